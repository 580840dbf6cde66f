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

}  // namespace rnicdv::hw
