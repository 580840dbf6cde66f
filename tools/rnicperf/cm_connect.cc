// SPDX-License-Identifier: BSD-3-Clause
#include "cm_connect.h"

#include <chrono>
#include <cstdio>
#include <thread>

namespace rnicperf {

using rnicdv::ConnectionEventType;
using rnicdv::Errc;
using rnicdv::Result;
using rnicdv::Status;

namespace {

constexpr uint32_t kCmListening = 20;

rnicdv::hw::Mtu mtu_code(uint32_t bytes) {
  switch (bytes) {
    case 256:
      return rnicdv::hw::Mtu::mtu256;
    case 512:
      return rnicdv::hw::Mtu::mtu512;
    case 1024:
      return rnicdv::hw::Mtu::mtu1024;
    case 2048:
      return rnicdv::hw::Mtu::mtu2048;
    default:
      return rnicdv::hw::Mtu::mtu4096;
  }
}

// Waits for ESTABLISHED; anything else is the failure it names (a REJ's reason in
// `*reject_reason`, if given).
Status wait_established(rnicdv::Connection& conn, std::chrono::milliseconds timeout,
                        uint16_t* reject_reason = nullptr) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      return Status::error(Errc::timeout, "%s: not established within %lld ms", conn.name().c_str(),
                           static_cast<long long>(timeout.count()));
    auto ev = conn.wait_event(left);
    if (!ev) continue;
    if (ev->type == ConnectionEventType::established) return Status::ok();
    if (ev->type == ConnectionEventType::rejected && reject_reason)
      *reject_reason = ev->reject_reason;
    if (!ev->status.is_ok()) return ev->status;
    return Status::error(Errc::protocol_error, "%s: %s instead of ESTABLISHED", conn.name().c_str(),
                         rnicdv::connection_event_name(ev->type));
  }
}

// The server's HCA address, from its record's GID: RoCE v2 GIDs are IP addresses (IPv4-mapped
// or IPv6).
Result<std::string> server_address(const TestEndpoint& ep) {
  const PeerRecord& peer = ep.remote(0);
  rnicdv::hw::Gid gid;
  std::copy(std::begin(peer.gid), std::end(peer.gid), gid.raw);
  const rnicdv::hw::IpAddress ip = gid.ip();
  if (ip.is_unspecified())
    return Status::error(Errc::unsupported, "-R: the server's GID %s is no IP address",
                         gid.to_string().c_str());
  return ip.to_string();
}

// Waits for the listener's next request.
Result<rnicdv::ConnectionRequest> next_request(rnicdv::Listener& listener, const Options& o,
                                               std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      return Status::error(Errc::timeout, "no connection request on CM port %u within %u s",
                           o.port, o.timeout_s);
    auto ev = listener.wait_event(left);
    if (!ev) continue;
    if (ev->type == ConnectionEventType::connect_request && ev->request)
      return std::move(*ev->request);
    if (!ev->status.is_ok()) return ev->status;
  }
}

// --bind_source_ip with -R: the CM's address on this side, which can only be the device's own
// (the simulated HCA's, RNICDV_SIM_ADDR).
Status check_bind_source(TestEndpoint& ep, const Options& o) {
  if (o.bind_source_ip.empty()) return Status::ok();
  const rnicdv::hw::DeviceInfo& info = ep.device().hw().info();
  const std::string own = info.gid.ip().to_string();
  if (own == o.bind_source_ip) return Status::ok();
  return Status::error(Errc::invalid_argument,
                       "--bind_source_ip %s with -R: the connection manager runs on %s's own "
                       "address, %s",
                       o.bind_source_ip.c_str(), info.name.c_str(), own.c_str());
}

}  // namespace

Status cm_resolve_datagrams(TestEndpoint& ep, OobSession& oob, const Options& o, bool client) {
  const std::chrono::milliseconds timeout(o.timeout_s * 1000u);
  RNICDV_TRY(check_bind_source(ep, o));
  if (!client) {
    RNICDV_ASSIGN_OR_RETURN(
        rnicdv::Listener listener,
        rnicdv::Listener::listen_datagram(ep.device(), o.bind_source_ip, o.port));
    RNICDV_TRY(oob.barrier(kCmListening));
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (size_t i = 0; i < ep.num_qps(); ++i) {
      RNICDV_ASSIGN_OR_RETURN(rnicdv::ConnectionRequest req, next_request(listener, o, deadline));
      RNICDV_TRY(req.accept_datagram(ep.qp(i), kUdQkey));
    }
    return Status::ok();
  }
  RNICDV_TRY(oob.barrier(kCmListening));
  RNICDV_ASSIGN_OR_RETURN(const std::string address, server_address(ep));
  for (size_t i = 0; i < ep.num_qps(); ++i) {
    RNICDV_ASSIGN_OR_RETURN(
        rnicdv::DatagramService svc,
        rnicdv::resolve_datagram_service(ep.device(), address, o.port, {}, timeout));
    ep.set_datagram_peer(i, svc.qpn, svc.qkey);
  }
  return Status::ok();
}

void apply_path_options(const Options& o, rnicdv::ConnectionOptions* c) {
  c->sl = o.sl;
  c->traffic_class = o.resolved_traffic_class();
  c->hop_limit = o.resolved_hop_limit();
  c->flow_label = o.flow_label_of(0);
  c->pkey_index = o.pkey_index;
  c->retry_count = o.retry_count;
}

Status cm_connect(TestEndpoint& ep, const CmRendezvous& meet, const Options& o, bool client,
                  uint32_t mtu_bytes, std::optional<rnicdv::Connection>* conn) {
  const std::chrono::milliseconds timeout(o.timeout_s * 1000u);
  rnicdv::ConnectionOptions options;
  options.timeout = timeout;
  options.path_mtu = mtu_code(mtu_bytes);
  options.responder_resources = static_cast<uint8_t>(ep.out_reads());
  options.initiator_depth = static_cast<uint8_t>(ep.out_reads());
  options.ack_timeout = o.qp_timeout;
  apply_path_options(o, &options);
  RNICDV_TRY(check_bind_source(ep, o));

  if (!client) {
    RNICDV_ASSIGN_OR_RETURN(rnicdv::Listener listener,
                            rnicdv::Listener::listen(ep.device(), o.bind_source_ip, o.port));
    RNICDV_TRY(meet.sync());
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    RNICDV_ASSIGN_OR_RETURN(rnicdv::ConnectionRequest req, next_request(listener, o, deadline));
    RNICDV_ASSIGN_OR_RETURN(*conn, req.accept(ep.qp(0), {}, options));
    return wait_established(**conn, timeout);
  }

  RNICDV_TRY(meet.sync());
  std::string address = meet.address;
  if (address.empty()) {
    RNICDV_ASSIGN_OR_RETURN(address, server_address(ep));
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (uint32_t refused = 0;; ++refused) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    options.timeout = std::max(left, std::chrono::milliseconds(1));
    RNICDV_ASSIGN_OR_RETURN(*conn,
                            rnicdv::Connection::connect(ep.qp(0), address, o.port, {}, options));
    uint16_t reason = 0;
    Status st = wait_established(**conn, options.timeout, &reason);
    // Only "nobody listens on that port" (REJ 8) may change; any other REJ is the answer.
    if (st && refused > 0)
      std::fprintf(stderr,
                   "rnicperf: -R: CM port %u of %s refused %u REQ(s) (nobody listened yet) "
                   "before it accepted\n",
                   o.port, address.c_str(), refused);
    if (st || !meet.retry_refused || st.code() != Errc::rejected ||
        reason != rnicdv::hw::reject_reason::invalid_service_id ||
        std::chrono::steady_clock::now() >= deadline)
      return st;
    // Nobody listened yet: the QP went to ERR with the REJ; back in INIT, with its receives
    // posted again, it can send the next REQ.
    conn->reset();
    RNICDV_TRY(ep.restart_after_reject(0, timeout));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

Status cm_connect(TestEndpoint& ep, OobSession& oob, const Options& o, bool client,
                  uint32_t mtu_bytes, std::optional<rnicdv::Connection>* conn) {
  CmRendezvous meet;
  meet.sync = [&oob] { return oob.barrier(kCmListening); };
  return cm_connect(ep, meet, o, client, mtu_bytes, conn);
}

}  // namespace rnicperf
