// SPDX-License-Identifier: BSD-3-Clause
// The requester: turns fetched SQ WQEs into request packets (IBA 9.7.1-9.7.4), MTU-segmented,
// within the go-back-N window, honouring max_rd_atomic and fences. A UC QP's packets carry
// the UC opcodes, ask for no ACK, and count as acknowledged once sent.
#include <algorithm>

#include "requester.h"

#include "../packet/psn.h"
#include "../seg_copy.h"
#include "completer.h"
#include "retransmit.h"
#include "sq_fetch.h"

namespace rnicdv::sim::rc {

namespace {

uint8_t send_opcode(pkt::OpPos pos, bool imm) {
  using namespace pkt::opcode;
  switch (pos) {
    case pkt::OpPos::first:
      return rc_send_first;
    case pkt::OpPos::middle:
      return rc_send_middle;
    case pkt::OpPos::last:
      return imm ? rc_send_last_imm : rc_send_last;
    default:
      return imm ? rc_send_only_imm : rc_send_only;
  }
}

uint8_t write_opcode(pkt::OpPos pos, bool imm) {
  using namespace pkt::opcode;
  switch (pos) {
    case pkt::OpPos::first:
      return rc_write_first;
    case pkt::OpPos::middle:
      return rc_write_middle;
    case pkt::OpPos::last:
      return imm ? rc_write_last_imm : rc_write_last;
    default:
      return imm ? rc_write_only_imm : rc_write_only;
  }
}

pkt::OpPos position(uint32_t k, uint32_t n) {
  if (n == 1) return pkt::OpPos::only;
  if (k == 0) return pkt::OpPos::first;
  if (k + 1 == n) return pkt::OpPos::last;
  return pkt::OpPos::middle;
}

}  // namespace

bool Requester::may_start(QpObj& qp, const SendWqe& w) {
  if (psn_diff(qp.req.next_psn, qp.comp.comp_psn) >= kPsnWindow) return false;
  if (!w.fenced && !w.is_rd_atomic()) return true;
  uint32_t rd_atomic = 0;
  for (uint32_t i = qp.comp.wq_head; i != qp.req.wq_send; ++i)
    if (qp.wqe_at(i).is_rd_atomic()) ++rd_atomic;
  // Fence (IBA 10.8.3.3): wait for every earlier READ and atomic to complete.
  if (w.fenced && rd_atomic != 0) return false;
  // At most max_rd_atomic READ/atomic requests outstanding (IBA 9.5, C9-...); 0 acts as 1.
  const uint32_t limit = std::max<uint32_t>(1, qp.attr.max_rd_atomic);
  return !w.is_rd_atomic() || rd_atomic < limit;
}

bool Requester::progress(QpObj& qp, uint32_t budget) {
  if (qp.state != hw::QpState::rts && qp.state != hw::QpState::sqd) return false;
  if (qp.req.rnr_deadline != 0) return false;  // waiting out an RNR NAK
  bool did = false;
  while (budget != 0) {
    if (qp.req.wq_send == qp.wq_tail) {
      if (qp.state != hw::QpState::rts || !fetcher_.fetch_next(qp)) {
        qp.pacer.drop_hold();  // nothing left to send: the QP goes idle, not held
        break;
      }
      did = true;
    }
    SendWqe& w = qp.wqe_at(qp.req.wq_send);
    if (w.error) break;  // completes with its error once everything before it has
    if (!w.started) {
      if (qp.state != hw::QpState::rts) break;  // SQD: no new message starts
      if (!may_start(qp, w)) break;
      w.started = true;
      w.first_psn = qp.req.next_psn;
      qp.req.next_psn = psn_add(qp.req.next_psn, w.span);
      ++qp.counters.wqes_executed;
      did = true;
    }
    if (w.fully_sent()) {
      ++qp.req.wq_send;
      continue;
    }
    const uint32_t psn = w.kind == WqeKind::read ? psn_add(w.first_psn, w.resp_pkts)
                                                 : psn_add(w.first_psn, w.pkts_sent);
    if (psn_diff(psn, qp.comp.comp_psn) >= kPsnWindow) break;
    if (qp.pacer.active()) [[unlikely]] {
      const uint64_t ready = qp.pacer.ready_at();
      if (ready > ctx_.now()) {
        qp.req.pace_deadline = ready;  // the engine's timer brings the QP back then
        qp.pacer.hold();
        break;
      }
    }
    if (!send_request_packet(qp, w)) break;
    did = true;
    --budget;
    if (w.fully_sent()) ++qp.req.wq_send;
  }
  if (did) completer_.complete_wqes(qp);
  return did;
}

bool Requester::send_request_packet(QpObj& qp, SendWqe& w) {
  pkt::Packet p;
  p.bth.dest_qp = qp.attr.dest_qpn;
  uint32_t payload_len = 0;
  uint64_t payload_offset = 0;
  bool last = true;
  switch (w.kind) {
    case WqeKind::send:
    case WqeKind::write: {
      const uint32_t k = w.pkts_sent;
      const pkt::OpPos pos = position(k, w.span);
      p.bth.psn = psn_add(w.first_psn, k);
      payload_offset = uint64_t{k} << qp.mtu_shift;
      payload_len = static_cast<uint32_t>(std::min<uint64_t>(qp.mtu, w.length - payload_offset));
      last = pos == pkt::OpPos::last || pos == pkt::OpPos::only;
      if (w.kind == WqeKind::send) {
        p.bth.opcode = send_opcode(pos, w.with_imm);
      } else {
        p.bth.opcode = write_opcode(pos, w.with_imm);
        p.reth = pkt::Reth{w.remote_addr, w.rkey, static_cast<uint32_t>(w.length)};
      }
      p.imm = w.imm;
      p.bth.solicited = last && w.solicited;
      break;
    }
    case WqeKind::read: {
      // A partly answered READ is reissued for the bytes still missing (IBA 9.7.5.1.4).
      const uint64_t done = uint64_t{w.resp_pkts} << qp.mtu_shift;
      p.bth.opcode = pkt::opcode::rc_read_request;
      p.bth.psn = psn_add(w.first_psn, w.resp_pkts);
      p.reth = pkt::Reth{w.remote_addr + done, w.rkey, static_cast<uint32_t>(w.length - done)};
      break;
    }
    case WqeKind::atomic:
      p.bth.opcode = w.mlx5_opcode == MLX5_OPCODE_ATOMIC_CS ? pkt::opcode::rc_compare_swap
                                                            : pkt::opcode::rc_fetch_add;
      p.bth.psn = w.first_psn;
      p.atomic = pkt::AtomicEth{w.remote_addr, w.rkey, w.swap_add, w.compare};
      break;
    case WqeKind::nop:
      return false;
  }
  const bool unreliable = qp.type == hw::QpType::uc;
  if (unreliable) p.bth.opcode |= pkt::opcode::uc_base;  // the fetcher let only SEND and WRITE by
  if (qp.type == hw::QpType::xrc_send) {
    // XRC: RC's opcode at 0xa0, and the responder's SRQ in the XRCETH (Annex A14).
    p.bth.opcode = static_cast<uint8_t>(p.bth.opcode + pkt::opcode::xrc_base);
    p.xrc_srqn = w.xrc_srqn;
  }
  // AckReq on the last packet of a message, on every READ/atomic, periodically inside long
  // messages, and when this packet fills the window (so the requester never stalls silently).
  ++qp.req.pkts_since_ack_req;
  const bool window_full = psn_diff(psn_add(p.bth.psn, 1), qp.comp.comp_psn) >= kPsnWindow;
  // A paced QP asks on every packet: at a low rate, kAckReqInterval packets can take longer
  // than the local ACK timeout, which would then fire on packets the link is still carrying.
  // UC asks for nothing: no ACK ever comes.
  p.bth.ack_req = !unreliable && (last || qp.req.pkts_since_ack_req >= kAckReqInterval ||
                                  window_full || qp.pacer.active());
  if (p.bth.ack_req) qp.req.pkts_since_ack_req = 0;

  uint8_t* frame = ctx_.frame();
  const size_t hl = pkt::build_headers(p, frame);
  if (payload_len != 0 && !gather_wqe_payload(w, payload_offset, frame + hl, payload_len,
                                              ctx_.counters().host_memory_faults))
    return false;
  const size_t len = pkt::finish_packet(frame, hl, payload_len);
  ctx_.transmit(qp, frame, len);
  if (qp.pacer.active()) [[unlikely]]
    qp.pacer.sent(static_cast<uint32_t>(len), ctx_.now());
  if (w.kind == WqeKind::send || w.kind == WqeKind::write)
    ++w.pkts_sent;
  else
    w.pkts_sent = 1;
  if (unreliable) {
    // A UC packet is done once it is on the wire (IBA 9.7.8: the requester neither waits for
    // nor retries anything); its WQE completes when its last packet has gone.
    qp.comp.comp_psn = psn_add(p.bth.psn, 1);
    return true;
  }
  retransmit_.arm(qp);
  return true;
}

}  // namespace rnicdv::sim::rc
