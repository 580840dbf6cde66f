// SPDX-License-Identifier: BSD-3-Clause
#include "wire/icrc.h"

#include <cstring>

#include "rnicdv/byte_order.h"
#include "wire/crc32.h"

namespace rnicdv::sim {
namespace {

// CRC register after the eight 0xFF bytes of the masked LRH, from the initial all-ones
// register (rxe_icrc.c seeds with the same constant).
constexpr uint32_t kStateAfterMaskedLrh = 0xDEBB20E3u;
constexpr size_t kMaxMaskedHeadersLen = kIpv6HeaderLen + kUdpHeaderLen + kBthLen;

// The variant fields (IBA A17.3.3), set to all ones. IPv4: TOS, TTL, header checksum. IPv6:
// traffic class and flow label (everything of the first word but the version), hop limit.
void mask_ipv4(uint8_t* ip) {
  ip[1] = 0xFF;
  ip[8] = 0xFF;
  ip[10] = ip[11] = 0xFF;
}
void mask_ipv6(uint8_t* ip) {
  ip[0] |= 0x0F;
  ip[1] = ip[2] = ip[3] = 0xFF;
  ip[7] = 0xFF;
}

// `masked` holds the IP header (`ip_len` bytes) and the UDP header; appends the BTH, masks the
// UDP checksum and the BTH's FECN/BECN byte, and runs the CRC over it and the rest.
uint32_t finish(uint8_t* masked, size_t ip_len, const uint8_t* datagram, size_t len) {
  uint8_t* udp = masked + ip_len;
  udp[6] = udp[7] = 0xFF;
  uint8_t* bth = udp + kUdpHeaderLen;
  std::memcpy(bth, datagram, kBthLen);
  bth[4] = 0xFF;
  uint32_t state = crc32_advance(kStateAfterMaskedLrh, masked, ip_len + kUdpHeaderLen + kBthLen);
  state = crc32_advance(state, datagram + kBthLen, len - kBthLen);
  return ~state;
}

// The ICRC under the IP header (`ip_len` bytes: 20 for IPv4, 40 for IPv6) and UDP header at
// `ip_udp_headers`, as carried: copied, masked, and run over with the datagram.
uint32_t icrc_under(const uint8_t* ip_udp_headers, size_t ip_len, const uint8_t* datagram,
                    size_t len) {
  if (len < kBthLen) [[unlikely]]
    return 0;
  uint8_t masked[kMaxMaskedHeadersLen];
  std::memcpy(masked, ip_udp_headers, ip_len + kUdpHeaderLen);
  if (ip_len == kIpv4HeaderLen)
    mask_ipv4(masked);
  else
    mask_ipv6(masked);
  return finish(masked, ip_len, datagram, len);
}

}  // namespace

uint32_t roce_icrc_ipv4(const uint8_t* ipv4_udp_headers, const uint8_t* datagram,
                        size_t len) noexcept {
  return icrc_under(ipv4_udp_headers, kIpv4HeaderLen, datagram, len);
}

uint32_t roce_icrc_ipv6(const uint8_t* ipv6_udp_headers, const uint8_t* datagram,
                        size_t len) noexcept {
  return icrc_under(ipv6_udp_headers, kIpv6HeaderLen, datagram, len);
}

uint32_t roce_icrc(const Endpoint& src, const Endpoint& dst, const uint8_t* data, size_t len) {
  if (len < kBthLen) [[unlikely]]
    return 0;
  // The headers the frame carries, lengths including the ICRC the datagram will carry.
  // Masked fields are left for finish() and mask_ipv*().
  uint8_t masked[kMaxMaskedHeadersLen] = {};
  const size_t udp_len = kUdpHeaderLen + len + kIcrcLen;
  size_t ip_len;
  if (src.ip.is_v4()) {
    // The header an unconnected IP_PMTUDISC_DO socket sends (Linux ip_select_ident_segs: a DF
    // datagram with no connected peer gets ID 0): ID 0, DF.
    ip_len = kIpv4HeaderLen;
    masked[0] = 0x45;  // version 4, IHL 5
    store_be16(masked + 2, static_cast<uint32_t>(kIpv4HeaderLen + udp_len));
    store_be16(masked + 6, 0x4000);  // DF, fragment offset 0
    masked[9] = 17;                  // UDP
    std::memcpy(masked + 12, src.ip.bytes.data() + 12, 4);
    std::memcpy(masked + 16, dst.ip.bytes.data() + 12, 4);
    mask_ipv4(masked);
  } else {
    ip_len = kIpv6HeaderLen;
    masked[0] = 0x60;
    store_be16(masked + 4, static_cast<uint32_t>(udp_len));  // payload length
    masked[6] = 17;                                          // next header: UDP
    std::memcpy(masked + 8, src.ip.bytes.data(), 16);
    std::memcpy(masked + 24, dst.ip.bytes.data(), 16);
    mask_ipv6(masked);
  }
  uint8_t* udp = masked + ip_len;
  store_be16(udp, src.port);
  store_be16(udp + 2, dst.port);
  store_be16(udp + 4, static_cast<uint32_t>(udp_len));
  return finish(masked, ip_len, data, len);
}

bool icrc_matches(const Endpoint& src, const Endpoint& dst, const uint8_t* wire_datagram,
                  size_t wire_len) noexcept {
  if (wire_len < kMinWireDatagramLen || wire_len > kMaxWireDatagramLen) [[unlikely]]
    return false;
  const size_t len = wire_len - kIcrcLen;
  return roce_icrc(src, dst, wire_datagram, len) == load_icrc(wire_datagram + len);
}

}  // namespace rnicdv::sim
