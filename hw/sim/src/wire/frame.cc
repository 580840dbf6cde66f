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

// The pseudo header the UDP checksum covers: IPv4's (RFC 768) or IPv6's (RFC 8200 8.1).
uint32_t udp_pseudo_header_sum(const IpAddress& src, const IpAddress& dst, size_t udp_len) {
  uint8_t pseudo[40] = {};
  size_t n;
  if (src.is_v4()) {
    std::memcpy(pseudo, src.bytes.data() + 12, 4);
    std::memcpy(pseudo + 4, dst.bytes.data() + 12, 4);
    pseudo[9] = kIpProtoUdp;
    store_be16(pseudo + 10, static_cast<uint32_t>(udp_len));
    n = 12;
  } else {
    std::memcpy(pseudo, src.bytes.data(), 16);
    std::memcpy(pseudo + 16, dst.bytes.data(), 16);
    store_be32(pseudo + 32, static_cast<uint32_t>(udp_len));
    pseudo[39] = kIpProtoUdp;
    n = 40;
  }
  return ones_complement_add(0, pseudo, n);
}

uint16_t fold(uint32_t sum) {
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

size_t write_ipv4_header(uint8_t* ip, const Endpoint& src, const Endpoint& dst, size_t udp_len,
                         IpClass cls) {
  ip[0] = 0x45;
  ip[1] = cls.tos;  // DSCP, ECN
  store_be16(ip + 2, static_cast<uint32_t>(kIpv4HeaderLen + udp_len));
  store_be16(ip + 4, 0);  // identification: 0, as the unconnected DF socket sends
  store_be16(ip + 6, kIpv4FlagDf);
  ip[8] = cls.ttl;
  ip[9] = kIpProtoUdp;
  store_be16(ip + 10, 0);
  std::memcpy(ip + 12, src.ip.bytes.data() + 12, 4);
  std::memcpy(ip + 16, dst.ip.bytes.data() + 12, 4);
  store_be16(ip + 10, ipv4_header_checksum(ip));
  return kIpv4HeaderLen;
}

size_t write_ipv6_header(uint8_t* ip, const Endpoint& src, const Endpoint& dst, size_t udp_len,
                         IpClass cls) {
  store_be32(ip, 6u << 28 | uint32_t{cls.tos} << 20 | (cls.flow_label & 0xFFFFF));
  store_be16(ip + 4, static_cast<uint32_t>(udp_len));  // payload length: no extension headers
  ip[6] = kIpProtoUdp;
  ip[7] = cls.ttl;  // hop limit
  std::memcpy(ip + 8, src.ip.bytes.data(), 16);
  std::memcpy(ip + 24, dst.ip.bytes.data(), 16);
  return kIpv6HeaderLen;
}

}  // namespace

MacAddress mac_for_ip(const IpAddress& ip) noexcept {
  const uint8_t* low = ip.bytes.data() + 12;
  if (ip.is_v4() && ip.is_multicast())
    return {0x01, 0x00, 0x5e, static_cast<uint8_t>(low[1] & 0x7f), low[2], low[3]};
  if (ip.is_v4()) return {0x02, 0x00, low[0], low[1], low[2], low[3]};
  if (ip.is_multicast()) return {0x33, 0x33, low[0], low[1], low[2], low[3]};
  return {0x06, 0x00, low[0], low[1], low[2], low[3]};
}

uint16_t ipv4_header_checksum(const uint8_t* header) noexcept {
  return fold(ones_complement_add(0, header, kIpv4HeaderLen));
}

uint16_t udp_checksum(const IpAddress& src, const IpAddress& dst, const uint8_t* udp_segment,
                      size_t udp_len) noexcept {
  return fold(ones_complement_add(udp_pseudo_header_sum(src, dst, udp_len), udp_segment, udp_len));
}

size_t write_roce_encap(uint8_t* out, const Endpoint& src, const Endpoint& dst,
                        size_t udp_payload_len, UdpChecksum checksum, const uint8_t* udp_payload,
                        IpClass cls) noexcept {
  const bool v4 = src.ip.is_v4();
  const MacAddress dst_mac = mac_for_ip(dst.ip), src_mac = mac_for_ip(src.ip);
  std::memcpy(out, dst_mac.data(), 6);
  std::memcpy(out + 6, src_mac.data(), 6);
  store_be16(out + 12, v4 ? kEthertypeIpv4 : kEthertypeIpv6);

  uint8_t* ip = out + kEthHeaderLen;
  const size_t udp_len = kUdpHeaderLen + udp_payload_len;
  const size_t ip_len = v4 ? write_ipv4_header(ip, src, dst, udp_len, cls)
                           : write_ipv6_header(ip, src, dst, udp_len, cls);

  uint8_t* udp = ip + ip_len;
  store_be16(udp, src.port);
  store_be16(udp + 2, dst.port);
  store_be16(udp + 4, static_cast<uint32_t>(udp_len));
  store_be16(udp + 6, 0);
  if ((checksum == UdpChecksum::compute || !v4) && udp_payload != nullptr) {
    uint32_t sum = udp_pseudo_header_sum(src.ip, dst.ip, udp_len);
    sum = ones_complement_add(sum, udp, kUdpHeaderLen);
    sum = ones_complement_add(sum, udp_payload, udp_payload_len);
    uint16_t value = fold(sum);
    if (value == 0) value = 0xFFFF;  // RFC 768: a computed 0 is sent as all ones
    store_be16(udp + 6, value);
  }
  return kEthHeaderLen + ip_len + kUdpHeaderLen;
}

size_t build_roce_frame(const Endpoint& src, const Endpoint& dst, const uint8_t* datagram,
                        size_t len, uint8_t* out, size_t out_capacity,
                        UdpChecksum checksum, IpClass ip) noexcept {
  if (len < kBthLen || len > kMaxDatagramLen || src.ip.is_v4() != dst.ip.is_v4()) [[unlikely]]
    return 0;
  const size_t encap_len = roce_encap_len(src.ip);
  const size_t frame_len = encap_len + len + kIcrcLen;
  if (frame_len > out_capacity) [[unlikely]]
    return 0;
  uint8_t* payload = out + encap_len;
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
    case FrameError::not_ip:
      return "neither IPv4 nor IPv6";
    case FrameError::ip_options:
      return "IPv4 options";
    case FrameError::bad_ip_checksum:
      return "bad IPv4 header checksum";
    case FrameError::fragmented:
      return "IPv4 fragment";
    case FrameError::not_udp:
      return "not UDP";
    case FrameError::bad_ip_length:
      return "bad IP length";
    case FrameError::bad_udp_length:
      return "bad UDP length";
    case FrameError::bad_udp_checksum:
      return "bad UDP checksum";
    case FrameError::mapped_address:
      return "IPv4-mapped address in an IPv6 header";
    case FrameError::runt:
      return "runt datagram";
    case FrameError::oversize:
      return "oversize datagram";
  }
  return "unknown";
}

namespace {

// The IPv4 header at `ip` (ethertype 0x0800), within `avail` bytes: the UDP header's place
// and length.
FrameError parse_ipv4(const uint8_t* ip, size_t avail, ParsedRoceFrame* out, size_t* udp_len) {
  if (avail < kIpv4HeaderLen + kUdpHeaderLen) return FrameError::truncated;
  if ((ip[0] >> 4) != 4) return FrameError::not_ip;
  if ((ip[0] & 0x0F) != 5) return FrameError::ip_options;
  if (ipv4_header_checksum(ip) != 0) return FrameError::bad_ip_checksum;
  const uint16_t flags_offset = load_be16(ip + 6);
  if ((flags_offset & kIpv4FlagMf) || (flags_offset & kIpv4FragOffsetMask))
    return FrameError::fragmented;
  if (ip[9] != kIpProtoUdp) return FrameError::not_udp;
  const size_t ip_total = load_be16(ip + 2);
  if (ip_total < kIpv4HeaderLen + kUdpHeaderLen) return FrameError::bad_ip_length;
  // Anything past the IPv4 datagram is Ethernet padding (minimum frame size).
  if (ip_total > avail) return FrameError::truncated;
  *udp_len = load_be16(ip + kIpv4HeaderLen + 4);
  if (*udp_len != ip_total - kIpv4HeaderLen) return FrameError::bad_udp_length;
  out->src.ip = IpAddress::v4(load_be32(ip + 12));
  out->dst.ip = IpAddress::v4(load_be32(ip + 16));
  out->ip_class = IpClass{ip[1], ip[8], 0};
  return FrameError::ok;
}

// The IPv6 header (ethertype 0x86DD). RoCE v2 frames carry no extension headers: a next
// header other than UDP is not a RoCE v2 frame.
FrameError parse_ipv6(const uint8_t* ip, size_t avail, ParsedRoceFrame* out, size_t* udp_len) {
  if (avail < kIpv6HeaderLen + kUdpHeaderLen) return FrameError::truncated;
  const uint32_t word0 = load_be32(ip);
  if ((word0 >> 28) != 6) return FrameError::not_ip;
  if (ip[6] != kIpProtoUdp) return FrameError::not_udp;
  const size_t payload = load_be16(ip + 4);
  if (payload < kUdpHeaderLen) return FrameError::bad_ip_length;
  if (payload > avail - kIpv6HeaderLen) return FrameError::truncated;
  *udp_len = load_be16(ip + kIpv6HeaderLen + 4);
  if (*udp_len != payload) return FrameError::bad_udp_length;
  out->src.ip = IpAddress::from_bytes(ip + 8);
  out->dst.ip = IpAddress::from_bytes(ip + 24);
  // An IPv4 peer is carried in an IPv4 header: the pseudo header, the checksum and the ICRC
  // all follow from the header's own version, which this would contradict.
  if (out->src.ip.is_v4() || out->dst.ip.is_v4()) return FrameError::mapped_address;
  out->ip_class = IpClass{static_cast<uint8_t>(word0 >> 20), ip[7], word0 & 0xFFFFF};
  return FrameError::ok;
}

}  // namespace

FrameError parse_roce_frame(const uint8_t* frame, size_t len, ParsedRoceFrame* out) noexcept {
  if (len < kEthHeaderLen) return FrameError::truncated;
  const uint16_t ethertype = load_be16(frame + 12);
  if (ethertype != kEthertypeIpv4 && ethertype != kEthertypeIpv6) return FrameError::not_ip;
  const bool v4 = ethertype == kEthertypeIpv4;
  const uint8_t* ip = frame + kEthHeaderLen;
  size_t udp_len = 0;
  const FrameError ip_err = v4 ? parse_ipv4(ip, len - kEthHeaderLen, out, &udp_len)
                               : parse_ipv6(ip, len - kEthHeaderLen, out, &udp_len);
  if (ip_err != FrameError::ok) return ip_err;
  const uint8_t* udp = ip + (v4 ? kIpv4HeaderLen : kIpv6HeaderLen);
  const uint16_t carried_checksum = load_be16(udp + 6);
  // IPv6 has no "no checksum" (RFC 8200 8.1); IPv4's zero means none was computed.
  if ((carried_checksum != 0 || !v4) && udp_checksum(out->src.ip, out->dst.ip, udp, udp_len) != 0)
    return FrameError::bad_udp_checksum;
  const size_t payload_len = udp_len - kUdpHeaderLen;
  if (payload_len < kMinWireDatagramLen) return FrameError::runt;
  if (payload_len > kMaxWireDatagramLen) return FrameError::oversize;

  std::memcpy(out->dst_mac.data(), frame, 6);
  std::memcpy(out->src_mac.data(), frame + 6, 6);
  out->src.port = load_be16(udp);
  out->dst.port = load_be16(udp + 2);
  out->ip_header = ip;
  out->datagram = udp + kUdpHeaderLen;
  out->datagram_len = payload_len - kIcrcLen;
  out->icrc = load_icrc(out->datagram + out->datagram_len);
  return FrameError::ok;
}

bool roce_frame_icrc_ok(const ParsedRoceFrame& f) noexcept {
  if (f.ip_header == nullptr || f.datagram_len < kBthLen) return false;
  const uint32_t icrc = f.src.ip.is_v4() ? roce_icrc_ipv4(f.ip_header, f.datagram, f.datagram_len)
                                         : roce_icrc_ipv6(f.ip_header, f.datagram, f.datagram_len);
  return icrc == f.icrc;
}

}  // namespace rnicdv::sim
