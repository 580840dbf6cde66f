// SPDX-License-Identifier: BSD-3-Clause
// The unreliable datagram service: see datagram.h.
#include "datagram.h"

#include <cstring>

#include "../packet/psn.h"
#include "../rc/completer.h"
#include "../rc/flush.h"
#include "../rc/queues.h"
#include "../rc/sq_fetch.h"
#include "../seg_copy.h"
#include "rnicdv/byte_order.h"

namespace rnicdv::sim::ud {

void write_grh(uint8_t out[kGrhBytes], const IpAddress& src, const IpAddress& dst,
               size_t udp_payload_len) {
  std::memset(out, 0, kGrhBytes);
  if (src.is_v6()) {
    out[0] = 0x60;  // version 6, traffic class and flow label 0
    store_be16(out + 4, static_cast<uint16_t>(8 + udp_payload_len));
    out[6] = 17;  // next header: UDP
    out[7] = 64;  // hop limit
    std::memcpy(out + 8, src.bytes.data(), 16);
    std::memcpy(out + 24, dst.bytes.data(), 16);
    return;
  }
  uint8_t* ip = out + 20;
  ip[0] = 0x45;  // version 4, 5 words
  store_be16(ip + 2, static_cast<uint16_t>(20 + 8 + udp_payload_len));
  store_be16(ip + 6, 0x4000);  // don't fragment
  ip[8] = 64;                  // TTL
  ip[9] = 17;                  // UDP
  store_be32(ip + 12, src.ipv4());
  store_be32(ip + 16, dst.ipv4());
  uint32_t sum = 0;
  for (int i = 0; i < 20; i += 2) sum += static_cast<uint32_t>(ip[i] << 8 | ip[i + 1]);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  store_be16(ip + 10, static_cast<uint16_t>(~sum));
}

bool Datagram::progress(QpObj& qp, uint32_t budget) {
  if (qp.state != hw::QpState::rts && qp.state != hw::QpState::sqd) return false;
  bool did = false;
  while (budget != 0) {
    if (qp.comp.wq_head == qp.wq_tail) {
      if (qp.state != hw::QpState::rts || !fetcher_.fetch_next(qp)) break;
      did = true;
    }
    SendWqe& w = qp.wqe_at(qp.comp.wq_head);
    if (!w.error && w.kind != WqeKind::nop) send_one(qp, w);
    if (w.error) {
      fail_send(qp, w);
      return true;
    }
    ++qp.counters.wqes_executed;
    completer_.complete_send_wqe(qp, w);
    ++qp.comp.wq_head;
    qp.req.wq_send = qp.comp.wq_head;
    --budget;
    did = true;
  }
  if (qp.state == hw::QpState::sqd && qp.comp.wq_head == qp.wq_tail && !qp.comp.sq_drained_raised) {
    qp.comp.sq_drained_raised = true;
    ctx_.raise_event(hw::AsyncEventType::sq_drained, qp.qpn, 0);
  }
  return did;
}

// One UD_SEND_ONLY packet; on failure the WQE's error is set and nothing was sent.
void Datagram::send_one(QpObj& qp, SendWqe& w) {
  pkt::Packet p;
  p.bth.opcode = w.with_imm ? pkt::opcode::ud_send_only_imm : pkt::opcode::ud_send_only;
  p.bth.dest_qp = w.ud_dest_qpn;
  p.bth.psn = qp.req.next_psn;
  p.bth.solicited = w.solicited;
  // A Q_Key with its high bit set means "use the QP's own" (IBA 10.2.5, controlled Q_Keys).
  p.deth.qkey = (w.ud_qkey & 0x80000000u) ? qp.attr.qkey : w.ud_qkey;
  p.deth.src_qp = qp.qpn;
  p.imm = w.imm;
  const auto payload_len = static_cast<uint32_t>(w.length);
  uint8_t* frame = ctx_.frame();
  const size_t hl = pkt::build_headers(p, frame);
  if (payload_len != 0 &&
      !gather_wqe_payload(w, 0, frame + hl, payload_len, ctx_.counters().host_memory_faults))
    return;
  const size_t len = pkt::finish_packet(frame, hl, payload_len);
  qp.req.next_psn = psn_add(qp.req.next_psn, 1);
  ctx_.transmit_to(qp, w.ud_dest, frame, len, IpClass{w.ud_tclass, w.ud_hop_limit, w.ud_flow_label});
}

// A send WQE that cannot execute: its error CQE, the rest of the SQ flushed, the QP in SQE.
void Datagram::fail_send(QpObj& qp, SendWqe& w) {
  flush_.send_error_cqe(qp, w, w.error);
  ++qp.comp.wq_head;
  qp.req.wq_send = qp.comp.wq_head;
  qp.state = hw::QpState::sqe;
  flush_.flush_sq(qp);
}

// The receive being filled completes with `syndrome`, the affiliated event is raised as the
// RC responder raises it for the same fault, and the QP goes to ERR.
void Datagram::recv_error(QpObj& qp, uint8_t syndrome, hw::AsyncEventType event) {
  flush_.recv_error_cqe(qp, syndrome);
  ctx_.raise_event(event, qp.qpn, 0);
  flush_.to_error(qp);
}

void Datagram::on_packet(QpObj& qp, const IpAddress& src, const IpAddress& dst,
                         const pkt::Packet& p, size_t frame_len) {
  const auto drop = [&](uint64_t& reason) {
    ++reason;
    ++ctx_.counters().rx_dropped;
    ++qp.counters.rx_dropped;
  };
  if (p.deth.qkey != qp.attr.qkey) return drop(ctx_.counters().ud_qkey_drops);
  const uint16_t posted = static_cast<uint16_t>(rc::load_rq_dbr(qp) - qp.rq_consumed);
  if (posted == 0 || posted > qp.rq.wqe_cnt) return drop(ctx_.counters().ud_no_recv_drops);
  RecvInProgress& r = qp.resp.recv;
  r.counter = qp.rq_consumed++;
  r.active = true;  // a fault from here on completes (or flushes) this receive
  wqe::DecodedRecvWqe d;
  wqe::WqeDefect defect = wqe::WqeDefect::none;
  // A receive queue whose memory is gone marks the QP; the engine then fails it (QP_FATAL)
  // and the flush completes this receive.
  if (!rc::mirror_rq(qp, r.counter)) return;
  defect = wqe::decode_recv_wqe(qp.rq, r.counter, &d);
  if (defect != wqe::WqeDefect::none)
    return recv_error(qp, MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, hw::AsyncEventType::qp_fatal);
  std::vector<LocalSeg>& segs = r.segs;
  segs.clear();
  uint64_t capacity = 0;
  for (uint32_t i = 0; i < d.num_sge; ++i) {
    const Sge& sge = d.sges[i];
    if (sge.length == 0) continue;
    uint8_t* host = nullptr;
    PinRef pin;
    if (ctx_.mrs().check(sge.lkey, qp.pdn, sge.addr, sge.length, hw::access::local_write, &host,
                         &pin) != AccessResult::ok)
      return recv_error(qp, MLX5_CQE_SYNDROME_LOCAL_PROT_ERR, hw::AsyncEventType::qp_access_err);
    segs.push_back(LocalSeg{host, sge.length, pin});
    capacity += sge.length;
  }
  // The GRH area counts against the buffer and in the byte count (IBA 11.4.1.1).
  if (capacity < kGrhBytes + p.payload_len)
    return recv_error(qp, MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR, hw::AsyncEventType::qp_req_err);
  uint8_t grh[kGrhBytes];
  write_grh(grh, src, dst, frame_len + 4);
  if (scatter_bytes(segs, 0, grh, kGrhBytes) != SegCopy::ok ||
      (p.payload_len && scatter_bytes(segs, kGrhBytes, p.payload, p.payload_len) != SegCopy::ok)) {
    ++ctx_.counters().host_memory_faults;
    return recv_error(qp, MLX5_CQE_SYNDROME_LOCAL_PROT_ERR, hw::AsyncEventType::qp_access_err);
  }
  const bool imm = p.bth.opcode == pkt::opcode::ud_send_only_imm;
  wqe::CqeInit c;
  c.cqe_opcode = imm ? MLX5_CQE_RESP_SEND_IMM : MLX5_CQE_RESP_SEND;
  c.qpn = qp.qpn;
  c.src_qpn = p.deth.src_qp;
  c.grh = true;
  c.roce_pkt_type = src.is_v4() ? 0x8 | 0x2 : 0x8 | 0x1;  // RoCE v2 over IPv4, over IPv6
  c.byte_cnt = kGrhBytes + p.payload_len;
  c.imm = imm ? p.imm : 0;
  c.wqe_counter = static_cast<uint16_t>(r.counter);
  c.srqn_uidx = qp.recv_srqn_uidx();
  c.solicited = p.bth.solicited;
  r.active = false;
  ctx_.write_cqe(qp.recv_cq, c);
}

}  // namespace rnicdv::sim::ud
