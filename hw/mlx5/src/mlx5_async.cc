// SPDX-License-Identifier: BSD-3-Clause
#include "mlx5_async.h"

#include "mlx5_verbs.h"

namespace rnicdv::hw::mlx5 {

namespace {

std::optional<AsyncEvent> qp_event(AsyncEventType type, const ibv_async_event& event) {
  if (!event.element.qp) return std::nullopt;
  AsyncEvent out{type};
  out.qpn = event.element.qp->qp_num;
  return out;
}

}  // namespace

std::optional<AsyncEvent> map_async_event(const ibv_async_event& event) noexcept {
  switch (event.event_type) {
    case IBV_EVENT_COMM_EST:
      return qp_event(AsyncEventType::comm_est, event);
    case IBV_EVENT_SQ_DRAINED:
      return qp_event(AsyncEventType::sq_drained, event);
    case IBV_EVENT_QP_LAST_WQE_REACHED:
      return qp_event(AsyncEventType::last_wqe_reached, event);
    case IBV_EVENT_QP_FATAL:
      return qp_event(AsyncEventType::qp_fatal, event);
    case IBV_EVENT_QP_REQ_ERR:
      return qp_event(AsyncEventType::qp_req_err, event);
    case IBV_EVENT_QP_ACCESS_ERR:
      return qp_event(AsyncEventType::qp_access_err, event);
    case IBV_EVENT_CQ_ERR: {
      const ibv_cq* cq = event.element.cq;
      if (!cq || !cq->cq_context) return std::nullopt;
      AsyncEvent out{AsyncEventType::cq_err};
      out.cqn = static_cast<const CqHandle*>(cq->cq_context)->cqn;
      return out;
    }
    case IBV_EVENT_DEVICE_FATAL:
      return AsyncEvent{AsyncEventType::device_fatal};
    case IBV_EVENT_PORT_ACTIVE:
      return AsyncEvent{AsyncEventType::port_active};
    case IBV_EVENT_PORT_ERR:
      return AsyncEvent{AsyncEventType::port_err};
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_LID_CHANGE:
    case IBV_EVENT_PKEY_CHANGE:
    case IBV_EVENT_SM_CHANGE:
    case IBV_EVENT_SRQ_LIMIT_REACHED: {
      const ibv_srq* srq = event.element.srq;
      if (!srq || !srq->srq_context) return std::nullopt;
      AsyncEvent out{AsyncEventType::srq_limit_reached};
      out.srqn = static_cast<const SrqHandle*>(srq->srq_context)->srqn;
      return out;
    }
    case IBV_EVENT_SRQ_ERR:
    case IBV_EVENT_CLIENT_REREGISTER:
    case IBV_EVENT_GID_CHANGE:
    case IBV_EVENT_WQ_FATAL:
      break;
  }
  return std::nullopt;
}

}  // namespace rnicdv::hw::mlx5
