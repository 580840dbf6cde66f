// SPDX-License-Identifier: BSD-3-Clause
// Writing CQEs, as the device does for every role of the transport: the CQE itself (cq.cc),
// the completion event it may fire (cq_events.cc), and what happens when a CQ cannot take it:
// an overrun or the CQ's memory taken away gives CQ_ERR, and every QP that completes into
// that CQ goes to ERR once the current work is over.
#include <algorithm>
#include <vector>

#include "hca.h"

namespace rnicdv::sim {

void Hca::write_cqe_locked(CqObj* cq, const wqe::CqeInit& in) {
  if (!cq) return;
  // The completion timestamp: the device's clock in nanoseconds (hca_core_clock 1 GHz, as the
  // uverbs shim reports it).
  wqe::CqeInit init = in;
  init.timestamp = now();
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
    // XRC targets have no CQ of their own: they complete into their domain's SRQs' CQs.
    std::vector<uint32_t> xrc_domains;
    for (const auto& srq : srqs_)
      if (srq->xrc && srq->cq == cq) xrc_domains.push_back(srq->xrcdn);
    const auto completes_here = [&](const QpObj& qp) {
      if (qp.send_cq == cq || qp.recv_cq == cq) return true;
      return qp.type == hw::QpType::xrc_recv &&
             std::find(xrc_domains.begin(), xrc_domains.end(), qp.xrcdn) != xrc_domains.end();
    };
    for (auto& qp : qps_) {
      if (!completes_here(*qp) || qp->state == hw::QpState::err ||
          qp->state == hw::QpState::reset)
        continue;
      raise_event(hw::AsyncEventType::qp_fatal, qp->qpn, 0);
      rc_.flush.to_error(*qp);
      activate_locked(*qp);  // files it among the QPs in ERR
    }
  }
}

void Hca::fail_cq_memory_locked(CqObj& cq) {
  cq.host_fault = false;
  if (cq.host_failed) return;
  cq.host_failed = true;
  cq.overflowed = true;
  cq.arm = CqArm::off;
  cq.arm_check_pending = false;
  ++counters_.host_memory_faults;
  raise_event(hw::AsyncEventType::cq_err, 0, cq.cqn);
  overflowed_cqs_.push_back(&cq);
}

}  // namespace rnicdv::sim
