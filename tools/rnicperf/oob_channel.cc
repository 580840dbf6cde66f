// SPDX-License-Identifier: BSD-3-Clause
#include "oob_channel.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <thread>

#include "rnicdv/hw/ip_address.h"

namespace rnicperf {

using rnicdv::Errc;
using rnicdv::Result;
using rnicdv::Status;

namespace {

using SteadyClock = std::chrono::steady_clock;

int64_t ms_left(SteadyClock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now());
  return left.count() < 0 ? 0 : left.count();
}

std::string endpoint_text(const sockaddr* sa) {
  char host[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (sa->sa_family == AF_INET) {
    auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    port = ntohs(in->sin_port);
    return std::string(host) + ":" + std::to_string(port);
  }
  if (sa->sa_family == AF_INET6) {
    auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
    port = ntohs(in6->sin6_port);
    return "[" + std::string(host) + "]:" + std::to_string(port);
  }
  return "?";
}

// Waits for `events` on fd; returns 1 ready, 0 timeout, -1 error (errno set).
int wait_fd(int fd, short events, int64_t timeout_ms) {
  pollfd p{fd, events, 0};
  for (;;) {
    int rc = ::poll(&p, 1, static_cast<int>(timeout_ms));
    if (rc < 0 && errno == EINTR) continue;
    return rc;
  }
}

// One non-blocking connect attempt, bounded by `timeout_ms`, from `source` if given. Returns 0,
// an errno of the connect, or minus the errno of binding the source.
int try_connect(const addrinfo* ai, const rnicdv::hw::SocketAddress* source, int64_t timeout_ms,
                int* out_fd) {
  int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
  if (fd < 0) return errno;
  if (source && ::bind(fd, source->get(), source->len) != 0) {
    const int err = errno;
    ::close(fd);
    return -err;  // the source cannot be bound: trying again will not change that
  }
  int rc = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
  if (rc != 0 && errno != EINPROGRESS) {
    int err = errno;
    ::close(fd);
    return err;
  }
  if (rc != 0) {
    int ready = wait_fd(fd, POLLOUT, timeout_ms);
    if (ready <= 0) {
      int err = ready == 0 ? ETIMEDOUT : errno;
      ::close(fd);
      return err;
    }
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      ::close(fd);
      return err;
    }
  }
  // Blocking from here on; every read and write is preceded by poll() with a deadline.
  int flags = ::fcntl(fd, F_GETFL);
  ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  *out_fd = fd;
  return 0;
}

}  // namespace

OobChannel& OobChannel::operator=(OobChannel&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(o.fd_, -1);
    transport_ = std::move(o.transport_);
    peer_ = std::move(o.peer_);
    peer_ip_ = std::move(o.peer_ip_);
  }
  return *this;
}

OobChannel::~OobChannel() {
  if (fd_ >= 0) ::close(fd_);
}

Result<OobChannel> OobChannel::connect(const std::string& host, uint16_t port, uint32_t timeout_ms,
                                       bool retry_refused,
                                       const std::function<void(const std::string&)>& notice,
                                       const OobAddressing& addressing) {
  const std::string target =
      (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
  std::optional<rnicdv::hw::SocketAddress> source;
  if (!addressing.local.empty()) {
    Result<rnicdv::hw::IpAddress> ip = rnicdv::hw::IpAddress::parse(addressing.local);
    if (!ip) return ip.status().prepend("control channel source");
    source = rnicdv::hw::to_socket_address(ip.value(), 0);
  }
  addrinfo hints{};
  // A source address fixes the family: the server's name must resolve to one of it.
  hints.ai_family = source ? source->storage.ss_family : addressing.family;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int gai = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (gai != 0)
    return Status::error(Errc::unreachable, "cannot reach server %s%s: %s", target.c_str(),
                         hints.ai_family == AF_INET6  ? " over IPv6"
                         : hints.ai_family == AF_INET ? " over IPv4"
                                                      : "",
                         gai_strerror(gai));
  const auto start = SteadyClock::now();
  const auto deadline = start + std::chrono::milliseconds(timeout_ms);
  int last_err = ETIMEDOUT;
  bool announced = false;
  for (;;) {
    // A connect attempt is bounded by a second at a time, so a silent wait can be announced.
    for (addrinfo* ai = res; ai; ai = ai->ai_next) {
      int fd = -1;
      const int64_t left = ms_left(deadline);
      int err = try_connect(ai, source ? &*source : nullptr, std::clamp<int64_t>(left, 1, 1000),
                            &fd);
      if (err < 0) {
        ::freeaddrinfo(res);
        return Status::error(Errc::invalid_argument,
                             "cannot reach server %s: control channel source %s: bind: %s",
                             target.c_str(), addressing.local.c_str(), std::strerror(-err));
      }
      if (err == 0) {
        std::string peer = endpoint_text(ai->ai_addr);
        ::freeaddrinfo(res);
        return OobChannel(fd, peer);
      }
      last_err = err;
    }
    if (last_err == ECONNREFUSED && !retry_refused) {
      ::freeaddrinfo(res);
      return Status::error(Errc::unreachable,
                           "cannot reach server %s: %s (no server is listening there: start "
                           "the server first, or pass --retry-connect to wait for it)",
                           target.c_str(), std::strerror(last_err));
    }
    if (!announced && notice && SteadyClock::now() - start >= std::chrono::seconds(1)) {
      announced = true;
      notice("waiting for the server at " + target + " (" + std::strerror(last_err) +
             "); giving up after " + std::to_string(timeout_ms / 1000) + " s (--timeout)");
    }
    if (ms_left(deadline) <= 0) break;
    if (last_err == ECONNREFUSED)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::freeaddrinfo(res);
  return Status::error(last_err == ETIMEDOUT ? Errc::timeout : Errc::unreachable,
                       "cannot reach server %s: %s (gave up after %u ms)", target.c_str(),
                       std::strerror(last_err), timeout_ms);
}

Result<std::pair<OobChannel, OobChannel>> OobChannel::pair() {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
    return Status::error(Errc::io_error, "socketpair: %s", std::strerror(errno));
  return std::pair<OobChannel, OobChannel>(OobChannel(fds[0], "loopback peer"),
                                           OobChannel(fds[1], "loopback peer"));
}

Status OobChannel::send_all(const void* data, size_t len, uint32_t timeout_ms) {
  if (transport_) return transport_->send_all(data, len, timeout_ms);
  auto deadline = SteadyClock::now() + std::chrono::milliseconds(timeout_ms);
  auto* p = static_cast<const uint8_t*>(data);
  size_t done = 0;
  while (done < len) {
    int ready = wait_fd(fd_, POLLOUT, ms_left(deadline));
    if (ready == 0)
      return Status::error(Errc::timeout, "send to %s: timed out after %u ms", peer_.c_str(),
                           timeout_ms);
    if (ready < 0)
      return Status::error(Errc::io_error, "send to %s: %s", peer_.c_str(), std::strerror(errno));
    ssize_t n = ::send(fd_, p + done, len - done, MSG_NOSIGNAL);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n < 0)
      return Status::error(
          errno == EPIPE || errno == ECONNRESET ? Errc::disconnected : Errc::io_error,
          "send to %s: %s", peer_.c_str(), std::strerror(errno));
    done += static_cast<size_t>(n);
  }
  return Status::ok();
}

Status OobChannel::recv_all(void* data, size_t len, uint32_t timeout_ms) {
  if (transport_) return transport_->recv_all(data, len, timeout_ms);
  auto deadline = SteadyClock::now() + std::chrono::milliseconds(timeout_ms);
  auto* p = static_cast<uint8_t*>(data);
  size_t done = 0;
  while (done < len) {
    int ready = wait_fd(fd_, POLLIN, ms_left(deadline));
    if (ready == 0)
      return Status::error(Errc::timeout, "no answer from %s for %u ms", peer_.c_str(), timeout_ms);
    if (ready < 0)
      return Status::error(Errc::io_error, "receive from %s: %s", peer_.c_str(),
                           std::strerror(errno));
    ssize_t n = ::recv(fd_, p + done, len - done, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n == 0) return Status::error(Errc::disconnected, "%s closed the connection", peer_.c_str());
    if (n < 0)
      return Status::error(errno == ECONNRESET ? Errc::disconnected : Errc::io_error,
                           "receive from %s: %s", peer_.c_str(), std::strerror(errno));
    done += static_cast<size_t>(n);
  }
  return Status::ok();
}

Result<bool> OobChannel::readable(uint32_t timeout_ms) {
  if (transport_) return transport_->readable(timeout_ms);
  int ready = wait_fd(fd_, POLLIN, timeout_ms);
  if (ready < 0)
    return Status::error(Errc::io_error, "poll %s: %s", peer_.c_str(), std::strerror(errno));
  return ready > 0;
}

OobListener& OobListener::operator=(OobListener&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(o.fd_, -1);
    port_ = o.port_;
  }
  return *this;
}

OobListener::~OobListener() {
  if (fd_ >= 0) ::close(fd_);
}

Result<OobListener> OobListener::listen(uint16_t port, const OobAddressing& addressing) {
  using rnicdv::hw::IpAddress;
  // By default an IPv6 socket accepting IPv4 too (dual stack), or IPv6 only for AF_INET6;
  // IPv4 where IPv6 is off. With a local address, that address alone.
  IpAddress at = IpAddress::v4(0);
  int fd = -1;
  if (!addressing.local.empty()) {
    Result<IpAddress> ip = IpAddress::parse(addressing.local);
    if (!ip) return ip.status().prepend("control channel address");
    at = ip.value();
    fd = ::socket(at.is_v4() ? AF_INET : AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  } else {
    fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0) at = IpAddress{};
    else if (addressing.family != AF_INET6) fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  }
  const std::string where = "TCP port " + std::to_string(port) +
                            (addressing.local.empty() ? "" : " of " + addressing.local) +
                            (addressing.family == AF_INET6 ? " over IPv6" : "");
  if (fd < 0)
    return Status::error(Errc::io_error, "cannot listen on %s: socket: %s", where.c_str(),
                         std::strerror(errno));
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (!at.is_v4()) {
    const int v6only = addressing.family == AF_INET6 || !addressing.local.empty() ? 1 : 0;
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof v6only);
  }
  const rnicdv::hw::SocketAddress sa = rnicdv::hw::to_socket_address(at, port);
  if (::bind(fd, sa.get(), sa.len) != 0 || ::listen(fd, 1) != 0) {
    int err = errno;
    ::close(fd);
    return Status::error(err == EADDRINUSE ? Errc::address_in_use : Errc::io_error,
                         "cannot listen on %s: %s", where.c_str(), std::strerror(err));
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  OobListener l;
  l.fd_ = fd;
  l.port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                              : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return l;
}

Result<OobChannel> OobListener::accept(uint32_t timeout_ms) {
  int ready = wait_fd(fd_, POLLIN, timeout_ms);
  if (ready == 0)
    return Status::error(Errc::timeout, "no client connected to TCP port %u within %u s", port_,
                         timeout_ms / 1000);
  if (ready < 0) return Status::error(Errc::io_error, "accept: %s", std::strerror(errno));
  sockaddr_storage peer{};
  socklen_t len = sizeof peer;
  int fd = ::accept4(fd_, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_CLOEXEC);
  if (fd < 0) return Status::error(Errc::io_error, "accept: %s", std::strerror(errno));
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  std::string text = endpoint_text(reinterpret_cast<sockaddr*>(&peer));
  // IPv4 clients on the dual-stack socket show as ::ffff:a.b.c.d; print them plainly.
  if (text.rfind("[::ffff:", 0) == 0) {
    auto close = text.find(']');
    text = text.substr(8, close - 8) + text.substr(close + 1);
  }
  return OobChannel(fd, "client " + text);
}

}  // namespace rnicperf
