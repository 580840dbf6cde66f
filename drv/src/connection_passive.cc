// SPDX-License-Identifier: BSD-3-Clause
// The passive side: Listener and ConnectionRequest. accept() puts the QP in RTR before the REP
// leaves, and it stays there until the RTU or a COMM_EST: the early-post window.
#include <cstdio>

#include "connection_core.h"
#include "rnicdv/device.h"
#include "rnicdv/qp.h"

namespace rnicdv {

using detail::ConnectionCore;
using detail::ListenerCore;
using detail::RequestCore;

// ---- ConnectionRequest -------------------------------------------------------------------

ConnectionRequest::ConnectionRequest(std::unique_ptr<RequestCore> core) : core_(std::move(core)) {}
ConnectionRequest::ConnectionRequest(ConnectionRequest&&) noexcept = default;
ConnectionRequest& ConnectionRequest::operator=(ConnectionRequest&&) noexcept = default;
ConnectionRequest::~ConnectionRequest() = default;  // an unanswered request: the CM rejects it

const std::vector<uint8_t>& ConnectionRequest::private_data() const {
  return core_->private_data;
}
hw::CmAddress ConnectionRequest::remote_address() const {
  return core_->remote;
}
hw::CmAddress ConnectionRequest::local_address() const {
  return core_->cm ? core_->cm->local_address() : hw::CmAddress{};
}
const hw::CmPeerOffer& ConnectionRequest::peer() const {
  return core_->peer;
}

Result<Connection> ConnectionRequest::accept(QueuePair& qp, std::span<const uint8_t> private_data,
                                             const ConnectionOptions& options) {
  detail::QpCore& q = *qp.core();
  char what[128];
  std::snprintf(what, sizeof what, "conn qp %#x: accept from %s", q.qpn,
                hw::cm_address_string(core_->remote).c_str());
  if (!core_->cm)
    return Status::error(Errc::bad_state, "%s: the request was already answered", what);
  if (core_->datagram)
    return Status::error(Errc::bad_state,
                         "%s: a datagram service's request connects nothing: answer it with "
                         "accept_datagram()",
                         what);
  if (q.device != core_->device)
    return Status::error(Errc::invalid_argument,
                         "%s: the QP belongs to device %s, the request "
                         "arrived on %s",
                         what, q.device->hw->info().name.c_str(),
                         core_->device->hw->info().name.c_str());
  RNICDV_TRY(detail::check_connectable(q, what));
  const hw::QpState s = q.state.load(std::memory_order_acquire);
  if (s != hw::QpState::reset && s != hw::QpState::init)
    return Status::error(Errc::bad_state,
                         "%s: the QP is in %s; a connection starts from RESET "
                         "or INIT",
                         what, hw::qp_state_name(s));

  auto core = std::make_unique<ConnectionCore>();
  core->device = core_->device;
  core->qp = &q;
  core->cm = std::move(core_->cm);
  core->options = options;
  core->active = false;
  core->state = ConnectionState::accepted;
  core->name = detail::connection_name(q.qpn, *core->cm);

  // INIT, then RTR with what the REQ negotiated, before the REP leaves (ib_srpt, raw ib_cm):
  // from here until the RTU the QP accepts inbound requests and withholds posted sends.
  Status st = Status::ok();
  if (s == hw::QpState::reset) st = core->move_qp(hw::QpState::init);
  if (st) st = core->move_qp(hw::QpState::rtr);
  if (!st) {
    [[maybe_unused]] Status rej = core->cm->reject(hw::reject_reason::no_qp, {});
    [[maybe_unused]] Status err = core->fail_qp();
    return st.prepend(what);
  }

  // RTS the moment the backend learns of the establishment, from its thread (see
  // ConnectionOptions::release_at_establishment).
  const bool release = options.release_at_establishment && q.threading != Threading::single;

  // COMM_EST stands in for a lost RTU: Device::process_events() hands it to this connection,
  // and so does the device itself where it learns it when the QP is released there.
  core->comm_est_token = detail::register_comm_est(core->cm.get());
  qp.set_comm_est_handler(&detail::forward_comm_est,
                          reinterpret_cast<void*>(static_cast<uintptr_t>(core->comm_est_token)),
                          release);

  if (release) {
    core->established_token = detail::register_established(core.get());
    if (!core->cm->set_established_notifier(
            &detail::on_established,
            reinterpret_cast<void*>(static_cast<uintptr_t>(core->established_token)))) {
      detail::unregister_established(core->established_token);
      core->established_token = 0;
    }
  }

  hw::CmAcceptParams params;
  params.qp.qpn = q.qpn;
  params.qp.responder_resources = options.responder_resources;
  params.qp.initiator_depth = options.initiator_depth;
  params.qp.rnr_retry_count = options.rnr_retry_count;
  params.private_data.assign(private_data.begin(), private_data.end());
  if (Status sent = core->cm->accept(params); !sent) {
    [[maybe_unused]] Status err = core->fail_qp();
    return Status(sent.code(), std::string(what) + ": " + sent.message());
  }
  return Connection(std::move(core));
}

Status ConnectionRequest::reject(uint16_t reason, std::span<const uint8_t> private_data) {
  if (!core_->cm)
    return Status::error(Errc::bad_state, "reject request from %s: already answered",
                         hw::cm_address_string(core_->remote).c_str());
  Status st = core_->cm->reject(reason, private_data);
  if (!st) return st;
  core_->cm.reset();
  return Status::ok();
}

bool ConnectionRequest::datagram() const {
  return core_->datagram;
}

Status ConnectionRequest::accept_datagram(QueuePair& qp, uint32_t qkey,
                                          std::span<const uint8_t> private_data) {
  const detail::QpCore& q = *qp.core();
  char what[128];
  std::snprintf(what, sizeof what, "datagram service qp %#x: accept from %s", q.qpn,
                hw::cm_address_string(core_->remote).c_str());
  if (!core_->cm)
    return Status::error(Errc::bad_state, "%s: the request was already answered", what);
  if (!core_->datagram)
    return Status::error(Errc::bad_state,
                         "%s: a connection request: answer it with accept(), which connects "
                         "an RC QP",
                         what);
  if (q.device != core_->device)
    return Status::error(Errc::invalid_argument,
                         "%s: the QP belongs to device %s, the request arrived on %s", what,
                         q.device->hw->info().name.c_str(),
                         core_->device->hw->info().name.c_str());
  if (!q.datagram)
    return Status::error(Errc::invalid_argument,
                         "%s: a datagram service answers with a UD QP; this one is %s", what,
                         q.unreliable ? "UC" : "RC");
  hw::CmAcceptParams params;
  params.qp.qpn = q.qpn;
  params.qp.qkey = qkey;
  params.private_data.assign(private_data.begin(), private_data.end());
  if (Status st = core_->cm->accept(params); !st)
    return Status(st.code(), std::string(what) + ": " + st.message());
  core_->cm.reset();
  return Status::ok();
}

// ---- Listener ------------------------------------------------------------------------------

namespace {

// Where a listener listens: `address`, or for "" any address of the device's own IP version
// (0.0.0.0 or ::, as a socket of that family binds it).
Result<hw::IpAddress> listen_address(Device& device, const std::string& address,
                                     const char* what) {
  RNICDV_ASSIGN_OR_RETURN(const hw::IpAddress ip, detail::parse_address(address, true, what));
  if (!address.empty()) return ip;
  return device.hw().info().gid.ip().is_v6() ? hw::IpAddress{} : hw::IpAddress::v4(0);
}

}  // namespace

Result<Listener> Listener::listen(Device& device, const std::string& address, uint16_t port,
                                  int backlog) {
  char what[96];
  std::snprintf(what, sizeof what, "listen on %s port %u", device.name().c_str(), port);
  RNICDV_ASSIGN_OR_RETURN(const hw::IpAddress ip, listen_address(device, address, what));
  hw::ConnectionManager* cmgr = device.hw().connection_manager();
  if (!cmgr)
    return Status::error(Errc::unsupported, "%s: the device has no connection manager", what);
  auto core = std::make_unique<ListenerCore>();
  RNICDV_ASSIGN_OR_RETURN(core->cm, cmgr->listen({ip, port}, backlog));
  core->device = device.core();
  return Listener(std::move(core));
}

Result<Listener> Listener::listen_datagram(Device& device, const std::string& address,
                                           uint16_t port, int backlog) {
  char what[112];
  std::snprintf(what, sizeof what, "datagram service on %s port %u", device.name().c_str(), port);
  RNICDV_ASSIGN_OR_RETURN(const hw::IpAddress ip, listen_address(device, address, what));
  hw::ConnectionManager* cmgr = device.hw().connection_manager();
  if (!cmgr)
    return Status::error(Errc::unsupported, "%s: the device has no connection manager", what);
  auto core = std::make_unique<ListenerCore>();
  RNICDV_ASSIGN_OR_RETURN(core->cm, cmgr->listen_ud({ip, port}, backlog));
  core->device = device.core();
  return Listener(std::move(core));
}

Listener::Listener(std::unique_ptr<ListenerCore> core) : core_(std::move(core)) {}
Listener::Listener(Listener&&) noexcept = default;
Listener& Listener::operator=(Listener&&) noexcept = default;
Listener::~Listener() = default;

std::optional<ConnectionEvent> Listener::poll_event() {
  core_->device->progress();
  hw::CmEvent ev;
  while (core_->cm->next_event(&ev)) {
    if (ev.type != hw::CmEventType::connect_request || !ev.request) continue;
    auto req = std::make_unique<RequestCore>();
    req->device = core_->device;
    req->cm = std::move(ev.request);
    req->private_data = std::move(ev.private_data);
    req->peer = ev.peer;
    req->remote = ev.remote;
    req->datagram = ev.sidr;
    ConnectionEvent out;
    out.type = ConnectionEventType::connect_request;
    out.request.emplace(ConnectionRequest(std::move(req)));
    return out;
  }
  return std::nullopt;
}

std::optional<ConnectionEvent> Listener::wait_event(std::chrono::milliseconds timeout) {
  return detail::wait_for(*core_->device, core_->cm->event_fd(), timeout,
                          [this] { return poll_event(); });
}

int Listener::event_fd() const {
  return core_->cm->event_fd();
}
hw::CmAddress Listener::address() const {
  return core_->cm->address();
}

}  // namespace rnicdv
