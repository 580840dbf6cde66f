// SPDX-License-Identifier: BSD-3-Clause
// rnicdv's QPs on simulated devices with IPv6 addresses: RC (early posting included) and UD
// over RoCE v2 in IPv6 frames, the IPv6 header as a UD receive's GRH, and the refusal of a
// peer of the other IP version, naming both addresses.
#include <stdlib.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "ud_env.h"

using namespace rnicdv;
using namespace rnicdv::test;

namespace {

constexpr uint32_t kQkey = 0x11111111;

hw::IpAddress ip(const char* text) {
  return take(hw::IpAddress::parse(text));
}

// The frames of a classic pcap file (24-byte header, 16 per record).
std::vector<std::vector<uint8_t>> pcap_frames(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::vector<uint8_t> b((std::istreambuf_iterator<char>(in)), {});
  std::vector<std::vector<uint8_t>> out;
  for (size_t at = 24; at + 16 <= b.size();) {
    uint32_t caplen = 0;
    std::memcpy(&caplen, &b[at + 8], 4);
    at += 16;
    if (at + caplen > b.size()) break;
    out.emplace_back(b.begin() + static_cast<long>(at), b.begin() + static_cast<long>(at + caplen));
    at += caplen;
  }
  return out;
}

uint16_t ethertype(const std::vector<uint8_t>& f) {
  return f.size() < 14 ? 0 : static_cast<uint16_t>(f[12] << 8 | f[13]);
}

struct Ipv6Pair {
  std::string pcap = make_pcap_path();
  Pair p;

  static std::string make_pcap_path() {
    char dir[] = "/tmp/rnicdv-ipv6-XXXXXX";
    REQUIRE(::mkdtemp(dir) != nullptr);
    return std::string(dir) + "/ipv6.pcap";
  }
  ~Ipv6Pair() {
    ::unlink(pcap.c_str());
    ::rmdir(pcap.substr(0, pcap.rfind('/')).c_str());
  }

  explicit Ipv6Pair(const QpConfig& config = default_qp_config(),
                    const char* b_address = "fd00::2") {
    sim::FabricConfig fc;
    fc.mode = sim::ExecMode::deterministic;
    fc.wire = sim::WireKind::inproc;
    fc.pcap_path = pcap;
    p.fabric = take(sim::Fabric::create(fc));
    p.a = make_node(p.fabric, mlx5_profile(), config, 1 << 16, 256, ip("fd00::1"));
    p.b = make_node(p.fabric, mlx5_profile(), config, 1 << 16, 256, ip(b_address));
  }
};

}  // namespace

TEST_CASE(
    "RC between two devices with IPv6 addresses: early-posted SENDs and a WRITE, in IPv6 "
    "frames",
    "[drv][ipv6]") {
  Ipv6Pair t;
  Pair& p = t.p;
  CHECK(p.a.sim->address() == ip("fd00::1"));
  CHECK(p.a.dev->info().gid.ip() == ip("fd00::1"));  // the GID is the address itself
  CHECK(p.a.sim->ipv4() == 0);
  CHECK(p.a.dev->info().node_guid != p.b.dev->info().node_guid);
  to_rtr(p);
  post_receive(p.b, 1, 0x4000, 256);
  post_receive(p.b, 2, 0x4100, 256);
  // Posted in RTR: built, withheld, and sent at RTS.
  fill(p.a.bytes(0), 200, 0x61);
  const Sge s1 = p.a.sge(0, 200), s2 = p.a.sge(0x200, 100);
  fill(p.a.bytes(0x200), 100, 0x62);
  REQUIRE(p.a.qp->post_send(send_wr(11, &s1, 1)) == Errc::ok);
  REQUIRE(p.a.qp->post_send(send_wr(12, &s2, 1)) == Errc::ok);
  to_rts(p.b, kPsnB);
  to_rts(p.a, kPsnA);
  auto got = poll_n(*p.fabric, *p.b.cq, 2);
  REQUIRE(got.size() == 2);
  CHECK(got[0].wr_id == 1);
  CHECK(got[1].wr_id == 2);
  CHECK(std::memcmp(p.b.bytes(0x4000), p.a.bytes(0), 200) == 0);
  CHECK(std::memcmp(p.b.bytes(0x4100), p.a.bytes(0x200), 100) == 0);
  REQUIRE(poll_n(*p.fabric, *p.a.cq, 2).size() == 2);

  fill(p.a.bytes(0x1000), 3000, 0x63);
  const Sge w = p.a.sge(0x1000, 3000);
  SendWr wr = send_wr(13, &w, 1);
  wr.opcode = WrOpcode::rdma_write;
  wr.remote_addr = reinterpret_cast<uint64_t>(p.b.bytes(0x8000));
  wr.rkey = p.b.mr->rkey();
  REQUIRE(p.a.qp->post_send(wr) == Errc::ok);
  auto done = poll_n(*p.fabric, *p.a.cq, 1);
  REQUIRE(done.size() == 1);
  CHECK(done[0].status == IBV_WC_SUCCESS);
  CHECK(std::memcmp(p.b.bytes(0x8000), p.a.bytes(0x1000), 3000) == 0);

  { Pair gone = std::move(p); }  // the fabric goes last, and closes its capture
  const auto frames = pcap_frames(t.pcap);
  CHECK(frames.size() >= 6);  // 2 SENDs, 3 WRITE packets, ACKs
  for (const auto& f : frames) CHECK(ethertype(f) == 0x86DD);
}

TEST_CASE("a UD datagram between IPv6 devices arrives behind the IPv6 header as its GRH",
          "[drv][ipv6][ud]") {
  Ipv6Pair t(ud_config());
  Pair& p = t.p;
  ud_move_to(*p.a.qp, hw::QpState::rts, kQkey);
  ud_move_to(*p.b.qp, hw::QpState::rts, kQkey);
  hw::AhAttr attr;
  attr.remote_gid = p.b.dev->info().gid;
  attr.traffic_class = 0x28;
  attr.flow_label = 0x54321;
  AddressHandle to_b = take(p.a.pd->create_ah(attr));
  post_receive(p.b, 5, 0x2000, 512 + kGrh);
  fill(p.a.bytes(0), 300, 0x71);
  const Sge s = p.a.sge(0, 300);
  SendWr wr = send_wr(1, &s, 1);
  wr.av = to_b.av();
  wr.remote_qpn = p.b.qp->qpn();
  wr.remote_qkey = kQkey;
  REQUIRE(p.a.qp->post_send(wr) == Errc::ok);
  auto got = poll_n(*p.fabric, *p.b.cq, 1);
  REQUIRE(got.size() == 1);
  CHECK(got[0].status == IBV_WC_SUCCESS);
  CHECK(got[0].byte_len == 300 + kGrh);
  CHECK(got[0].src_qp == p.a.qp->qpn());
  const uint8_t* grh = p.b.bytes(0x2000);
  CHECK((grh[0] >> 4) == 6);  // the IPv6 header fills the whole GRH area
  CHECK(grh[6] == 17);        // next header: UDP
  CHECK((grh[4] << 8 | grh[5]) == 8 + 12 + 8 + 300 + 4);  // UDP, BTH, DETH, payload, ICRC
  CHECK(std::memcmp(grh + 8, ip("fd00::1").bytes.data(), 16) == 0);
  CHECK(std::memcmp(grh + 24, ip("fd00::2").bytes.data(), 16) == 0);
  CHECK(std::memcmp(p.b.bytes(0x2000 + kGrh), p.a.bytes(0), 300) == 0);

  // On the wire: the address handle's traffic class and flow label in the IPv6 header.
  { Pair gone = std::move(p); }
  const auto frames = pcap_frames(t.pcap);
  REQUIRE(frames.size() == 1);
  REQUIRE(frames[0].size() >= 62);
  CHECK(ethertype(frames[0]) == 0x86DD);
  const uint8_t* h = frames[0].data() + 14;
  const uint32_t word0 = uint32_t(h[0]) << 24 | uint32_t(h[1]) << 16 | uint32_t(h[2]) << 8 | h[3];
  CHECK(word0 == (6u << 28 | 0x28u << 20 | 0x54321u));
}

TEST_CASE(
    "a peer of the other IP version is refused at RTR and by an address handle, naming "
    "both addresses",
    "[drv][ipv6][errors]") {
  Ipv6Pair t(default_qp_config(), "127.0.0.9");
  Pair& p = t.p;
  check(p.a.qp->to_init());
  const Status st = p.a.qp->to_rtr(p.b.qp->local_endpoint(kPsnB), hw::Mtu::mtu1024);
  CHECK(st.code() == Errc::invalid_argument);
  CHECK_THAT(st.message(), Catch::Contains("::ffff:127.0.0.9") && Catch::Contains("fd00::1") &&
                               Catch::Contains("one IP version"));
  CHECK(p.a.qp->state() == hw::QpState::init);

  hw::AhAttr attr;
  attr.remote_gid = p.b.dev->info().gid;
  auto ah = p.a.pd->create_ah(attr);
  REQUIRE_FALSE(ah.is_ok());
  CHECK(ah.status().code() == Errc::unsupported);
  CHECK_THAT(ah.status().message(),
             Catch::Contains("::ffff:127.0.0.9") && Catch::Contains("fd00::1"));
}
