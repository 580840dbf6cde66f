// SPDX-License-Identifier: BSD-3-Clause
// UD multicast over IPv6 on the UDP wire: three threaded devices on unique local addresses of
// an interface that carries multicast (a veth end in a network namespace that
// run_in_ipv6_netns.sh makes, passing the addresses in RNICDV_TEST_IPV6_ADDRS), a publisher
// and two subscribers of an ff0e:: group. Each subscriber's device joins the group through the
// kernel (IPV6_JOIN_GROUP on that interface) and receives every datagram once, behind an IPv6
// GRH addressed to the group. Skipped when not run through the script.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "skip.h"
#include "ud_env.h"

using namespace rnicdv;
using namespace rnicdv::test;

namespace {

constexpr uint32_t kQkey = 0x11111111;

std::vector<hw::IpAddress> test_addresses() {
  const char* text = std::getenv("RNICDV_TEST_IPV6_ADDRS");
  if (!text) skip_test("needs the namespace of test/drv/run_in_ipv6_netns.sh (root)");
  std::vector<hw::IpAddress> out;
  std::istringstream words(text);
  for (std::string w; words >> w;) out.push_back(take(hw::IpAddress::parse(w)));
  REQUIRE(out.size() == 3);
  return out;
}

void recv_on(QueuePair& qp, Node& n, uint64_t wr_id, size_t offset) {
  const Sge s = n.sge(offset, 512 + kGrh);
  RecvWr r;
  r.wr_id = wr_id;
  r.sg_list = &s;
  r.num_sge = 1;
  REQUIRE(qp.post_recv(r) == Errc::ok);
}

}  // namespace

TEST_CASE("on the UDP wire over IPv6, an ff0e:: group's datagrams reach every subscriber once "
          "through the kernel's multicast, behind an IPv6 GRH addressed to the group",
          "[drv][ud][multicast][ipv6][udp]") {
  const std::vector<hw::IpAddress> addrs = test_addresses();
  sim::FabricConfig fc;
  fc.mode = sim::ExecMode::threaded;
  fc.wire = sim::WireKind::udp;
  fc.seed = 5;
  auto fabric = take(sim::Fabric::create(fc));
  Node a = make_node(fabric, mlx5_profile(), ud_config(), 1 << 16, 256, addrs[0]);
  Node b = make_node(fabric, mlx5_profile(), ud_config(), 1 << 16, 256, addrs[1]);
  Node c = make_node(fabric, mlx5_profile(), ud_config(), 1 << 16, 256, addrs[2]);
  for (QueuePair* qp : {&*a.qp, &*b.qp, &*c.qp}) ud_move_to(*qp, hw::QpState::rts, kQkey);
  const hw::Gid group = take(multicast_gid("ff0e::77:9"));
  check(b.qp->attach_multicast(group));
  check(c.qp->attach_multicast(group));
  for (int i = 0; i < 8; ++i) {
    recv_on(*b.qp, b, 100 + i, kDst + i * 0x800);
    recv_on(*c.qp, c, 200 + i, kDst + i * 0x800);
  }
  hw::AhAttr attr;
  attr.remote_gid = group;
  AddressHandle ah = take(a.pd->create_ah(attr));
  for (uint32_t i = 0; i < 8; ++i) {
    fill(a.bytes(kSrc + i * 256), 200, static_cast<uint8_t>(0x30 + i));
    REQUIRE(a.qp->post_datagram(i, a.sge(kSrc + i * 256, 200), ah, kMulticastQpn, kQkey,
                                send_flags::signaled) == Errc::ok);
  }
  for (Node* n : {&b, &c}) {
    auto got = poll_n(*fabric, *n->cq, 8, 10'000'000'000ull);
    REQUIRE(got.size() == 8);
    for (uint32_t i = 0; i < 8; ++i) {
      CHECK(got[i].status == IBV_WC_SUCCESS);
      CHECK(got[i].byte_len == 200 + kGrh);
      const uint8_t* grh = n->bytes(kDst + i * 0x800);
      CHECK(grh[0] >> 4 == 6);
      CHECK(hw::IpAddress::from_bytes(grh + 8) == addrs[0]);
      CHECK(std::memcmp(grh + 24, group.raw, 16) == 0);
      CHECK(std::memcmp(grh + kGrh, a.bytes(kSrc + i * 256), 200) == 0);
    }
  }
  CHECK(poll_n(*fabric, *a.cq, 8, 10'000'000'000ull).size() == 8);
  CHECK(b.sim->counters().rx_dropped == 0);
}
