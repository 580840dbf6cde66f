// SPDX-License-Identifier: BSD-3-Clause
// RoCE v2 over IPv6 on the wires: the address type, the frame's IPv6 header, the ICRC over the
// IPv6 pseudo header (IBA A17.3.3) against zlib's CRC-32, tshark's decoding of the capture,
// and delivery over the in-process wire and over UDP on ::1.
#include <zlib.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tshark.h"
#include "wire/frame.h"
#include "wire/wire.h"
#include "wire_test_util.h"

using namespace rnicdv;
using namespace rnicdv::sim;
using namespace rnicdv::sim::test;
using namespace rnicdv::test;

namespace {

IpAddress ip(const char* text) {
  Result<IpAddress> a = IpAddress::parse(text);
  REQUIRE(a.is_ok());
  return *a;
}

// zlib's CRC-32 over what IBA A17.3.3 says the ICRC covers under an IPv6 header, built here
// byte by byte: 8 x 0xFF; the IPv6 header with the traffic class, flow label and hop limit all
// ones (version kept); the UDP header with its checksum all ones; the BTH with byte 4 all ones;
// the rest of the datagram.
uint32_t zlib_icrc_ipv6(const Endpoint& src, const Endpoint& dst, const std::vector<uint8_t>& d) {
  std::vector<uint8_t> buf(8, 0xFF);
  const size_t udp_len = 8 + d.size() + 4;
  const uint8_t first[8] = {0x6F, 0xFF, 0xFF, 0xFF, uint8_t(udp_len >> 8), uint8_t(udp_len),
                            17,   0xFF};
  buf.insert(buf.end(), first, first + 8);
  buf.insert(buf.end(), src.ip.bytes.begin(), src.ip.bytes.end());
  buf.insert(buf.end(), dst.ip.bytes.begin(), dst.ip.bytes.end());
  append_masked_udp_header(buf, src, dst, udp_len);
  buf.insert(buf.end(), d.begin(), d.end());
  buf[8 + 40 + 8 + 4] = 0xFF;
  return static_cast<uint32_t>(crc32(0, buf.data(), static_cast<uInt>(buf.size())));
}

// RFC 1071 sum over the RFC 8200 8.1 pseudo header and the UDP segment, written here apart
// from the library: 0 when the checksum the segment carries is right.
uint16_t reference_udp6_checksum(const IpAddress& s, const IpAddress& d, const uint8_t* udp,
                                 size_t len) {
  std::vector<uint8_t> b(s.bytes.begin(), s.bytes.end());
  b.insert(b.end(), d.bytes.begin(), d.bytes.end());
  const uint8_t tail[8] = {
      uint8_t(len >> 24), uint8_t(len >> 16), uint8_t(len >> 8), uint8_t(len), 0, 0, 0, 17};
  b.insert(b.end(), tail, tail + 8);
  b.insert(b.end(), udp, udp + len);
  if (b.size() % 2) b.push_back(0);
  uint32_t sum = 0;
  for (size_t i = 0; i < b.size(); i += 2) sum += uint32_t(b[i]) << 8 | b[i + 1];
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

// An in-process wire made with `config`, with `ea` attached to `a` and `eb` to `b`.
std::unique_ptr<Wire> inproc_pair(const WireConfig& config, const Endpoint& ea, RecordingSink& a,
                                  const Endpoint& eb, RecordingSink& b) {
  auto made = make_inproc_wire(config);
  REQUIRE(made.is_ok());
  std::unique_ptr<Wire> wire = std::move(*made);
  REQUIRE(wire->attach(ea, &a).is_ok());
  REQUIRE(wire->attach(eb, &b).is_ok());
  return wire;
}

}  // namespace

TEST_CASE("an IP address parses and prints in either family and says what kind it is",
          "[ipv6][address]") {
  const IpAddress v4 = ip("127.0.0.2");
  CHECK(v4.is_v4());
  CHECK(v4.ipv4() == 0x7F000002u);
  CHECK(v4 == IpAddress::v4(0x7F000002u));
  CHECK(v4.to_string() == "127.0.0.2");
  CHECK(v4.is_loopback());
  CHECK(ip("::ffff:10.0.0.1") == IpAddress::v4(0x0A000001u));  // the IPv4-mapped form is IPv4
  const IpAddress v6 = ip("fd00::1");
  CHECK(v6.is_v6());
  CHECK(v6.ipv4() == 0);
  CHECK(v6.to_string() == "fd00::1");
  CHECK_FALSE(v6.is_link_local());
  CHECK(ip("fe80::2").is_link_local());
  CHECK(ip("::1").is_loopback());
  CHECK(ip("ff02::1").is_multicast());
  CHECK(ip("239.1.2.3").is_multicast());
  CHECK_FALSE(ip("10.1.2.3").is_multicast());
  CHECK(IpAddress{}.is_unspecified());
  CHECK(IpAddress::v4(0).is_unspecified());
  // The GID a RoCE v2 port derives from an address is the same 16 bytes.
  CHECK(hw::Gid::from_ip(v6).ip() == v6);
  CHECK(hw::Gid::from_ip(v4).to_string() == "::ffff:127.0.0.2");

  Result<IpAddress> zone = IpAddress::parse("fe80::1%lo");
  REQUIRE_FALSE(zone.is_ok());
  CHECK(zone.status().code() == Errc::invalid_argument);
  CHECK_THAT(zone.status().message(), Catch::Contains("fe80::1%lo") && Catch::Contains("zone"));
  Result<IpAddress> bad = IpAddress::parse("10.0.0");
  REQUIRE_FALSE(bad.is_ok());
  CHECK_THAT(bad.status().message(), Catch::Contains("\"10.0.0\""));
}

TEST_CASE(
    "an IPv6 RoCE v2 frame carries the traffic class, flow label and hop limit, a UDP "
    "checksum that verifies, and parses back",
    "[ipv6][frame]") {
  const Endpoint src{ip("fd00::1"), 49152}, dst{ip("fd00::2"), 4791};
  const std::vector<uint8_t> d = datagram(0x04, 0x000011, 100, {}, std::vector<uint8_t>(33, 0x5A));
  std::vector<uint8_t> frame(kMaxRoceFrameLen);
  const IpClass cls{0xB8, 17, 0x12345};
  const size_t n = build_roce_frame(src, dst, d.data(), d.size(), frame.data(), frame.size(),
                                    UdpChecksum::zero, cls);
  REQUIRE(n == kRoceEncapLenIpv6 + d.size() + kIcrcLen);
  CHECK(kRoceEncapLenIpv6 == 62);
  CHECK(get16(frame.data() + 12) == 0x86DD);
  const uint8_t* h = frame.data() + kEthHeaderLen;
  CHECK(get32(h) == 0x6B812345u);  // version 6, traffic class 0xB8, flow label 0x12345
  CHECK(get16(h + 4) == 8 + d.size() + 4);
  CHECK(h[6] == 17);
  CHECK(h[7] == 17);
  CHECK(std::memcmp(h + 8, src.ip.bytes.data(), 16) == 0);
  CHECK(std::memcmp(h + 24, dst.ip.bytes.data(), 16) == 0);
  const uint8_t* udp = h + 40;
  CHECK(get16(udp) == 49152);
  CHECK(get16(udp + 2) == 4791);
  // IPv6 has no "no checksum": it is computed even when IPv4 frames would carry 0.
  CHECK(get16(udp + 6) != 0);
  CHECK(reference_udp6_checksum(src.ip, dst.ip, udp, get16(udp + 4)) == 0);
  // Locally administered unicast MACs from the addresses' last four bytes.
  CHECK(frame[0] == 0x06);
  CHECK(frame[6] == 0x06);
  CHECK(frame[11] == 0x01);

  ParsedRoceFrame p;
  REQUIRE(parse_roce_frame(frame.data(), n, &p) == FrameError::ok);
  CHECK(p.src == src);
  CHECK(p.dst == dst);
  CHECK(p.ip_class == cls);
  CHECK(p.datagram_len == d.size());
  CHECK(std::memcmp(p.datagram, d.data(), d.size()) == 0);
  CHECK(roce_frame_icrc_ok(p));

  // A payload byte changed: the UDP checksum no longer verifies.
  std::vector<uint8_t> bent(frame.begin(), frame.begin() + static_cast<long>(n));
  bent[kRoceEncapLenIpv6 + 20] ^= 0x01;
  CHECK(parse_roce_frame(bent.data(), bent.size(), &p) == FrameError::bad_udp_checksum);
  // An extension header before UDP is not a RoCE v2 frame; a version nibble that disagrees
  // with the ethertype is not IP.
  std::vector<uint8_t> ext(frame.begin(), frame.begin() + static_cast<long>(n));
  ext[kEthHeaderLen + 6] = 0;  // hop-by-hop options
  CHECK(parse_roce_frame(ext.data(), ext.size(), &p) == FrameError::not_udp);
  std::vector<uint8_t> v4nibble(frame.begin(), frame.begin() + static_cast<long>(n));
  v4nibble[kEthHeaderLen] = 0x4B;
  CHECK(parse_roce_frame(v4nibble.data(), v4nibble.size(), &p) == FrameError::not_ip);
  // An IPv4-mapped address inside an IPv6 header: not how an IPv4 peer is carried.
  std::vector<uint8_t> mapped(frame.begin(), frame.begin() + static_cast<long>(n));
  const IpAddress v4peer = IpAddress::v4(0x0A000001u);
  std::memcpy(&mapped[kEthHeaderLen + 24], v4peer.bytes.data(), 16);
  CHECK(parse_roce_frame(mapped.data(), mapped.size(), &p) == FrameError::mapped_address);
  // Cut anywhere inside the headers: truncated, never read past the end.
  for (size_t cut = 0; cut < kRoceEncapLenIpv6; ++cut)
    CHECK(parse_roce_frame(frame.data(), cut, &p) != FrameError::ok);
  // Mixed families do not make a frame.
  CHECK(build_roce_frame(Endpoint{IpAddress::v4(0x7F000002u), 4791}, dst, d.data(), d.size(),
                         frame.data(), frame.size()) == 0);
}

TEST_CASE("the ICRC over IPv6 is IBA A17.3.3's, computed by zlib, and masks the variant fields",
          "[ipv6][icrc]") {
  std::mt19937_64 rng(11);
  for (size_t len : {size_t{12}, size_t{13}, size_t{40}, size_t{1000}, size_t{4096 + 28}}) {
    std::vector<uint8_t> d(len);
    for (auto& b : d) b = static_cast<uint8_t>(rng());
    Endpoint src{ip("fe80::2"), static_cast<uint16_t>(rng())}, dst{ip("fd00:1:2::ab"), 4791};
    INFO("datagram length " << len);
    const uint32_t icrc = roce_icrc(src, dst, d.data(), d.size());
    CHECK(icrc == zlib_icrc_ipv6(src, dst, d));
    // The ICRC a frame carries verifies from its own headers, whatever the traffic class, flow
    // label and hop limit (the fields routers may change).
    std::vector<uint8_t> frame(kMaxRoceFrameLen);
    for (IpClass cls : {IpClass{}, IpClass{0xFF, 1, 0xFFFFF}, IpClass{0x02, 200, 7}}) {
      const size_t n = build_roce_frame(src, dst, d.data(), d.size(), frame.data(), frame.size(),
                                        UdpChecksum::zero, cls);
      REQUIRE(n != 0);
      ParsedRoceFrame p;
      REQUIRE(parse_roce_frame(frame.data(), n, &p) == FrameError::ok);
      CHECK(p.icrc == icrc);
      CHECK(roce_frame_icrc_ok(p));
    }
    // The addresses are covered.
    Endpoint other = src;
    other.ip.bytes[15] ^= 1;
    CHECK(roce_icrc(other, dst, d.data(), d.size()) != icrc);
  }
}

TEST_CASE(
    "tshark decodes IPv6 RoCE v2 frames with their addresses, traffic class and flow "
    "label, none malformed",
    "[ipv6][pcap][tshark]") {
  skip_without_tshark();
  TempDir dir;
  WireConfig config;
  config.pcap_path = dir.file("ipv6.pcap");
  RecordingSink a, b;
  const Endpoint ea{ip("fd00::a"), 4791}, eb{ip("fe80::b"), 4791};
  std::unique_ptr<Wire> made = inproc_pair(config, ea, a, eb, b);
  Wire& wire = *made;
  const auto send = datagram(0x04, 0x000011, 100, {}, {'h', 'e', 'l', 'l', 'o'});
  const auto write = datagram(0x0A, 0x0000AB, 7, reth(0x00007F0012340000ull, 0xCAFE, 16),
                              std::vector<uint8_t>(16, 0x42));
  wire.transmit(ea, eb, send.data(), send.size(), IpClass{0x68, 33, 0xABCDE});
  wire.transmit(eb, ea, write.data(), write.size());
  CHECK(wire.poll(eb, 16) == 1);
  CHECK(wire.poll(ea, 16) == 1);
  const auto rows = tshark_rows(
      tshark(config.pcap_path,
             "-T fields -e frame.protocols -e ipv6.src -e ipv6.dst -e ipv6.tclass -e ipv6.flow "
             "-e ipv6.hlim -e udp.dstport -e infiniband.bth.opcode -e infiniband.bth.destqp "
             "-e infiniband.reth.r_key"));
  REQUIRE(rows.size() == 2);
  REQUIRE(rows[0].size() >= 9);
  CHECK(rows[0][0] == "eth:ethertype:ipv6:udp:infiniband:data");
  CHECK(rows[0][1] == "fd00::a");
  CHECK(rows[0][2] == "fe80::b");
  CHECK(rows[0][3] == "0x00000068");
  CHECK(rows[0][4] == "0x0abcde");
  CHECK(rows[0][5] == "33");
  CHECK(rows[0][6] == "4791");
  CHECK(rows[0][7] == "4");
  CHECK(rows[0][8] == "0x000011");
  REQUIRE(rows[1].size() >= 10);
  CHECK(rows[1][1] == "fe80::b");
  CHECK(rows[1][7] == "10");
  CHECK(rows[1][9] == "0x0000cafe");
  CHECK(tshark(config.pcap_path, "-Y _ws.malformed -T fields -e frame.number").empty());
  // tshark checks the UDP checksum too, as a receiver of IPv6 would: 1 is "Good".
  const auto sums = tshark_rows(
      tshark(config.pcap_path, "-o udp.check_checksum:TRUE -T fields -e udp.checksum.status"));
  REQUIRE(sums.size() == 2);
  for (const auto& row : sums) CHECK(row.at(0) == "1");
}

TEST_CASE(
    "the in-process wire carries IPv6 endpoints and drops a frame whose two addresses "
    "are of different families",
    "[ipv6][inproc]") {
  auto made = make_inproc_wire(WireConfig{});
  REQUIRE(made.is_ok());
  Wire& wire = **made;
  RecordingSink a, b, c;
  const Endpoint ea{ip("fd00::1"), 4791}, eb{ip("fd00::2"), 4791};
  const Endpoint ec{v4(127, 0, 0, 2), 4791};
  REQUIRE(wire.attach(ea, &a).is_ok());
  REQUIRE(wire.attach(eb, &b).is_ok());
  REQUIRE(wire.attach(ec, &c).is_ok());
  // Endpoints that share the low bytes of their addresses stay apart.
  CHECK(wire.attach(Endpoint{ip("fd00::1"), 4791}, &c).status().code() == Errc::address_in_use);
  const auto d = tagged_datagram(1, 0);
  wire.transmit(ea, eb, d.data(), d.size());
  CHECK(wire.poll(eb, 8) == 1);
  const auto got = b.take();
  REQUIRE(got.size() == 1);
  CHECK(got[0].src == ea);
  CHECK(got[0].dst == eb);
  CHECK(got[0].bytes == d);

  const uint64_t malformed = wire.counters().dropped_malformed;
  wire.transmit(ec, eb, d.data(), d.size());
  wire.transmit(ea, ec, d.data(), d.size());
  CHECK(wire.poll(eb, 8) == 0);
  CHECK(wire.poll(ec, 8) == 0);
  CHECK(wire.counters().dropped_malformed == malformed + 2);
  wire.detach(ea);
  wire.detach(eb);
  wire.detach(ec);
}

TEST_CASE(
    "the UDP wire carries RoCE v2 over IPv6 on ::1, and refuses a link-local address "
    "that no interface holds",
    "[ipv6][udp]") {
  WireConfig config;
  auto made = make_udp_wire(config);
  REQUIRE(made.is_ok());
  Wire& wire = **made;
  RecordingSink a, b;
  const uint16_t pa = free_udp_port();
  uint16_t pb = free_udp_port();
  while (pb == pa) pb = free_udp_port();
  const Endpoint ea{ip("::1"), pa}, eb{ip("::1"), pb};
  auto attached = wire.attach(ea, &a);
  if (!attached.is_ok() && attached.status().code() == Errc::not_found)
    skip_test("this machine has no IPv6 loopback address");
  REQUIRE(attached.is_ok());
  REQUIRE(wire.attach(eb, &b).is_ok());
  CHECK(wire.wait_fd(ea) >= 0);
  std::vector<std::vector<uint8_t>> sent;
  for (uint32_t i = 0; i < 8; ++i) {
    sent.push_back(tagged_datagram(2, i, 100 + i));
    wire.transmit(ea, eb, sent.back().data(), sent.back().size(), IpClass{0x20, 9, 0});
  }
  poll_until(wire, eb, b, 8);
  const auto got = b.take();
  REQUIRE(got.size() == 8);
  for (uint32_t i = 0; i < 8; ++i) {
    CHECK(got[i].src == ea);  // the ICRC verified over the IPv6 pseudo header
    CHECK(got[i].bytes == sent[i]);
  }
  CHECK(wire.counters().dropped_icrc == 0);
  wire.detach(ea);
  wire.detach(eb);

  RecordingSink c;
  const Endpoint nowhere{ip("fe80::dead:beef:1"), pa};
  auto refused = wire.attach(nowhere, &c);
  REQUIRE_FALSE(refused.is_ok());
  CHECK(refused.status().code() == Errc::not_found);
  CHECK_THAT(refused.status().message(),
             Catch::Contains("[fe80::dead:beef:1]") && Catch::Contains("no interface holds"));
  // An address that nobody owns: bind's EADDRNOTAVAIL, named.
  const Endpoint unowned{ip("fd00:dead::1"), pa};
  auto not_ours = wire.attach(unowned, &c);
  REQUIRE_FALSE(not_ours.is_ok());
  CHECK(not_ours.status().code() == Errc::not_found);
  CHECK_THAT(not_ours.status().message(),
             Catch::Contains("[fd00:dead::1]:") && Catch::Contains("bind") &&
                 Catch::Contains("Cannot assign requested address"));
}

TEST_CASE("an IPv6 frame held back by a delay fault keeps its traffic class and flow label",
          "[ipv6][faults]") {
  TempDir dir;
  VirtualClock clock;
  WireConfig config;
  config.clock = &clock;
  config.faults.delay = 1.0;  // every frame waits
  config.faults.max_delay_ns = 1000;
  config.pcap_path = dir.file("held.pcap");
  RecordingSink a, b;
  const Endpoint ea{ip("fd00::1"), 4791}, eb{ip("fd00::2"), 4791};
  std::unique_ptr<Wire> made = inproc_pair(config, ea, a, eb, b);
  Wire& wire = *made;
  const IpClass cls{0x48, 40, 0xABCDE};
  const auto d = tagged_datagram(3, 0);
  wire.transmit(ea, eb, d.data(), d.size(), cls);
  CHECK(wire.counters().faults_delayed == 1);
  clock.set(clock.now_ns() + 1'000'000);
  wire.poll(ea, 8);  // the sender's held frame goes out once due
  CHECK(wire.poll(eb, 8) == 1);
  REQUIRE(b.take().size() == 1);
  wire.detach(ea);
  wire.detach(eb);
  made.reset();  // the wire goes, and closes its capture

  const PcapFile pcap = read_pcap(config.pcap_path);
  REQUIRE(pcap.records.size() == 1);
  ParsedRoceFrame p;
  REQUIRE(parse_roce_frame(pcap.records[0].bytes.data(), pcap.records[0].bytes.size(), &p) ==
          FrameError::ok);
  CHECK(p.ip_class == cls);
  CHECK(roce_frame_icrc_ok(p));
}
