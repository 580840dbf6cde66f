// SPDX-License-Identifier: BSD-3-Clause
// Errors, flushes and resets. In ERR every outstanding WQE of both queues completes with
// WR_FLUSH_ERR, signaled or not, in queue order, after the error CQE that caused it (IBA
// 10.3.1.7, C10-42/C10-96); work posted later is flushed as the device sees it. RESET
// discards everything without completions and rewinds the device's indices.
#include <endian.h>

#include <cstring>

#include "hca.h"
#include "rnicdv/byte_order.h"

namespace rnicdv::sim {

void Hca::push_cqe(QpObj& qp, CqObj* cq, const wqe::CqeInit& init) {
  (void)qp;
  if (!cq) return;
  switch (cq_push(*cq, init)) {
    case CqPush::written:
      ++counters_.cqes_written;
      // Only a CQ with an event handler is ever armed (cq.h).
      if (cq->arm != CqArm::off) [[unlikely]] {
        if (cq_arm_met_by_cqe(*cq, cq->pi - 1, init)) raise_cq_event_locked(*cq);
      }
      return;
    case CqPush::dead:
      return;
    case CqPush::host_fault:
      fail_cq_memory_locked(*cq);
      return;
    case CqPush::overflow:
      break;
  }
  // CQ overrun (IBA 11.4.2.1, C11-...): CQ_ERR, nothing overwritten, and every QP that
  // completes into this CQ goes to ERR. The moves are done once the current work is over.
  // An overrun CQ raises no completion event any more: the CQE that would have fired it was
  // never written, the consumer learns of the overrun from CQ_ERR, and later arms are ignored.
  cq->arm = CqArm::off;
  cq->arm_check_pending = false;
  ++counters_.cq_overflows;
  raise_event(hw::AsyncEventType::cq_err, 0, cq->cqn);
  overflowed_cqs_.push_back(cq);
}

void Hca::handle_cq_overflows_locked() {
  while (!overflowed_cqs_.empty()) {
    CqObj* cq = overflowed_cqs_.back();
    overflowed_cqs_.pop_back();
    for (auto& qp : qps_) {
      if ((qp->send_cq != cq && qp->recv_cq != cq) || qp->state == hw::QpState::err ||
          qp->state == hw::QpState::reset)
        continue;
      raise_event(hw::AsyncEventType::qp_fatal, qp->qpn, 0);
      qp_to_error_locked(*qp);
    }
  }
}

void Hca::send_error_cqe(QpObj& qp, const SendWqe& w, uint8_t syndrome) {
  wqe::CqeInit c;
  c.cqe_opcode = MLX5_CQE_REQ_ERR;
  c.send_opcode = w.mlx5_opcode;
  c.syndrome = syndrome;
  c.wqe_counter = static_cast<uint16_t>(w.pi);
  c.qpn = qp.qpn;
  c.srqn_uidx = qp.user_index;
  if (syndrome != MLX5_CQE_SYNDROME_WR_FLUSH_ERR) ++counters_.error_cqes;
  push_cqe(qp, qp.send_cq, c);
}

void Hca::qp_to_error_locked(QpObj& qp) {
  if (qp.state == hw::QpState::err) return;
  qp.state = hw::QpState::err;
  qp.retx_deadline = 0;
  qp.rnr_deadline = 0;
  qp.resp_queue.clear();
  qp.write.active = false;
  qp.cur_op = 0;
  qp.rtr_db_kept = false;
  flush_sq_locked(qp);
  flush_rq_locked(qp);
}

void Hca::flush_sq_locked(QpObj& qp) {
  // WQEs the device fetched and did not complete.
  while (qp.wq_head != qp.wq_tail) {
    const SendWqe& w = qp.wqe_at(qp.wq_head);
    ++qp.wq_head;
    send_error_cqe(qp, w, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
  }
  qp.wq_send = qp.wq_head;
  // WQEs the DBR announces that were never fetched: only the control segment is read.
  SendWqe w;
  for (;;) {
    const uint16_t ahead = static_cast<uint16_t>(load_sq_dbr(qp) - qp.sq_consumed);
    bool beyond = false;
    if (ahead == 0 || ahead > qp.sq.bb_count) {
      // A scanning device flushes valid-looking WQEs past the DBR too.
      if (!config_.profile.fetches_beyond_dbr || qp.host_failed) break;
      bool valid = false;
      if (!read_queue(qp, [&] { valid = wqe::looks_valid_send_wqe(qp.sq, qp.sq_consumed, qp.qpn); }) ||
          !valid)
        break;
      beyond = true;
    }
    uint8_t ctrl[8];
    if (!read_queue(qp, [&] { std::memcpy(ctrl, qp.sq.bb(qp.sq_consumed), sizeof ctrl); })) break;
    const uint32_t ds = load_be32(ctrl + 4) & 0x3f;
    w.pi = qp.sq_consumed;
    w.mlx5_opcode = static_cast<uint8_t>(load_be32(ctrl) & 0xff);
    send_error_cqe(qp, w, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
    qp.sq_consumed += ds == 0 ? 1 : (ds + 3) / 4;
    ++counters_.wqes_fetched;
    if (beyond) ++counters_.wqes_beyond_dbr;
  }
  qp.sq_limit = qp.sq_consumed;
}

void Hca::flush_rq_locked(QpObj& qp) {
  wqe::CqeInit c;
  c.cqe_opcode = MLX5_CQE_RESP_ERR;
  c.syndrome = MLX5_CQE_SYNDROME_WR_FLUSH_ERR;
  c.qpn = qp.qpn;
  c.srqn_uidx = qp.user_index;
  if (qp.recv.active) {
    qp.recv.active = false;
    c.wqe_counter = static_cast<uint16_t>(qp.recv.counter);
    push_cqe(qp, qp.recv_cq, c);
  }
  for (;;) {
    const uint16_t posted = static_cast<uint16_t>(load_rq_dbr(qp) - qp.rq_consumed);
    if (posted == 0 || posted > qp.rq.wqe_cnt) break;
    c.wqe_counter = static_cast<uint16_t>(qp.rq_consumed);
    ++qp.rq_consumed;
    push_cqe(qp, qp.recv_cq, c);
  }
}

void Hca::reset_qp_locked(QpObj& qp) {
  qp.state = hw::QpState::reset;
  qp.attr = hw::QpAttr{};
  qp.remote_ipv4 = 0;
  qp.db_pending = false;
  qp.rtr_db_kept = false;
  qp.sq_limit = qp.sq_consumed = qp.rq_consumed = 0;
  qp.seen_sq_dbr = load_sq_dbr(qp);
  qp.seen_rq_dbr = load_rq_dbr(qp);
  qp.wq_head = qp.wq_send = qp.wq_tail = 0;
  qp.next_psn = qp.comp_psn = 0;
  qp.pkts_since_ack_req = 0;
  qp.retx_deadline = qp.rnr_deadline = 0;
  qp.gap_retry_armed = false;
  qp.sq_drained_raised = false;
  qp.epsn = qp.msn = 0;
  qp.nak_seq_sent = false;
  qp.cur_op = 0;
  qp.recv.active = false;
  qp.write.active = false;
  qp.resources.clear();
  qp.res_next = 0;
  qp.resp_queue.clear();
  qp.comm_est_raised = false;
}

}  // namespace rnicdv::sim
