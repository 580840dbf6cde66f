// SPDX-License-Identifier: BSD-3-Clause
// Errors, flushes and resets. In ERR every outstanding WQE of both queues completes with
// WR_FLUSH_ERR, signaled or not, in queue order, after the error CQE that caused it (IBA
// 10.3.1.7, C10-42/C10-96); work posted later is flushed as the device sees it. RESET
// discards everything without completions and rewinds the device's indices.
#include <endian.h>

#include <cstring>

#include "flush.h"

#include "queues.h"
#include "rnicdv/byte_order.h"

namespace rnicdv::sim::rc {

void Flush::send_error_cqe(QpObj& qp, const SendWqe& w, uint8_t syndrome) {
  wqe::CqeInit c;
  c.cqe_opcode = MLX5_CQE_REQ_ERR;
  c.send_opcode = w.mlx5_opcode;
  c.syndrome = syndrome;
  c.wqe_counter = static_cast<uint16_t>(w.pi);
  c.qpn = qp.qpn;
  c.srqn_uidx = qp.user_index;
  if (syndrome != MLX5_CQE_SYNDROME_WR_FLUSH_ERR) ++ctx_.counters().error_cqes;
  ctx_.write_cqe(qp.send_cq, c);
}

void Flush::recv_error_cqe(QpObj& qp, uint8_t syndrome) {
  wqe::CqeInit c;
  c.cqe_opcode = MLX5_CQE_RESP_ERR;
  c.syndrome = syndrome;
  c.qpn = qp.qpn;
  c.wqe_counter = static_cast<uint16_t>(qp.resp.recv.counter);
  c.srqn_uidx = qp.recv_srqn_uidx();
  qp.resp.recv.active = false;
  ++ctx_.counters().error_cqes;
  ctx_.write_cqe(qp.receive_cq(), c);
}

void Flush::to_error(QpObj& qp) {
  if (qp.state == hw::QpState::err) return;
  qp.state = hw::QpState::err;
  qp.comp.retx_deadline = 0;
  qp.req.rnr_deadline = qp.req.pace_deadline = 0;
  qp.pacer.drop_hold();
  qp.resp.resp_queue.clear();
  qp.resp.write.active = false;
  qp.resp.cur_op = 0;
  qp.rtr_db_kept = false;
  flush_sq(qp);
  flush_rq(qp);
}

void Flush::flush_sq(QpObj& qp) {
  // WQEs the device fetched and did not complete.
  while (qp.comp.wq_head != qp.wq_tail) {
    const SendWqe& w = qp.wqe_at(qp.comp.wq_head);
    ++qp.comp.wq_head;
    send_error_cqe(qp, w, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
  }
  qp.req.wq_send = qp.comp.wq_head;
  // WQEs the DBR announces that were never fetched: only the control segment is read. A QP
  // without a send queue has none, whatever its record says.
  SendWqe w;
  while (qp.has_sq()) {
    const uint16_t ahead = static_cast<uint16_t>(load_sq_dbr(qp) - qp.sq_consumed);
    bool beyond = false;
    if (ahead == 0 || ahead > qp.sq.bb_count) {
      // A scanning device flushes valid-looking WQEs past the DBR too.
      if (!ctx_.profile().fetches_beyond_dbr || qp.host_failed) break;
      if (!mirror_sq_beyond(qp, qp.sq_consumed) ||
          !wqe::looks_valid_send_wqe(qp.sq, qp.sq_consumed, qp.qpn, qp.transport()))
        break;
      beyond = true;
    } else if (!mirror_sq(qp, qp.sq_consumed, qp.sq_consumed + ahead)) {
      break;
    }
    uint8_t ctrl[8];
    std::memcpy(ctrl, qp.sq.bb(qp.sq_consumed), sizeof ctrl);
    const uint32_t ds = load_be32(ctrl + 4) & 0x3f;
    w.pi = qp.sq_consumed;
    w.mlx5_opcode = static_cast<uint8_t>(load_be32(ctrl) & 0xff);
    send_error_cqe(qp, w, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
    qp.sq_consumed += ds == 0 ? 1 : (ds + 3) / 4;
    ++ctx_.counters().wqes_fetched;
    if (beyond) ++ctx_.counters().wqes_beyond_dbr;
  }
  qp.sq_limit = qp.sq_consumed;
}

void Flush::flush_rq(QpObj& qp) {
  wqe::CqeInit c;
  c.cqe_opcode = MLX5_CQE_RESP_ERR;
  c.syndrome = MLX5_CQE_SYNDROME_WR_FLUSH_ERR;
  c.qpn = qp.qpn;
  c.srqn_uidx = qp.recv_srqn_uidx();
  if (qp.resp.recv.active) {
    qp.resp.recv.active = false;
    c.wqe_counter = static_cast<uint16_t>(qp.resp.recv.counter);
    ctx_.write_cqe(qp.receive_cq(), c);
  }
  // The WQEs still posted to a shared receive queue belong to the other QPs as much as to
  // this one: only the receive this QP was filling is flushed. XRC QPs have no receive queue.
  if (qp.srq || qp.xrc()) return;
  for (;;) {
    const uint16_t posted = static_cast<uint16_t>(load_rq_dbr(qp) - qp.rq_consumed);
    if (posted == 0 || posted > qp.rq.wqe_cnt) break;
    c.wqe_counter = static_cast<uint16_t>(qp.rq_consumed);
    ++qp.rq_consumed;
    ctx_.write_cqe(qp.recv_cq, c);
  }
}

void Flush::reset(QpObj& qp) {
  qp.state = hw::QpState::reset;
  qp.attr = hw::QpAttr{};
  qp.remote_ip = IpAddress{};
  qp.ip_class = IpClass{};
  qp.db_pending = false;
  qp.rtr_db_kept = false;
  qp.sq_limit = qp.sq_consumed = qp.rq_consumed = qp.sq_mirrored = 0;
  qp.seen_sq_dbr = load_sq_dbr(qp);
  qp.seen_rq_dbr = load_rq_dbr(qp);
  qp.comp.wq_head = qp.req.wq_send = qp.wq_tail = 0;
  qp.req.next_psn = qp.comp.comp_psn = 0;
  qp.req.pkts_since_ack_req = 0;
  qp.comp.retx_deadline = qp.req.rnr_deadline = qp.req.pace_deadline = 0;
  qp.pacer.drop_hold();
  qp.comp.gap_retry_armed = false;
  qp.comp.sq_drained_raised = false;
  qp.resp.epsn = qp.resp.msn = 0;
  qp.resp.nak_seq_sent = false;
  qp.resp.cur_op = 0;
  qp.resp.uc_dropping = false;
  qp.resp.recv.active = false;
  qp.resp.write.active = false;
  qp.resp.resources.clear();
  qp.resp.res_next = 0;
  qp.resp.resp_queue.clear();
  qp.resp.comm_est_raised = false;
  qp.resp.fault_asked = false;
  qp.resp.fault.reset();
}

}  // namespace rnicdv::sim::rc
