// SPDX-License-Identifier: BSD-3-Clause
// Connections and listeners over librdmacm (see rdmacm_cm.h).
#include "cm/rdmacm_cm.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstring>

#include "cm/rdmacm_watch.h"
#include "mlx5_event_thread.h"

namespace rnicdv::hw::mlx5::cm {
namespace {

// librdmacm's addresses are whole sockaddr_in or sockaddr_in6 structures.
CmAddress from_sockaddr(const sockaddr* sa) {
  CmAddress a;
  if (!sa) return a;
  const socklen_t len = sa->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  if (!from_socket_address(sa, len, &a.ip, &a.port)) return {};
  return a;
}

// The unspecified address of `like`'s IP version.
IpAddress any_address_like(const IpAddress& like) {
  return like.is_v4() ? IpAddress::v4(0) : IpAddress{};
}

Status errno_status(const std::string& what, const char* call) {
  const int e = errno;
  return Status::error(e == ETIMEDOUT ? Errc::timeout : Errc::io_error, "%s: %s: %s", what.c_str(),
                       call, std::strerror(e));
}

// A channel whose reads never block: next_event() polls it.
Result<rdma_event_channel*> open_channel(const std::string& what) {
  rdma_event_channel* ch = rdma_create_event_channel();
  if (!ch) return errno_status(what, "rdma_create_event_channel");
  const int flags = fcntl(ch->fd, F_GETFL);
  if (flags < 0 || fcntl(ch->fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    Status st = errno_status(what, "fcntl(O_NONBLOCK)");
    rdma_destroy_event_channel(ch);
    return st;
  }
  return ch;
}

// librdmacm opens its own verbs context for each device (ucma_init_device), so an ID's
// context is never the driver's: the device is what must match.
bool same_device(const ibv_context* a, const ibv_context* b) {
  if (!a || !b) return false;
  if (a->device == b->device) return true;
  return std::strcmp(ibv_get_device_name(a->device), ibv_get_device_name(b->device)) == 0;
}

// Waits on a non-blocking channel for `expected`; any other event, or the deadline, fails
// with what the event says.
Status await(rdma_event_channel* ch, rdma_cm_event_type expected,
             std::chrono::steady_clock::time_point deadline, const std::string& what) {
  for (;;) {
    rdma_cm_event* ev = nullptr;
    if (rdma_get_cm_event(ch, &ev) == 0) {
      const rdma_cm_event_type got = ev->event;
      const int status = ev->status;
      rdma_ack_cm_event(ev);
      if (got == expected) return Status::ok();
      return Status::error(Errc::unreachable, "%s: %s (status %d) while waiting for %s",
                           what.c_str(), rdma_cm_event_name(got), status,
                           rdma_cm_event_name(expected));
    }
    if (errno != EAGAIN) return errno_status(what, "rdma_get_cm_event");
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      return Status::error(Errc::timeout, "%s: no %s in time", what.c_str(),
                           rdma_cm_event_name(expected));
    pollfd pfd{ch->fd, POLLIN, 0};
    if (::poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000))) < 0 &&
        errno != EINTR)
      return errno_status(what, "poll");
  }
}

// rdma_connect's and rdma_accept's parameters for `qp` (the QP is the driver's: qp_num).
rdma_conn_param conn_param(const CmQpOffer& qp, const std::vector<uint8_t>& private_data) {
  rdma_conn_param cp{};
  cp.private_data = private_data.empty() ? nullptr : private_data.data();
  cp.private_data_len = static_cast<uint8_t>(private_data.size());
  cp.responder_resources = qp.responder_resources;
  cp.initiator_depth = qp.initiator_depth;
  cp.retry_count = std::min<uint8_t>(qp.retry_count, 7);
  cp.rnr_retry_count = std::min<uint8_t>(qp.rnr_retry_count, 7);
  cp.qp_num = qp.qpn;
  return cp;
}

ibv_qp_state ibv_state(QpState s) {
  switch (s) {
    case QpState::init:
      return IBV_QPS_INIT;
    case QpState::rtr:
      return IBV_QPS_RTR;
    case QpState::rts:
      return IBV_QPS_RTS;
    default:
      return IBV_QPS_ERR;
  }
}

class RdmaCmConnection final : public CmConnection {
 public:
  // `events`: the device's event thread for a passive connection, null for an active one.
  RdmaCmConnection(rdma_event_channel* ch, rdma_cm_id* id, std::shared_ptr<EventThread> events)
      : ch_(ch), id_(id), events_(std::move(events)), event_fd_(ch->fd) {}

  ~RdmaCmConnection() override {
    // The event thread lets go of the channel first: it may be reading it right now, and
    // rdma_destroy_id waits for the events it took to be acknowledged.
    if (watched_) watched_->close();
    // Established: rdma_destroy_id sends the DREQ (cm_destroy_id); connecting: a REJ.
    rdma_destroy_id(id_);
    rdma_destroy_event_channel(ch_);
  }

  // Active side: the parameters the REQ carried.
  void set_connect_params(const CmConnectParams& p) { params_ = p; }

  int event_fd() const override { return event_fd_.load(std::memory_order_acquire); }

  bool next_event(CmEvent* out) override {
    std::lock_guard lock(mu_);
    if (watched_) return watched_->next(out);
    for (;;) {
      rdma_cm_event* ev = nullptr;
      if (rdma_get_cm_event(ch_, &ev) != 0) return false;  // EAGAIN: nothing pending
      const rdma_cm_event copy = *ev;
      // Address and route resolution finish inside connect(); nothing else is expected here.
      const bool deliver = translate_event(copy, out);
      if (deliver) out->remote = remote_address();
      rdma_ack_cm_event(ev);
      if (deliver) return true;
    }
  }

  Status qp_attr(QpState target, QpAttr* attr, uint32_t* mask) const override {
    ibv_qp_attr a{};
    a.qp_state = ibv_state(target);
    int m = 0;
    if (rdma_init_qp_attr(id_, &a, &m) != 0)
      return errno_status(name() + ": qp attributes for " + qp_state_name(target),
                          "rdma_init_qp_attr");
    *attr = qp_attr_from_ibv(a, m, mask);
    return Status::ok();
  }

  Status accept(const CmAcceptParams& p) override {
    if (p.private_data.size() > kRepPrivateDataMax)
      return Status::error(Errc::invalid_argument,
                           "%s: accept: %zu bytes of private data, at "
                           "most %zu",
                           name().c_str(), p.private_data.size(), kRepPrivateDataMax);
    // The QP is the driver's (qp_num): librdmacm only sends the REP.
    rdma_conn_param cp = conn_param(p.qp, p.private_data);
    if (rdma_accept(id_, &cp) != 0) return errno_status(name() + ": accept", "rdma_accept");
    return Status::ok();
  }

  Status reject(uint16_t reason, std::span<const uint8_t> data) override {
    // librdmacm always rejects with reason 28 (consumer defined); others cannot be sent.
    if (reason != reject_reason::consumer_defined)
      return Status::error(Errc::unsupported,
                           "%s: reject: librdmacm sends only reason 28, not "
                           "%u",
                           name().c_str(), reason);
    if (data.size() > kRejPrivateDataMax)
      return Status::error(Errc::invalid_argument, "%s: reject: %zu bytes of private data",
                           name().c_str(), data.size());
    if (rdma_reject(id_, data.empty() ? nullptr : data.data(), static_cast<uint8_t>(data.size())))
      return errno_status(name() + ": reject", "rdma_reject");
    return Status::ok();
  }

  Status establish() override {
    if (rdma_establish(id_) != 0) return errno_status(name() + ": establish", "rdma_establish");
    return Status::ok();
  }

  Status notify_comm_est() override {
    // ESTABLISHED follows on the channel; EISCONN means the RTU got there first.
    if (rdma_notify(id_, IBV_EVENT_COMM_EST) != 0 && errno != EISCONN)
      return errno_status(name() + ": COMM_EST", "rdma_notify");
    return Status::ok();
  }

  // librdmacm delivers ESTABLISHED only to a read of the channel, so from here on the
  // device's event thread reads it (cm/rdmacm_watch.h): the notifier runs on that thread as
  // the RTU, or COMM_EST forwarded with rdma_notify, arrives, before the application can read
  // the event, and event_fd() becomes the eventfd of the thread's queue. The first notifier
  // starts the thread if no other user has; a connection that never gets one is read by the
  // application only, as before. Active connections have nothing to notify (establish() is
  // the driver's own call): false.
  bool set_established_notifier(void (*fn)(void* ctx), void* ctx) override {
    if (!events_) return false;
    std::lock_guard lock(mu_);
    if (watched_) {
      watched_->set_notifier(fn, ctx);
      return true;
    }
    if (!fn) return true;
    auto w = WatchedChannel::start(events_, ch_, remote_address(), fn, ctx, name());
    if (!w) return false;  // the driver then moves the QP when the application reads the event
    watched_ = std::move(w.value());
    event_fd_.store(watched_->fd(), std::memory_order_release);
    return true;
  }

  Status disconnect() override {
    if (rdma_disconnect(id_) != 0 && errno != EINVAL)
      return errno_status(name() + ": disconnect", "rdma_disconnect");
    return Status::ok();
  }

  CmAddress local_address() const override { return from_sockaddr(rdma_get_local_addr(id_)); }
  CmAddress remote_address() const override {
    CmAddress a = from_sockaddr(rdma_get_peer_addr(id_));
    return a.ip.is_unspecified() ? params_.remote : a;
  }
  std::string name() const override {
    return "cm " + cm_address_string(local_address()) + "->" + cm_address_string(remote_address());
  }

 private:
  rdma_event_channel* ch_;
  rdma_cm_id* id_;
  const std::shared_ptr<EventThread> events_;
  std::atomic<int> event_fd_;
  std::mutex mu_;
  std::shared_ptr<WatchedChannel> watched_;  // under mu_: set once, by the notifier
  CmConnectParams params_;
};

class RdmaCmListener final : public CmListener {
 public:
  RdmaCmListener(const RdmaCmConnectionManager& mgr, rdma_event_channel* ch, rdma_cm_id* id,
                 CmAddress address)
      : mgr_(mgr), ch_(ch), id_(id), address_(address) {}
  ~RdmaCmListener() override {
    rdma_destroy_id(id_);
    rdma_destroy_event_channel(ch_);
  }

  int event_fd() const override { return ch_->fd; }
  CmAddress address() const override { return address_; }
  Status set_backlog(int backlog) override {
    // rdma_listen on a listening ID sets its backlog (ucma_listen).
    if (rdma_listen(id_, listen_backlog(backlog)) != 0)
      return errno_status("listen " + cm_address_string(address_), "rdma_listen");
    return Status::ok();
  }

  bool next_event(CmEvent* out) override {
    std::lock_guard lock(mu_);
    for (;;) {
      rdma_cm_event* ev = nullptr;
      if (rdma_get_cm_event(ch_, &ev) != 0) return false;
      if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
        rdma_ack_cm_event(ev);
        continue;
      }
      rdma_cm_id* conn_id = ev->id;
      const bool ours = same_device(conn_id->verbs, mgr_.verbs());
      CmEvent translated;
      translate_event(*ev, &translated);
      rdma_ack_cm_event(ev);  // before the id moves to its own channel (rdma_migrate_id)
      if (!ours) {
        // A wildcard listener hears requests for every device; this one is not ours.
        rdma_reject(conn_id, nullptr, 0);
        rdma_destroy_id(conn_id);
        continue;
      }
      auto ch = open_channel("listen " + cm_address_string(address_));
      if (!ch || rdma_migrate_id(conn_id, ch.value()) != 0) {
        rdma_reject(conn_id, nullptr, 0);
        rdma_destroy_id(conn_id);
        if (ch) rdma_destroy_event_channel(ch.value());
        continue;
      }
      *out = std::move(translated);
      auto conn = std::make_unique<RdmaCmConnection>(ch.value(), conn_id, mgr_.events());
      out->remote = conn->remote_address();
      out->request = std::move(conn);
      return true;
    }
  }

 private:
  const RdmaCmConnectionManager& mgr_;
  rdma_event_channel* ch_;
  rdma_cm_id* id_;
  CmAddress address_;
  std::mutex mu_;
};

}  // namespace

RdmaCmConnectionManager::RdmaCmConnectionManager(ibv_context* verbs, const IpAddress& address,
                                                 std::string device_name,
                                                 std::shared_ptr<EventThread> events)
    : verbs_(verbs), address_(address), name_(std::move(device_name)), events_(std::move(events)) {}

Result<std::unique_ptr<CmListener>> RdmaCmConnectionManager::listen(const CmAddress& local,
                                                                    int backlog) {
  const std::string what = "listen " + cm_address_string(local) + " on " + name_;
  if (!local.ip.is_unspecified() && local.ip != address_)
    return Status::error(Errc::invalid_argument, "%s: not the device's address (%s)", what.c_str(),
                         address_.to_string().c_str());
  RNICDV_ASSIGN_OR_RETURN(rdma_event_channel* const ch, open_channel(what));
  rdma_cm_id* id = nullptr;
  if (rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP) != 0) {
    Status st = errno_status(what, "rdma_create_id");
    rdma_destroy_event_channel(ch);
    return st;
  }
  SocketAddress sa = to_socket_address(local.ip, local.port);
  if (rdma_bind_addr(id, sa.get()) != 0 ||
      rdma_listen(id, listen_backlog(backlog)) != 0) {
    Status st = errno_status(what, "rdma_bind_addr/rdma_listen");
    if (errno == EADDRINUSE) st = Status(Errc::address_in_use, st.message());
    rdma_destroy_id(id);
    rdma_destroy_event_channel(ch);
    return st;
  }
  return std::unique_ptr<CmListener>(new RdmaCmListener(*this, ch, id, local));
}

Result<std::unique_ptr<CmConnection>> RdmaCmConnectionManager::connect(const CmConnectParams& p) {
  const std::string what = "connect to " + cm_address_string(p.remote) + " from " + name_;
  if (p.space != CmPortSpace::tcp)
    return Status::error(Errc::unsupported, "%s: SIDR (UD port space): not implemented on mlx5",
                         what.c_str());
  if (p.private_data.size() > kReqPrivateDataMax)
    return Status::error(Errc::invalid_argument,
                         "%s: %zu bytes of private data, a REQ carries "
                         "at most %zu",
                         what.c_str(), p.private_data.size(), kReqPrivateDataMax);
  if (p.remote.ip.is_unspecified() || p.remote.port == 0 || p.qp.qpn == 0)
    return Status::error(Errc::invalid_argument, "%s: address, port and QPN must be non-zero",
                         what.c_str());
  RNICDV_ASSIGN_OR_RETURN(rdma_event_channel* const ch, open_channel(what));
  rdma_cm_id* id = nullptr;
  if (rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP) != 0) {
    Status st = errno_status(what, "rdma_create_id");
    rdma_destroy_event_channel(ch);
    return st;
  }
  auto conn = std::make_unique<RdmaCmConnection>(ch, id, nullptr);
  conn->set_connect_params(p);
  uint8_t ack_timeout = p.qp.local_ack_timeout;
  [[maybe_unused]] int rc = rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT,
                                            &ack_timeout, sizeof ack_timeout);
  // The path's traffic class, which the kernel's CM puts in the REQ for the passive side
  // (rdma_cm's TOS; the route resolved below carries it).
  if (p.qp.traffic_class != 0) {
    uint8_t tos = p.qp.traffic_class;
    if (rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof tos) != 0)
      return errno_status(what, "rdma_set_option(RDMA_OPTION_ID_TOS)");
  }
  // Address and route resolution run here, so that the REQ is on its way when connect()
  // returns, as with the other backend: the application need not poll the connection for
  // them (a loopback test that waits on its listener would otherwise never see the REQ).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(p.timeout_ms);
  const int timeout_ms = static_cast<int>(std::min<uint32_t>(p.timeout_ms, INT32_MAX));
  // The source is the device's address where it is of the destination's IP version and names
  // no one link; otherwise the kernel's route chooses it (and the device check below holds).
  const bool own_source = !address_.is_unspecified() && !address_.is_link_local() &&
                          address_.is_v4() == p.remote.ip.is_v4();
  SocketAddress src =
      to_socket_address(own_source ? address_ : any_address_like(p.remote.ip), p.local_port);
  SocketAddress dst = to_socket_address(p.remote.ip, p.remote.port);
  if (rdma_resolve_addr(id, src.get(), dst.get(), timeout_ms) != 0)
    return errno_status(what, "rdma_resolve_addr");
  RNICDV_TRY(await(ch, RDMA_CM_EVENT_ADDR_RESOLVED, deadline, what));
  if (!same_device(id->verbs, verbs_))
    return Status::error(Errc::unreachable, "%s: the address is reached through %s, not %s",
                         what.c_str(), id->verbs ? ibv_get_device_name(id->verbs->device) : "none",
                         name_.c_str());
  if (rdma_resolve_route(id, timeout_ms) != 0) return errno_status(what, "rdma_resolve_route");
  RNICDV_TRY(await(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, deadline, what));
  rdma_conn_param cp = conn_param(p.qp, p.private_data);
  if (rdma_connect(id, &cp) != 0) return errno_status(what, "rdma_connect");
  return std::unique_ptr<CmConnection>(std::move(conn));
}

}  // namespace rnicdv::hw::mlx5::cm
