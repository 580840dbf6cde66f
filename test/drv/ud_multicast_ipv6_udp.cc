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
  // Each copy's GRH is the IPv6 header, from the publisher's address to the group.
  check_group_fanout(*fabric, a, {&b, &c}, group, kQkey, [&](const uint8_t* grh) {
    CHECK(grh[0] >> 4 == 6);
    CHECK(hw::IpAddress::from_bytes(grh + 8) == addrs[0]);
    CHECK(std::memcmp(grh + 24, group.raw, 16) == 0);
  });
  CHECK(b.sim->counters().rx_dropped == 0);
}
