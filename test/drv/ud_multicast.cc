// SPDX-License-Identifier: BSD-3-Clause
// UD multicast in rnicdv's API on the simulated HCA: a datagram sent to a group reaches every
// QP attached to it once, on every device (the sender's own device and QP included), behind a
// GRH whose destination is the group, and each checked against its own Q_Key; detaching, and
// destroying an attached QP, stop delivery; the refusals name the QP, the group and the reason.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstring>
#include <thread>

#include "ud_env.h"

using namespace rnicdv;
using namespace rnicdv::test;

namespace {

constexpr uint32_t kQkey = 0x11111111;

void ud_up(QueuePair& qp, uint32_t qkey = kQkey) { ud_move_to(qp, hw::QpState::rts, qkey); }


uint32_t load_be32(const uint8_t* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3];
}

// A publisher (a) and two subscriber devices (b, c), each with a UD QP, on one fabric; b has a
// second QP (b2) and c one with another Q_Key (c2).
struct Groups {
  std::shared_ptr<sim::Fabric> fabric = make_fabric();
  Node a = make_node(fabric, mlx5_profile(), ud_config());
  Node b = make_node(fabric, mlx5_profile(), ud_config());
  Node c = make_node(fabric, mlx5_profile(), ud_config());
  std::optional<QueuePair> b2, c2;
  hw::Gid group = take(multicast_gid("239.1.2.3"));
  std::optional<AddressHandle> to_group;

  Groups() {
    b2.emplace(take(b.dev->create_qp(*b.pd, *b.cq, *b.cq, ud_config())));
    c2.emplace(take(c.dev->create_qp(*c.pd, *c.cq, *c.cq, ud_config())));
    for (QueuePair* qp : {&*a.qp, &*b.qp, &*b2, &*c.qp}) ud_up(*qp);
    ud_up(*c2, kQkey + 1);
    hw::AhAttr attr;
    attr.remote_gid = group;
    to_group.emplace(take(a.pd->create_ah(attr)));
  }
  // One datagram of `len` bytes (pattern `seed`) from a's QP to the group.
  void publish(uint64_t wr_id, uint32_t len, uint8_t seed) {
    fill(a.bytes(kSrc), len, seed);
    const Sge s = a.sge(kSrc, len);
    SendWr wr = send_wr(wr_id, &s, 1);
    wr.av = to_group->av();
    wr.remote_qpn = kMulticastQpn;
    wr.remote_qkey = kQkey;
    REQUIRE(a.qp->post_send(wr) == Errc::ok);
  }
};

}  // namespace

TEST_CASE("a datagram sent to a multicast group reaches every attached QP once, on every device, "
          "the sender's own QP included, behind a GRH addressed to the group",
          "[drv][ud][multicast]") {
  Groups g;
  for (QueuePair* qp : {&*g.a.qp, &*g.b.qp, &*g.b2, &*g.c.qp, &*g.c2})
    check(qp->attach_multicast(g.group));
  check(g.b.qp->attach_multicast(g.group));  // again: not an error, and not a second copy
  post_grh_recv(*g.a.qp, g.a, 10, kDst);
  post_grh_recv(*g.b.qp, g.b, 20, kDst);
  post_grh_recv(*g.b2, g.b, 21, kDst + 0x1000);
  post_grh_recv(*g.c.qp, g.c, 30, kDst);
  post_grh_recv(*g.c2, g.c, 31, kDst + 0x1000);

  g.publish(1, 300, 0x40);
  // a's CQ: the send and a's own copy.
  auto at_a = poll_n(*g.fabric, *g.a.cq, 2);
  REQUIRE(at_a.size() == 2);
  auto at_b = poll_n(*g.fabric, *g.b.cq, 2);
  auto at_c = poll_n(*g.fabric, *g.c.cq, 1);
  REQUIRE(at_b.size() == 2);
  REQUIRE(at_c.size() == 1);

  const auto check_copy = [&](const Completion& wc, Node& n, size_t offset) {
    CHECK(wc.status == IBV_WC_SUCCESS);
    CHECK(wc.opcode == IBV_WC_RECV);
    CHECK(wc.byte_len == 300 + kGrh);
    CHECK(wc.src_qp == g.a.qp->qpn());
    CHECK(std::memcmp(n.bytes(offset + kGrh), g.a.bytes(kSrc), 300) == 0);
    // The GRH's IPv4 header: from a's address to the group.
    const uint8_t* ip = n.bytes(offset + 20);
    CHECK(load_be32(ip + 12) == g.a.dev->info().gid.ipv4());
    CHECK(load_be32(ip + 16) == 0xEF010203u);
  };
  int sends = 0;
  for (const Completion& wc : at_a) {
    if (wc.opcode == IBV_WC_SEND) {
      ++sends;
      CHECK(wc.wr_id == 1);
    } else {
      CHECK(wc.wr_id == 10);
      check_copy(wc, g.a, kDst);
    }
  }
  CHECK(sends == 1);
  for (const Completion& wc : at_b) check_copy(wc, g.b, wc.wr_id == 20 ? kDst : kDst + 0x1000);
  CHECK(at_b[0].wr_id != at_b[1].wr_id);
  CHECK(at_c[0].wr_id == 30);  // c2's Q_Key differs: dropped there
  check_copy(at_c[0], g.c, kDst);
  CHECK(g.c.counters().ud_qkey_drops == 1);
  // Nothing twice.
  CHECK(poll_for(*g.fabric, *g.a.cq).empty());
  CHECK(poll_for(*g.fabric, *g.b.cq).empty());
  CHECK(poll_for(*g.fabric, *g.c.cq).empty());
}

TEST_CASE("a QP that blocks multicast loopback does not receive what it sends to a group; "
          "another QP on its device does",
          "[drv][ud][multicast]") {
  Groups g;
  QpConfig blocking = ud_config();
  blocking.caps.block_self_multicast_loopback = true;
  QueuePair sender = take(g.a.dev->create_qp(*g.a.pd, *g.a.cq, *g.a.cq, blocking));
  CHECK(sender.caps().block_self_multicast_loopback);
  ud_up(sender);
  check(sender.attach_multicast(g.group));
  check(g.a.qp->attach_multicast(g.group));
  check(g.b.qp->attach_multicast(g.group));
  post_grh_recv(sender, g.a, 1, kDst);
  post_grh_recv(*g.a.qp, g.a, 2, kDst + 0x1000);
  post_grh_recv(*g.b.qp, g.b, 3, kDst);

  fill(g.a.bytes(kSrc), 64, 9);
  const Sge s = g.a.sge(kSrc, 64);
  SendWr wr = send_wr(7, &s, 1);
  wr.av = g.to_group->av();
  wr.remote_qpn = kMulticastQpn;
  wr.remote_qkey = kQkey;
  REQUIRE(sender.post_send(wr) == Errc::ok);
  auto at_a = poll_n(*g.fabric, *g.a.cq, 2);
  REQUIRE(at_a.size() == 2);
  for (const Completion& wc : at_a) {
    CHECK(wc.wr_id != 1);  // never the sender's own receive
    if (wc.opcode == IBV_WC_RECV) CHECK(wc.src_qp == sender.qpn());
  }
  auto at_b = poll_n(*g.fabric, *g.b.cq, 1);
  REQUIRE(at_b.size() == 1);
  CHECK(at_b[0].wr_id == 3);
  CHECK(poll_for(*g.fabric, *g.a.cq).empty());

  // An RC QP cannot block multicast loopback: it has none.
  QpConfig rc = default_qp_config();
  rc.caps.block_self_multicast_loopback = true;
  auto refused = g.a.dev->create_qp(*g.a.pd, *g.a.cq, *g.a.cq, rc);
  REQUIRE_FALSE(refused.is_ok());
  CHECK(refused.status().code() == Errc::invalid_argument);
  CHECK_THAT(refused.status().message(), Catch::Contains("for UD QPs only"));
}

TEST_CASE("detaching a QP, or destroying it, stops its copies, and a device whose last QP left "
          "the group hears no more of it",
          "[drv][ud][multicast]") {
  Groups g;
  for (QueuePair* qp : {&*g.b.qp, &*g.b2, &*g.c.qp}) check(qp->attach_multicast(g.group));
  post_grh_recv(*g.b.qp, g.b, 20, kDst);
  post_grh_recv(*g.b2, g.b, 21, kDst + 0x1000);
  post_grh_recv(*g.c.qp, g.c, 30, kDst);
  post_grh_recv(*g.c.qp, g.c, 31, kDst + 0x1000);

  check(g.b.qp->detach_multicast(g.group));
  g.publish(1, 64, 1);
  auto at_b = poll_n(*g.fabric, *g.b.cq, 1);
  REQUIRE(at_b.size() == 1);
  CHECK(at_b[0].wr_id == 21);  // b2 only
  REQUIRE(poll_n(*g.fabric, *g.c.cq, 1).size() == 1);
  CHECK(poll_n(*g.fabric, *g.a.cq, 1).size() == 1);  // the send

  // b2 goes: b has no QP in the group, and its device no longer hears it.
  g.b2.reset();
  const uint64_t b_rx = g.b.counters().packets_rx;
  g.publish(2, 64, 2);
  REQUIRE(poll_n(*g.fabric, *g.c.cq, 1).size() == 1);
  CHECK(poll_n(*g.fabric, *g.a.cq, 1).size() == 1);
  CHECK(poll_for(*g.fabric, *g.b.cq).empty());
  CHECK(g.b.counters().packets_rx == b_rx);
  CHECK(g.b.counters().rx_dropped == 0);
}

TEST_CASE("attaching refuses an RC QP, a GID that is not a group's and a group of the other IP "
          "version, detaching a group not attached is refused, and multicast_gid refuses what "
          "is not a group",
          "[drv][ud][multicast][errors]") {
  Groups g;
  Pair rc = make_connected_pair(mlx5_profile());
  Status s = rc.a.qp->attach_multicast(g.group);
  CHECK(s.code() == Errc::invalid_argument);
  CHECK_THAT(s.message(), Catch::Contains("attach_multicast ::ffff:239.1.2.3") &&
                              Catch::Contains("only a UD QP joins a group (this one is RC)"));

  s = g.a.qp->attach_multicast(g.b.dev->info().gid);  // a unicast address
  CHECK(s.code() == Errc::invalid_argument);
  CHECK_THAT(s.message(), Catch::Contains("not a multicast GID"));
  hw::Gid v6;
  v6.raw[0] = 0xff;
  v6.raw[1] = 0x0e;
  v6.raw[15] = 1;
  s = g.a.qp->attach_multicast(v6);
  CHECK(s.code() == Errc::invalid_argument);
  CHECK_THAT(s.message(), Catch::Contains("attach_multicast ff0e::1: an IPv6 group, and the "
                                          "device's address 127.0.0.") &&
                              Catch::Contains(" is IPv4"));

  s = g.a.qp->detach_multicast(g.group);
  CHECK(s.code() == Errc::invalid_argument);
  CHECK_THAT(s.message(), Catch::Contains("detach_multicast 239.1.2.3") &&
                              Catch::Contains("not attached"));

  for (const char* bad : {"10.0.0.1", "239.1.2", "fd00::1", ""}) {
    INFO(bad);
    auto gid = multicast_gid(bad);
    REQUIRE_FALSE(gid.is_ok());
    CHECK(gid.status().code() == Errc::invalid_argument);
    CHECK_THAT(gid.status().message(), Catch::Contains(std::string("'") + bad + "'"));
  }
  CHECK(take(multicast_gid("224.0.0.1")).to_string() == "::ffff:224.0.0.1");
  CHECK(take(multicast_gid("ff0e::1:2")).to_string() == "ff0e::1:2");

  const hw::DeviceCaps& caps = g.a.dev->info().caps;
  CHECK(caps.max_mcast_grp > 0);
  CHECK(caps.max_mcast_qp_attach > 0);
  CHECK(caps.max_total_mcast_qp_attach >= caps.max_mcast_qp_attach);
}

TEST_CASE("on the UDP wire with threaded devices, a group's datagrams reach every member's QP "
          "through the kernel's multicast",
          "[drv][ud][multicast][udp]") {
  sim::FabricConfig fc;
  fc.mode = sim::ExecMode::threaded;
  fc.wire = sim::WireKind::udp;
  fc.seed = 3;
  auto fabric = take(sim::Fabric::create(fc));
  Node a = make_node(fabric, mlx5_profile(), ud_config());
  Node b = make_node(fabric, mlx5_profile(), ud_config());
  Node c = make_node(fabric, mlx5_profile(), ud_config());
  for (QueuePair* qp : {&*a.qp, &*b.qp, &*c.qp}) ud_up(*qp);
  // The subscribers' devices asleep before they join (in one process a transmit also kicks
  // them; across processes only their wait fd wakes them: the mckey test covers that).
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const hw::Gid group = take(multicast_gid("239.77.1.9"));
  check(b.qp->attach_multicast(group));
  check(c.qp->attach_multicast(group));
  check_group_fanout(*fabric, a, {&b, &c}, group, kQkey, [](const uint8_t*) {});
}

TEST_CASE("over IPv6, a datagram sent to an ff0e:: group reaches every attached QP, the sender's "
          "own included, behind an IPv6 GRH addressed to the group",
          "[drv][ud][multicast][ipv6]") {
  auto fabric = make_fabric();
  Node a = make_node(fabric, mlx5_profile(), ud_config(), 1 << 16, 256,
                     take(hw::IpAddress::parse("fd00::a")));
  Node b = make_node(fabric, mlx5_profile(), ud_config(), 1 << 16, 256,
                     take(hw::IpAddress::parse("fd00::b")));
  for (Node* n : {&a, &b}) ud_up(*n->qp);
  const hw::Gid group = take(multicast_gid("ff0e::77:1"));
  for (Node* n : {&a, &b}) check(n->qp->attach_multicast(group));
  // An IPv4 group on an IPv6 device is refused, naming both.
  Status v4 = b.qp->attach_multicast(take(multicast_gid("239.1.2.3")));
  CHECK(v4.code() == Errc::invalid_argument);
  CHECK_THAT(v4.message(), Catch::Contains("an IPv4 group, and the device's address fd00::b is "
                                           "IPv6"));
  post_grh_recv(*a.qp, a, 10, kDst);
  post_grh_recv(*b.qp, b, 20, kDst);

  hw::AhAttr attr;
  attr.remote_gid = group;
  AddressHandle ah = take(a.pd->create_ah(attr));
  fill(a.bytes(kSrc), 200, 0x61);
  const Sge s = a.sge(kSrc, 200);
  SendWr wr = send_wr(1, &s, 1);
  wr.av = ah.av();
  wr.remote_qpn = kMulticastQpn;
  wr.remote_qkey = kQkey;
  REQUIRE(a.qp->post_send(wr) == Errc::ok);
  auto at_a = poll_n(*fabric, *a.cq, 2);  // the send and a's own copy
  auto at_b = poll_n(*fabric, *b.cq, 1);
  REQUIRE(at_a.size() == 2);
  REQUIRE(at_b.size() == 1);
  const auto check_copy = [&](const Completion& wc, Node& n) {
    CHECK(wc.status == IBV_WC_SUCCESS);
    CHECK(wc.byte_len == 200 + kGrh);
    CHECK(wc.src_qp == a.qp->qpn());
    CHECK(std::memcmp(n.bytes(kDst + kGrh), a.bytes(kSrc), 200) == 0);
    // The GRH is the IPv6 header: version 6, from a's address to the group.
    const uint8_t* grh = n.bytes(kDst);
    CHECK(grh[0] >> 4 == 6);
    CHECK(hw::IpAddress::from_bytes(grh + 8) == a.sim->address());
    CHECK(std::memcmp(grh + 24, group.raw, 16) == 0);
  };
  for (const Completion& wc : at_a)
    if (wc.opcode == IBV_WC_RECV) check_copy(wc, a);
  check_copy(at_b[0], b);
  CHECK(poll_for(*fabric, *b.cq).empty());  // once
  check(b.qp->detach_multicast(group));
  check(a.qp->detach_multicast(group));
}
