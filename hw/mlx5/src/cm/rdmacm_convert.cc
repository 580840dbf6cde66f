// SPDX-License-Identifier: BSD-3-Clause
// librdmacm's vocabulary (ibv_qp_attr from rdma_init_qp_attr, rdma_cm_event) in the driver's.
#include <algorithm>
#include <cerrno>
#include <cstring>

#include "cm/rdmacm_cm.h"

namespace rnicdv::hw::mlx5::cm {

QpAttr qp_attr_from_ibv(const ibv_qp_attr& a, int m, uint32_t* mask) {
  QpAttr out;
  uint32_t bits = 0;
  if (m & IBV_QP_STATE) {
    bits |= qp_attr::state;
    switch (a.qp_state) {
      case IBV_QPS_RESET:
        out.state = QpState::reset;
        break;
      case IBV_QPS_INIT:
        out.state = QpState::init;
        break;
      case IBV_QPS_RTR:
        out.state = QpState::rtr;
        break;
      case IBV_QPS_RTS:
        out.state = QpState::rts;
        break;
      case IBV_QPS_SQD:
        out.state = QpState::sqd;
        break;
      case IBV_QPS_SQE:
        out.state = QpState::sqe;
        break;
      default:
        out.state = QpState::err;
        break;
    }
  }
  if (m & IBV_QP_ACCESS_FLAGS) {
    bits |= qp_attr::access_flags;
    out.access_flags = a.qp_access_flags & (access::local_write | access::remote_write |
                                            access::remote_read | access::remote_atomic);
  }
  if (m & (IBV_QP_PKEY_INDEX | IBV_QP_PORT)) {
    bits |= qp_attr::port;
    out.pkey_index = a.pkey_index;
    out.port_num = a.port_num ? a.port_num : 1;
  }
  if (m & IBV_QP_PATH_MTU) {
    bits |= qp_attr::path_mtu;
    out.path_mtu = static_cast<Mtu>(std::clamp<int>(a.path_mtu, IBV_MTU_256, IBV_MTU_4096));
  }
  if (m & IBV_QP_DEST_QPN) {
    bits |= qp_attr::dest_qpn;
    out.dest_qpn = a.dest_qp_num & 0xffffff;
  }
  if (m & IBV_QP_RQ_PSN) {
    bits |= qp_attr::rq_psn;
    out.rq_psn = a.rq_psn & 0xffffff;
  }
  if (m & IBV_QP_SQ_PSN) {
    bits |= qp_attr::sq_psn;
    out.sq_psn = a.sq_psn & 0xffffff;
  }
  if (m & IBV_QP_MAX_QP_RD_ATOMIC) {
    bits |= qp_attr::max_rd_atomic;
    out.max_rd_atomic = a.max_rd_atomic;
  }
  if (m & IBV_QP_MAX_DEST_RD_ATOMIC) {
    bits |= qp_attr::max_dest_rd_atomic;
    out.max_dest_rd_atomic = a.max_dest_rd_atomic;
  }
  if (m & IBV_QP_MIN_RNR_TIMER) {
    bits |= qp_attr::min_rnr_timer;
    out.min_rnr_timer = a.min_rnr_timer;
  }
  if (m & IBV_QP_TIMEOUT) {
    bits |= qp_attr::timeout;
    out.timeout = a.timeout;
  }
  if (m & IBV_QP_RETRY_CNT) {
    bits |= qp_attr::retry_cnt;
    out.retry_cnt = a.retry_cnt;
  }
  if (m & IBV_QP_RNR_RETRY) {
    bits |= qp_attr::rnr_retry;
    out.rnr_retry = a.rnr_retry;
  }
  if (m & IBV_QP_AV) {
    // On RoCE the address vector is the peer's GID (the backend builds the AH from it).
    bits |= qp_attr::av;
    std::memcpy(out.remote_gid.raw, a.ah_attr.grh.dgid.raw, sizeof out.remote_gid.raw);
    // And the path's class, hop limit, flow label and SL: on the passive side the REQ's.
    out.traffic_class = a.ah_attr.grh.traffic_class;
    out.hop_limit = a.ah_attr.grh.hop_limit;
    out.flow_label = a.ah_attr.grh.flow_label;
    out.sl = a.ah_attr.sl;
  }
  *mask = bits;
  return out;
}

const char* rdma_cm_event_name(rdma_cm_event_type t) noexcept {
  return rdma_event_str(t);
}

bool translate_event(const rdma_cm_event& ev, CmEvent* out) {
  *out = CmEvent{};
  const auto& conn = ev.param.conn;
  auto take_private = [&] {
    if (conn.private_data && conn.private_data_len)
      out->private_data.assign(
          static_cast<const uint8_t*>(conn.private_data),
          static_cast<const uint8_t*>(conn.private_data) + conn.private_data_len);
  };
  auto take_peer = [&] {
    out->peer.qpn = conn.qp_num;
    out->peer.responder_resources = conn.responder_resources;
    out->peer.initiator_depth = conn.initiator_depth;
    out->peer.retry_count = conn.retry_count;
    out->peer.rnr_retry_count = conn.rnr_retry_count;
  };
  out->detail = std::string("rdma_cm: ") + rdma_event_str(ev.event);
  switch (ev.event) {
    case RDMA_CM_EVENT_CONNECT_REQUEST:
      out->type = CmEventType::connect_request;
      take_private();
      take_peer();
      return true;
    case RDMA_CM_EVENT_CONNECT_RESPONSE:
      out->type = CmEventType::connect_response;
      take_private();
      take_peer();
      return true;
    case RDMA_CM_EVENT_ESTABLISHED:
      out->type = CmEventType::established;
      return true;
    case RDMA_CM_EVENT_REJECTED:
      // For IB and RoCE the status is the REJ reason (cma_ib_handler).
      out->type = CmEventType::rejected;
      out->reject_reason = static_cast<uint16_t>(ev.status > 0 ? ev.status : 0);
      out->detail = "rejected: " + std::string(reject_reason_name(out->reject_reason)) + " (" +
                    std::to_string(ev.status) + ")";
      take_private();
      return true;
    case RDMA_CM_EVENT_UNREACHABLE:
    case RDMA_CM_EVENT_ADDR_ERROR:
    case RDMA_CM_EVENT_ROUTE_ERROR:
      out->type = CmEventType::unreachable;
      out->detail += std::string(", ") + std::strerror(ev.status < 0 ? -ev.status : ev.status);
      return true;
    case RDMA_CM_EVENT_CONNECT_ERROR:
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
      out->type = CmEventType::error;
      out->detail += std::string(", ") + std::strerror(ev.status < 0 ? -ev.status : ev.status);
      return true;
    case RDMA_CM_EVENT_DISCONNECTED:
      out->type = CmEventType::disconnected;
      return true;
    default:
      return false;  // resolution steps, TIMEWAIT_EXIT, address changes, multicast
  }
}

}  // namespace rnicdv::hw::mlx5::cm
