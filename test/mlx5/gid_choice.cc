// SPDX-License-Identifier: BSD-3-Clause
// Source GID choice on RoCE ports, perftest's way, without hardware.
#include <catch2/catch.hpp>

#include <vector>

#include "mlx5_port.h"

using namespace rnicdv::hw;
using namespace rnicdv::hw::mlx5;

namespace {

Gid link_local(uint8_t last) {
  Gid g;
  g.raw[0] = 0xfe;
  g.raw[1] = 0x80;
  g.raw[15] = last;
  return g;
}

Gid global_v6() {
  Gid g;
  g.raw[0] = 0x20;
  g.raw[1] = 0x01;
  g.raw[2] = 0x0d;
  g.raw[3] = 0xb8;
  g.raw[15] = 1;
  return g;
}

GidCandidate entry(uint32_t index, Gid gid, uint32_t type) {
  return GidCandidate{index, gid, type};
}

}  // namespace

TEST_CASE("the IPv4-mapped RoCE v2 GID wins over link-local and v1 entries", "[gid]") {
  // The table a RoCE port with one IPv4 address shows: fe80 v1/v2, then ::ffff:a.b.c.d v1/v2.
  const Gid ipv4 = Gid::from_ipv4(0x7f000001);
  std::vector<GidCandidate> table = {
      entry(0, link_local(1), IBV_GID_TYPE_ROCE_V1),
      entry(1, link_local(1), IBV_GID_TYPE_ROCE_V2),
      entry(2, ipv4, IBV_GID_TYPE_ROCE_V1),
      entry(3, ipv4, IBV_GID_TYPE_ROCE_V2),
  };
  auto chosen = choose_roce_gid(table);
  REQUIRE(chosen);
  CHECK(chosen->index == 3);
  CHECK(chosen->type == IBV_GID_TYPE_ROCE_V2);
  CHECK(chosen->gid.to_string() == "::ffff:127.0.0.1");
}

TEST_CASE("an IPv4-mapped RoCE v1 GID still beats any IPv6 GID", "[gid]") {
  std::vector<GidCandidate> table = {
      entry(0, global_v6(), IBV_GID_TYPE_ROCE_V2),
      entry(1, Gid::from_ipv4(0x0a000001), IBV_GID_TYPE_ROCE_V1),
  };
  auto chosen = choose_roce_gid(table);
  REQUIRE(chosen);
  CHECK(chosen->index == 1);
}

TEST_CASE("without IPv4, a routable IPv6 GID beats a link-local one", "[gid]") {
  std::vector<GidCandidate> table = {
      entry(0, link_local(7), IBV_GID_TYPE_ROCE_V2),
      entry(1, global_v6(), IBV_GID_TYPE_ROCE_V1),
  };
  auto chosen = choose_roce_gid(table);
  REQUIRE(chosen);
  CHECK(chosen->index == 1);
}

TEST_CASE("equal GIDs prefer RoCE v2, then the lowest index", "[gid]") {
  std::vector<GidCandidate> table = {
      entry(5, link_local(1), IBV_GID_TYPE_ROCE_V1),
      entry(7, link_local(1), IBV_GID_TYPE_ROCE_V2),
      entry(6, link_local(1), IBV_GID_TYPE_ROCE_V2),
  };
  auto chosen = choose_roce_gid(table);
  REQUIRE(chosen);
  CHECK(chosen->index == 6);
}

TEST_CASE("zero, InfiniBand-type and unaddressable entries are never chosen", "[gid]") {
  std::vector<GidCandidate> table = {
      entry(0, Gid{}, IBV_GID_TYPE_ROCE_V2), entry(1, Gid::from_ipv4(0x0a000001), IBV_GID_TYPE_IB),
      entry(300, Gid::from_ipv4(0x0a000002), IBV_GID_TYPE_ROCE_V2),  // beyond sgid_index's 8 bits
  };
  CHECK_FALSE(choose_roce_gid(table));
  CHECK_FALSE(choose_roce_gid({}));
}

TEST_CASE("GID helpers recognise link-local and zero GIDs", "[gid]") {
  CHECK(is_link_local(link_local(1)));
  CHECK_FALSE(is_link_local(global_v6()));
  CHECK_FALSE(is_link_local(Gid::from_ipv4(1)));
  CHECK(is_zero(Gid{}));
  CHECK_FALSE(is_zero(link_local(0)));
}

TEST_CASE("the port's transport name follows its link layer and GID type", "[gid]") {
  PortAddressing port;
  port.link_layer = LinkLayer::ethernet;
  CHECK(port_transport_name(port) == "Ethernet (no GID)");
  port.source_gid = entry(3, Gid::from_ipv4(1), IBV_GID_TYPE_ROCE_V2);
  CHECK(port_transport_name(port) == "RoCE v2");
  port.source_gid->type = IBV_GID_TYPE_ROCE_V1;
  CHECK(port_transport_name(port) == "RoCE v1");
  port.link_layer = LinkLayer::infiniband;
  CHECK(port_transport_name(port) == "InfiniBand");
}
