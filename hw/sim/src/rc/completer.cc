// SPDX-License-Identifier: BSD-3-Clause
// The completer: ACKs, NAKs, READ responses and atomic acknowledgments coming back to the
// requester (IBA 9.7.5.2), and the send completions they produce, in SQ order. A coalesced
// ACK completes every SEND/WRITE before it; a READ or atomic whose response did not come
// before a later ACK lost it, and is retried (go-back-N).
#include <cstring>

#include "completer.h"

#include "../packet/psn.h"
#include "../seg_copy.h"
#include "flush.h"
#include "retransmit.h"

namespace rnicdv::sim::rc {

namespace {

bool response_complete(const SendWqe& w) {
  if (w.kind == WqeKind::read) return w.resp_pkts >= w.span;
  if (w.kind == WqeKind::atomic) return w.atomic_done;
  return true;
}

uint8_t nak_to_syndrome(uint8_t aeth) {
  switch (aeth) {
    case pkt::aeth::kNakRemoteAccessError:
      return MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR;
    case pkt::aeth::kNakRemoteOperationalError:
      return MLX5_CQE_SYNDROME_REMOTE_OP_ERR;
    default:
      return MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR;
  }
}

}  // namespace

void Completer::on_response(QpObj& qp, const pkt::Packet& p) {
  if (qp.state != hw::QpState::rts && qp.state != hw::QpState::sqd &&
      qp.state != hw::QpState::sqe) {
    ++ctx_.counters().rx_dropped;
    return;
  }
  // A response for a PSN never sent is not ours (stale, or from a previous connection).
  if (psn_cmp(p.bth.psn, qp.req.next_psn) >= 0) {
    ++ctx_.counters().rx_dropped;
    ++qp.counters.rx_dropped;
    return;
  }
  switch (pkt::opcode_info(p.bth.opcode).kind) {
    case pkt::OpKind::ack:
      on_ack(qp, p);
      break;
    case pkt::OpKind::read_response:
      on_read_response(qp, p);
      break;
    case pkt::OpKind::atomic_ack:
      on_atomic_ack(qp, p);
      break;
    default:
      ++ctx_.counters().rx_dropped;
      break;
  }
  complete_wqes(qp);
}

SendWqe* Completer::find_wqe_by_psn(QpObj& qp, uint32_t psn, uint32_t* index) {
  for (uint32_t i = qp.comp.wq_head; i != qp.wq_tail; ++i) {
    SendWqe& w = qp.wqe_at(i);
    if (!w.started) break;
    if (w.span == 0) continue;
    if (psn_cmp(psn, w.first_psn) >= 0 && psn_cmp(psn, psn_add(w.first_psn, w.span)) < 0) {
      if (index) *index = i;
      return &w;
    }
  }
  return nullptr;
}

// Everything up to and including `psn` was received by the responder.
bool Completer::acknowledge_through(QpObj& qp, uint32_t psn) {
  uint32_t new_comp = psn_add(psn, 1);
  if (psn_cmp(new_comp, qp.comp.comp_psn) <= 0) return false;
  bool lost_response = false;
  for (uint32_t i = qp.comp.wq_head; i != qp.wq_tail; ++i) {
    SendWqe& w = qp.wqe_at(i);
    if (!w.started || psn_cmp(w.first_psn, new_comp) >= 0) break;
    if (w.is_rd_atomic() && !response_complete(w)) {
      const uint32_t resume = psn_add(w.first_psn, w.resp_pkts);
      if (psn_cmp(resume, new_comp) < 0) {
        new_comp = resume;
        lost_response = true;
      }
      break;
    }
  }
  bool progress = false;
  if (psn_cmp(new_comp, qp.comp.comp_psn) > 0) {
    qp.comp.comp_psn = new_comp;
    progress = true;
    // Progress resets the retry counters (as rxe does) and restarts the ACK timer.
    qp.comp.retry_left = qp.attr.retry_cnt;
    qp.comp.rnr_left = qp.attr.rnr_retry;
    qp.comp.gap_retry_armed = false;
    qp.comp.retx_deadline = 0;
    if (psn_cmp(qp.comp.comp_psn, qp.req.next_psn) != 0) retransmit_.arm(qp);
    // Packets the responder already has need not be sent again after a rewind.
    while (qp.req.wq_send != qp.wq_tail) {
      SendWqe& w = qp.wqe_at(qp.req.wq_send);
      if (!w.started || w.error) break;
      if ((w.kind == WqeKind::send || w.kind == WqeKind::write) &&
          psn_cmp(qp.comp.comp_psn, psn_add(w.first_psn, w.pkts_sent)) > 0) {
        w.pkts_sent = std::min(w.span, psn_diff(qp.comp.comp_psn, w.first_psn));
      }
      if (!w.fully_sent()) break;
      ++qp.req.wq_send;
    }
  }
  if (lost_response && !(qp.comp.gap_retry_armed && qp.comp.gap_retry_psn == qp.comp.comp_psn)) {
    qp.comp.gap_retry_armed = true;
    qp.comp.gap_retry_psn = qp.comp.comp_psn;
    retransmit_.rewind(qp, qp.comp.comp_psn);
  }
  return progress;
}

void Completer::on_ack(QpObj& qp, const pkt::Packet& p) {
  const uint8_t syndrome = p.aeth.syndrome;
  const uint32_t psn = p.bth.psn;
  switch (syndrome & pkt::aeth::kTypeMask) {
    case pkt::aeth::kAck:
      ++ctx_.counters().acks_rx;
      acknowledge_through(qp, psn);
      return;
    case pkt::aeth::kRnrNak:
      ++ctx_.counters().rnr_naks_rx;
      ++qp.counters.rnr_naks_rx;
      retransmit_.on_rnr_nak(qp, p);
      return;
    case pkt::aeth::kNak:
      break;
    default:
      ++ctx_.counters().rx_dropped;
      return;
  }
  ++ctx_.counters().naks_rx;
  ++qp.counters.naks_rx;
  // Every NAK implicitly acknowledges the PSNs before it (IBA 9.7.5.2.2).
  acknowledge_through(qp, psn_add(psn, kPsnMask));
  if (syndrome == pkt::aeth::kNakPsnSeqError) {
    if (psn_cmp(psn, qp.comp.comp_psn) >= 0) retransmit_.rewind(qp, psn);
    return;
  }
  uint32_t index = 0;
  SendWqe* w = find_wqe_by_psn(qp, psn, &index);
  if (!w) return;
  w->error = nak_to_syndrome(syndrome);
  if (static_cast<int32_t>(qp.req.wq_send - index) > 0) qp.req.wq_send = index;
}

void Completer::on_read_response(QpObj& qp, const pkt::Packet& p) {
  const uint32_t psn = p.bth.psn;
  // A response implicitly acknowledges every request before it.
  acknowledge_through(qp, psn_add(psn, kPsnMask));
  uint32_t index = 0;
  SendWqe* w = find_wqe_by_psn(qp, psn, &index);
  if (!w || w->kind != WqeKind::read) {
    ++qp.counters.duplicates_rx;
    ++ctx_.counters().duplicates_rx;
    return;
  }
  const uint32_t expected = psn_add(w->first_psn, w->resp_pkts);
  const int32_t order = psn_cmp(psn, expected);
  if (order < 0) {
    ++qp.counters.duplicates_rx;
    ++ctx_.counters().duplicates_rx;
    return;
  }
  if (order > 0) {
    // A response went missing: reissue the READ for the rest once per gap.
    if (!(qp.comp.gap_retry_armed && qp.comp.gap_retry_psn == expected)) {
      qp.comp.gap_retry_armed = true;
      qp.comp.gap_retry_psn = expected;
      retransmit_.rewind(qp, expected);
    }
    return;
  }
  // An earlier READ or atomic still misses its response: this one came too early.
  if (qp.comp.comp_psn != psn) return;
  const bool last = w->resp_pkts + 1 == w->span;
  const pkt::OpPos pos = pkt::opcode_info(p.bth.opcode).pos;
  const bool pos_ok = last ? (pos == pkt::OpPos::last || pos == pkt::OpPos::only)
                           : (pos == pkt::OpPos::first || pos == pkt::OpPos::middle);
  const uint64_t offset = uint64_t{w->resp_pkts} << qp.mtu_shift;
  const uint64_t expected_len = last ? w->length - offset : qp.mtu;
  if (!pos_ok || p.payload_len != expected_len) {
    ++ctx_.counters().rx_dropped;
    ++qp.counters.rx_dropped;
    return;
  }
  if (p.payload_len && scatter_bytes(w->segs, offset, p.payload, p.payload_len) != SegCopy::ok) {
    // The local buffer was taken away after the WQE was fetched.
    ++ctx_.counters().host_memory_faults;
    w->error = MLX5_CQE_SYNDROME_LOCAL_PROT_ERR;
  }
  ++w->resp_pkts;
  acknowledge_through(qp, psn);
}

void Completer::on_atomic_ack(QpObj& qp, const pkt::Packet& p) {
  const uint32_t psn = p.bth.psn;
  acknowledge_through(qp, psn_add(psn, kPsnMask));
  uint32_t index = 0;
  SendWqe* w = find_wqe_by_psn(qp, psn, &index);
  if (!w || w->kind != WqeKind::atomic || w->atomic_done || qp.comp.comp_psn != psn) {
    ++qp.counters.duplicates_rx;
    ++ctx_.counters().duplicates_rx;
    return;
  }
  // The original value, in host order, into the 8-byte local buffer (IBA 9.4.5).
  uint8_t value[8];
  std::memcpy(value, &p.atomic_orig, sizeof value);
  if (scatter_bytes(w->segs, 0, value, sizeof value) != SegCopy::ok) {
    ++ctx_.counters().host_memory_faults;
    w->error = MLX5_CQE_SYNDROME_LOCAL_PROT_ERR;
  }
  w->atomic_done = true;
  acknowledge_through(qp, psn);
}

void Completer::complete_wqes(QpObj& qp) {
  while (qp.comp.wq_head != qp.wq_tail) {
    SendWqe& w = qp.wqe_at(qp.comp.wq_head);
    if (w.error) {
      flush_.send_error_cqe(qp, w, w.error);
      ++qp.comp.wq_head;
      if (static_cast<int32_t>(qp.req.wq_send - qp.comp.wq_head) < 0) qp.req.wq_send = qp.comp.wq_head;
      if (qp.type == hw::QpType::uc) {
        // UC, like UD: the send queue stops in SQE and is flushed; the receive side runs on
        // (IBA 10.3.1.2), and SQE->RTS resumes it.
        qp.state = hw::QpState::sqe;
        flush_.flush_sq(qp);
      } else {
        flush_.to_error(qp);
      }
      return;
    }
    if (!w.started) break;
    if (w.kind != WqeKind::nop &&
        (!response_complete(w) || psn_cmp(qp.comp.comp_psn, psn_add(w.first_psn, w.span)) < 0))
      break;
    if (qp.req.wq_send == qp.comp.wq_head) {
      if (!w.fully_sent()) break;
      ++qp.req.wq_send;
    }
    complete_send_wqe(qp, w);
    ++qp.comp.wq_head;
  }
  const bool idle =
      qp.comp.wq_head == qp.req.wq_send && (qp.req.wq_send == qp.wq_tail || !qp.wqe_at(qp.req.wq_send).started);
  if (idle) qp.comp.retx_deadline = 0;
  if (idle && qp.state == hw::QpState::sqd && !qp.comp.sq_drained_raised) {
    qp.comp.sq_drained_raised = true;
    ctx_.raise_event(hw::AsyncEventType::sq_drained, qp.qpn, 0);
  }
}

void Completer::complete_send_wqe(QpObj& qp, SendWqe& w) {
  // Unsignaled WQEs write nothing: the next signaled CQE retires them (libmlx5 moves
  // sq.tail to wqe_head[wqe_counter] + 1).
  if (!w.signaled) return;
  wqe::CqeInit c;
  c.cqe_opcode = MLX5_CQE_REQ;
  c.send_opcode = w.mlx5_opcode;
  c.wqe_counter = static_cast<uint16_t>(w.pi);
  c.qpn = qp.qpn;
  c.srqn_uidx = qp.user_index;
  if (w.kind == WqeKind::read) c.byte_cnt = static_cast<uint32_t>(w.length);
  if (w.kind == WqeKind::atomic) c.byte_cnt = 8;
  ctx_.write_cqe(qp.send_cq, c);
}

}  // namespace rnicdv::sim::rc
