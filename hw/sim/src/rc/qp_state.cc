// SPDX-License-Identifier: BSD-3-Clause
// The QP state machine (IBA 10.3.1, Table 91 "QP state transition properties" as
// ibv_modify_qp(3) lists them for RC): which transitions are legal, which attributes each
// one requires and which it accepts.
#include "qp_state.h"

#include <span>
#include <string>

#include "../packet/psn.h"
#include "completer.h"
#include "flush.h"
#include "queues.h"

namespace rnicdv::sim::rc {

namespace {

namespace a = hw::qp_attr;
using hw::QpState;

struct Transition {
  QpState from;
  QpState to;
  uint32_t required;
  uint32_t optional;
};

constexpr Transition kTransitions[] = {
    {QpState::reset, QpState::init, a::port | a::access_flags, 0},
    {QpState::init, QpState::init, 0, a::port | a::access_flags},
    {QpState::init, QpState::rtr,
     a::av | a::path_mtu | a::dest_qpn | a::rq_psn | a::max_dest_rd_atomic | a::min_rnr_timer,
     a::access_flags | a::port},
    {QpState::rtr, QpState::rts,
     a::sq_psn | a::timeout | a::retry_cnt | a::rnr_retry | a::max_rd_atomic,
     a::access_flags | a::min_rnr_timer},
    {QpState::rts, QpState::rts, 0, a::access_flags | a::min_rnr_timer},
    {QpState::rts, QpState::sqd, 0, 0},
    {QpState::sqd, QpState::rts, 0, a::access_flags | a::min_rnr_timer},
    {QpState::sqd, QpState::sqd, 0,
     a::access_flags | a::min_rnr_timer | a::timeout | a::retry_cnt | a::rnr_retry |
         a::max_rd_atomic | a::max_dest_rd_atomic},
    {QpState::sqe, QpState::rts, 0, a::access_flags | a::min_rnr_timer},
};

// UD (ibv_modify_qp(3) for IBV_QPT_UD): a Q_Key from INIT on, no path, no peer. `port`
// carries the P_Key index, which UD may change at RTR and in SQD.
constexpr Transition kUdTransitions[] = {
    {QpState::reset, QpState::init, a::port | a::qkey, 0},
    {QpState::init, QpState::init, 0, a::port | a::qkey},
    {QpState::init, QpState::rtr, 0, a::port | a::qkey},
    {QpState::rtr, QpState::rts, a::sq_psn, a::qkey},
    {QpState::rts, QpState::rts, 0, a::qkey},
    {QpState::rts, QpState::sqd, 0, 0},
    {QpState::sqd, QpState::rts, 0, a::qkey},
    {QpState::sqd, QpState::sqd, 0, a::port | a::qkey},
    {QpState::sqe, QpState::rts, 0, a::qkey},
};

// UC (ibv_modify_qp(3) for IBV_QPT_UC): RC's path and peer, without what reliability needs
// (no ACK timeout, retry counts, RNR timer or READ/atomic depths), and SQE->RTS, since a send
// error leaves the receive side running.
constexpr Transition kUcTransitions[] = {
    {QpState::reset, QpState::init, a::port | a::access_flags, 0},
    {QpState::init, QpState::init, 0, a::port | a::access_flags},
    {QpState::init, QpState::rtr, a::av | a::path_mtu | a::dest_qpn | a::rq_psn,
     a::access_flags | a::port},
    {QpState::rtr, QpState::rts, a::sq_psn, a::access_flags},
    {QpState::rts, QpState::rts, 0, a::access_flags},
    {QpState::rts, QpState::sqd, 0, 0},
    {QpState::sqd, QpState::rts, 0, a::access_flags},
    {QpState::sqd, QpState::sqd, 0, a::access_flags},
    {QpState::sqe, QpState::rts, 0, a::access_flags},
};

// XRC (ib_modify_qp_is_ok's table for IB_QPT_XRC_INI and IB_QPT_XRC_TGT): an initiator is RC
// without a responder (no responder depth, no RNR timer); a target is RC without a requester
// (RTR->RTS takes the ACK timeout and the SQ PSN only).
constexpr Transition kXrcIniTransitions[] = {
    {QpState::reset, QpState::init, a::port | a::access_flags, 0},
    {QpState::init, QpState::init, 0, a::port | a::access_flags},
    {QpState::init, QpState::rtr, a::av | a::path_mtu | a::dest_qpn | a::rq_psn,
     a::access_flags | a::port},
    {QpState::rtr, QpState::rts,
     a::sq_psn | a::timeout | a::retry_cnt | a::rnr_retry | a::max_rd_atomic, a::access_flags},
    {QpState::rts, QpState::rts, 0, a::access_flags},
    {QpState::rts, QpState::sqd, 0, 0},
    {QpState::sqd, QpState::rts, 0, a::access_flags},
    {QpState::sqd, QpState::sqd, 0,
     a::access_flags | a::timeout | a::retry_cnt | a::rnr_retry | a::max_rd_atomic},
};
constexpr Transition kXrcTgtTransitions[] = {
    {QpState::reset, QpState::init, a::port | a::access_flags, 0},
    {QpState::init, QpState::init, 0, a::port | a::access_flags},
    {QpState::init, QpState::rtr,
     a::av | a::path_mtu | a::dest_qpn | a::rq_psn | a::max_dest_rd_atomic | a::min_rnr_timer,
     a::access_flags | a::port},
    {QpState::rtr, QpState::rts, a::sq_psn | a::timeout, a::access_flags | a::min_rnr_timer},
    {QpState::rts, QpState::rts, 0, a::access_flags | a::min_rnr_timer},
    {QpState::rts, QpState::sqd, 0, 0},
    {QpState::sqd, QpState::rts, 0, a::access_flags | a::min_rnr_timer},
    {QpState::sqd, QpState::sqd, 0,
     a::access_flags | a::min_rnr_timer | a::timeout | a::max_dest_rd_atomic},
};

const char* attr_name(uint32_t bit) {
  switch (bit) {
    case a::state:
      return "state";
    case a::access_flags:
      return "access_flags";
    case a::port:
      return "port";
    case a::path_mtu:
      return "path_mtu";
    case a::dest_qpn:
      return "dest_qpn";
    case a::rq_psn:
      return "rq_psn";
    case a::sq_psn:
      return "sq_psn";
    case a::max_rd_atomic:
      return "max_rd_atomic";
    case a::max_dest_rd_atomic:
      return "max_dest_rd_atomic";
    case a::min_rnr_timer:
      return "min_rnr_timer";
    case a::timeout:
      return "timeout";
    case a::retry_cnt:
      return "retry_cnt";
    case a::rnr_retry:
      return "rnr_retry";
    case a::av:
      return "av (remote GID)";
    case a::qkey:
      return "qkey";
  }
  return "unknown attribute";
}

uint32_t lowest_bit(uint32_t mask) {
  return mask & (~mask + 1);
}

constexpr uint32_t kAllAttrs = (a::qkey << 1) - 1;
constexpr uint32_t kKnownAccess = hw::access::local_write | hw::access::remote_write |
                                  hw::access::remote_read | hw::access::remote_atomic;

}  // namespace

Status QpStateMachine::check(const QpObj& qp, const hw::QpAttr& attr, uint32_t mask) const {
  const QpState from = qp.state;
  const QpState to = (mask & a::state) ? attr.state : from;
  const char* f = hw::qp_state_name(from);
  const char* t = hw::qp_state_name(to);
  const auto fail = [&](Errc code, const char* reason) {
    return Status::error(code, "qp %#x: modify %s->%s: %s", qp.qpn, f, t, reason);
  };
  if (mask & ~kAllAttrs) return fail(Errc::invalid_argument, "unknown attribute bits");

  uint32_t required = 0;
  uint32_t optional = 0;
  if (to == QpState::reset || to == QpState::err) {
    optional = kAllAttrs;  // any state may go to RESET or ERR; other attributes are ignored
  } else {
    bool legal = false;
    const auto& table =
        qp.type == hw::QpType::ud         ? std::span<const Transition>(kUdTransitions)
        : qp.type == hw::QpType::uc       ? std::span<const Transition>(kUcTransitions)
        : qp.type == hw::QpType::xrc_send ? std::span<const Transition>(kXrcIniTransitions)
        : qp.type == hw::QpType::xrc_recv ? std::span<const Transition>(kXrcTgtTransitions)
                                          : std::span<const Transition>(kTransitions);
    for (const Transition& tr : table) {
      if (tr.from == from && tr.to == to) {
        legal = true;
        required = tr.required;
        optional = tr.optional;
        break;
      }
    }
    if (!legal) return fail(Errc::bad_state, "illegal transition");
  }
  if (const uint32_t missing = required & ~mask) {
    const std::string reason = std::string(attr_name(lowest_bit(missing))) + " not set";
    return fail(Errc::invalid_argument, reason.c_str());
  }
  if (const uint32_t extra = mask & ~(required | optional | a::state)) {
    const std::string reason =
        std::string(attr_name(lowest_bit(extra))) + " is not an attribute of this transition";
    return fail(Errc::invalid_argument, reason.c_str());
  }
  if (to == QpState::reset || to == QpState::err) return Status::ok();

  const hw::DeviceCaps& caps = ctx_.caps();
  if ((mask & a::port) && (attr.port_num < 1 || attr.port_num > ctx_.port_count() ||
                           attr.pkey_index != 0))
    return fail(Errc::invalid_argument, ctx_.port_count() == 2
                                            ? "only ports 1 and 2 and P_Key index 0 exist"
                                            : "only port 1 and P_Key index 0 exist");
  // Multicast groups are joined on port 1 (ud/multicast.cc): a QP attached to one stays there.
  if ((mask & a::port) && attr.port_num != 1 && !qp.mcast_groups.empty())
    return fail(Errc::invalid_argument,
                "the QP is attached to multicast groups, which are port 1's: detach them first");
  if ((mask & a::access_flags) && (attr.access_flags & ~kKnownAccess))
    return fail(Errc::invalid_argument, "unknown access flags");
  if (mask & a::path_mtu) {
    const uint8_t m = static_cast<uint8_t>(attr.path_mtu);
    if (m < 1 || m > static_cast<uint8_t>(caps.max_mtu))
      return fail(Errc::invalid_argument, "path_mtu above the port's MTU");
  }
  if ((mask & a::dest_qpn) && attr.dest_qpn > kPsnMask)
    return fail(Errc::invalid_argument, "dest_qpn is wider than 24 bits");
  if ((mask & a::rq_psn) && attr.rq_psn > kPsnMask)
    return fail(Errc::invalid_argument, "rq_psn is wider than 24 bits");
  if ((mask & a::sq_psn) && attr.sq_psn > kPsnMask)
    return fail(Errc::invalid_argument, "sq_psn is wider than 24 bits");
  if ((mask & a::max_rd_atomic) && attr.max_rd_atomic > caps.max_qp_init_rd_atom)
    return fail(Errc::invalid_argument, "max_rd_atomic above the device's limit");
  if ((mask & a::max_dest_rd_atomic) && attr.max_dest_rd_atomic > caps.max_qp_rd_atom)
    return fail(Errc::invalid_argument, "max_dest_rd_atomic above the device's limit");
  if ((mask & a::min_rnr_timer) && attr.min_rnr_timer > 31)
    return fail(Errc::invalid_argument, "min_rnr_timer is a 5-bit code");
  if ((mask & a::timeout) && attr.timeout > 31)
    return fail(Errc::invalid_argument, "timeout is a 5-bit exponent");
  if ((mask & a::retry_cnt) && attr.retry_cnt > 7)
    return fail(Errc::invalid_argument, "retry_cnt above 7");
  if ((mask & a::rnr_retry) && attr.rnr_retry > 7)
    return fail(Errc::invalid_argument, "rnr_retry above 7");
  if ((mask & a::av) && attr.remote_gid.ip().is_unspecified())
    return fail(Errc::invalid_argument, "remote GID is unspecified (all zeros)");
  if ((mask & a::av) && attr.remote_gid.ip().is_v4() != ctx_.local_address().is_v4()) {
    const std::string reason = "remote GID " + attr.remote_gid.to_string() + " is " +
                               (attr.remote_gid.ip().is_v4() ? "IPv4" : "IPv6") +
                               "-addressed, the device's address " +
                               ctx_.local_address().to_string() +
                               " is not (RoCE v2 frames carry "
                               "one IP version end to end)";
    return fail(Errc::invalid_argument, reason.c_str());
  }
  if ((mask & a::av) && attr.sl > 15)
    return fail(Errc::invalid_argument,
                ("sl " + std::to_string(attr.sl) + " is not 0..15").c_str());
  if ((mask & a::av) && attr.flow_label > 0xFFFFF)
    return fail(Errc::invalid_argument,
                ("flow_label " + std::to_string(attr.flow_label) + " is wider than 20 bits").c_str());
  return Status::ok();
}

void QpStateMachine::apply(QpObj& qp, const hw::QpAttr& attr, uint32_t mask) {
  const QpState from = qp.state;
  const QpState to = (mask & a::state) ? attr.state : from;
  if (to == QpState::reset) {
    flush_.reset(qp);
    return;
  }
  if (to == QpState::err) {
    flush_.to_error(qp);
    return;
  }
  hw::QpAttr& cur = qp.attr;
  if (mask & a::access_flags) cur.access_flags = attr.access_flags;
  if (mask & a::port) {
    cur.port_num = attr.port_num;
    cur.pkey_index = attr.pkey_index;
  }
  if (mask & a::path_mtu) {
    cur.path_mtu = attr.path_mtu;
    qp.mtu = hw::mtu_bytes(attr.path_mtu);
    qp.mtu_shift = 7 + static_cast<uint32_t>(attr.path_mtu);
  }
  if (mask & a::dest_qpn) cur.dest_qpn = attr.dest_qpn;
  if (mask & a::rq_psn) cur.rq_psn = attr.rq_psn;
  if (mask & a::sq_psn) cur.sq_psn = attr.sq_psn;
  if (mask & a::max_rd_atomic) cur.max_rd_atomic = attr.max_rd_atomic;
  if (mask & a::max_dest_rd_atomic) cur.max_dest_rd_atomic = attr.max_dest_rd_atomic;
  if (mask & a::min_rnr_timer) cur.min_rnr_timer = attr.min_rnr_timer;
  if (mask & a::timeout) cur.timeout = attr.timeout;
  if (mask & a::retry_cnt) cur.retry_cnt = attr.retry_cnt;
  if (mask & a::rnr_retry) cur.rnr_retry = attr.rnr_retry;
  if (mask & a::qkey) cur.qkey = attr.qkey;
  if (mask & a::av) {
    cur.remote_gid = attr.remote_gid;
    cur.traffic_class = attr.traffic_class;
    cur.hop_limit = attr.hop_limit == 0 ? 64 : attr.hop_limit;
    cur.flow_label = attr.flow_label;
    cur.sl = attr.sl;
    qp.remote_ip = attr.remote_gid.ip();
    qp.ip_class = IpClass{cur.traffic_class, cur.hop_limit, cur.flow_label & 0xFFFFF};
  }
  if (mask & a::max_dest_rd_atomic)
    qp.resp.resources.assign(std::max<uint32_t>(1, cur.max_dest_rd_atomic), RespResource{});

  qp.state = to;
  if (from == QpState::init && to == QpState::rtr) {
    qp.resp.epsn = cur.rq_psn;
    qp.resp.msn = 0;
    qp.resp.nak_seq_sent = false;
    qp.resp.uc_dropping = false;
  }
  if (from == QpState::rtr && to == QpState::rts) {
    qp.req.next_psn = qp.comp.comp_psn = cur.sq_psn;
    qp.comp.retry_left = cur.retry_cnt;
    qp.comp.rnr_left = cur.rnr_retry;
  }
  if (to == QpState::sqd && from != QpState::sqd) {
    qp.comp.sq_drained_raised = false;
    completer_.complete_wqes(qp);  // raises SQ_DRAINED at once when nothing is in flight
  }
  if (to == QpState::rts && from != QpState::rts) {
    // A doorbell kept from RTR runs now (mlx5); leaving SQD or SQE resumes from the DBR.
    const bool resume = from == QpState::sqd || from == QpState::sqe || qp.rtr_db_kept;
    qp.rtr_db_kept = false;
    if (resume) {
      const uint16_t ahead = static_cast<uint16_t>(load_sq_dbr(qp) - qp.sq_consumed);
      if (ahead != 0 && ahead <= qp.sq.bb_count) qp.sq_limit = qp.sq_consumed + ahead;
    }
  }
}

}  // namespace rnicdv::sim::rc
