// SPDX-License-Identifier: BSD-3-Clause
// Ethernet/IPv4/UDP/RoCEv2 frame building and parsing.
#include <catch2/catch.hpp>
#include <random>
#include <vector>

#include "wire/frame.h"
#include "wire/icrc.h"
#include "wire_test_util.h"

using namespace rnicdv::sim;
using namespace rnicdv::sim::test;

namespace {

// RFC 1071 by the book: add 16-bit words in a wide accumulator, fold, complement.
uint16_t reference_checksum(const std::vector<uint8_t>& bytes) {
  uint64_t sum = 0;
  for (size_t i = 0; i < bytes.size(); i += 2) {
    const uint32_t hi = bytes[i];
    const uint32_t lo = i + 1 < bytes.size() ? bytes[i + 1] : 0;
    sum += hi << 8 | lo;
  }
  while (sum > 0xFFFF) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<uint16_t>(~sum & 0xFFFF);
}

const Endpoint kSrc{v4(127, 0, 0, 2), 49152};
const Endpoint kDst{v4(10, 1, 2, 3), 4791};

std::vector<uint8_t> build(const std::vector<uint8_t>& d, UdpChecksum c = UdpChecksum::zero) {
  std::vector<uint8_t> frame(kMaxRoceFrameLen);
  const size_t n = build_roce_frame(kSrc, kDst, d.data(), d.size(), frame.data(), frame.size(), c);
  frame.resize(n);
  return frame;
}

}  // namespace

TEST_CASE("Built frames carry the documented Ethernet, IPv4 and UDP headers", "[frame]") {
  const std::vector<uint8_t> d = datagram(0x04, 0x11, 5, {}, std::vector<uint8_t>(33, 0x5A));
  const std::vector<uint8_t> f = build(d);
  REQUIRE(f.size() == 14 + 20 + 8 + d.size() + 4);

  // Ethernet: 02:00 + IPv4 address, ethertype IPv4.
  CHECK(std::vector<uint8_t>(f.begin(), f.begin() + 6) ==
        std::vector<uint8_t>{0x02, 0x00, 10, 1, 2, 3});
  CHECK(std::vector<uint8_t>(f.begin() + 6, f.begin() + 12) ==
        std::vector<uint8_t>{0x02, 0x00, 127, 0, 0, 2});
  CHECK(get16(&f[12]) == 0x0800);

  const uint8_t* ip = &f[14];
  CHECK(ip[0] == 0x45);
  CHECK(ip[1] == 0);
  CHECK(get16(ip + 2) == 20 + 8 + d.size() + 4);
  CHECK(get16(ip + 4) == 0);       // ID 0
  CHECK(get16(ip + 6) == 0x4000);  // DF, offset 0
  CHECK(ip[8] == 64);
  CHECK(ip[9] == 17);
  CHECK(get32(ip + 12) == kSrc.ip.ipv4());
  CHECK(get32(ip + 16) == kDst.ip.ipv4());

  // Header checksum, recomputed independently with the field zeroed.
  std::vector<uint8_t> header(ip, ip + 20);
  header[10] = header[11] = 0;
  CHECK(get16(ip + 10) == reference_checksum(header));
  CHECK(ipv4_header_checksum(ip) == 0);

  const uint8_t* udp = ip + 20;
  CHECK(get16(udp) == kSrc.port);
  CHECK(get16(udp + 2) == 4791);
  CHECK(get16(udp + 4) == 8 + d.size() + 4);
  CHECK(get16(udp + 6) == 0);  // no UDP checksum, as rxe sends

  // Datagram, then its ICRC least significant byte first.
  CHECK(std::vector<uint8_t>(udp + 8, udp + 8 + d.size()) == d);
  const uint32_t icrc = roce_icrc(kSrc, kDst, d.data(), d.size());
  const uint8_t* tail = udp + 8 + d.size();
  CHECK(tail[0] == (icrc & 0xFF));
  CHECK(tail[3] == (icrc >> 24));
}

TEST_CASE("mac_for_ipv4 derives a locally administered unicast MAC", "[frame]") {
  const MacAddress mac = mac_for_ipv4(ipv4(192, 168, 7, 254));
  CHECK(mac == MacAddress{0x02, 0x00, 192, 168, 7, 254});
  CHECK((mac[0] & 0x02) != 0);  // locally administered
  CHECK((mac[0] & 0x01) == 0);  // unicast
}

TEST_CASE("A computed UDP checksum verifies independently and is checked on parse", "[frame]") {
  const std::vector<uint8_t> d = datagram(0x04, 0x11, 5, {}, std::vector<uint8_t>(31, 0xC3));
  std::vector<uint8_t> f = build(d, UdpChecksum::compute);
  const uint8_t* ip = &f[14];
  // Pseudo header + UDP segment, summed by the reference routine, verifies to zero.
  std::vector<uint8_t> covered(ip + 12, ip + 20);
  covered.push_back(0);
  covered.push_back(17);
  const size_t udp_len = get16(ip + 22 + 2);
  covered.push_back(static_cast<uint8_t>(udp_len >> 8));
  covered.push_back(static_cast<uint8_t>(udp_len));
  covered.insert(covered.end(), ip + 20, ip + 20 + udp_len);
  CHECK(get16(ip + 26) != 0);
  CHECK(reference_checksum(covered) == 0);

  ParsedRoceFrame p;
  CHECK(parse_roce_frame(f.data(), f.size(), &p) == FrameError::ok);
  f[kRoceEncapLenIpv4 + 20] ^= 0x10;  // payload byte
  CHECK(parse_roce_frame(f.data(), f.size(), &p) == FrameError::bad_udp_checksum);
}

TEST_CASE("parse(build(x)) gives back x", "[frame]") {
  std::mt19937_64 rng(99);
  for (int i = 0; i < 200; ++i) {
    const size_t len = kBthLen + rng() % (kMaxDatagramLen - kBthLen + 1);
    std::vector<uint8_t> d(len);
    for (auto& b : d) b = static_cast<uint8_t>(rng());
    const Endpoint src{IpAddress::v4(static_cast<uint32_t>(rng())), static_cast<uint16_t>(rng())};
    const Endpoint dst{IpAddress::v4(static_cast<uint32_t>(rng())), 4791};
    const UdpChecksum mode = (i & 1) ? UdpChecksum::compute : UdpChecksum::zero;
    std::vector<uint8_t> frame(kMaxRoceFrameLen);
    const size_t n =
        build_roce_frame(src, dst, d.data(), d.size(), frame.data(), frame.size(), mode);
    REQUIRE(n == kRoceEncapLenIpv4 + len + kIcrcLen);

    ParsedRoceFrame p;
    REQUIRE(parse_roce_frame(frame.data(), n, &p) == FrameError::ok);
    CHECK(p.src == src);
    CHECK(p.dst == dst);
    CHECK(p.src_mac == mac_for_ipv4(src.ip.ipv4()));
    CHECK(p.dst_mac == mac_for_ipv4(dst.ip.ipv4()));
    REQUIRE(p.datagram_len == len);
    CHECK(std::vector<uint8_t>(p.datagram, p.datagram + len) == d);
    CHECK(p.icrc == roce_icrc(src, dst, d.data(), d.size()));
    CHECK(roce_frame_icrc_ok(p));
  }
}

TEST_CASE("Ethernet padding after the IPv4 datagram is accepted", "[frame]") {
  // The smallest RoCEv2 frame (bare BTH) is 58 bytes, below Ethernet's 60-byte minimum.
  std::vector<uint8_t> f = build(bth(0x11, 1, 2, 0));
  REQUIRE(f.size() == 58);
  f.resize(60, 0);
  ParsedRoceFrame p;
  REQUIRE(parse_roce_frame(f.data(), f.size(), &p) == FrameError::ok);
  CHECK(p.datagram_len == kBthLen);
  CHECK(roce_frame_icrc_ok(p));
}

TEST_CASE("Runt and oversize datagrams are rejected when building and parsing", "[frame]") {
  std::vector<uint8_t> out(kMaxRoceFrameLen + 64);
  std::vector<uint8_t> d(kMaxDatagramLen + 1, 0);
  CHECK(build_roce_frame(kSrc, kDst, d.data(), kBthLen - 1, out.data(), out.size()) == 0);
  CHECK(build_roce_frame(kSrc, kDst, d.data(), kMaxDatagramLen + 1, out.data(), out.size()) == 0);
  CHECK(build_roce_frame(kSrc, kDst, d.data(), kMaxDatagramLen, out.data(), out.size()) ==
        kRoceEncapLenIpv4 + kMaxWireDatagramLen);
  // Too small an output buffer.
  CHECK(build_roce_frame(kSrc, kDst, d.data(), 100, out.data(), kRoceEncapLenIpv4 + 100 + 3) == 0);

  ParsedRoceFrame p;
  // A UDP payload of 15 bytes (one short of BTH + ICRC), with consistent lengths.
  std::vector<uint8_t> runt(kRoceEncapLenIpv4 + 15, 0);
  write_roce_encap(runt.data(), kSrc, kDst, 15);
  CHECK(parse_roce_frame(runt.data(), runt.size(), &p) == FrameError::runt);
  // A UDP payload one byte over the largest datagram plus ICRC.
  std::vector<uint8_t> big(kMaxRoceFrameLen + 1, 0);
  write_roce_encap(big.data(), kSrc, kDst, kMaxWireDatagramLen + 1);
  CHECK(parse_roce_frame(big.data(), big.size(), &p) == FrameError::oversize);
}

TEST_CASE("Every truncation of a frame is rejected without reading past it", "[frame]") {
  const std::vector<uint8_t> f = build(datagram(0x0A, 9, 9, reth(1, 2, 3), {1, 2, 3, 4}));
  ParsedRoceFrame p;
  for (size_t n = 0; n < f.size(); ++n) {
    // An exact-size heap copy, so ASan catches any read past `n`.
    std::vector<uint8_t> cut(f.begin(), f.begin() + static_cast<long>(n));
    INFO("length " << n);
    CHECK(parse_roce_frame(cut.data(), cut.size(), &p) != FrameError::ok);
  }
}

TEST_CASE("Frames that are not plain RoCEv2 over IPv4 are classified", "[frame]") {
  const std::vector<uint8_t> good = build(datagram(0x04, 1, 1, {}, {9, 9, 9, 9}));
  ParsedRoceFrame p;
  auto parse_with = [&](size_t offset, uint8_t value, bool fix_checksum = true) {
    std::vector<uint8_t> f = good;
    f[offset] = value;
    if (fix_checksum) {
      f[24] = f[25] = 0;
      const uint16_t c = reference_checksum(std::vector<uint8_t>(&f[14], &f[34]));
      f[24] = static_cast<uint8_t>(c >> 8);
      f[25] = static_cast<uint8_t>(c);
    }
    return parse_roce_frame(f.data(), f.size(), &p);
  };
  CHECK(parse_with(12, 0x86) == FrameError::not_ip);  // ethertype 0x86dd
  CHECK(parse_with(14, 0x65) == FrameError::not_ip);  // IPv6 version nibble
  CHECK(parse_with(14, 0x46) == FrameError::ip_options);
  CHECK(parse_with(20, 0x60) == FrameError::fragmented);  // DF + MF
  CHECK(parse_with(21, 0x01) == FrameError::fragmented);  // fragment offset
  CHECK(parse_with(23, 6) == FrameError::not_udp);
  CHECK(parse_with(19, 0x01, false) == FrameError::bad_ip_checksum);  // ID changed
  CHECK(parse_with(17, 0x10) == FrameError::bad_ip_length);           // total length 16
  CHECK(parse_with(39, static_cast<uint8_t>(good[39] + 1)) == FrameError::bad_udp_length);
  CHECK(parse_with(17, static_cast<uint8_t>(good[17] + 1)) == FrameError::truncated);
}
