// SPDX-License-Identifier: BSD-3-Clause
#include "rnicdv/hw/ip_address.h"

#include <arpa/inet.h>

#include <cstring>

namespace rnicdv::hw {

IpAddress IpAddress::from_bytes(const uint8_t raw[16]) noexcept {
  IpAddress a;
  std::memcpy(a.bytes.data(), raw, 16);
  return a;
}

Result<IpAddress> IpAddress::parse(std::string_view text) {
  char buf[INET6_ADDRSTRLEN + 1];
  if (text.empty() || text.size() >= sizeof buf)
    return Status::error(Errc::invalid_argument, "IP address \"%.*s\": not an address",
                         static_cast<int>(text.size()), text.data());
  std::memcpy(buf, text.data(), text.size());
  buf[text.size()] = '\0';
  in_addr addr4{};
  if (inet_pton(AF_INET, buf, &addr4) == 1) return IpAddress::v4(ntohl(addr4.s_addr));
  IpAddress a;
  if (inet_pton(AF_INET6, buf, a.bytes.data()) == 1) return a;
  if (std::memchr(buf, '%', text.size()))
    return Status::error(Errc::invalid_argument,
                         "IP address \"%s\": zone suffixes are not taken (the interface of a "
                         "link-local address is the one that holds it)",
                         buf);
  return Status::error(Errc::invalid_argument, "IP address \"%s\": neither IPv4 nor IPv6", buf);
}

std::string IpAddress::to_string() const {
  char buf[INET6_ADDRSTRLEN] = {};
  if (is_v4()) {
    const in_addr addr4{htonl(ipv4())};
    inet_ntop(AF_INET, &addr4, buf, sizeof buf);
  } else {
    inet_ntop(AF_INET6, bytes.data(), buf, sizeof buf);
  }
  return buf;
}

SocketAddress to_socket_address(const IpAddress& ip, uint16_t port, uint32_t scope_id) noexcept {
  SocketAddress a;
  if (ip.is_v4()) {
    auto* sa = reinterpret_cast<sockaddr_in*>(&a.storage);
    sa->sin_family = AF_INET;
    sa->sin_addr.s_addr = htonl(ip.ipv4());
    sa->sin_port = htons(port);
    a.len = sizeof(sockaddr_in);
  } else {
    auto* sa = reinterpret_cast<sockaddr_in6*>(&a.storage);
    sa->sin6_family = AF_INET6;
    std::memcpy(&sa->sin6_addr, ip.bytes.data(), 16);
    sa->sin6_port = htons(port);
    if (ip.is_link_local()) sa->sin6_scope_id = scope_id;
    a.len = sizeof(sockaddr_in6);
  }
  return a;
}

bool from_socket_address(const sockaddr* sa, socklen_t len, IpAddress* ip, uint16_t* port,
                         uint32_t* scope_id) noexcept {
  if (!sa || len < static_cast<socklen_t>(sizeof(sa_family_t))) return false;
  if (sa->sa_family == AF_INET && len >= static_cast<socklen_t>(sizeof(sockaddr_in))) {
    sockaddr_in in{};
    std::memcpy(&in, sa, sizeof in);
    *ip = IpAddress::v4(ntohl(in.sin_addr.s_addr));
    *port = ntohs(in.sin_port);
    if (scope_id) *scope_id = 0;
    return true;
  }
  if (sa->sa_family == AF_INET6 && len >= static_cast<socklen_t>(sizeof(sockaddr_in6))) {
    sockaddr_in6 in6{};
    std::memcpy(&in6, sa, sizeof in6);
    *ip = IpAddress::from_bytes(in6.sin6_addr.s6_addr);
    *port = ntohs(in6.sin6_port);
    if (scope_id) *scope_id = in6.sin6_scope_id;
    return true;
  }
  return false;
}

}  // namespace rnicdv::hw
