// SPDX-License-Identifier: BSD-3-Clause
// The out-of-band control channel (perftest's "Data ex. method : Ethernet"): a TCP
// connection from the client to the server's port (default 18515), or a socketpair when both
// ends run in one process (--loopback). With -z ("Data ex. method : rdma_cm") the bytes go
// as SENDs on an RC QP the connection manager connects instead (rdma_cm_channel.h), behind
// the same calls. Every call is bounded by a timeout.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "rnicdv/status.h"

namespace rnicperf {

// Where the control channel's sockets go: the address family of the server's name
// (AF_UNSPEC: either; --ipv6-addr: AF_INET6) and this side's own address ("" : any; the
// client binds it as its source, the server listens on it alone).
struct OobAddressing {
  int family = 0;  // AF_UNSPEC
  std::string local;
};

// A channel that is not a socket (-z's QP). Each send_all is one message on the wire, which
// perftest's peer reads whole; recv_all reads what arrived as one stream.
class OobTransport {
 public:
  virtual ~OobTransport() = default;
  virtual rnicdv::Status send_all(const void* data, size_t len, uint32_t timeout_ms) = 0;
  virtual rnicdv::Status recv_all(void* data, size_t len, uint32_t timeout_ms) = 0;
  virtual rnicdv::Result<bool> readable(uint32_t timeout_ms) = 0;
};

class OobChannel {
 public:
  OobChannel() = default;
  OobChannel(int fd, std::string peer) : fd_(fd), peer_(std::move(peer)) {}
  // `peer_ip`: the peer's address as the transport reached it (-z: its HCA's).
  OobChannel(std::unique_ptr<OobTransport> transport, std::string peer, std::string peer_ip = {})
      : transport_(std::move(transport)), peer_(std::move(peer)), peer_ip_(std::move(peer_ip)) {}
  OobChannel(OobChannel&& o) noexcept
      : fd_(std::exchange(o.fd_, -1)), transport_(std::move(o.transport_)),
        peer_(std::move(o.peer_)), peer_ip_(std::move(o.peer_ip_)) {}
  OobChannel& operator=(OobChannel&& o) noexcept;
  OobChannel(const OobChannel&) = delete;
  OobChannel& operator=(const OobChannel&) = delete;
  ~OobChannel();

  // Connects to host:port within `timeout_ms`. A refused connection (nobody listening) fails
  // at once unless `retry_refused`, which tries again every 50 ms until the deadline. A wait
  // longer than a second is announced once through `notice` (what it waits for, and why).
  // Error: "cannot reach server 10.0.0.9:18515: Connection refused (...)".
  static rnicdv::Result<OobChannel> connect(
      const std::string& host, uint16_t port, uint32_t timeout_ms, bool retry_refused,
      const std::function<void(const std::string&)>& notice = {},
      const OobAddressing& addressing = {});
  // Two connected ends (AF_UNIX socketpair).
  static rnicdv::Result<std::pair<OobChannel, OobChannel>> pair();

  rnicdv::Status send_all(const void* data, size_t len, uint32_t timeout_ms);
  // Errc::disconnected when the peer closes first, Errc::timeout when nothing arrives.
  rnicdv::Status recv_all(void* data, size_t len, uint32_t timeout_ms);
  // True when a read would not block (data or EOF) within `timeout_ms` (0: just look).
  rnicdv::Result<bool> readable(uint32_t timeout_ms);

  int fd() const { return fd_; }
  const std::string& peer() const { return peer_; }
  bool valid() const { return fd_ >= 0 || transport_ != nullptr; }
  // -z: the bytes travel as SENDs on a QP (perftest then exchanges its records in binary).
  bool over_rdma_cm() const { return transport_ != nullptr; }
  // -z: the server's HCA address, as resolved from the name given (the CM's for -R too).
  const std::string& peer_ip() const { return peer_ip_; }

 private:
  int fd_ = -1;
  std::unique_ptr<OobTransport> transport_;
  std::string peer_;  // "127.0.0.1:18515", for messages
  std::string peer_ip_;
};

class OobListener {
 public:
  OobListener() = default;
  OobListener(OobListener&& o) noexcept : fd_(std::exchange(o.fd_, -1)), port_(o.port_) {}
  OobListener& operator=(OobListener&& o) noexcept;
  OobListener(const OobListener&) = delete;
  OobListener& operator=(const OobListener&) = delete;
  ~OobListener();

  // Listens on every address at `port` (0: an ephemeral port, see port()), or on
  // `addressing.local` alone; `addressing.family` AF_INET6 listens for IPv6 only. Error when
  // the port is taken: "cannot listen on TCP port 18515: Address already in use".
  static rnicdv::Result<OobListener> listen(uint16_t port, const OobAddressing& addressing = {});
  // Waits at most `timeout_ms` for one client.
  rnicdv::Result<OobChannel> accept(uint32_t timeout_ms);
  uint16_t port() const { return port_; }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

}  // namespace rnicperf
