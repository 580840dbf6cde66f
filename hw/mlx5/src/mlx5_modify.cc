// SPDX-License-Identifier: BSD-3-Clause
#include "mlx5_modify.h"

#include <cstdio>
#include <cstring>

namespace rnicdv::hw::mlx5 {

static_assert(access::local_write == IBV_ACCESS_LOCAL_WRITE);
static_assert(access::remote_write == IBV_ACCESS_REMOTE_WRITE);
static_assert(access::remote_read == IBV_ACCESS_REMOTE_READ);
static_assert(access::remote_atomic == IBV_ACCESS_REMOTE_ATOMIC);

namespace {

constexpr uint32_t kAllAccess =
    access::local_write | access::remote_write | access::remote_read | access::remote_atomic;
constexpr uint32_t kMax24 = 0xffffff;  // QPNs and PSNs are 24-bit (IBA 9.2 BTH)

// Attributes that may be changed without a state change (RTS->RTS, SQD->RTS).
constexpr uint32_t kRtsTunable = qp_attr::access_flags | qp_attr::min_rnr_timer;

}  // namespace

TransitionRule rc_transition_rule(QpState from, QpState to) noexcept {
  using S = QpState;
  namespace a = qp_attr;
  // Any state may be reset; any state but RESET may be moved to ERR (IBA 10.3.1).
  if (to == S::reset) return {true, 0, 0};
  if (to == S::err) return {from != S::reset, 0, 0};
  switch (from) {
    case S::reset:
      if (to == S::init) return {true, a::port | a::access_flags, 0};
      break;
    case S::init:
      if (to == S::init) return {true, 0, a::port | a::access_flags};
      if (to == S::rtr) {
        return {true,
                a::av | a::path_mtu | a::dest_qpn | a::rq_psn | a::max_dest_rd_atomic |
                    a::min_rnr_timer,
                a::access_flags};
      }
      break;
    case S::rtr:
      if (to == S::rts) {
        return {true, a::sq_psn | a::timeout | a::retry_cnt | a::rnr_retry | a::max_rd_atomic,
                kRtsTunable};
      }
      break;
    case S::rts:
      if (to == S::rts) return {true, 0, kRtsTunable};
      if (to == S::sqd) return {true, 0, 0};
      break;
    case S::sqd:
      if (to == S::rts) return {true, 0, kRtsTunable};
      if (to == S::sqd) {
        return {true, 0,
                a::port | a::av | a::timeout | a::retry_cnt | a::rnr_retry | a::max_rd_atomic |
                    a::max_dest_rd_atomic | a::access_flags | a::min_rnr_timer};
      }
      break;
    case S::sqe:  // SQE->RTS exists for UC and UD only; an RC QP goes to ERR instead.
    case S::err:
      break;
  }
  return {};
}

const char* qp_attr_bit_name(uint32_t bit) noexcept {
  switch (bit) {
    case qp_attr::state:
      return "state";
    case qp_attr::access_flags:
      return "access_flags";
    case qp_attr::port:
      return "port";
    case qp_attr::path_mtu:
      return "path_mtu";
    case qp_attr::dest_qpn:
      return "dest_qpn";
    case qp_attr::rq_psn:
      return "rq_psn";
    case qp_attr::sq_psn:
      return "sq_psn";
    case qp_attr::max_rd_atomic:
      return "max_rd_atomic";
    case qp_attr::max_dest_rd_atomic:
      return "max_dest_rd_atomic";
    case qp_attr::min_rnr_timer:
      return "min_rnr_timer";
    case qp_attr::timeout:
      return "timeout";
    case qp_attr::retry_cnt:
      return "retry_cnt";
    case qp_attr::rnr_retry:
      return "rnr_retry";
    case qp_attr::av:
      return "av";
    case qp_attr::qkey:
      return "qkey";
  }
  return "?";
}

ibv_qp_state to_ibv_state(QpState s) noexcept {
  switch (s) {
    case QpState::reset:
      return IBV_QPS_RESET;
    case QpState::init:
      return IBV_QPS_INIT;
    case QpState::rtr:
      return IBV_QPS_RTR;
    case QpState::rts:
      return IBV_QPS_RTS;
    case QpState::sqd:
      return IBV_QPS_SQD;
    case QpState::sqe:
      return IBV_QPS_SQE;
    case QpState::err:
      return IBV_QPS_ERR;
  }
  return IBV_QPS_ERR;
}

QpState from_ibv_state(ibv_qp_state s) noexcept {
  switch (s) {
    case IBV_QPS_RESET:
      return QpState::reset;
    case IBV_QPS_INIT:
      return QpState::init;
    case IBV_QPS_RTR:
      return QpState::rtr;
    case IBV_QPS_RTS:
      return QpState::rts;
    case IBV_QPS_SQD:
      return QpState::sqd;
    case IBV_QPS_SQE:
      return QpState::sqe;
    case IBV_QPS_ERR:
    case IBV_QPS_UNKNOWN:
      break;
  }
  return QpState::err;
}

TransitionRule ud_transition_rule(QpState from, QpState to) noexcept {
  using S = QpState;
  namespace a = qp_attr;
  if (to == S::reset) return {true, 0, 0};
  if (to == S::err) return {from != S::reset, 0, 0};
  switch (from) {
    case S::reset:
      if (to == S::init) return {true, a::port | a::qkey, 0};
      break;
    case S::init:
      if (to == S::init) return {true, 0, a::port | a::qkey};
      if (to == S::rtr) return {true, 0, a::qkey};
      break;
    case S::rtr:
      if (to == S::rts) return {true, a::sq_psn, a::qkey};
      break;
    case S::rts:
      if (to == S::rts) return {true, 0, a::qkey};
      if (to == S::sqd) return {true, 0, 0};
      break;
    case S::sqd:
      if (to == S::rts || to == S::sqd) return {true, 0, a::qkey};
      break;
    case S::sqe:
      if (to == S::rts) return {true, 0, a::qkey};
      break;
    case S::err:
      break;
  }
  return {};
}

TransitionRule uc_transition_rule(QpState from, QpState to) noexcept {
  using S = QpState;
  namespace a = qp_attr;
  if (to == S::reset) return {true, 0, 0};
  if (to == S::err) return {from != S::reset, 0, 0};
  switch (from) {
    case S::reset:
      if (to == S::init) return {true, a::port | a::access_flags, 0};
      break;
    case S::init:
      if (to == S::init) return {true, 0, a::port | a::access_flags};
      if (to == S::rtr) return {true, a::av | a::path_mtu | a::dest_qpn | a::rq_psn, a::access_flags};
      break;
    case S::rtr:
      if (to == S::rts) return {true, a::sq_psn, a::access_flags};
      break;
    case S::rts:
      if (to == S::rts) return {true, 0, a::access_flags};
      if (to == S::sqd) return {true, 0, 0};
      break;
    case S::sqd:
      if (to == S::rts) return {true, 0, a::access_flags};
      if (to == S::sqd) return {true, 0, a::port | a::av | a::access_flags};
      break;
    case S::sqe:
      if (to == S::rts) return {true, 0, a::access_flags};
      break;
    case S::err:
      break;
  }
  return {};
}

namespace {

// Builds the "qp 0x1c: modify RTR->RTS: " prefix once per call.
class ModifyErrors {
 public:
  ModifyErrors(uint32_t qpn, QpState from, QpState to) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "qp 0x%x: modify %s->%s: ", qpn, qp_state_name(from),
                  qp_state_name(to));
    prefix_ = buf;
  }
  Status operator()(Errc code, const std::string& reason) const {
    return Status(code, prefix_ + reason);
  }

 private:
  std::string prefix_;
};

// "sq_psn, timeout" for the bits of `bits`, in bit order.
std::string bit_names(uint32_t bits) {
  std::string out;
  for (uint32_t bit = 1; bit != 0 && bit <= bits; bit <<= 1) {
    if (!(bits & bit)) continue;
    if (!out.empty()) out += ", ";
    out += qp_attr_bit_name(bit);
  }
  return out;
}

std::string value_error(const char* name, uint64_t value, const char* limit) {
  return std::string(name) + " " + std::to_string(value) + " out of range (" + limit + ")";
}

bool gid_equal(const Gid& a, const Gid& b) {
  return std::memcmp(a.raw, b.raw, sizeof a.raw) == 0;
}

}  // namespace

Result<VerbsModify> translate_modify(const QpAttr& attr, uint32_t mask, const ModifyContext& ctx) {
  const QpState target = (mask & qp_attr::state) ? attr.state : ctx.current;
  const ModifyErrors fail(ctx.qpn, ctx.current, target);

  if (const uint32_t unknown = mask & ~kKnownQpAttrBits; unknown != 0) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "unknown attribute bits 0x%x", unknown);
    return fail(Errc::invalid_argument, buf);
  }
  const bool ud = ctx.type == QpType::ud;
  const TransitionRule rule = ud                      ? ud_transition_rule(ctx.current, target)
                              : ctx.type == QpType::uc ? uc_transition_rule(ctx.current, target)
                                                       : rc_transition_rule(ctx.current, target);
  if (!rule.valid) {
    return fail(Errc::bad_state, ud                      ? "not a valid transition for a UD QP (IBA 10.3.1)"
                                 : ctx.type == QpType::uc ? "not a valid transition for a UC QP (IBA 10.3.1)"
                                                          : "not a valid transition for an RC QP (IBA 10.3.1)");
  }
  const uint32_t given = mask & ~qp_attr::state;
  if (const uint32_t missing = rule.required & ~given; missing != 0) {
    return fail(Errc::invalid_argument, bit_names(missing) + " not set");
  }
  if (const uint32_t extra = given & ~(rule.required | rule.optional); extra != 0) {
    return fail(Errc::invalid_argument, bit_names(extra) + " not accepted by this transition");
  }

  VerbsModify out;
  std::memset(&out.attr, 0, sizeof out.attr);
  out.target = target;
  out.port = ctx.current_port;
  if (mask & qp_attr::state) {
    out.attr.qp_state = to_ibv_state(target);
    out.mask |= IBV_QP_STATE;
  }
  if (target == QpState::sqd && ctx.current == QpState::rts) {
    // Ask for IBV_EVENT_SQ_DRAINED when the drain completes (IBA 10.3.1, SQ Drain).
    out.attr.en_sqd_async_notify = 1;
    out.mask |= IBV_QP_EN_SQD_ASYNC_NOTIFY;
  }

  if (given & qp_attr::port) {
    if (attr.port_num == 0 || attr.port_num > ctx.ports.size()) {
      return fail(Errc::invalid_argument, "port " + std::to_string(attr.port_num) +
                                              " does not exist (device has " +
                                              std::to_string(ctx.ports.size()) + ")");
    }
    const PortAddressing& port = ctx.ports[attr.port_num - 1u];
    if (port.pkey_table_len != 0 && attr.pkey_index >= port.pkey_table_len) {
      return fail(Errc::invalid_argument, "pkey_index " + std::to_string(attr.pkey_index) +
                                              " beyond port " + std::to_string(attr.port_num) +
                                              "'s P_Key table (" +
                                              std::to_string(port.pkey_table_len) + " entries)");
    }
    out.attr.port_num = attr.port_num;
    out.attr.pkey_index = attr.pkey_index;
    out.mask |= IBV_QP_PORT | IBV_QP_PKEY_INDEX;
    out.port = attr.port_num;
  }

  // Attributes below that depend on the port use the port after this call.
  const PortAddressing* port =
      (out.port >= 1 && out.port <= ctx.ports.size()) ? &ctx.ports[out.port - 1u] : nullptr;
  if ((given & (qp_attr::path_mtu | qp_attr::av)) && !port) {
    return fail(Errc::bad_state, "the QP has no port (it was not taken to INIT with a port)");
  }

  if (given & qp_attr::access_flags) {
    if (attr.access_flags & ~kAllAccess) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "access_flags 0x%x has unknown bits", attr.access_flags);
      return fail(Errc::invalid_argument, buf);
    }
    out.attr.qp_access_flags = attr.access_flags;
    out.mask |= IBV_QP_ACCESS_FLAGS;
  }
  if (given & qp_attr::path_mtu) {
    const auto mtu = static_cast<uint8_t>(attr.path_mtu);
    if (mtu < static_cast<uint8_t>(Mtu::mtu256) || mtu > static_cast<uint8_t>(Mtu::mtu4096)) {
      return fail(Errc::invalid_argument, value_error("path_mtu code", mtu, "1..5"));
    }
    if (mtu > static_cast<uint8_t>(port->max_mtu)) {
      return fail(Errc::invalid_argument, "path_mtu " + std::to_string(mtu_bytes(attr.path_mtu)) +
                                              " above port " + std::to_string(port->port_num) +
                                              "'s maximum " +
                                              std::to_string(mtu_bytes(port->max_mtu)));
    }
    out.attr.path_mtu = static_cast<ibv_mtu>(mtu);
    out.mask |= IBV_QP_PATH_MTU;
  }
  if (given & qp_attr::dest_qpn) {
    if (attr.dest_qpn > kMax24)
      return fail(Errc::invalid_argument, value_error("dest_qpn", attr.dest_qpn, "24 bits"));
    out.attr.dest_qp_num = attr.dest_qpn;
    out.mask |= IBV_QP_DEST_QPN;
  }
  if (given & qp_attr::rq_psn) {
    if (attr.rq_psn > kMax24)
      return fail(Errc::invalid_argument, value_error("rq_psn", attr.rq_psn, "24 bits"));
    out.attr.rq_psn = attr.rq_psn;
    out.mask |= IBV_QP_RQ_PSN;
  }
  if (given & qp_attr::sq_psn) {
    if (attr.sq_psn > kMax24)
      return fail(Errc::invalid_argument, value_error("sq_psn", attr.sq_psn, "24 bits"));
    out.attr.sq_psn = attr.sq_psn;
    out.mask |= IBV_QP_SQ_PSN;
  }
  if (given & qp_attr::max_rd_atomic) {
    if (attr.max_rd_atomic > ctx.max_rd_atomic) {
      return fail(
          Errc::invalid_argument,
          value_error("max_rd_atomic", attr.max_rd_atomic,
                      ("device max_qp_init_rd_atom " + std::to_string(ctx.max_rd_atomic)).c_str()));
    }
    out.attr.max_rd_atomic = attr.max_rd_atomic;
    out.mask |= IBV_QP_MAX_QP_RD_ATOMIC;
  }
  if (given & qp_attr::max_dest_rd_atomic) {
    if (attr.max_dest_rd_atomic > ctx.max_dest_rd_atomic) {
      return fail(
          Errc::invalid_argument,
          value_error("max_dest_rd_atomic", attr.max_dest_rd_atomic,
                      ("device max_qp_rd_atom " + std::to_string(ctx.max_dest_rd_atomic)).c_str()));
    }
    out.attr.max_dest_rd_atomic = attr.max_dest_rd_atomic;
    out.mask |= IBV_QP_MAX_DEST_RD_ATOMIC;
  }
  if (given & qp_attr::min_rnr_timer) {
    // The 5-bit RNR timer code this QP sends in RNR NAKs (AETH syndrome).
    if (attr.min_rnr_timer > 31)
      return fail(Errc::invalid_argument,
                  value_error("min_rnr_timer", attr.min_rnr_timer, "0..31"));
    out.attr.min_rnr_timer = attr.min_rnr_timer;
    out.mask |= IBV_QP_MIN_RNR_TIMER;
  }
  if (given & qp_attr::timeout) {
    // Local ACK timeout: 4.096 us * 2^timeout, a 5-bit exponent; 0 disables it.
    if (attr.timeout > 31)
      return fail(Errc::invalid_argument, value_error("timeout", attr.timeout, "0..31"));
    out.attr.timeout = attr.timeout;
    out.mask |= IBV_QP_TIMEOUT;
  }
  if (given & qp_attr::retry_cnt) {
    if (attr.retry_cnt > 7)
      return fail(Errc::invalid_argument, value_error("retry_cnt", attr.retry_cnt, "0..7"));
    out.attr.retry_cnt = attr.retry_cnt;
    out.mask |= IBV_QP_RETRY_CNT;
  }
  if (given & qp_attr::rnr_retry) {
    // 3 bits; 7 means retry for ever.
    if (attr.rnr_retry > 7)
      return fail(Errc::invalid_argument, value_error("rnr_retry", attr.rnr_retry, "0..7"));
    out.attr.rnr_retry = attr.rnr_retry;
    out.mask |= IBV_QP_RNR_RETRY;
  }

  if (given & qp_attr::av) {
    if (is_zero(attr.remote_gid))
      return fail(Errc::invalid_argument, "remote_gid not set (all zero)");
    if (attr.sl > 15) return fail(Errc::invalid_argument, value_error("sl", attr.sl, "0..15"));
    if (attr.flow_label > 0xFFFFF)
      return fail(Errc::invalid_argument,
                  value_error("flow_label", attr.flow_label, "0..1048575 (20 bits)"));
    ibv_ah_attr& ah = out.attr.ah_attr;
    ah.port_num = port->port_num;
    ah.sl = attr.sl;
    ah.src_path_bits = 0;
    ah.static_rate = 0;
    if (port->link_layer == LinkLayer::infiniband) {
      if (!port->source_gid || !gid_equal(port->source_gid->gid, attr.remote_gid)) {
        return fail(Errc::unsupported,
                    "remote " + attr.remote_gid.to_string() + " on InfiniBand port " +
                        std::to_string(port->port_num) +
                        ": reaching a peer needs its LID, which QpAttr does not carry; only "
                        "loopback to this port's GID is supported");
      }
      ah.is_global = 0;
      ah.dlid = port->lid;
    } else {
      if (!port->source_gid) {
        return fail(Errc::unsupported, "port " + std::to_string(port->port_num) +
                                           " has no usable source GID (no IP address on its "
                                           "network interface?)");
      }
      ah.is_global = 1;
      ah.dlid = 0;
      std::memcpy(ah.grh.dgid.raw, attr.remote_gid.raw, sizeof ah.grh.dgid.raw);
      ah.grh.sgid_index = static_cast<uint8_t>(port->source_gid->index);
      ah.grh.hop_limit = attr.hop_limit == 0 ? kRoceHopLimit : attr.hop_limit;
      ah.grh.traffic_class = attr.traffic_class;
      ah.grh.flow_label = attr.flow_label;
    }
    out.mask |= IBV_QP_AV;
  }
  if (given & qp_attr::qkey) {
    out.attr.qkey = attr.qkey;
    out.mask |= IBV_QP_QKEY;
  }
  return out;
}

}  // namespace rnicdv::hw::mlx5
