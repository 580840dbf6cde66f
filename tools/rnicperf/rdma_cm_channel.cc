// SPDX-License-Identifier: BSD-3-Clause
#include "rdma_cm_channel.h"

#include <infiniband/verbs.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace rnicperf {

using rnicdv::ConnectionEventType;
using rnicdv::Errc;
using rnicdv::Result;
using rnicdv::Status;
namespace hw = rnicdv::hw;
using SteadyClock = std::chrono::steady_clock;

namespace {

// Each receive slot takes one message; a longer send_all of rnicperf's own exchange goes as
// several SENDs. perftest's messages are at most 56 bytes.
constexpr uint32_t kSlotBytes = 4096;
constexpr uint32_t kRecvSlots = 16;
constexpr uint64_t kSendWrId = ~uint64_t{0};

int64_t ms_left(SteadyClock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now());
  return std::max<int64_t>(left.count(), 0);
}

// Waiting on a CQ: a few yields, then sleeps growing to a millisecond, so a waiting side
// leaves the cores to the simulated HCA and the peer.
class Backoff {
 public:
  void pause() {
    if (++rounds_ < 64) {
      std::this_thread::yield();
      return;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(std::min(1000, 20 << std::min(
                                                                          (rounds_ - 64) / 16, 6))));
  }

 private:
  int rounds_ = 0;
};

const char* wc_status_text(uint8_t status) {
  return ibv_wc_status_str(static_cast<ibv_wc_status>(status));
}

class RdmaCmTransport final : public OobTransport {
 public:
  static Result<std::unique_ptr<RdmaCmTransport>> create(rnicdv::Device& device);
  ~RdmaCmTransport() override;

  rnicdv::QueuePair& qp() { return *qp_; }
  // Takes the connection made for qp() and waits until it is ESTABLISHED. A REJ's reason is
  // then reject_reason().
  Status establish(rnicdv::Connection conn, SteadyClock::time_point deadline);
  uint16_t reject_reason() const { return reject_reason_; }
  std::string peer() const { return hw::cm_address_string(conn_->remote_address()); }
  std::string peer_ip() const { return conn_->remote_address().ip.to_string(); }

  Status send_all(const void* data, size_t len, uint32_t timeout_ms) override;
  Status recv_all(void* data, size_t len, uint32_t timeout_ms) override;
  Result<bool> readable(uint32_t timeout_ms) override;

 private:
  RdmaCmTransport() = default;
  uint8_t* slot(uint32_t i) const { return buf_ + size_t{i} * kSlotBytes; }
  Errc post_recv_slot(uint32_t i);
  // Moves at most one arrived message into the stream; false when none was there. A failed
  // receive (the QP flushed: the peer disconnected) becomes failure_.
  bool take_one();
  // Reads the connection's events: a disconnection becomes failure_.
  void pump_events();
  Status send_one(const uint8_t* p, uint32_t len, SteadyClock::time_point deadline,
                  uint32_t timeout_ms);

  std::optional<rnicdv::ProtectionDomain> pd_;
  std::optional<rnicdv::CompletionQueue> send_cq_, recv_cq_;
  uint8_t* buf_ = nullptr;  // kRecvSlots receive slots, then the send slot
  std::optional<rnicdv::MemoryRegion> mr_;
  std::optional<rnicdv::QueuePair> qp_;
  std::optional<rnicdv::Connection> conn_;  // destroyed first (declared last)
  std::string name_ = "the control connection";
  uint16_t reject_reason_ = 0;
  std::mutex send_mu_;
  bool send_broken_ = false;  // under send_mu_: a send timed out, its slot may still be read
  // The receiving side: the main thread reads, and a run's watcher thread may look
  // (readable) at the same time; both take the receive CQ's completions and the connection's
  // events, so one at a time.
  std::mutex recv_mu_;
  std::vector<uint8_t> stream_;  // under recv_mu_: arrived, not yet read
  size_t stream_pos_ = 0;
  Status failure_;  // under recv_mu_: why nothing more will arrive
};

Result<std::unique_ptr<RdmaCmTransport>> RdmaCmTransport::create(rnicdv::Device& device) {
  std::unique_ptr<RdmaCmTransport> t(new RdmaCmTransport());
  RNICDV_ASSIGN_OR_RETURN(t->pd_, device.alloc_pd());
  RNICDV_ASSIGN_OR_RETURN(t->send_cq_, device.create_cq(4));
  RNICDV_ASSIGN_OR_RETURN(t->recv_cq_, device.create_cq(kRecvSlots));
  const size_t bytes = size_t{kSlotBytes} * (kRecvSlots + 1);
  t->buf_ = static_cast<uint8_t*>(std::aligned_alloc(kSlotBytes, bytes));
  if (!t->buf_)
    return Status::error(Errc::no_resources, "-z: no memory for the control channel's %zu bytes",
                         bytes);
  std::memset(t->buf_, 0, bytes);
  RNICDV_ASSIGN_OR_RETURN(t->mr_, t->pd_->reg_mr(t->buf_, bytes, hw::access::local_write));
  rnicdv::QpConfig config;
  config.caps.max_send_wr = 2;
  config.caps.max_recv_wr = kRecvSlots;
  config.caps.max_send_sge = 1;
  config.caps.max_recv_sge = 1;
  // The reporter thread's signs of life and the main thread's messages both send (one at a
  // time, under send_mu_), and the CM may move the QP from its own thread.
  config.threading = rnicdv::Threading::thread_safe;
  RNICDV_ASSIGN_OR_RETURN(t->qp_,
                          device.create_qp(*t->pd_, *t->send_cq_, *t->recv_cq_, config));
  // INIT now, so that the receives are there before the peer can send.
  hw::QpAttr init;
  init.state = hw::QpState::init;
  RNICDV_TRY(t->qp_->modify(init, hw::qp_attr::state | hw::qp_attr::port |
                                      hw::qp_attr::access_flags));
  for (uint32_t i = 0; i < kRecvSlots; ++i)
    if (Errc e = t->post_recv_slot(i); e != Errc::ok)
      return Status::error(e, "-z: cannot post the control channel's receive %u", i);
  return t;
}

RdmaCmTransport::~RdmaCmTransport() {
  conn_.reset();  // the peer is told (DREQ) while the QP still exists
  qp_.reset();
  mr_.reset();
  std::free(buf_);
}

Errc RdmaCmTransport::post_recv_slot(uint32_t i) {
  const rnicdv::Sge sge{reinterpret_cast<uintptr_t>(slot(i)), kSlotBytes, mr_->lkey()};
  return qp_->post_recv(i, sge);
}

Status RdmaCmTransport::establish(rnicdv::Connection conn, SteadyClock::time_point deadline) {
  conn_ = std::move(conn);
  name_ = conn_->name();
  for (;;) {
    const int64_t left = ms_left(deadline);
    if (left <= 0)
      return Status::error(Errc::timeout, "%s: not established in time (--timeout)",
                           name_.c_str());
    auto ev = conn_->wait_event(std::chrono::milliseconds(std::min<int64_t>(left, 100)));
    if (!ev) continue;
    if (ev->type == ConnectionEventType::established) return Status::ok();
    if (ev->type == ConnectionEventType::rejected) reject_reason_ = ev->reject_reason;
    if (!ev->status.is_ok()) return ev->status;
    return Status::error(Errc::protocol_error, "%s: %s instead of ESTABLISHED", name_.c_str(),
                         rnicdv::connection_event_name(ev->type));
  }
}

void RdmaCmTransport::pump_events() {
  if (!conn_) return;
  while (auto ev = conn_->poll_event()) {
    if (!failure_.is_ok()) continue;
    if (ev->type == ConnectionEventType::disconnected)
      failure_ = Status::error(Errc::disconnected, "%s closed the connection", name_.c_str());
    else if (!ev->status.is_ok())
      failure_ = ev->status;
  }
}

bool RdmaCmTransport::take_one() {
  rnicdv::Completion wc;
  if (recv_cq_->poll(&wc, 1) == 0) return false;
  if (wc.status != IBV_WC_SUCCESS) {
    if (failure_.is_ok())
      failure_ = Status::error(Errc::disconnected, "%s: the peer is gone (receive: %s)",
                               name_.c_str(), wc_status_text(wc.status));
    return false;
  }
  const uint32_t i = static_cast<uint32_t>(wc.wr_id);
  if (stream_pos_ == stream_.size()) {
    stream_.clear();
    stream_pos_ = 0;
  }
  stream_.insert(stream_.end(), slot(i), slot(i) + std::min(wc.byte_len, kSlotBytes));
  if (Errc e = post_recv_slot(i); e != Errc::ok && failure_.is_ok())
    failure_ = Status::error(e, "%s: cannot post a receive again", name_.c_str());
  return true;
}

Status RdmaCmTransport::recv_all(void* data, size_t len, uint32_t timeout_ms) {
  const auto deadline = SteadyClock::now() + std::chrono::milliseconds(timeout_ms);
  std::lock_guard<std::mutex> lock(recv_mu_);
  Backoff backoff;
  while (stream_.size() - stream_pos_ < len) {
    if (take_one()) continue;
    pump_events();
    if (!failure_.is_ok()) {
      // The peer's last message may have completed after the poll above and before its
      // disconnection was read: what arrived before it left is still taken.
      if (take_one()) continue;
      return failure_;
    }
    if (ms_left(deadline) <= 0)
      return Status::error(Errc::timeout, "no answer from %s for %u ms", name_.c_str(),
                           timeout_ms);
    backoff.pause();
  }
  std::memcpy(data, stream_.data() + stream_pos_, len);
  stream_pos_ += len;
  return Status::ok();
}

Result<bool> RdmaCmTransport::readable(uint32_t timeout_ms) {
  const auto deadline = SteadyClock::now() + std::chrono::milliseconds(timeout_ms);
  std::lock_guard<std::mutex> lock(recv_mu_);
  Backoff backoff;
  for (;;) {
    if (stream_.size() > stream_pos_) return true;
    if (take_one()) continue;
    pump_events();
    // As a socket at its end: readable, and the read says why.
    if (!failure_.is_ok()) return true;
    if (ms_left(deadline) <= 0) return false;
    backoff.pause();
  }
}

Status RdmaCmTransport::send_one(const uint8_t* p, uint32_t len,
                                 SteadyClock::time_point deadline, uint32_t timeout_ms) {
  uint8_t* out = slot(kRecvSlots);
  std::memcpy(out, p, len);
  const rnicdv::Sge sge{reinterpret_cast<uintptr_t>(out), len, mr_->lkey()};
  if (Errc e = qp_->post_message(kSendWrId, sge, rnicdv::send_flags::signaled); e != Errc::ok)
    return Status::error(e == Errc::qp_in_error || e == Errc::bad_state ? Errc::disconnected : e,
                         "send to %s: %s", name_.c_str(), rnicdv::errc_name(e));
  Backoff backoff;
  for (;;) {
    rnicdv::Completion wc;
    if (send_cq_->poll(&wc, 1) == 1) {
      if (wc.status == IBV_WC_SUCCESS) return Status::ok();
      return Status::error(Errc::disconnected, "send to %s: %s", name_.c_str(),
                           wc_status_text(wc.status));
    }
    if (ms_left(deadline) <= 0) {
      send_broken_ = true;
      return Status::error(Errc::timeout, "send to %s: timed out after %u ms", name_.c_str(),
                           timeout_ms);
    }
    backoff.pause();
  }
}

Status RdmaCmTransport::send_all(const void* data, size_t len, uint32_t timeout_ms) {
  const auto deadline = SteadyClock::now() + std::chrono::milliseconds(timeout_ms);
  std::lock_guard<std::mutex> lock(send_mu_);
  if (send_broken_)
    return Status::error(Errc::disconnected, "send to %s: an earlier send never completed",
                         name_.c_str());
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t done = 0; done < len;) {
    const uint32_t n = static_cast<uint32_t>(std::min<size_t>(len - done, kSlotBytes));
    RNICDV_TRY(send_one(p + done, n, deadline, timeout_ms));
    done += n;
  }
  return Status::ok();
}

// The HCA address `server` names: an address as written, or the first address of the
// device's IP version that the name resolves to.
Result<std::string> resolve_server(const rnicdv::Device& device, const std::string& server) {
  if (hw::IpAddress::parse(server)) return server;
  const bool v4 = device.info().gid.is_ipv4_mapped();
  addrinfo hints{};
  hints.ai_family = v4 ? AF_INET : AF_INET6;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int gai = ::getaddrinfo(server.c_str(), nullptr, &hints, &res); gai != 0)
    return Status::error(Errc::unreachable, "-z: cannot resolve %s to an %s address (%s's): %s",
                         server.c_str(), v4 ? "IPv4" : "IPv6", device.info().name.c_str(),
                         gai_strerror(gai));
  hw::IpAddress ip;
  uint16_t port = 0;
  const bool ok = hw::from_socket_address(res->ai_addr, res->ai_addrlen, &ip, &port);
  ::freeaddrinfo(res);
  if (!ok)
    return Status::error(Errc::unreachable, "-z: %s resolves to no IP address", server.c_str());
  return ip.to_string();
}

// --bind_source_ip with -z: the CM's address on this side, which can only be the device's.
Status check_local(const rnicdv::Device& device, const std::string& local) {
  if (local.empty()) return Status::ok();
  const std::string own = device.info().gid.ip().to_string();
  if (own == local) return Status::ok();
  return Status::error(Errc::invalid_argument,
                       "--bind_source_ip %s with -z: the connection manager runs on %s's own "
                       "address, %s",
                       local.c_str(), device.info().name.c_str(), own.c_str());
}

rnicdv::ConnectionOptions control_options(SteadyClock::time_point deadline) {
  rnicdv::ConnectionOptions options;
  options.timeout = std::chrono::milliseconds(std::max<int64_t>(ms_left(deadline), 1));
  // SENDs only: no READ or atomic either way (perftest's zeroed conn_param for SEND).
  options.responder_resources = 0;
  options.initiator_depth = 0;
  options.remote_access = 0;
  return options;
}

OobChannel channel_of(std::unique_ptr<RdmaCmTransport> t) {
  std::string peer = t->peer() + " (rdma_cm)";
  std::string ip = t->peer_ip();
  return OobChannel(std::move(t), std::move(peer), std::move(ip));
}

}  // namespace

Result<OobChannel> rdma_cm_connect_channel(rnicdv::Device& device, const std::string& server,
                                           const RdmaCmChannelSetup& setup,
                                           const std::function<void(const std::string&)>& notice) {
  RNICDV_TRY(check_local(device, setup.local));
  RNICDV_ASSIGN_OR_RETURN(const std::string address, resolve_server(device, server));
  const auto start = SteadyClock::now();
  const auto deadline = start + std::chrono::milliseconds(setup.timeout_ms);
  bool announced = false;
  for (;;) {
    RNICDV_ASSIGN_OR_RETURN(std::unique_ptr<RdmaCmTransport> t, RdmaCmTransport::create(device));
    Result<rnicdv::Connection> conn = rnicdv::Connection::connect(
        t->qp(), address, setup.port, {}, control_options(deadline));
    if (!conn) return conn.status().prepend("-z: control connection");
    Status st = t->establish(std::move(conn.value()), deadline);
    if (st) return channel_of(std::move(t));
    // Nobody listens on the port yet (REJ 8), or nobody answered: a later try may find the
    // server. Any other refusal is the server's answer.
    const bool not_yet =
        (st.code() == Errc::rejected && t->reject_reason() == hw::reject_reason::invalid_service_id) ||
        st.code() == Errc::unreachable;
    if (!not_yet || ms_left(deadline) <= 0) return st.prepend("-z: control connection");
    if (setup.give_up && setup.give_up())
      return Status::error(Errc::disconnected,
                           "-z: control connection: the server stopped before it accepted (%s)",
                           st.message().c_str());
    if (!setup.retry)
      return Status::error(st.code(),
                           "-z: control connection: %s (start the server first, or pass "
                           "--retry-connect to wait for it)",
                           st.message().c_str());
    if (!announced && notice && SteadyClock::now() - start >= std::chrono::seconds(1)) {
      announced = true;
      notice("waiting for the server at " + address + " CM port " + std::to_string(setup.port) +
             " (" + st.message() + "); giving up after " +
             std::to_string(setup.timeout_ms / 1000) + " s (--timeout)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

Result<OobChannel> rdma_cm_accept_channel(
    rnicdv::Device& device, const RdmaCmChannelSetup& setup,
    const std::function<Status(const std::string&)>& listening) {
  RNICDV_TRY(check_local(device, setup.local));
  RNICDV_ASSIGN_OR_RETURN(std::unique_ptr<RdmaCmTransport> t, RdmaCmTransport::create(device));
  const auto deadline = SteadyClock::now() + std::chrono::milliseconds(setup.timeout_ms);
  std::optional<rnicdv::ConnectionRequest> request;
  {
    // The listener goes once the request is taken (perftest destroys its control ID), so that
    // the port is free for -R's own listener.
    RNICDV_ASSIGN_OR_RETURN(rnicdv::Listener listener,
                            rnicdv::Listener::listen(device, setup.local, setup.port));
    if (listening) RNICDV_TRY(listening(hw::cm_address_string(listener.address())));
    while (!request) {
      const int64_t left = ms_left(deadline);
      if (left <= 0)
        return Status::error(Errc::timeout, "-z: no connection request on CM port %u within %u s",
                             setup.port, setup.timeout_ms / 1000);
      auto ev = listener.wait_event(std::chrono::milliseconds(std::min<int64_t>(left, 100)));
      if (!ev) continue;
      if (ev->type == ConnectionEventType::connect_request && ev->request &&
          !ev->request->datagram())
        request = std::move(ev->request);
      else if (!ev->status.is_ok())
        return ev->status.prepend("-z");
    }
  }
  Result<rnicdv::Connection> conn = request->accept(t->qp(), {}, control_options(deadline));
  if (!conn) return conn.status().prepend("-z: control connection");
  RNICDV_TRY(t->establish(std::move(conn.value()), deadline).prepend("-z: control connection"));
  return channel_of(std::move(t));
}

}  // namespace rnicperf
