// SPDX-License-Identifier: BSD-3-Clause
// RoCEv2 ICRC: known vectors from hardware and scapy, and zlib's crc32 as an independent
// oracle over the masked pseudo header.
#include <zlib.h>

#include <catch2/catch.hpp>
#include <random>
#include <vector>

#include "wire/crc32.h"
#include "wire/frame.h"
#include "wire/icrc.h"
#include "wire_test_util.h"

using namespace rnicdv::sim;
using namespace rnicdv::sim::test;

namespace {

std::vector<uint8_t> hex(const char* text) {
  std::vector<uint8_t> out;
  int nibble = -1;
  for (const char* p = text; *p; ++p) {
    int v;
    if (*p >= '0' && *p <= '9')
      v = *p - '0';
    else if (*p >= 'a' && *p <= 'f')
      v = *p - 'a' + 10;
    else
      continue;
    if (nibble < 0) {
      nibble = v;
    } else {
      out.push_back(static_cast<uint8_t>(nibble << 4 | v));
      nibble = -1;
    }
  }
  return out;
}

// zlib's CRC-32 over exactly what IBA A17.3.3 says the ICRC covers, built byte by byte here
// without the library's code: 8 x 0xFF, IPv4 header (ID 0, DF, TOS/TTL/checksum all ones),
// UDP header (checksum all ones), BTH with byte 4 all ones, the rest.
uint32_t zlib_icrc(const Endpoint& src, const Endpoint& dst, const std::vector<uint8_t>& d) {
  std::vector<uint8_t> buf(8, 0xFF);
  const size_t udp_len = 8 + d.size() + 4;
  const uint8_t ip[20] = {0x45,
                          0xFF,
                          uint8_t((20 + udp_len) >> 8),
                          uint8_t(20 + udp_len),
                          0,
                          0,
                          0x40,
                          0,
                          0xFF,
                          17,
                          0xFF,
                          0xFF,
                          uint8_t(src.ip.ipv4() >> 24),
                          uint8_t(src.ip.ipv4() >> 16),
                          uint8_t(src.ip.ipv4() >> 8),
                          uint8_t(src.ip.ipv4()),
                          uint8_t(dst.ip.ipv4() >> 24),
                          uint8_t(dst.ip.ipv4() >> 16),
                          uint8_t(dst.ip.ipv4() >> 8),
                          uint8_t(dst.ip.ipv4())};
  buf.insert(buf.end(), ip, ip + 20);
  append_masked_udp_header(buf, src, dst, udp_len);
  buf.insert(buf.end(), d.begin(), d.end());
  buf[8 + 20 + 8 + 4] = 0xFF;
  return static_cast<uint32_t>(crc32(0, buf.data(), static_cast<uInt>(buf.size())));
}

}  // namespace

TEST_CASE("CRC-32 gives the standard check value and matches zlib at every length and offset",
          "[icrc]") {
  const uint8_t check[] = {'1', '2', '3', '4', '5', '6', '7', '8', '9'};
  REQUIRE(crc32_ieee(0, check, sizeof(check)) == 0xCBF43926u);

  std::mt19937_64 rng(7);
  std::vector<uint8_t> buf(300);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  for (size_t offset = 0; offset < 8; ++offset) {
    for (size_t len = 0; len + offset <= buf.size(); len += 1 + len / 16) {
      const uint32_t expected =
          static_cast<uint32_t>(crc32(0, buf.data() + offset, static_cast<uInt>(len)));
      REQUIRE(crc32_ieee(0, buf.data() + offset, len) == expected);
    }
  }
  // Chaining, as zlib allows.
  const uint32_t whole = crc32_ieee(0, buf.data(), buf.size());
  REQUIRE(crc32_ieee(crc32_ieee(0, buf.data(), 101), buf.data() + 101, buf.size() - 101) == whole);
}

TEST_CASE("ICRC matches a RoCEv2 CNP captured from a ConnectX-4 Lx", "[icrc]") {
  // From scapy's test/contrib/roce.uts: a real adapter's frame, IPv4 ID 0x718c, TOS 0xc2,
  // BECN set in BTH byte 4 (masked), UDP checksum 0; the last four bytes are its ICRC.
  const std::vector<uint8_t> frame =
      hex("e41d 2dab 2bc2 7cfe 9064 3b32 0800 45c2"
          "003c 718c 4000 4011 9161 0a00 1101 0a00"
          "1201 0000 12b7 0028 0000 8100 ffff 4000"
          "0118 0000 0000 0000 0000 0000 0000 0000"
          "0000 0000 0000 82fd 002a");
  ParsedRoceFrame f;
  REQUIRE(parse_roce_frame(frame.data(), frame.size(), &f) == FrameError::ok);
  REQUIRE(f.datagram_len == 12 + 16);
  CHECK(f.icrc == 0x2A00FD82u);  // bytes 82 fd 00 2a, least significant first
  CHECK(roce_icrc_ipv4(f.ip_header, f.datagram, f.datagram_len) == 0x2A00FD82u);
  CHECK(roce_frame_icrc_ok(f));
}

TEST_CASE("ICRC matches scapy's UC SEND_ONLY example", "[icrc]") {
  // scapy test/contrib/roce.uts "RoCE layer": 192.168.0.7 -> 192.168.0.7, TOS 1, ID 1144, DF,
  // UDP 49152 -> 4791, BTH UC_SEND_ONLY, MigReq, pad 2, DestQP 211, PSN 13571856, and 20
  // bytes of payload (18 of data, 2 of pad). Expected ICRC bytes: 78 f3 53 f3.
  const std::vector<uint8_t> headers =
      hex("4501 0040 0478 4000 4011 0000 c0a8 0007 c0a8 0007"  // IPv4 (checksum masked anyway)
          "c000 12b7 002c 0000");                              // UDP
  std::vector<uint8_t> d = hex("2460 ffff 0000 00d3 00cf 1710");
  const char payload[] =
      "F0\x81\x8b\xe2\x89"
      "5\xd9\x0e\x9a\x95PT\x01\xbe\x88^P\x00\x00";
  d.insert(d.end(), payload, payload + 20);
  CHECK(roce_icrc_ipv4(headers.data(), d.data(), d.size()) == 0xF353F378u);
}

TEST_CASE("ICRC ignores exactly the masked fields", "[icrc]") {
  uint8_t frame[kMaxRoceFrameLen];
  const std::vector<uint8_t> d = datagram(0x04, 0x123, 7, {}, std::vector<uint8_t>(40, 0xAB));
  const Endpoint a{v4(10, 0, 0, 1), 49152}, b{v4(10, 0, 0, 2), 4791};
  const size_t n = build_roce_frame(a, b, d.data(), d.size(), frame, sizeof(frame));
  REQUIRE(n == kRoceEncapLenIpv4 + d.size() + kIcrcLen);
  uint8_t* ip = frame + kEthHeaderLen;
  uint8_t* dg = frame + kRoceEncapLenIpv4;
  const uint32_t base = roce_icrc_ipv4(ip, dg, d.size());
  REQUIRE(base == roce_icrc(a, b, d.data(), d.size()));

  auto with = [&](uint8_t* byte, uint8_t value) {
    const uint8_t saved = *byte;
    *byte = value;
    const uint32_t icrc = roce_icrc_ipv4(ip, dg, d.size());
    *byte = saved;
    return icrc;
  };
  // Masked: TOS, TTL, IPv4 checksum, UDP checksum, BTH FECN/BECN/reserved.
  CHECK(with(&ip[1], 0x2E) == base);
  CHECK(with(&ip[8], 3) == base);
  CHECK(with(&ip[10], 0x12) == base);
  CHECK(with(&ip[26], 0x34) == base);
  CHECK(with(&dg[4], 0xC0) == base);
  // Covered: IPv4 ID, flags, length, addresses, UDP ports and length, the rest of the BTH.
  CHECK(with(&ip[5], 1) != base);
  CHECK(with(&ip[6], 0) != base);
  CHECK(with(&ip[3], static_cast<uint8_t>(ip[3] + 1)) != base);
  CHECK(with(&ip[15], 9) != base);
  CHECK(with(&ip[21], 1) != base);
  CHECK(with(&ip[24], 1) != base);
  CHECK(with(&dg[0], 0x05) != base);
  CHECK(with(&dg[5], 1) != base);
  CHECK(with(&dg[8], 0) != base);
}

TEST_CASE("roce_icrc equals zlib's CRC over the masked pseudo header on random datagrams",
          "[icrc]") {
  std::mt19937_64 rng(2024);
  for (int i = 0; i < 300; ++i) {
    const size_t len = kBthLen + rng() % (kMaxDatagramLen - kBthLen + 1);
    std::vector<uint8_t> d(len);
    for (auto& b : d) b = static_cast<uint8_t>(rng());
    const Endpoint src{IpAddress::v4(static_cast<uint32_t>(rng())), static_cast<uint16_t>(rng())};
    const Endpoint dst{IpAddress::v4(static_cast<uint32_t>(rng())), 4791};
    INFO("datagram length " << len);
    REQUIRE(roce_icrc(src, dst, d.data(), d.size()) == zlib_icrc(src, dst, d));
  }
}

TEST_CASE("A datagram with any byte changed fails ICRC verification", "[icrc]") {
  const Endpoint src{v4(127, 0, 0, 2), 4791}, dst{v4(127, 0, 0, 3), 4791};
  std::vector<uint8_t> wire =
      datagram(0x0A, 0x42, 99, reth(0x1000, 0x77, 8), {1, 2, 3, 4, 5, 6, 7, 8});
  const size_t len = wire.size();
  wire.resize(len + kIcrcLen);
  store_icrc(&wire[len], roce_icrc(src, dst, wire.data(), len));
  REQUIRE(icrc_matches(src, dst, wire.data(), wire.size()));

  for (size_t i = 0; i < wire.size(); ++i) {
    for (uint8_t mask : {uint8_t{0x01}, uint8_t{0x80}, uint8_t{0xFF}}) {
      wire[i] ^= mask;
      INFO("byte " << i << " xor " << int{mask});
      // BTH byte 4 (FECN/BECN/reserved) is the one byte the ICRC deliberately skips.
      CHECK(icrc_matches(src, dst, wire.data(), wire.size()) == (i == 4));
      wire[i] ^= mask;
    }
  }
  // The pseudo header is covered too: another source or destination fails.
  CHECK_FALSE(icrc_matches(Endpoint{IpAddress::v4(src.ip.ipv4() + 1), src.port}, dst, wire.data(),
                           wire.size()));
  CHECK_FALSE(icrc_matches(src, Endpoint{dst.ip, 4792}, wire.data(), wire.size()));
  // Runt and oversize lengths never verify.
  CHECK_FALSE(icrc_matches(src, dst, wire.data(), kMinWireDatagramLen - 1));
  std::vector<uint8_t> big(kMaxWireDatagramLen + 1);
  CHECK_FALSE(icrc_matches(src, dst, big.data(), big.size()));
}
