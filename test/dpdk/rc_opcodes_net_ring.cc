// SPDX-License-Identifier: BSD-3-Clause
// Every RC opcode between two simulated HCAs whose wire is DPDK's net_ring: the in-process
// link of two ethdev ports, each transmitting into the ring the other receives from.
#include "dpdk_env.h"

#include <string>

#include "rnicdv/sim/dpdk.h"

using namespace rnicdv;
using namespace rnicdv::test;

TEST_CASE("every RC opcode crosses the net_ring link with data and completions intact",
          "[dpdk][opcodes]") {
  TempPcap pcap("opcodes");
  Pair p = make_dpdk_pair(pcap.path);

  // Each device has its own port of the link, address and MAC.
  const std::string ta = p.a.sim->info().transport, tb = p.b.sim->info().transport;
  INFO(ta << " / " << tb);
  CHECK(ta.find("dpdk 10.77.0.1:4791 port ") != std::string::npos);
  CHECK(ta.find("rnicdv_link0 (net_ring) mac 02:00:0a:4d:00:01") != std::string::npos);
  CHECK(tb.find("dpdk 10.77.0.2:4791 port ") != std::string::npos);
  CHECK(tb.find("rnicdv_link1 (net_ring) mac 02:00:0a:4d:00:02") != std::string::npos);

  run_every_rc_opcode(p);

  std::set<int> expected;
  for (int op = 0x00; op <= 0x14; ++op) expected.insert(op);
  const auto frames = read_pcap(pcap.path);
  const std::set<int> seen = bth_opcodes(frames);
  for (int op : expected) {
    INFO("BTH opcode 0x" << std::hex << op);
    CHECK(seen.count(op) == 1);
  }

  // Nothing was lost or rejected on the way, and every frame sent was received.
  const sim::DeviceCounters ca = p.a.counters(), cb = p.b.counters();
  CHECK(ca.rx_dropped == 0);
  CHECK(cb.rx_dropped == 0);
  CHECK(ca.retransmits == 0);
  CHECK(ca.packets_tx + cb.packets_tx == frames.size());
  CHECK(ca.packets_rx == cb.packets_tx);
  CHECK(cb.packets_rx == ca.packets_tx);
}

TEST_CASE("a second fabric in the process reuses EAL and the link", "[dpdk][eal]") {
  for (int round = 0; round < 2; ++round) {
    Pair p = make_dpdk_pair();
    uint64_t value = 7 + static_cast<uint64_t>(round);
    std::memcpy(p.a.bytes(0), &value, 8);
    const Sge sge = p.a.sge(0, 8);
    REQUIRE(p.a.qp->post_send(write_wr(1, &sge, 1, p.b.addr(0x100), p.b.rkey())) == Errc::ok);
    one_completion(p, p.a);
    CHECK(std::memcmp(p.b.bytes(0x100), &value, 8) == 0);
  }
  CHECK(sim::dpdk_memory_mode() != "");
}

TEST_CASE("EAL arguments other than the running ones are refused, naming both", "[dpdk][eal]") {
  Pair p = make_dpdk_pair();  // EAL runs with the defaults
  const Status st = sim::dpdk_init("--vdev=net_null0");
  INFO(st.message());
  CHECK(st.code() == Errc::busy);
  CHECK(st.message().find("--vdev=net_null0") != std::string::npos);
  CHECK(st.message().find("once per process") != std::string::npos);
  // Empty or identical arguments are the running EAL.
  CHECK(sim::dpdk_init("").is_ok());
}

TEST_CASE("a port that does not exist is named in the error", "[dpdk][ports]") {
  sim::FabricConfig config;
  config.mode = sim::ExecMode::deterministic;
  config.wire = sim::WireKind::dpdk;
  config.dpdk_args = "--port=net_nosuch7";
  auto r = sim::Fabric::create(config);
  REQUIRE_FALSE(r);
  INFO(r.status().message());
  CHECK(r.status().code() == Errc::not_found);
  CHECK(r.status().message().find("net_nosuch7") != std::string::npos);
}

TEST_CASE("the in-process link has two ports: a third device is refused", "[dpdk][ports]") {
  auto fabric = make_dpdk_fabric();
  auto a = fabric->add_device();
  auto b = fabric->add_device();
  REQUIRE(a);
  REQUIRE(b);
  auto c = fabric->add_device();
  REQUIRE_FALSE(c);
  INFO(c.status().message());
  CHECK(c.status().code() == Errc::no_resources);
  CHECK(c.status().message().find("one device per port") != std::string::npos);
}

TEST_CASE("registered memory from DPDK's heap carries RDMA traffic", "[dpdk][memory]") {
  Pair p = make_dpdk_pair();
  void* heap = take(sim::dpdk_alloc(1 << 16, 4096));
  REQUIRE((reinterpret_cast<uintptr_t>(heap) & 4095) == 0);
  auto* bytes = static_cast<uint8_t*>(heap);
  CHECK(bytes[0] == 0);
  CHECK(bytes[65535] == 0);  // zeroed
  std::optional<MemoryRegion> mr;
  mr.emplace(take(p.b.pd->reg_mr(heap, 1 << 16,
                                 hw::access::local_write | hw::access::remote_write |
                                     hw::access::remote_read)));
  fill_pattern(p.a.bytes(0), 3000, 9);
  const Sge sge = p.a.sge(0, 3000);
  REQUIRE(p.a.qp->post_send(write_wr(1, &sge, 1, mr->addr() + 4096, mr->rkey())) == Errc::ok);
  one_completion(p, p.a);
  CHECK(std::memcmp(bytes + 4096, p.a.bytes(0), 3000) == 0);
  mr.reset();
  sim::dpdk_free(heap);
  CHECK_FALSE(sim::dpdk_alloc(0, 64));
  CHECK_FALSE(sim::dpdk_alloc(64, 3));
}
