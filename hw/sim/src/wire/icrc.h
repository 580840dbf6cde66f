// SPDX-License-Identifier: BSD-3-Clause
// RoCEv2 invariant CRC (IBA Annex A17.3.3) and the datagram sizes the wire accepts.
//
// The ICRC is the standard CRC-32 over: eight 0xFF bytes standing in for the masked LRH, the
// IPv4 header with TOS, TTL and header checksum set to all ones (or the IPv6 header with
// traffic class, flow label and hop limit set to all ones), the UDP header with its
// checksum set to all ones, the BTH with byte 4 (FECN, BECN, reserved) set to all ones, and
// the rest of the datagram (extension headers, payload, pad). It is appended least
// significant byte first (Linux rxe_icrc.c; scapy contrib/roce.py).
#pragma once

#include <cstddef>
#include <cstdint>

#include "rnicdv/sim/sim.h"
#include "wire/wire.h"

namespace rnicdv::sim {

inline constexpr size_t kBthLen = 12;
inline constexpr size_t kIcrcLen = 4;
// Largest datagram transmit() takes (BTH..pad, no ICRC): a 4096-byte MTU plus headers.
inline constexpr size_t kMaxDatagramLen = 4096 + 64;
// The UDP payload the wire carries: datagram plus ICRC.
inline constexpr size_t kMinWireDatagramLen = kBthLen + kIcrcLen;
inline constexpr size_t kMaxWireDatagramLen = kMaxDatagramLen + kIcrcLen;
static_assert(kMaxWireDatagramLen == kMaxWireDatagramBytes, "sim.h states the same limit");
inline constexpr size_t kIpv4HeaderLen = 20;  // IHL 5: RoCEv2 frames carry no IPv4 options
inline constexpr size_t kIpv6HeaderLen = 40;  // no extension headers
inline constexpr size_t kUdpHeaderLen = 8;

// ICRC of `datagram` (BTH..pad, `len` bytes, no ICRC) under the IPv4 + UDP headers a frame
// actually carries (`ipv4_udp_headers`: 20-byte IPv4 header with IHL 5, then the UDP header).
// The masked fields are masked here; everything else, including the IPv4 ID, flags and
// lengths, is covered as found.
uint32_t roce_icrc_ipv4(const uint8_t* ipv4_udp_headers, const uint8_t* datagram,
                        size_t len) noexcept;
// The same under a 40-byte IPv6 header and the UDP header.
uint32_t roce_icrc_ipv6(const uint8_t* ipv6_udp_headers, const uint8_t* datagram,
                        size_t len) noexcept;

inline void store_icrc(uint8_t* out, uint32_t icrc) noexcept {
  out[0] = static_cast<uint8_t>(icrc);
  out[1] = static_cast<uint8_t>(icrc >> 8);
  out[2] = static_cast<uint8_t>(icrc >> 16);
  out[3] = static_cast<uint8_t>(icrc >> 24);
}

inline uint32_t load_icrc(const uint8_t* in) noexcept {
  return uint32_t{in[0]} | uint32_t{in[1]} << 8 | uint32_t{in[2]} << 16 | uint32_t{in[3]} << 24;
}

// True when `wire_datagram` (`wire_len` bytes: datagram then ICRC) carries the ICRC of a
// datagram sent src -> dst. Lengths outside [kMinWireDatagramLen, kMaxWireDatagramLen] fail.
bool icrc_matches(const Endpoint& src, const Endpoint& dst, const uint8_t* wire_datagram,
                  size_t wire_len) noexcept;

}  // namespace rnicdv::sim
