// SPDX-License-Identifier: BSD-3-Clause
// An IP address of either family, as RoCE v2 names endpoints: 16 bytes in network order, an
// IPv4 address in its IPv4-mapped form ::ffff:a.b.c.d (RFC 4291 2.5.5.2). That is also the
// GID a RoCE v2 port derives from the address, so a GID and the address it was made from are
// the same bytes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <sys/socket.h>

#include "rnicdv/status.h"

namespace rnicdv::hw {

struct IpAddress {
  std::array<uint8_t, 16> bytes{};

  // :: (unspecified). Declared so that IpAddress is no aggregate: a brace list that held a
  // host-order IPv4 integer where an address belongs would otherwise fill its bytes.
  constexpr IpAddress() noexcept = default;

  static constexpr IpAddress v4(uint32_t host_order) noexcept {
    IpAddress a;
    a.bytes[10] = a.bytes[11] = 0xff;
    a.bytes[12] = static_cast<uint8_t>(host_order >> 24);
    a.bytes[13] = static_cast<uint8_t>(host_order >> 16);
    a.bytes[14] = static_cast<uint8_t>(host_order >> 8);
    a.bytes[15] = static_cast<uint8_t>(host_order);
    return a;
  }
  static IpAddress from_bytes(const uint8_t raw[16]) noexcept;
  // "127.0.0.2", "fd00::1", "fe80::2", "::ffff:10.0.0.1" (the last one is IPv4). Zone
  // suffixes ("%eth0") are refused: the fabric finds a link-local address's interface itself.
  static Result<IpAddress> parse(std::string_view text);

  constexpr bool is_v4() const noexcept {
    for (size_t i = 0; i < 10; ++i)
      if (bytes[i] != 0) return false;
    return bytes[10] == 0xff && bytes[11] == 0xff;
  }
  constexpr bool is_v6() const noexcept { return !is_v4(); }
  // The IPv4 address in host order; 0 for an IPv6 one.
  constexpr uint32_t ipv4() const noexcept {
    if (!is_v4()) return 0;
    return uint32_t{bytes[12]} << 24 | uint32_t{bytes[13]} << 16 | uint32_t{bytes[14]} << 8 |
           bytes[15];
  }
  // 0.0.0.0 or ::, "any address" where an address is to be chosen.
  constexpr bool is_unspecified() const noexcept {
    for (size_t i = 0; i < 16; ++i)
      if (bytes[i] != 0 && !(is_v4() && (i == 10 || i == 11))) return false;
    return true;
  }
  // 224.0.0.0/4 or ff00::/8.
  constexpr bool is_multicast() const noexcept {
    return is_v4() ? (bytes[12] >> 4) == 0xE : bytes[0] == 0xff;
  }
  // fe80::/10: valid on one link only, so a socket needs that link's interface.
  constexpr bool is_link_local() const noexcept {
    return bytes[0] == 0xfe && (bytes[1] & 0xc0) == 0x80;
  }
  constexpr bool is_loopback() const noexcept {
    if (is_v4()) return bytes[12] == 127;
    for (size_t i = 0; i < 15; ++i)
      if (bytes[i] != 0) return false;
    return bytes[15] == 1;
  }

  // Dotted quad for IPv4, RFC 5952 text for IPv6.
  std::string to_string() const;

  constexpr bool operator==(const IpAddress&) const = default;
  constexpr auto operator<=>(const IpAddress&) const = default;
};

// A socket address of either family: an AF_INET one for an IPv4 address, an AF_INET6 one for
// an IPv6 address, with `scope_id` (an interface index) for a link-local one.
struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t len = 0;
  const sockaddr* get() const noexcept { return reinterpret_cast<const sockaddr*>(&storage); }
  sockaddr* get() noexcept { return reinterpret_cast<sockaddr*>(&storage); }
};
SocketAddress to_socket_address(const IpAddress& ip, uint16_t port, uint32_t scope_id = 0) noexcept;

// The address and port (host order) of a sockaddr_in or sockaddr_in6 at `sa`, `len` bytes
// (at least the family's structure); false for another family, a short length or null. An
// IPv4-mapped IPv6 address reads as the IPv4 one. `scope_id`, if given, gets a sockaddr_in6's.
bool from_socket_address(const sockaddr* sa, socklen_t len, IpAddress* ip, uint16_t* port,
                         uint32_t* scope_id = nullptr) noexcept;

// A 64-bit mix of the address, for hash tables.
constexpr uint64_t hash_of(const IpAddress& a) noexcept {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint8_t b : a.bytes) h = (h ^ b) * 0x100000001b3ull;
  return h;
}
struct IpAddressHash {
  size_t operator()(const IpAddress& a) const noexcept { return static_cast<size_t>(hash_of(a)); }
};

}  // namespace rnicdv::hw
