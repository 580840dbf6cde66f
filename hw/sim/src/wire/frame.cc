// SPDX-License-Identifier: BSD-3-Clause
#include "wire/frame.h"

#include <bit>
#include <cstring>

#include "rnicdv/byte_order.h"

namespace rnicdv::sim {
namespace {

constexpr uint8_t kIpProtoUdp = 17;
constexpr uint16_t kIpv4FlagDf = 0x4000, kIpv4FlagMf = 0x2000, kIpv4FragOffsetMask = 0x1FFF;


// RFC 1071: 16-bit big-endian words summed in 32 bits, carries folded at the end. An odd
// trailing byte is the high byte of a word padded with zero. The bulk goes eight bytes at a
// time in host order with end-around carries: the one's-complement sum is the same modulo
// 0xFFFF for any word width that is a multiple of 16 bits, and byte order only swaps the
// folded result (RFC 1071 section 2 (A), (B)).
uint32_t ones_complement_add(uint32_t sum, const uint8_t* p, size_t len) {
  if (len >= 16) {
    uint64_t acc = 0;
    while (len >= 8) {
      uint64_t word;
      std::memcpy(&word, p, sizeof(word));
      acc += word;
      acc += acc < word;  // end-around carry
      p += 8;
      len -= 8;
    }
    acc = (acc & 0xFFFFFFFFu) + (acc >> 32);
    acc = (acc & 0xFFFFFFFFu) + (acc >> 32);
    acc = (acc & 0xFFFFu) + (acc >> 16);
    acc = (acc & 0xFFFFu) + (acc >> 16);
    acc = (acc & 0xFFFFu) + (acc >> 16);
    auto folded = static_cast<uint16_t>(acc);
    if constexpr (std::endian::native == std::endian::little)
      folded = static_cast<uint16_t>(folded << 8 | folded >> 8);
    sum += folded;
    if (sum & 0x80000000u) sum = (sum & 0xFFFF) + (sum >> 16);
  }
  while (len >= 2) {
    sum += load_be16(p);
    p += 2;
    len -= 2;
    if (sum & 0x80000000u) sum = (sum & 0xFFFF) + (sum >> 16);
  }
  if (len) sum += uint32_t{p[0]} << 8;
  return sum;
}

// The IPv4 pseudo header the UDP checksum covers (RFC 768).
uint32_t udp_pseudo_header_sum(uint32_t src_ipv4, uint32_t dst_ipv4, size_t udp_len) {
  uint8_t pseudo[12];
  store_be32(pseudo, src_ipv4);
  store_be32(pseudo + 4, dst_ipv4);
  pseudo[8] = 0;
  pseudo[9] = kIpProtoUdp;
  store_be16(pseudo + 10, static_cast<uint32_t>(udp_len));
  return ones_complement_add(0, pseudo, sizeof(pseudo));
}

uint16_t fold(uint32_t sum) {
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

}  // namespace

MacAddress mac_for_ipv4(uint32_t ipv4) noexcept {
  if (is_multicast_ipv4(ipv4))  // RFC 1112 6.4: 01:00:5e and the group's low 23 bits
    return {0x01, 0x00, 0x5e, static_cast<uint8_t>((ipv4 >> 16) & 0x7f),
            static_cast<uint8_t>(ipv4 >> 8), static_cast<uint8_t>(ipv4)};
  return {0x02,
          0x00,
          static_cast<uint8_t>(ipv4 >> 24),
          static_cast<uint8_t>(ipv4 >> 16),
          static_cast<uint8_t>(ipv4 >> 8),
          static_cast<uint8_t>(ipv4)};
}

uint16_t ipv4_header_checksum(const uint8_t* header) noexcept {
  return fold(ones_complement_add(0, header, kIpv4HeaderLen));
}

uint16_t udp_checksum(uint32_t src_ipv4, uint32_t dst_ipv4, const uint8_t* udp_segment,
                      size_t udp_len) noexcept {
  return fold(ones_complement_add(udp_pseudo_header_sum(src_ipv4, dst_ipv4, udp_len), udp_segment,
                                  udp_len));
}

void write_roce_encap(uint8_t* out, const Endpoint& src, const Endpoint& dst,
                      size_t udp_payload_len, UdpChecksum checksum,
                      const uint8_t* udp_payload, IpClass cls) noexcept {
  const MacAddress dst_mac = mac_for_ipv4(dst.ipv4), src_mac = mac_for_ipv4(src.ipv4);
  std::memcpy(out, dst_mac.data(), 6);
  std::memcpy(out + 6, src_mac.data(), 6);
  store_be16(out + 12, kEthertypeIpv4);

  uint8_t* ip = out + kEthHeaderLen;
  const size_t udp_len = kUdpHeaderLen + udp_payload_len;
  ip[0] = 0x45;
  ip[1] = cls.tos;  // DSCP, ECN
  store_be16(ip + 2, static_cast<uint32_t>(kIpv4HeaderLen + udp_len));
  store_be16(ip + 4, 0);  // identification: 0, as the unconnected DF socket sends
  store_be16(ip + 6, kIpv4FlagDf);
  ip[8] = cls.ttl;
  ip[9] = kIpProtoUdp;
  store_be16(ip + 10, 0);
  store_be32(ip + 12, src.ipv4);
  store_be32(ip + 16, dst.ipv4);
  store_be16(ip + 10, ipv4_header_checksum(ip));

  uint8_t* udp = ip + kIpv4HeaderLen;
  store_be16(udp, src.port);
  store_be16(udp + 2, dst.port);
  store_be16(udp + 4, static_cast<uint32_t>(udp_len));
  store_be16(udp + 6, 0);
  if (checksum == UdpChecksum::compute && udp_payload != nullptr) {
    uint32_t sum = udp_pseudo_header_sum(src.ipv4, dst.ipv4, udp_len);
    sum = ones_complement_add(sum, udp, kUdpHeaderLen);
    sum = ones_complement_add(sum, udp_payload, udp_payload_len);
    uint16_t value = fold(sum);
    if (value == 0) value = 0xFFFF;  // RFC 768: a computed 0 is sent as all ones
    store_be16(udp + 6, value);
  }
}

size_t build_roce_frame(const Endpoint& src, const Endpoint& dst, const uint8_t* datagram,
                        size_t len, uint8_t* out, size_t out_capacity,
                        UdpChecksum checksum, IpClass ip) noexcept {
  if (len < kBthLen || len > kMaxDatagramLen) [[unlikely]]
    return 0;
  const size_t frame_len = kRoceEncapLen + len + kIcrcLen;
  if (frame_len > out_capacity) [[unlikely]]
    return 0;
  uint8_t* payload = out + kRoceEncapLen;
  std::memcpy(payload, datagram, len);
  store_icrc(payload + len, roce_icrc(src, dst, datagram, len));
  write_roce_encap(out, src, dst, len + kIcrcLen, checksum, payload, ip);
  return frame_len;
}

const char* frame_error_name(FrameError e) noexcept {
  switch (e) {
    case FrameError::ok:
      return "ok";
    case FrameError::truncated:
      return "truncated";
    case FrameError::not_ipv4:
      return "not IPv4";
    case FrameError::ip_options:
      return "IPv4 options";
    case FrameError::bad_ip_checksum:
      return "bad IPv4 header checksum";
    case FrameError::fragmented:
      return "IPv4 fragment";
    case FrameError::not_udp:
      return "not UDP";
    case FrameError::bad_ip_length:
      return "bad IPv4 total length";
    case FrameError::bad_udp_length:
      return "bad UDP length";
    case FrameError::bad_udp_checksum:
      return "bad UDP checksum";
    case FrameError::runt:
      return "runt datagram";
    case FrameError::oversize:
      return "oversize datagram";
  }
  return "unknown";
}

FrameError parse_roce_frame(const uint8_t* frame, size_t len, ParsedRoceFrame* out) noexcept {
  if (len < kRoceEncapLen) return FrameError::truncated;
  if (load_be16(frame + 12) != kEthertypeIpv4) return FrameError::not_ipv4;
  const uint8_t* ip = frame + kEthHeaderLen;
  if ((ip[0] >> 4) != 4) return FrameError::not_ipv4;
  if ((ip[0] & 0x0F) != 5) return FrameError::ip_options;
  if (ipv4_header_checksum(ip) != 0) return FrameError::bad_ip_checksum;
  const uint16_t flags_offset = load_be16(ip + 6);
  if ((flags_offset & kIpv4FlagMf) || (flags_offset & kIpv4FragOffsetMask))
    return FrameError::fragmented;
  if (ip[9] != kIpProtoUdp) return FrameError::not_udp;
  const size_t ip_total = load_be16(ip + 2);
  if (ip_total < kIpv4HeaderLen + kUdpHeaderLen) return FrameError::bad_ip_length;
  // Anything past the IPv4 datagram is Ethernet padding (minimum frame size).
  if (ip_total > len - kEthHeaderLen) return FrameError::truncated;

  const uint8_t* udp = ip + kIpv4HeaderLen;
  const size_t udp_len = load_be16(udp + 4);
  if (udp_len != ip_total - kIpv4HeaderLen) return FrameError::bad_udp_length;
  const uint32_t src_ip = load_be32(ip + 12), dst_ip = load_be32(ip + 16);
  if (load_be16(udp + 6) != 0 && udp_checksum(src_ip, dst_ip, udp, udp_len) != 0)
    return FrameError::bad_udp_checksum;
  const size_t payload_len = udp_len - kUdpHeaderLen;
  if (payload_len < kMinWireDatagramLen) return FrameError::runt;
  if (payload_len > kMaxWireDatagramLen) return FrameError::oversize;

  std::memcpy(out->dst_mac.data(), frame, 6);
  std::memcpy(out->src_mac.data(), frame + 6, 6);
  out->src = Endpoint{src_ip, load_be16(udp)};
  out->dst = Endpoint{dst_ip, load_be16(udp + 2)};
  out->ipv4_header = ip;
  out->datagram = udp + kUdpHeaderLen;
  out->datagram_len = payload_len - kIcrcLen;
  out->icrc = load_icrc(out->datagram + out->datagram_len);
  return FrameError::ok;
}

bool roce_frame_icrc_ok(const ParsedRoceFrame& f) noexcept {
  if (f.ipv4_header == nullptr || f.datagram_len < kBthLen) return false;
  return roce_icrc_ipv4(f.ipv4_header, f.datagram, f.datagram_len) == f.icrc;
}

}  // namespace rnicdv::sim
