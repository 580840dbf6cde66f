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
constexpr size_t kMaskedHeadersLen = kIpv4HeaderLen + kUdpHeaderLen + kBthLen;

// Offsets inside the masked header block.
constexpr size_t kIpv4Tos = 1, kIpv4Ttl = 8, kIpv4Checksum = 10;
constexpr size_t kUdpChecksum = kIpv4HeaderLen + 6;
constexpr size_t kBthFecnBecn = kIpv4HeaderLen + kUdpHeaderLen + 4;

inline void mask_variant_fields(uint8_t* h) {
  h[kIpv4Tos] = 0xFF;
  h[kIpv4Ttl] = 0xFF;
  h[kIpv4Checksum] = h[kIpv4Checksum + 1] = 0xFF;
  h[kUdpChecksum] = h[kUdpChecksum + 1] = 0xFF;
  h[kBthFecnBecn] = 0xFF;
}

inline uint32_t finish(uint8_t* masked, const uint8_t* datagram, size_t len) {
  std::memcpy(masked + kIpv4HeaderLen + kUdpHeaderLen, datagram, kBthLen);
  mask_variant_fields(masked);
  uint32_t state = crc32_advance(kStateAfterMaskedLrh, masked, kMaskedHeadersLen);
  state = crc32_advance(state, datagram + kBthLen, len - kBthLen);
  return ~state;
}

}  // namespace

uint32_t roce_icrc_ipv4(const uint8_t* ipv4_udp_headers, const uint8_t* datagram,
                        size_t len) noexcept {
  if (len < kBthLen) [[unlikely]]
    return 0;
  uint8_t masked[kMaskedHeadersLen];
  std::memcpy(masked, ipv4_udp_headers, kIpv4HeaderLen + kUdpHeaderLen);
  return finish(masked, datagram, len);
}

uint32_t roce_icrc(const Endpoint& src, const Endpoint& dst, const uint8_t* data, size_t len) {
  if (len < kBthLen) [[unlikely]]
    return 0;
  // The header an unconnected IP_PMTUDISC_DO socket sends (Linux ip_select_ident_segs: a DF
  // datagram with no connected peer gets ID 0): ID 0, DF.
  // Lengths include the ICRC the datagram will carry. Masked fields are left for
  // mask_variant_fields().
  uint8_t masked[kMaskedHeadersLen];
  const size_t udp_len = kUdpHeaderLen + len + kIcrcLen;
  masked[0] = 0x45;  // version 4, IHL 5
  store_be16(masked + 2, static_cast<uint32_t>(kIpv4HeaderLen + udp_len));
  store_be16(masked + 4, 0);       // identification
  store_be16(masked + 6, 0x4000);  // DF, fragment offset 0
  masked[9] = 17;             // UDP
  store_be32(masked + 12, src.ipv4);
  store_be32(masked + 16, dst.ipv4);
  uint8_t* udp = masked + kIpv4HeaderLen;
  store_be16(udp, src.port);
  store_be16(udp + 2, dst.port);
  store_be16(udp + 4, static_cast<uint32_t>(udp_len));
  return finish(masked, data, len);
}

bool icrc_matches(const Endpoint& src, const Endpoint& dst, const uint8_t* wire_datagram,
                  size_t wire_len) noexcept {
  if (wire_len < kMinWireDatagramLen || wire_len > kMaxWireDatagramLen) [[unlikely]]
    return false;
  const size_t len = wire_len - kIcrcLen;
  return roce_icrc(src, dst, wire_datagram, len) == load_icrc(wire_datagram + len);
}

}  // namespace rnicdv::sim
