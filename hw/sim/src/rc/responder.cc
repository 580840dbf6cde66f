// SPDX-License-Identifier: BSD-3-Clause
// The responder: executes inbound requests in PSN order (IBA 9.7.5.1). SEND consumes
// receive WQEs, WRITE places data, READ and atomics are answered from a ring of responder
// resources so duplicates can be replayed. Errors give the NAK classes of IBA 9.7.5.2.4
// (as rxe sends them) and move the QP to ERR. A fault specification's remote statuses
// (wr status=remote_access, remote_operation, rnr_retry, retry) answer a chosen request
// message as the genuine condition of that kind would.
#include <endian.h>

#include <algorithm>
#include <cstring>

#include "responder.h"

#include "../faults/schedule.h"
#include "../host_access.h"
#include "../packet/psn.h"
#include "../seg_copy.h"
#include "../srq.h"
#include "flush.h"
#include "queues.h"
#include "rnicdv/doorbell/mmio.h"

namespace rnicdv::sim::rc {

void Responder::on_request(QpObj& qp, const pkt::Packet& p) {
  // Requests are processed from RTR on (IBA 10.3.1.3). The first one in RTR raises
  // COMM_EST (IBA 11.6.3.1), once.
  if (qp.state == hw::QpState::rtr && !qp.resp.comm_est_raised) {
    qp.resp.comm_est_raised = true;
    ++ctx_.counters().comm_est_raised;
    ctx_.raise_event(hw::AsyncEventType::comm_est, qp.qpn, 0);
  }
  if (qp.type == hw::QpType::uc) return on_uc_request(qp, p);
  const int32_t order = psn_cmp(p.bth.psn, qp.resp.epsn);
  if (order >= 0 && qp.resp.fault == faults::ChosenStatus::retry) {
    // The message chosen for wr status=retry holds the expected PSN: no copy of it, and
    // nothing after it, is ever seen, as if the link lost them all.
    ++ctx_.counters().rx_dropped;
    ++qp.counters.rx_dropped;
    return;
  }
  if (order > 0) {
    // PSN sequence error: one NAK per gap, then silent drops until the expected PSN.
    if (!qp.resp.nak_seq_sent) {
      qp.resp.nak_seq_sent = true;
      queue_ack(qp, pkt::aeth::kNakPsnSeqError, qp.resp.epsn);
    }
    ++ctx_.counters().rx_dropped;
    ++qp.counters.rx_dropped;
    return;
  }
  if (order < 0) {
    on_duplicate_request(qp, p);
    return;
  }
  qp.resp.nak_seq_sent = false;

  const pkt::OpcodeInfo& info = pkt::opcode_info(p.bth.opcode);
  const uint32_t psn = p.bth.psn;
  // Opcode sequence (IBA 9.7.5.1.1 / rxe check_op_seq): a message in progress continues with
  // MIDDLE or LAST of its own kind; otherwise only FIRST or ONLY may come.
  const bool continues = info.pos == pkt::OpPos::middle || info.pos == pkt::OpPos::last;
  const bool sequence_ok = qp.resp.cur_op == 0
                               ? !continues
                               : (continues && static_cast<uint8_t>(info.kind) == qp.resp.cur_op);
  const bool length_ok = (info.kind != pkt::OpKind::send && info.kind != pkt::OpKind::write) ||
                         payload_length_ok(qp, info, p);
  if (!sequence_ok || !length_ok) {
    fail(qp, pkt::aeth::kNakInvalidRequest, psn, MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR,
         hw::AsyncEventType::qp_req_err);
    return;
  }
  if (qp.type == hw::QpType::xrc_recv && !bind_xrc_srq(qp, p, info)) return;
  if ((info.pos == pkt::OpPos::first || info.pos == pkt::OpPos::only) && chosen_fault(qp, p, info))
    return;
  // The QP's own remote access rights (INIT attribute access_flags).
  uint32_t needed = 0;
  if (info.kind == pkt::OpKind::write) needed = hw::access::remote_write;
  if (info.kind == pkt::OpKind::read_request) needed = hw::access::remote_read;
  if (info.kind == pkt::OpKind::atomic) needed = hw::access::remote_atomic;
  if ((qp.attr.access_flags & needed) != needed) {
    fail(qp, pkt::aeth::kNakInvalidRequest, psn, 0, hw::AsyncEventType::qp_req_err);
    return;
  }

  switch (info.kind) {
    case pkt::OpKind::send:
      if (!execute_send(qp, p, info)) return;
      break;
    case pkt::OpKind::write:
      if (!execute_write(qp, p, info)) return;
      break;
    case pkt::OpKind::read_request:
      execute_read(qp, p);
      return;
    case pkt::OpKind::atomic:
      execute_atomic(qp, p);
      return;
    default:
      ++ctx_.counters().rx_dropped;
      return;
  }
  qp.resp.epsn = psn_add(qp.resp.epsn, 1);
  if (p.bth.ack_req) queue_ack(qp, pkt::aeth::kAck | pkt::aeth::kCreditInvalid, psn);
}

bool Responder::bind_xrc_srq(QpObj& qp, const pkt::Packet& p, const pkt::OpcodeInfo& info) {
  SrqObj* srq = ctx_.find_srq(p.xrc_srqn);
  const bool starts = info.pos == pkt::OpPos::first || info.pos == pkt::OpPos::only;
  if (srq == nullptr || !srq->xrc || srq->xrcdn != qp.xrcdn || (!starts && srq != qp.srq)) {
    fail(qp, pkt::aeth::kNakInvalidRequest, p.bth.psn, MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR,
         hw::AsyncEventType::qp_req_err);
    return false;
  }
  if (starts && srq->cq && srq->cq->overflowed) {
    // The SRQ's CQ is in error (an overrun, or its memory gone): a QP that completes into it
    // goes to ERR (cq_write.cc), and so does a target as it turns to that SRQ. No answer: the
    // initiator's retries run out.
    ctx_.raise_event(hw::AsyncEventType::qp_fatal, qp.qpn, 0);
    flush_.to_error(qp);
    return false;
  }
  if (starts) {
    qp.srq = srq;
    qp.pdn = srq->pdn;
  }
  return true;
}

// Payload lengths of SEND and WRITE packets (rxe check_length): FIRST and MIDDLE carry exactly
// the MTU, LAST 1..MTU, ONLY 0..MTU.
bool Responder::payload_length_ok(const QpObj& qp, const pkt::OpcodeInfo& info,
                                  const pkt::Packet& p) {
  switch (info.pos) {
    case pkt::OpPos::first:
    case pkt::OpPos::middle:
      return p.payload_len == qp.mtu;
    case pkt::OpPos::last:
      return p.payload_len >= 1 && p.payload_len <= qp.mtu;
    default:
      return p.payload_len <= qp.mtu;
  }
}

namespace {

uint32_t fault_op(pkt::OpKind kind) {
  switch (kind) {
    case pkt::OpKind::send:
      return faults::op::send;
    case pkt::OpKind::write:
      return faults::op::write;
    case pkt::OpKind::read_request:
      return faults::op::read;
    case pkt::OpKind::atomic:
      return faults::op::atomic;
    default:
      return 0;
  }
}

}  // namespace

// wr status=remote_*: the first packet of a new request message (in order, so neither a
// duplicate nor a packet after a gap) is counted once, by its PSN; the chosen message is
// answered as the genuine error of that kind, on every copy of it that arrives. True when the
// packet was answered so.
bool Responder::chosen_fault(QpObj& qp, const pkt::Packet& p, const pkt::OpcodeInfo& info) {
  faults::FaultSchedule* schedule = ctx_.wr_faults();
  if (schedule == nullptr) return false;
  const uint32_t psn = p.bth.psn;
  if (!qp.resp.fault_asked || qp.resp.fault_psn != psn) {
    // The responder's own QP is the one counted (the BTH's destination QP).
    qp.resp.fault_asked = true;
    qp.resp.fault_psn = psn;
    qp.resp.fault = schedule->take_wr_fault(faults::WrSite::responder, ctx_.device_index(),
                                            qp.qpn, fault_op(info.kind), psn);
  }
  if (!qp.resp.fault) return false;
  switch (*qp.resp.fault) {
    case faults::ChosenStatus::remote_access:
      // As for an rkey or access violation: NAK, QP_ACCESS_ERR, the QP to ERR.
      fail(qp, pkt::aeth::kNakRemoteAccessError, psn, 0, hw::AsyncEventType::qp_access_err);
      return true;
    case faults::ChosenStatus::remote_operation:
      // As for a receive queue the device cannot use: NAK, QP_FATAL, the QP to ERR.
      fail(qp, pkt::aeth::kNakRemoteOperationalError, psn, 0, hw::AsyncEventType::qp_fatal);
      return true;
    case faults::ChosenStatus::rnr_retry:
      // As for a SEND that finds no receive WQE: an RNR NAK, the PSN stays expected, and the
      // next copy is answered the same until the requester's rnr_retry runs out.
      ++ctx_.counters().rnr_naks_tx;
      ++qp.counters.rnr_naks_tx;
      queue_ack(qp, static_cast<uint8_t>(pkt::aeth::kRnrNak | (qp.attr.min_rnr_timer & 0x1f)),
                psn);
      return true;
    case faults::ChosenStatus::retry:
      ++ctx_.counters().rx_dropped;
      ++qp.counters.rx_dropped;
      return true;
    case faults::ChosenStatus::local_protection:
    case faults::ChosenStatus::local_length:
      break;  // never chosen at the responder
  }
  return false;
}

// No receive WQE for a SEND (or a WRITE with immediate): the sender gets an RNR NAK carrying
// this QP's min_rnr_timer (IBA 9.7.5.2.8) and the PSN stays expected. UC has no RNR: the
// message is lost.
void Responder::no_recv_wqe(QpObj& qp, const pkt::Packet& p) {
  if (qp.type == hw::QpType::uc) {
    ++ctx_.counters().uc_no_recv_drops;
    drop_uc_message(qp);
    return;
  }
  ++ctx_.counters().rnr_naks_tx;
  ++qp.counters.rnr_naks_tx;
  queue_ack(qp, static_cast<uint8_t>(pkt::aeth::kRnrNak | (qp.attr.min_rnr_timer & 0x1f)),
            p.bth.psn);
}

// Takes the next receive WQE for a SEND (or a WRITE with immediate); without one, see
// no_recv_wqe. A receive WQE the device cannot use completes in error. On UC, a WQE taken by
// a message that was then dropped is still this QP's: the next message fills it.
bool Responder::take_recv_wqe(QpObj& qp, const pkt::Packet& p) {
  if (qp.type == hw::QpType::uc && qp.resp.recv.active) {
    qp.resp.recv.placed = 0;
    return true;
  }
  if (qp.srq) return take_srq_wqe(qp, p);
  const uint16_t posted = static_cast<uint16_t>(load_rq_dbr(qp) - qp.rq_consumed);
  if (posted == 0 || posted > qp.rq.wqe_cnt) {
    no_recv_wqe(qp, p);
    return false;
  }
  RecvInProgress& r = qp.resp.recv;
  r.counter = qp.rq_consumed;
  r.segs.clear();
  r.capacity = 0;
  r.placed = 0;
  r.active = true;
  ++qp.rq_consumed;

  // A WRITE with immediate uses the WQE for its completion only; its SGEs are not touched.
  if (pkt::opcode_info(p.bth.opcode).kind != pkt::OpKind::send) return true;
  wqe::DecodedRecvWqe d;
  wqe::WqeDefect defect = wqe::WqeDefect::none;
  if (mirror_rq(qp, r.counter)) {
    defect = wqe::decode_recv_wqe(qp.rq, r.counter, &d);
  } else {
    // The receive queue's memory is gone: the sender gets a NAK, this QP goes to ERR.
    fail(qp, pkt::aeth::kNakRemoteOperationalError, p.bth.psn, MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR,
         hw::AsyncEventType::qp_fatal);
    return false;
  }
  if (defect != wqe::WqeDefect::none) {
    fail(qp, pkt::aeth::kNakRemoteOperationalError, p.bth.psn, MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR,
         hw::AsyncEventType::qp_fatal);
    return false;
  }
  return resolve_recv_segs(qp, p, d);
}

bool Responder::resolve_recv_segs(QpObj& qp, const pkt::Packet& p, const wqe::DecodedRecvWqe& d) {
  RecvInProgress& r = qp.resp.recv;
  for (uint32_t i = 0; i < d.num_sge; ++i) {
    const Sge& sge = d.sges[i];
    if (sge.length == 0) continue;
    uint8_t* host = nullptr;
    PinRef pin;
    if (ctx_.mrs().check(sge.lkey, qp.pdn, sge.addr, sge.length, hw::access::local_write, &host,
                         &pin) != AccessResult::ok) {
      fail(qp, pkt::aeth::kNakRemoteOperationalError, p.bth.psn, MLX5_CQE_SYNDROME_LOCAL_PROT_ERR,
           hw::AsyncEventType::qp_access_err);
      return false;
    }
    r.segs.push_back(LocalSeg{host, sge.length, pin});
    r.capacity += sge.length;
  }
  return true;
}

// From the QP's shared receive queue: the next WQE in the free list's order (srq_wqe.h). The
// CQE names it by its index. Falling below an armed limit raises SRQ_LIMIT_REACHED once.
bool Responder::take_srq_wqe(QpObj& qp, const pkt::Packet& p) {
  SrqObj& srq = *qp.srq;
  // The posted count is 16 bits, as libmlx5 keeps it (mlx5_srq.counter).
  if (srq.host_failed) return srq_memory_gone(qp, p);
  uint32_t dbr = 0;
  if (srq.external) [[unlikely]] {
    if (!host_load32(srq.dbrec, &dbr)) return srq_memory_gone(qp, p);
    dbr = be32toh(dbr);
  } else {
    dbr = doorbell::load_dbr(srq.dbrec);
  }
  const uint16_t posted = static_cast<uint16_t>(dbr - srq.consumed);
  if (posted == 0 || posted >= srq.ring.wqe_cnt) {
    no_recv_wqe(qp, p);
    return false;
  }
  const uint16_t index = srq.next_index;
  const bool is_send = pkt::opcode_info(p.bth.opcode).kind == pkt::OpKind::send;
  uint16_t next = 0;
  wqe::DecodedRecvWqe d;
  wqe::WqeDefect defect = wqe::WqeDefect::none;
  if (!mirror_srq(srq, index)) return srq_memory_gone(qp, p);
  next = srq.ring.next(index);
  if (is_send) defect = wqe::decode_srq_wqe(srq.ring, index, &d);
  srq.next_index = next;
  ++srq.consumed;
  if (srq.limit != 0 && posted - 1u < srq.limit) {
    srq.limit = 0;  // one event per arm
    ctx_.raise_event(hw::AsyncEventType::srq_limit_reached, 0, 0, srq.srqn);
  }
  RecvInProgress& r = qp.resp.recv;
  r.counter = index;
  r.segs.clear();
  r.capacity = 0;
  r.placed = 0;
  r.active = true;
  if (!is_send) return true;
  if (defect != wqe::WqeDefect::none) {
    fail(qp, pkt::aeth::kNakRemoteOperationalError, p.bth.psn, MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR,
         hw::AsyncEventType::qp_fatal);
    return false;
  }
  return resolve_recv_segs(qp, p, d);
}

// The SRQ's ring or record the application placed faulted: it is never read again, and the QP
// that needed it fails as one whose receive queue is gone.
bool Responder::srq_memory_gone(QpObj& qp, const pkt::Packet& p) {
  qp.srq->host_failed = true;
  fail(qp, pkt::aeth::kNakRemoteOperationalError, p.bth.psn, MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR,
       hw::AsyncEventType::qp_fatal);
  return false;
}

bool Responder::execute_send(QpObj& qp, const pkt::Packet& p, const pkt::OpcodeInfo& info) {
  if (info.pos == pkt::OpPos::first || info.pos == pkt::OpPos::only) {
    if (!take_recv_wqe(qp, p)) return false;
  }
  RecvInProgress& r = qp.resp.recv;
  if (r.placed + p.payload_len > r.capacity) {
    // The message is larger than the receive buffer: LOC_LEN_ERR here, NAK invalid
    // request to the sender (IBA 9.7.5.2.4 class C).
    fail(qp, pkt::aeth::kNakInvalidRequest, p.bth.psn, MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR,
         hw::AsyncEventType::qp_req_err);
    return false;
  }
  if (p.payload_len && scatter_bytes(r.segs, r.placed, p.payload, p.payload_len) != SegCopy::ok) {
    // The receive buffer was taken away after it was posted (the MR check passed).
    ++ctx_.counters().host_memory_faults;
    fail(qp, pkt::aeth::kNakRemoteOperationalError, p.bth.psn, MLX5_CQE_SYNDROME_LOCAL_PROT_ERR,
         hw::AsyncEventType::qp_access_err);
    return false;
  }
  r.placed += p.payload_len;
  if (info.pos == pkt::OpPos::last || info.pos == pkt::OpPos::only) {
    complete_recv(qp, p, info.immediate ? MLX5_CQE_RESP_SEND_IMM : MLX5_CQE_RESP_SEND, r.placed);
    qp.resp.msn = psn_add(qp.resp.msn, 1);
    qp.resp.cur_op = 0;
  } else {
    qp.resp.cur_op = static_cast<uint8_t>(pkt::OpKind::send);
  }
  return true;
}

bool Responder::execute_write(QpObj& qp, const pkt::Packet& p, const pkt::OpcodeInfo& info) {
  WriteInProgress& wr = qp.resp.write;
  const bool starts = info.pos == pkt::OpPos::first || info.pos == pkt::OpPos::only;
  const bool ends = info.pos == pkt::OpPos::last || info.pos == pkt::OpPos::only;
  if (starts) {
    const uint32_t len = p.reth.dma_length;
    const bool len_ok = info.pos == pkt::OpPos::only ? p.payload_len == len : len > qp.mtu;
    if (!len_ok || len > ctx_.caps().max_msg_size) {
      refuse(qp, pkt::aeth::kNakInvalidRequest, p.bth.psn, hw::AsyncEventType::qp_req_err);
      return false;
    }
    uint8_t* host = nullptr;
    PinRef pin;
    if (ctx_.mrs().check(p.reth.rkey, qp.pdn, p.reth.va, len, hw::access::remote_write, &host,
                         &pin) != AccessResult::ok) {
      refuse(qp, pkt::aeth::kNakRemoteAccessError, p.bth.psn, hw::AsyncEventType::qp_access_err);
      return false;
    }
    wr.active = true;
    wr.dst = host;
    wr.pin = pin;
    wr.total = len;
    wr.placed = 0;
  }
  if (wr.placed + p.payload_len > wr.total || (ends && wr.placed + p.payload_len != wr.total)) {
    refuse(qp, pkt::aeth::kNakInvalidRequest, p.bth.psn, hw::AsyncEventType::qp_req_err);
    return false;
  }
  // WRITE with immediate needs a receive WQE for its completion; check before placing so an
  // RNR retry of the last packet finds the same state.
  if (ends && info.immediate && !take_recv_wqe(qp, p)) return false;
  if (p.payload_len && !host_place(wr.pin, wr.dst + wr.placed, p.payload, p.payload_len)) {
    // The target region's pages were taken away after registration.
    ++ctx_.counters().host_memory_faults;
    wr.active = false;
    refuse(qp, pkt::aeth::kNakRemoteAccessError, p.bth.psn, hw::AsyncEventType::qp_access_err);
    return false;
  }
  wr.placed += p.payload_len;
  if (ends) {
    if (info.immediate) complete_recv(qp, p, MLX5_CQE_RESP_WR_IMM, wr.total);
    qp.resp.msn = psn_add(qp.resp.msn, 1);
    wr.active = false;
    qp.resp.cur_op = 0;
  } else {
    qp.resp.cur_op = static_cast<uint8_t>(pkt::OpKind::write);
  }
  return true;
}

void Responder::execute_read(QpObj& qp, const pkt::Packet& p) {
  const uint32_t len = p.reth.dma_length;
  if (len > ctx_.caps().max_msg_size) {
    fail(qp, pkt::aeth::kNakInvalidRequest, p.bth.psn, 0, hw::AsyncEventType::qp_req_err);
    return;
  }
  uint8_t* host = nullptr;
  PinRef pin;
  if (ctx_.mrs().check(p.reth.rkey, qp.pdn, p.reth.va, len, hw::access::remote_read, &host, &pin) !=
      AccessResult::ok) {
    fail(qp, pkt::aeth::kNakRemoteAccessError, p.bth.psn, 0, hw::AsyncEventType::qp_access_err);
    return;
  }
  const uint32_t span =
      static_cast<uint32_t>(std::max<uint64_t>(1, (uint64_t{len} + qp.mtu - 1) >> qp.mtu_shift));
  qp.resp.msn = psn_add(qp.resp.msn, 1);
  RespResource& res = qp.resp.resources[qp.resp.res_next++ % qp.resp.resources.size()];
  res = RespResource{
      RespResource::Kind::read, p.bth.psn, span, p.reth.va, p.reth.rkey, len, 0, qp.resp.msn,
      qp.pdn};
  RespJob job;
  job.kind = RespJob::Kind::read;
  job.psn = p.bth.psn;
  job.msn = qp.resp.msn;
  job.va = p.reth.va;
  job.rkey = p.reth.rkey;
  job.length = len;
  job.npkts = span;
  job.pdn = qp.pdn;
  qp.resp.resp_queue.push_back(job);
  qp.resp.epsn = psn_add(qp.resp.epsn, span);
}

void Responder::execute_atomic(QpObj& qp, const pkt::Packet& p) {
  const pkt::AtomicEth& a = p.atomic;
  if (a.va & 7) {  // atomics need 8-byte alignment (IBA 9.4.5, C9-...): invalid request
    fail(qp, pkt::aeth::kNakInvalidRequest, p.bth.psn, 0, hw::AsyncEventType::qp_req_err);
    return;
  }
  uint8_t* host = nullptr;
  PinRef pin;
  if (ctx_.mrs().check(a.rkey, qp.pdn, a.va, 8, hw::access::remote_atomic, &host, &pin) !=
      AccessResult::ok) {
    fail(qp, pkt::aeth::kNakRemoteAccessError, p.bth.psn, 0, hw::AsyncEventType::qp_access_err);
    return;
  }
  // Atomic with respect to every device of the process (host order, like rxe).
  uint64_t orig = 0;
  const bool cas = p.bth.opcode == pkt::opcode::rc_compare_swap;
  if (!host_atomic64(pin, reinterpret_cast<uint64_t*>(host),
                     cas ? HostAtomic::compare_swap : HostAtomic::fetch_add, a.swap_add, a.compare,
                     &orig)) {
    ++ctx_.counters().host_memory_faults;
    fail(qp, pkt::aeth::kNakRemoteAccessError, p.bth.psn, 0, hw::AsyncEventType::qp_access_err);
    return;
  }
  qp.resp.msn = psn_add(qp.resp.msn, 1);
  RespResource& res = qp.resp.resources[qp.resp.res_next++ % qp.resp.resources.size()];
  res = RespResource{RespResource::Kind::atomic, p.bth.psn, 1, a.va, a.rkey, 8, orig, qp.resp.msn,
                     qp.pdn};
  RespJob job;
  job.kind = RespJob::Kind::atomic_ack;
  job.psn = p.bth.psn;
  job.msn = qp.resp.msn;
  job.atomic_orig = orig;
  qp.resp.resp_queue.push_back(job);
  qp.resp.epsn = psn_add(qp.resp.epsn, 1);
}

// A request the responder already executed (IBA 9.7.5.1.2, C9-105 ... C9-113): SEND/WRITE are
// re-acknowledged without placing data again; a READ is executed again from the requested
// PSN; an atomic is answered with the saved original value and never applied twice.
void Responder::on_duplicate_request(QpObj& qp, const pkt::Packet& p) {
  ++ctx_.counters().duplicates_rx;
  ++qp.counters.duplicates_rx;
  const pkt::OpcodeInfo& info = pkt::opcode_info(p.bth.opcode);
  const uint32_t psn = p.bth.psn;
  if (info.kind == pkt::OpKind::send || info.kind == pkt::OpKind::write) {
    // Acknowledged again whether or not it asks for an ACK (C9-105, as rxe does): a
    // duplicate means the requester missed our ACK or NAK, and after a lost NAK it only
    // learns where we are from an answer to a retransmission. Waiting for the next
    // AckReq packet of a go-back-N round (up to 32 packets in) lets loss stall it for
    // whole timeouts, and enough of those in a row exhaust retry_cnt on a healthy link.
    queue_ack(qp, pkt::aeth::kAck | pkt::aeth::kCreditInvalid, psn_add(qp.resp.epsn, kPsnMask));
    return;
  }
  for (const RespResource& res : qp.resp.resources) {
    if (info.kind == pkt::OpKind::read_request && res.kind == RespResource::Kind::read &&
        psn_cmp(psn, res.first_psn) >= 0 && psn_cmp(psn, psn_add(res.first_psn, res.span)) < 0) {
      const uint64_t offset = uint64_t{psn_diff(psn, res.first_psn)} << qp.mtu_shift;
      if (p.reth.rkey != res.rkey || p.reth.va != res.va + offset ||
          uint64_t{p.reth.dma_length} + offset != res.length)
        break;
      // The requester asks again from `psn` on: a stream of this READ still queued or
      // under way is superseded (as rxe restarts the resource), or every re-request would
      // add another full stream and a lossy link would carry the remainder many times.
      const uint32_t res_end = psn_add(res.first_psn, res.span);
      std::erase_if(qp.resp.resp_queue, [&](const RespJob& j) {
        return j.kind == RespJob::Kind::read && psn_cmp(j.psn, res.first_psn) >= 0 &&
               psn_cmp(j.psn, res_end) < 0;
      });
      RespJob job;
      job.kind = RespJob::Kind::read;
      job.psn = psn;
      job.msn = res.msn;
      job.va = p.reth.va;
      job.rkey = p.reth.rkey;
      job.length = p.reth.dma_length;
      job.npkts = res.span - psn_diff(psn, res.first_psn);
      job.pdn = res.pdn;
      qp.resp.resp_queue.push_back(job);
      return;
    }
    if (info.kind == pkt::OpKind::atomic && res.kind == RespResource::Kind::atomic &&
        res.first_psn == psn) {
      RespJob job;
      job.kind = RespJob::Kind::atomic_ack;
      job.psn = psn;
      job.msn = res.msn;
      job.atomic_orig = res.atomic_orig;
      qp.resp.resp_queue.push_back(job);
      return;
    }
  }
  // No resource matches: dropped (class D).
}

void Responder::complete_recv(QpObj& qp, const pkt::Packet& p, uint8_t cqe_opcode,
                              uint64_t byte_cnt) {
  wqe::CqeInit c;
  c.cqe_opcode = cqe_opcode;
  c.qpn = qp.qpn;
  c.src_qpn = qp.attr.dest_qpn;
  c.byte_cnt = static_cast<uint32_t>(byte_cnt);
  c.imm = (cqe_opcode == MLX5_CQE_RESP_SEND_IMM || cqe_opcode == MLX5_CQE_RESP_WR_IMM) ? p.imm : 0;
  c.wqe_counter = static_cast<uint16_t>(qp.resp.recv.counter);
  c.srqn_uidx = qp.recv_srqn_uidx();
  c.solicited = p.bth.solicited;
  qp.resp.recv.active = false;
  ctx_.write_cqe(qp.receive_cq(), c);
}

void Responder::refuse(QpObj& qp, uint8_t nak_syndrome, uint32_t psn, hw::AsyncEventType event) {
  if (qp.type == hw::QpType::uc) return drop_uc_message(qp);
  fail(qp, nak_syndrome, psn, 0, event);
}

void Responder::fail(QpObj& qp, uint8_t nak_syndrome, uint32_t psn, uint8_t recv_syndrome,
                     hw::AsyncEventType event) {
  if (recv_syndrome != 0 && qp.resp.recv.active) flush_.recv_error_cqe(qp, recv_syndrome);
  if (qp.type == hw::QpType::uc) {
    // A local fault (the receive WQE or its buffer): UC tells the sender nothing.
    ctx_.raise_event(event, qp.qpn, 0);
    flush_.to_error(qp);
    return;
  }
  // Everything already answered goes out first, then the NAK; then the QP stops.
  transmit(qp, UINT32_MAX);
  pkt::Packet nak;
  nak.bth.opcode = answer_opcode(qp, pkt::opcode::rc_acknowledge);
  nak.bth.dest_qp = qp.attr.dest_qpn;
  nak.bth.psn = psn;
  nak.aeth = pkt::Aeth{nak_syndrome, qp.resp.msn};
  const size_t len = pkt::build_packet(nak, ctx_.frame(), ctx_.frame_size());
  ++ctx_.counters().naks_tx;
  ++qp.counters.naks_tx;
  ctx_.transmit(qp, ctx_.frame(), len);
  ctx_.raise_event(event, qp.qpn, 0);
  flush_.to_error(qp);
}

}  // namespace rnicdv::sim::rc
