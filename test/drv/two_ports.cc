// SPDX-License-Identifier: BSD-3-Clause
// Two-port simulated HCAs (sim::DeviceConfig::ports): each port has its own address on the
// wire and its own GID (DeviceInfo::ports); a QP sends and receives through the port its INIT
// transition names (QueuePair::to_init with a port), its endpoint carries that port's GID,
// and the port counters count each port's own traffic. A frame to the other port's address
// is not the QP's; a port the device has not is refused.
#include "sim_env.h"

using namespace rnicdv;
using namespace rnicdv::test;

namespace {

struct TwoPortNode {
  std::vector<uint8_t> mem = std::vector<uint8_t>(1 << 16);
  std::shared_ptr<sim::Device> sim;
  std::optional<Device> dev;
  std::optional<ProtectionDomain> pd;
  std::optional<CompletionQueue> cq;
  std::optional<MemoryRegion> mr;
};

TwoPortNode make_two_port_node(const std::shared_ptr<sim::Fabric>& fabric, uint8_t ports = 2) {
  TwoPortNode n;
  sim::DeviceConfig dc;
  dc.ports = ports;
  n.sim = take(fabric->add_device(dc));
  n.dev.emplace(take(Device::wrap(n.sim)));
  n.pd.emplace(take(n.dev->alloc_pd()));
  n.cq.emplace(take(n.dev->create_cq(256)));
  n.mr.emplace(take(n.pd->reg_mr(n.mem.data(), n.mem.size(),
                                 hw::access::local_write | hw::access::remote_write |
                                     hw::access::remote_read)));
  return n;
}

// Brings qa (on port_a) and qb (on port_b) to RTS, each the other's peer.
void connect_on_ports(QueuePair& qa, uint8_t port_a, QueuePair& qb, uint8_t port_b) {
  check(qa.to_init(hw::access::remote_write, port_a));
  check(qb.to_init(hw::access::remote_write, port_b));
  check(qa.to_rtr(qb.local_endpoint(kPsnB), hw::Mtu::mtu1024));
  check(qb.to_rtr(qa.local_endpoint(kPsnA), hw::Mtu::mtu1024));
  check(qa.to_rts(kPsnA));
  check(qb.to_rts(kPsnB));
}

uint64_t counter(TwoPortNode& n, uint8_t port, const char* name) {
  return take(n.dev->read_port_counter(port, name));
}

}  // namespace

TEST_CASE("a two-port HCA has two addresses; a QP on port 2 sends and receives through it, and "
          "each port counts its own traffic", "[ports]") {
  auto fabric = make_fabric();
  TwoPortNode a = make_two_port_node(fabric), b = make_two_port_node(fabric);
  const hw::DeviceInfo& ia = a.dev->info();
  REQUIRE(ia.ports.size() == 2);
  CHECK(ia.ports[0].gid.to_string() == ia.gid.to_string());
  CHECK(ia.ports[1].gid.to_string() != ia.gid.to_string());
  CHECK(ia.ports[1].gid_index == 3);
  CHECK(ia.transport.find("port 2") != std::string::npos);

  QueuePair qa = take(a.dev->create_qp(*a.pd, *a.cq, *a.cq, default_qp_config()));
  QueuePair qb = take(b.dev->create_qp(*b.pd, *b.cq, *b.cq, default_qp_config()));
  connect_on_ports(qa, 2, qb, 2);
  // Each end's endpoint names its port 2's GID.
  CHECK(qa.local_endpoint(kPsnA).gid.to_string() == ia.ports[1].gid.to_string());

  std::memset(a.mem.data(), 0x42, 4096);
  const Sge sge = a.mr->sge(0, 4096);
  REQUIRE(qa.post_send(write_wr(1, &sge, 1, b.mr->addr() + 0x2000, b.mr->rkey())) == Errc::ok);
  const std::vector<Completion> done = poll_n(*fabric, *a.cq, 1);
  REQUIRE(done.size() == 1);
  CHECK(done[0].status == IBV_WC_SUCCESS);
  CHECK(b.mem[0x2000] == 0x42);
  CHECK(b.mem[0x2fff] == 0x42);

  // Four request packets left a's port 2 and reached b's port 2; the ACKs came back the same
  // way. Port 1 carried nothing.
  CHECK(counter(a, 2, "counters/port_xmit_packets") == 4);
  CHECK(counter(b, 2, "counters/port_rcv_packets") == 4);
  CHECK(counter(a, 2, "counters/port_rcv_packets") >= 1);
  CHECK(counter(a, 2, "counters/port_xmit_data") * 4 >= 4096);
  CHECK(counter(a, 1, "counters/port_xmit_packets") == 0);
  CHECK(counter(b, 1, "counters/port_rcv_packets") == 0);
  const sim::DeviceCounters ca = a.sim->counters();
  CHECK(ca.port2_packets_tx == ca.packets_tx);
}

TEST_CASE("a QP on port 1 reaches a peer's port 2; a frame to the port its QP is not on is "
          "dropped", "[ports]") {
  auto fabric = make_fabric();
  TwoPortNode a = make_two_port_node(fabric), b = make_two_port_node(fabric);
  QueuePair qa = take(a.dev->create_qp(*a.pd, *a.cq, *a.cq, default_qp_config()));
  QueuePair qb = take(b.dev->create_qp(*b.pd, *b.cq, *b.cq, default_qp_config()));
  connect_on_ports(qa, 1, qb, 2);
  std::memset(a.mem.data(), 0x17, 64);
  const Sge sge = a.mr->sge(0, 64);
  REQUIRE(qa.post_send(write_wr(1, &sge, 1, b.mr->addr(), b.mr->rkey())) == Errc::ok);
  REQUIRE(poll_n(*fabric, *a.cq, 1).at(0).status == IBV_WC_SUCCESS);
  CHECK(b.mem[0] == 0x17);
  CHECK(counter(a, 1, "counters/port_xmit_packets") == 1);
  CHECK(counter(b, 2, "counters/port_rcv_packets") == 1);

  // Now a QP that addresses b's port 1, where b's QP is not: nothing it sends is taken, and
  // its WR ends with transport retries exhausted.
  QueuePair qc = take(a.dev->create_qp(*a.pd, *a.cq, *a.cq, default_qp_config()));
  QueuePair qd = take(b.dev->create_qp(*b.pd, *b.cq, *b.cq, default_qp_config()));
  check(qc.to_init(hw::access::remote_write));
  check(qd.to_init(hw::access::remote_write, 2));
  QpEndpoint wrong = qd.local_endpoint(kPsnB);
  wrong.gid = b.dev->info().ports[0].gid;  // b's port 1 address, not its QP's port
  check(qc.to_rtr(wrong, hw::Mtu::mtu1024));
  check(qd.to_rtr(qc.local_endpoint(kPsnA), hw::Mtu::mtu1024));
  check(qc.to_rts(kPsnA, /*timeout=*/1, /*retry_cnt=*/1));
  check(qd.to_rts(kPsnB));
  const uint64_t dropped_before = b.sim->counters().rx_dropped;
  REQUIRE(qc.post_send(write_wr(2, &sge, 1, b.mr->addr() + 0x100, b.mr->rkey())) == Errc::ok);
  const std::vector<Completion> failed = poll_n(*fabric, *a.cq, 1);
  REQUIRE(failed.size() == 1);
  CHECK(failed[0].wr_id == 2);
  CHECK(failed[0].status == IBV_WC_RETRY_EXC_ERR);
  CHECK(b.mem[0x100] == 0);
  CHECK(b.sim->counters().rx_dropped > dropped_before);
}

TEST_CASE("ports a device has not are refused, naming the port; multicast is port 1's",
          "[ports][errors]") {
  auto fabric = make_fabric();
  TwoPortNode two = make_two_port_node(fabric), one = make_two_port_node(fabric, 1);
  CHECK(one.dev->info().ports.size() == 1);
  QueuePair q1 = take(one.dev->create_qp(*one.pd, *one.cq, *one.cq, default_qp_config()));
  Status st = q1.to_init(hw::access::remote_write, 2);
  REQUIRE_FALSE(st);
  CHECK_THAT(st.message(), Catch::Matchers::Contains("only port 1"));
  QueuePair q2 = take(two.dev->create_qp(*two.pd, *two.cq, *two.cq, default_qp_config()));
  st = q2.to_init(hw::access::remote_write, 3);
  REQUIRE_FALSE(st);
  CHECK_THAT(st.message(), Catch::Matchers::Contains("only ports 1 and 2"));
  CHECK(q2.state() == hw::QpState::reset);

  Result<uint64_t> none = two.dev->read_port_counter(3, "counters/port_xmit_packets");
  REQUIRE_FALSE(none);
  CHECK_THAT(none.status().message(), Catch::Matchers::Contains("ports 1 and 2"));
  CHECK_FALSE(one.dev->read_port_counter(2, "counters/port_xmit_packets"));

  QpConfig ud = default_qp_config();
  ud.type = hw::QpType::ud;
  QueuePair u = take(two.dev->create_qp(*two.pd, *two.cq, *two.cq, ud));
  hw::QpAttr attr;
  attr.state = hw::QpState::init;
  attr.port_num = 2;
  attr.qkey = 0x11111111;
  check(u.modify(attr, hw::qp_attr::state | hw::qp_attr::port | hw::qp_attr::qkey));
  const Status joined = u.attach_multicast(take(multicast_gid("239.1.2.3")));
  REQUIRE_FALSE(joined);
  CHECK_THAT(joined.message(), Catch::Matchers::Contains("port 1"));
  // A QP that joined on port 1 does not move to port 2 while it is attached.
  QueuePair member = take(two.dev->create_qp(*two.pd, *two.cq, *two.cq, ud));
  attr.port_num = 1;
  check(member.modify(attr, hw::qp_attr::state | hw::qp_attr::port | hw::qp_attr::qkey));
  const hw::Gid group = take(multicast_gid("239.1.2.4"));
  check(member.attach_multicast(group));
  attr.port_num = 2;
  const Status moved = member.modify(attr, hw::qp_attr::state | hw::qp_attr::port);
  REQUIRE_FALSE(moved);
  CHECK_THAT(moved.message(), Catch::Matchers::Contains("multicast groups"));
  check(member.detach_multicast(group));
  check(member.modify(attr, hw::qp_attr::state | hw::qp_attr::port));

  // An address handle is made for a port: its address vector names that port's GID index.
  for (uint8_t port : {uint8_t{1}, uint8_t{2}}) {
    hw::AhAttr ah_attr;
    ah_attr.remote_gid = one.dev->info().gid;
    ah_attr.port = port;
    AddressHandle ah = take(two.pd->create_ah(ah_attr));
    const uint32_t gid_index = be32toh(ah.av()->grh_gid_fl) >> 20 & 0xff;
    CHECK(gid_index == two.dev->info().ports[port - 1u].gid_index);
  }
  hw::AhAttr port3;
  port3.remote_gid = one.dev->info().gid;
  port3.port = 3;
  Result<AddressHandle> no_ah = two.pd->create_ah(port3);
  REQUIRE_FALSE(no_ah);
  CHECK(no_ah.status().code() == Errc::invalid_argument);
  CHECK_THAT(no_ah.status().message(), Catch::Matchers::Contains("port 3"));

  sim::DeviceConfig bad;
  bad.ports = 3;
  Result<std::shared_ptr<sim::Device>> three = fabric->add_device(bad);
  REQUIRE_FALSE(three);
  CHECK_THAT(three.status().message(), Catch::Matchers::Contains("1 or 2"));
}

TEST_CASE("fault rules name a two-port device by either port: device= and addr= reach port 2's "
          "frames", "[ports][faults]") {
  // The addresses the wire picks are the same in each fabric of the same configuration: a
  // first fabric learns port 2's, a second names it.
  std::string b_port2;
  {
    auto fabric = make_fabric();
    TwoPortNode a = make_two_port_node(fabric), b = make_two_port_node(fabric);
    b_port2 = b.dev->info().ports[1].gid.ip().to_string();
  }
  auto run = [](const std::string& spec, uint64_t* retransmits) {
    sim::FabricConfig config;
    config.mode = sim::ExecMode::deterministic;
    config.wire = sim::WireKind::inproc;
    config.seed = 7;
    config.fault_spec = spec;
    auto fabric = take(sim::Fabric::create(config));
    TwoPortNode a = make_two_port_node(fabric), b = make_two_port_node(fabric);
    QueuePair qa = take(a.dev->create_qp(*a.pd, *a.cq, *a.cq, default_qp_config()));
    QueuePair qb = take(b.dev->create_qp(*b.pd, *b.cq, *b.cq, default_qp_config()));
    connect_on_ports(qa, 2, qb, 2);
    const Sge sge = a.mr->sge(0, 256);
    REQUIRE(qa.post_send(write_wr(1, &sge, 1, b.mr->addr(), b.mr->rkey())) == Errc::ok);
    const std::vector<Completion> done = poll_n(*fabric, *a.cq, 1, 10'000'000'000ull);
    REQUIRE(done.size() == 1);
    *retransmits = a.sim->counters().retransmits;
    return done[0].status;
  };
  uint64_t retransmits = 0;
  // device=0 is a: its WRITE leaves from port 2, dropped once and sent again.
  CHECK(run("drop nth=1 opcode=write device=0", &retransmits) == IBV_WC_SUCCESS);
  CHECK(retransmits >= 1);
  // addr= b's port 2 address: b answers the WRITE with the chosen NAK.
  CHECK(run("wr status=remote_access opcode=write addr=" + b_port2, &retransmits) ==
        IBV_WC_REM_ACCESS_ERR);
}
