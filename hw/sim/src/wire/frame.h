// SPDX-License-Identifier: BSD-3-Clause
// Ethernet / IP / UDP / RoCEv2 frames: what a RoCEv2 datagram looks like on a real link, over
// IPv4 or IPv6 (the family of the endpoints' addresses). Used for the pcap capture and by
// wires that carry whole frames.
//
// Built frames use locally administered MACs derived from the address (mac_for_ip). Over
// IPv4: ethertype 0x0800, an IPv4 header with IHL 5, ID 0, DF set, the TOS and TTL of the
// sender's IpClass (0 and 64 unless a QP sets them) and a correct header checksum (the header
// an unconnected IP_PMTUDISC_DO socket sends, which is what the ICRC is computed over), and a
// UDP header whose checksum is 0 ("no checksum", RFC 768) unless asked to compute it. Zero is
// what Linux rxe sends; the ICRC masks the field either way and protects the whole datagram.
// Over IPv6: ethertype 0x86DD, a 40-byte header with the IpClass's traffic class, flow label
// and hop limit, next header UDP and no extension headers, and a UDP checksum that is always
// computed (RFC 8200 8.1: a receiver discards an IPv6 UDP datagram whose checksum is 0).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "wire/icrc.h"
#include "wire/wire.h"

namespace rnicdv::sim {

inline constexpr size_t kEthHeaderLen = 14;
inline constexpr size_t kRoceEncapLenIpv4 = kEthHeaderLen + kIpv4HeaderLen + kUdpHeaderLen;  // 42
inline constexpr size_t kRoceEncapLenIpv6 = kEthHeaderLen + kIpv6HeaderLen + kUdpHeaderLen;  // 62
inline constexpr size_t kMaxRoceEncapLen = kRoceEncapLenIpv6;
inline constexpr size_t kMaxRoceFrameLen = kMaxRoceEncapLen + kMaxWireDatagramLen;
// The headers in front of a datagram sent from (or to) `a`.
constexpr size_t roce_encap_len(const IpAddress& a) noexcept {
  return a.is_v4() ? kRoceEncapLenIpv4 : kRoceEncapLenIpv6;
}
inline constexpr uint16_t kEthertypeIpv4 = 0x0800;
inline constexpr uint16_t kEthertypeIpv6 = 0x86DD;
inline constexpr uint16_t kRoceV2UdpPort = 4791;  // IANA, IBA Annex A17.2
inline constexpr uint8_t kFrameIpv4Ttl = 64;

using MacAddress = std::array<uint8_t, 6>;

// 02:00:a:b:c:d for IPv4 a.b.c.d, and for an IPv4 multicast group 01:00:5e and its low 23
// bits (RFC 1112 6.4). 06:00 and the last four bytes for an IPv6 address, and for an IPv6
// group 33:33 and its last four bytes (RFC 2464 7).
MacAddress mac_for_ip(const IpAddress& ip) noexcept;
inline MacAddress mac_for_ipv4(uint32_t ipv4) noexcept {
  return mac_for_ip(IpAddress::v4(ipv4));
}

enum class UdpChecksum : uint8_t { zero, compute };

// Writes the Ethernet, IP and UDP headers (roce_encap_len(src.ip) bytes, which it returns) in
// front of a UDP payload of `udp_payload_len` bytes (datagram + ICRC). With
// UdpChecksum::compute, or over IPv6, `udp_payload` must point at that payload; with
// UdpChecksum::zero over IPv4 it is not read. `udp_payload_len` must be at most
// kMaxWireDatagramLen, and src and dst of one family.
size_t write_roce_encap(uint8_t* out, const Endpoint& src, const Endpoint& dst,
                        size_t udp_payload_len, UdpChecksum checksum = UdpChecksum::zero,
                        const uint8_t* udp_payload = nullptr, IpClass ip = {}) noexcept;

// Builds a whole frame: headers, `datagram` (BTH..pad, `len` bytes) and its ICRC. Returns
// the frame length, or 0 when len is outside [kBthLen, kMaxDatagramLen] or the frame does not
// fit in `out_capacity`.
size_t build_roce_frame(const Endpoint& src, const Endpoint& dst, const uint8_t* datagram,
                        size_t len, uint8_t* out, size_t out_capacity,
                        UdpChecksum checksum = UdpChecksum::zero, IpClass ip = {}) noexcept;

// RFC 1071 Internet checksum of an IPv4 header (20 bytes); 0 when the header verifies.
uint16_t ipv4_header_checksum(const uint8_t* header) noexcept;
// UDP checksum (RFC 768) over the pseudo header, the UDP header (checksum field included as
// found) and payload. Computing it with the field zeroed gives the value to store; computing
// it over a received segment gives 0 when it verifies.
uint16_t udp_checksum(const IpAddress& src, const IpAddress& dst, const uint8_t* udp_segment,
                      size_t udp_len) noexcept;

enum class FrameError : uint8_t {
  ok,
  truncated,   // shorter than the headers or than the lengths they declare
  not_ip,      // ethertype neither 0x0800 nor 0x86DD, or an IP version that disagrees with it
  ip_options,  // IHL other than 5: RoCEv2 frames carry no IPv4 options
  bad_ip_checksum,
  fragmented,        // MF set or a fragment offset: the ICRC cannot be checked per fragment
  not_udp,           // another protocol, or IPv6 extension headers before the UDP header
  bad_ip_length,     // total length below the headers it must contain
  bad_udp_length,    // UDP length disagrees with the IP header's length
  bad_udp_checksum,  // a non-zero UDP checksum that does not verify
  mapped_address,    // an IPv4-mapped address in an IPv6 header
  runt,              // UDP payload shorter than BTH + ICRC
  oversize,          // UDP payload longer than kMaxWireDatagramLen
};
const char* frame_error_name(FrameError e) noexcept;

struct ParsedRoceFrame {
  MacAddress dst_mac{}, src_mac{};
  Endpoint src, dst;
  IpClass ip_class;                      // TOS or traffic class, TTL or hop limit, flow label
  const uint8_t* ip_header = nullptr;    // 20 (IPv4) or 40 (IPv6) bytes, then the UDP header
  const uint8_t* datagram = nullptr;     // BTH..pad
  size_t datagram_len = 0;               // without the ICRC
  uint32_t icrc = 0;                     // as carried (little-endian on the wire)
};

// Parses a frame (Ethernet padding after the IPv4 datagram is allowed). Every length is
// checked against `len` before it is used. Does not check the ICRC: see roce_frame_icrc_ok.
FrameError parse_roce_frame(const uint8_t* frame, size_t len, ParsedRoceFrame* out) noexcept;

// True when the frame's ICRC matches its actual IP/UDP headers and datagram.
bool roce_frame_icrc_ok(const ParsedRoceFrame& f) noexcept;

}  // namespace rnicdv::sim
