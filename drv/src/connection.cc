// SPDX-License-Identifier: BSD-3-Clause
// Connection: the active side, and what every CM event does to the QP (docs/connections.md,
// "The flows, with the QP's state at each step"; docs/driver.md, "Early posting").
#include <arpa/inet.h>
#include <poll.h>

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <unordered_map>

#include "connection_core.h"
#include "rnicdv/device.h"
#include "rnicdv/qp.h"

namespace rnicdv {

using detail::ConnectionCore;

const char* connection_event_name(ConnectionEventType t) noexcept {
  switch (t) {
    case ConnectionEventType::connect_request:
      return "CONNECT_REQUEST";
    case ConnectionEventType::established:
      return "ESTABLISHED";
    case ConnectionEventType::rejected:
      return "REJECTED";
    case ConnectionEventType::unreachable:
      return "UNREACHABLE";
    case ConnectionEventType::timeout:
      return "TIMEOUT";
    case ConnectionEventType::disconnected:
      return "DISCONNECTED";
    case ConnectionEventType::error:
      return "CONNECT_ERROR";
  }
  return "?";
}

const char* connection_state_name(ConnectionState s) noexcept {
  switch (s) {
    case ConnectionState::connecting:
      return "connecting";
    case ConnectionState::accepted:
      return "accepted";
    case ConnectionState::established:
      return "established";
    case ConnectionState::disconnecting:
      return "disconnecting";
    case ConnectionState::closed:
      return "closed";
  }
  return "?";
}

namespace detail {

std::string connection_name(uint32_t qpn, const hw::CmConnection& cm) {
  char prefix[32];
  std::snprintf(prefix, sizeof prefix, "conn qp %#x ", qpn);
  return prefix + hw::cm_address_string(cm.local_address()) + "->" +
         hw::cm_address_string(cm.remote_address());
}

std::string address_port(const std::string& address, uint16_t port) {
  const bool v6 = address.find(':') != std::string::npos;
  return (v6 ? "[" + address + "]" : address) + ":" + std::to_string(port);
}

Result<hw::IpAddress> parse_address(const std::string& address, bool allow_any,
                                    const char* what) {
  if (allow_any && address.empty()) return hw::IpAddress{};
  Result<hw::IpAddress> a = hw::IpAddress::parse(address);
  if (!a) return a.status().prepend(what);
  if (a.value().is_unspecified() && !allow_any)
    return Status::error(Errc::invalid_argument, "%s: %s is not a peer address", what,
                         address.c_str());
  return a;
}

bool wait_readable(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, timeout_ms) > 0;
}

// ---- COMM_EST forwarding -------------------------------------------------------------------

namespace {

// Tokens for objects a backend calls back with a void* context, possibly concurrently with
// their destruction: the callback looks the token up and runs under the registry's lock, and
// removal takes the same lock, so an object is never used after it was removed.
template <class T>
class TokenRegistry {
 public:
  uint64_t add(T* target) {
    std::lock_guard lock(mu_);
    const uint64_t token = next_++;
    targets_.emplace(token, target);
    return token;
  }
  void remove(uint64_t token) {
    std::lock_guard lock(mu_);
    targets_.erase(token);
  }
  template <class Fn>
  void with(void* ctx, Fn&& fn) {
    std::lock_guard lock(mu_);
    auto it = targets_.find(reinterpret_cast<uintptr_t>(ctx));
    if (it != targets_.end()) fn(*it->second);
  }

 private:
  std::mutex mu_;
  std::unordered_map<uint64_t, T*> targets_;
  uint64_t next_ = 1;
};

TokenRegistry<hw::CmConnection> comm_est_targets;
TokenRegistry<ConnectionCore> established_targets;

}  // namespace

uint64_t register_comm_est(hw::CmConnection* cm) {
  return comm_est_targets.add(cm);
}

void unregister_comm_est(uint64_t token) {
  comm_est_targets.remove(token);
}

void forward_comm_est(void* ctx) {
  // The CM takes only its own lock (rdma_notify / ib_cm_notify: an RTU stand-in, ESTABLISHED
  // once), and may call on_established() from here, which takes the other registry's.
  comm_est_targets.with(ctx, [](hw::CmConnection& cm) {
    [[maybe_unused]] Status st = cm.notify_comm_est();
  });
}

// ---- Release at establishment --------------------------------------------------------------

uint64_t register_established(ConnectionCore* core) {
  return established_targets.add(core);
}

void unregister_established(uint64_t token) {
  established_targets.remove(token);
}

void on_established(void* ctx) {
  established_targets.with(ctx, [](ConnectionCore& core) {
    [[maybe_unused]] Status st = core.release_at_establishment();
  });
}

Status ConnectionCore::release_at_establishment() {
  std::lock_guard lock(move_mu);
  if (rts_reached || qp->state.load(std::memory_order_acquire) != hw::QpState::rtr)
    return Status::ok();
  Status st = move_qp(hw::QpState::rts);
  if (st) rts_reached = true;
  // A failure is reported when the application reads the event (apply() tries again).
  return st;
}

// ---- Moving the QP -------------------------------------------------------------------------

Status check_connectable(const QpCore& q, const char* what) {
  if (!q.datagram && !q.unreliable) return Status::ok();
  return Status::error(Errc::unsupported,
                       "%s: the connection manager connects RC QPs; a %s QP is brought up with "
                       "modify_qp and the peer's address",
                       what, q.datagram ? "UD" : "UC");
}

Status ConnectionCore::move_qp(hw::QpState target) {
  hw::QpAttr attr;
  uint32_t mask = 0;
  RNICDV_TRY(cm->qp_attr(target, &attr, &mask));
  switch (target) {
    case hw::QpState::init:
      attr.access_flags = options.remote_access;
      mask |= hw::qp_attr::access_flags;
      if (mask & hw::qp_attr::port) attr.pkey_index = options.pkey_index;
      break;
    case hw::QpState::rtr:
      // The CM gives what the peer allows; this side may want fewer (librdmacm's
      // ucma_modify_qp_rtr applies the consumer's responder resources the same way).
      attr.max_dest_rd_atomic = std::min(attr.max_dest_rd_atomic, options.responder_resources);
      attr.min_rnr_timer = options.min_rnr_timer;
      mask |= hw::qp_attr::max_dest_rd_atomic | hw::qp_attr::min_rnr_timer;
      // The path's class, hop limit, flow label and SL: the backend gives the REQ's (the
      // active side's offer); a passive side that asked for its own sets them here.
      if ((mask & hw::qp_attr::av) && (active || !options.path_from_request)) {
        attr.traffic_class = options.traffic_class;
        attr.hop_limit = options.hop_limit;
        attr.flow_label = options.flow_label;
        attr.sl = options.sl;
      }
      break;
    case hw::QpState::rts:
      attr.max_rd_atomic = std::min(attr.max_rd_atomic, options.initiator_depth);
      mask |= hw::qp_attr::max_rd_atomic;
      break;
    default:
      break;
  }
  return qp->modify(attr, mask);
}

Status ConnectionCore::fail_qp() {
  if (comm_est_token) {
    unregister_comm_est(comm_est_token);
    comm_est_token = 0;
  }
  state = ConnectionState::closed;
  const hw::QpState s = qp->state.load(std::memory_order_acquire);
  if (s == hw::QpState::err || s == hw::QpState::reset) return Status::ok();
  // ERR completes every withheld WR with a flush error after whatever the device flushes.
  hw::QpAttr attr;
  attr.state = hw::QpState::err;
  return qp->modify(attr, hw::qp_attr::state);
}

ConnectionEvent ConnectionCore::failure(ConnectionEventType type, Errc code,
                                        const std::string& why) {
  ConnectionEvent out;
  out.type = type;
  Status moved = fail_qp();
  std::string msg = name + ": " + why;
  if (!moved) msg += " (and the QP could not be moved to ERR: " + moved.message() + ")";
  out.status = Status(code, msg);
  return out;
}

std::optional<ConnectionEvent> ConnectionCore::apply(hw::CmEvent& ev) {
  ConnectionEvent out;
  switch (ev.type) {
    case hw::CmEventType::connect_response: {
      // Active side, REP received: RTR, RTS (the flush), then the RTU (IBA 12.9.6; rdma_cm
      // cma_rep_recv, librdmacm ucma_process_conn_resp).
      Status st = move_qp(hw::QpState::rtr);
      if (st) st = move_qp(hw::QpState::rts);
      if (!st) {
        [[maybe_unused]] Status rej = cm->reject(hw::reject_reason::consumer_defined, {});
        return failure(ConnectionEventType::error, st.code(),
                       "REP received, but the QP could not follow: " + st.message());
      }
      if (Status est = cm->establish(); !est)
        return failure(ConnectionEventType::error, est.code(), "sending the RTU: " + est.message());
      state = ConnectionState::established;
      out.type = ConnectionEventType::established;
      out.private_data = std::move(ev.private_data);
      return out;
    }
    case hw::CmEventType::established: {
      // Passive side: RTU received or COMM_EST forwarded. RTS releases withheld work.
      if (comm_est_token) {
        unregister_comm_est(comm_est_token);
        comm_est_token = 0;
      }
      Status st = Status::ok();
      {
        std::lock_guard lock(move_mu);
        if (!rts_reached) st = move_qp(hw::QpState::rts);
        if (st) rts_reached = true;
      }
      if (!st) {
        [[maybe_unused]] Status d = cm->disconnect();
        return failure(
            ConnectionEventType::error, st.code(),
            "established (" + ev.detail + "), but the QP could not reach RTS: " + st.message());
      }
      state = ConnectionState::established;
      out.type = ConnectionEventType::established;
      return out;
    }
    case hw::CmEventType::rejected: {
      out = failure(ConnectionEventType::rejected, Errc::rejected, ev.detail);
      out.reject_reason = ev.reject_reason;
      out.private_data = std::move(ev.private_data);
      return out;
    }
    case hw::CmEventType::unreachable:
      return failure(ConnectionEventType::unreachable, Errc::unreachable, ev.detail);
    case hw::CmEventType::timeout:
      return failure(ConnectionEventType::timeout, Errc::timeout, ev.detail);
    case hw::CmEventType::disconnected:
      return failure(ConnectionEventType::disconnected, Errc::disconnected, ev.detail);
    case hw::CmEventType::error:
      return failure(ConnectionEventType::error, Errc::io_error, ev.detail);
    case hw::CmEventType::connect_request:
      return std::nullopt;  // listeners only
  }
  return std::nullopt;
}

ConnectionCore::~ConnectionCore() {
  if (established_token) unregister_established(established_token);
  if (comm_est_token) unregister_comm_est(comm_est_token);
  if (qp && !active) {
    bool ours = false;
    {
      std::lock_guard lock(device->mutex);
      ours = qp->comm_est_fn == &forward_comm_est;
      if (ours) {
        qp->comm_est_fn = nullptr;
        qp->comm_est_ctx = nullptr;
      }
    }
    // The token is gone already: a call the device has under way finds nothing.
    if (ours && qp->hw_qp) (void)qp->hw_qp->set_comm_est_notifier(nullptr, nullptr);
  }
  if (state != ConnectionState::closed && qp) [[maybe_unused]]
    Status st = fail_qp();
  cm.reset();  // the backend tells the peer (REJ while connecting, DREQ when established)
}

}  // namespace detail

// ---- Connection ------------------------------------------------------------------------------

Result<Connection> Connection::connect(QueuePair& qp, const std::string& address, uint16_t port,
                                       std::span<const uint8_t> private_data,
                                       const ConnectionOptions& options) {
  detail::QpCore& q = *qp.core();
  char what[96];
  std::snprintf(what, sizeof what, "conn qp %#x: connect to %s", q.qpn,
                detail::address_port(address, port).c_str());
  RNICDV_ASSIGN_OR_RETURN(const hw::IpAddress ip, detail::parse_address(address, false, what));
  hw::ConnectionManager* cmgr = q.device->hw->connection_manager();
  if (!cmgr)
    return Status::error(Errc::unsupported, "%s: device %s has no connection manager", what,
                         q.device->hw->info().name.c_str());
  RNICDV_TRY(detail::check_connectable(q, what));
  const hw::QpState s = q.state.load(std::memory_order_acquire);
  if (s != hw::QpState::reset && s != hw::QpState::init)
    return Status::error(Errc::bad_state,
                         "%s: the QP is in %s; a connection starts from RESET "
                         "or INIT",
                         what, hw::qp_state_name(s));

  if (s == hw::QpState::reset) {
    // INIT now, so that receives can be posted before the REP arrives.
    hw::QpAttr attr;
    attr.state = hw::QpState::init;
    attr.pkey_index = options.pkey_index;
    attr.port_num = 1;
    attr.access_flags = options.remote_access;
    if (Status st =
            q.modify(attr, hw::qp_attr::state | hw::qp_attr::port | hw::qp_attr::access_flags);
        !st)
      return st.prepend(what);
  }

  hw::CmConnectParams params;
  params.remote = {ip, port};
  params.qp.qpn = q.qpn;
  params.qp.path_mtu = std::min(options.path_mtu, q.device->hw->info().caps.active_mtu);
  params.qp.responder_resources = options.responder_resources;
  params.qp.initiator_depth = options.initiator_depth;
  params.qp.retry_count = options.retry_count;
  params.qp.rnr_retry_count = options.rnr_retry_count;
  params.qp.local_ack_timeout = options.ack_timeout;
  params.qp.traffic_class = options.traffic_class;
  params.qp.hop_limit = options.hop_limit;
  params.qp.flow_label = options.flow_label;
  params.qp.sl = options.sl;
  params.private_data.assign(private_data.begin(), private_data.end());
  params.timeout_ms =
      static_cast<uint32_t>(std::clamp<int64_t>(options.timeout.count(), 1, UINT32_MAX));
  params.max_cm_retries = options.max_cm_retries;
  auto cm = cmgr->connect(params);
  if (!cm) {
    char prefix[32];
    std::snprintf(prefix, sizeof prefix, "conn qp %#x", q.qpn);
    return cm.status().prepend(prefix);
  }

  auto core = std::make_unique<ConnectionCore>();
  core->device = q.device;
  core->qp = &q;
  core->cm = std::move(cm.value());
  core->options = options;
  core->active = true;
  core->state = ConnectionState::connecting;
  core->name = detail::connection_name(q.qpn, *core->cm);
  return Connection(std::move(core));
}

Connection::Connection(std::unique_ptr<ConnectionCore> core) : core_(std::move(core)) {}
Connection::Connection(Connection&&) noexcept = default;
Connection& Connection::operator=(Connection&&) noexcept = default;
Connection::~Connection() = default;

std::optional<ConnectionEvent> Connection::poll_event() {
  core_->device->progress();
  hw::CmEvent ev;
  while (core_->cm->next_event(&ev)) {
    if (auto out = core_->apply(ev)) return out;
  }
  return std::nullopt;
}

std::optional<ConnectionEvent> Connection::wait_event(std::chrono::milliseconds timeout) {
  return detail::wait_for(*core_->device, core_->cm->event_fd(), timeout,
                          [this] { return poll_event(); });
}

int Connection::event_fd() const {
  return core_->cm->event_fd();
}

Status Connection::disconnect() {
  switch (core_->state) {
    case ConnectionState::closed:
    case ConnectionState::disconnecting:
      return Status::ok();
    default:
      break;
  }
  // As rdma_disconnect: the QP to ERR first (its work completes with flush errors), then the
  // DREQ (or a REJ while still connecting).
  Status moved = core_->fail_qp();
  core_->state = ConnectionState::disconnecting;
  Status sent = core_->cm->disconnect();
  if (!sent) return sent.prepend(core_->name + ": disconnect");
  if (!moved) return moved.prepend(core_->name + ": disconnect");
  return Status::ok();
}

ConnectionState Connection::state() const {
  return core_->state;
}
const std::string& Connection::name() const {
  return core_->name;
}
hw::CmAddress Connection::local_address() const {
  return core_->cm->local_address();
}
hw::CmAddress Connection::remote_address() const {
  return core_->cm->remote_address();
}
uint32_t Connection::qpn() const {
  return core_->qp->qpn;
}

// ---- Datagram services -----------------------------------------------------------------------

Result<DatagramService> resolve_datagram_service(Device& device, const std::string& address,
                                                 uint16_t port,
                                                 std::span<const uint8_t> private_data,
                                                 std::chrono::milliseconds timeout) {
  char what[128];
  std::snprintf(what, sizeof what, "resolve datagram service %s from %s",
                detail::address_port(address, port).c_str(), device.name().c_str());
  RNICDV_ASSIGN_OR_RETURN(const hw::IpAddress ip, detail::parse_address(address, false, what));
  if (port == 0) return Status::error(Errc::invalid_argument, "%s: port 0", what);
  if (timeout.count() <= 0 || timeout.count() > UINT32_MAX)
    return Status::error(Errc::invalid_argument, "%s: a timeout of %lld ms", what,
                         static_cast<long long>(timeout.count()));
  hw::ConnectionManager* cmgr = device.hw().connection_manager();
  if (!cmgr)
    return Status::error(Errc::unsupported, "%s: the device has no connection manager", what);
  hw::CmConnectParams params;
  params.space = hw::CmPortSpace::udp;
  params.remote = {ip, port};
  params.private_data.assign(private_data.begin(), private_data.end());
  params.timeout_ms = static_cast<uint32_t>(timeout.count());
  params.max_cm_retries = 15;  // rdma_cm's for a SIDR_REQ (CMA_MAX_CM_RETRIES)
  std::unique_ptr<hw::CmConnection> cm;
  if (auto made = cmgr->connect(params); made)
    cm = std::move(made).value();
  else
    return made.status().prepend(what);

  // The CM ends the request itself once its tries are spent; a second more covers the engine.
  std::shared_ptr<detail::DeviceCore> dev = device.core();
  std::optional<hw::CmEvent> answer =
      detail::wait_for(*dev, cm->event_fd(), timeout + std::chrono::seconds(1),
                       [&]() -> std::optional<hw::CmEvent> {
                         dev->progress();
                         hw::CmEvent ev;
                         if (cm->next_event(&ev)) return ev;
                         return std::nullopt;
                       });
  if (!answer)
    return Status::error(Errc::timeout, "%s: no answer within %lld ms", what,
                         static_cast<long long>(timeout.count()));
  switch (answer->type) {
    case hw::CmEventType::connect_response: {
      DatagramService out;
      out.address = params.remote;
      out.qpn = answer->peer.qpn;
      out.qkey = answer->peer.qkey;
      out.private_data = std::move(answer->private_data);
      return out;
    }
    case hw::CmEventType::unreachable:
      // A refusal by the service itself is a rejection; nothing listening, or no answer at
      // all, leaves it unreachable.
      return Status::error(answer->sidr_status == hw::sidr_status::reject ? Errc::rejected
                                                                           : Errc::unreachable,
                           "%s: %s", what, answer->detail.c_str());
    default:
      return Status::error(Errc::protocol_error, "%s: %s (%s)", what,
                           hw::cm_event_type_name(answer->type), answer->detail.c_str());
  }
}

}  // namespace rnicdv
