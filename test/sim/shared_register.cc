// SPDX-License-Identifier: BSD-3-Clause
// A doorbell is never lost on a shared register: when two QPs ring the same half before the
// device looks, only one write survives, and the device checks every QP bound to the
// register against its doorbell record.
#include <catch2/catch.hpp>

#include "sim_harness.h"

using namespace simtest;

TEST_CASE("two QPs overwrite each other's doorbell on a shared register; both run") {
  auto fabric = make_fabric();
  HostOptions o = Pair::default_host();
  o.device.dedicated_bf_regs = 0;  // every QP shares one register
  auto dev_a = must(fabric->add_device(o.device));
  auto dev_b = must(fabric->add_device(o.device));
  constexpr int kQps = 3;
  std::vector<std::unique_ptr<Host>> a, b;
  for (int i = 0; i < kQps; ++i) {
    a.push_back(std::make_unique<Host>());
    a.back()->init_on(dev_a, o);
    b.push_back(std::make_unique<Host>());
    b.back()->init_on(dev_b, o);
    connect(*a.back(), *b.back());
    CHECK(a.back()->view().bf_shared);
  }
  REQUIRE(a[0]->view().dv.bf.reg == a[2]->view().dv.bf.reg);

  std::vector<Buffer> src, dst;
  for (int i = 0; i < kQps; ++i) {
    src.push_back(a[i]->reg(64, all_remote(), static_cast<uint8_t>(0x10 + i)));
    dst.push_back(b[i]->reg(64));
  }
  for (int round = 0; round < 5; ++round) {
    for (int i = 0; i < kQps; ++i) {
      Sge sge{src[i].addr(), 8, src[i].lkey()};
      SendWr wr = make_wr(WrOpcode::rdma_write, &sge, 1);
      wr.remote_addr = dst[i].addr(8 * round);
      wr.rkey = dst[i].rkey();
      REQUIRE(a[i]->post(wr) == Errc::ok);
      a[i]->store_sq_dbr();
    }
    // All three write the same half (each QP's own offset is 0 then 256...): the device
    // sees one write naming the last QP.
    for (int i = 0; i < kQps; ++i) a[i]->bf_offset = 0;
    for (int i = 0; i < kQps; ++i) a[i]->write_register();
    Completion c;
    for (int i = 0; i < kQps; ++i) {
      Host& h = *a[i];
      REQUIRE(fabric->run_until([&] { return h.poll_send(&c); }, 1'000'000'000));
      CHECK(c.status == IBV_WC_SUCCESS);
      CHECK(dst[i].mem[8 * round] == 0x10 + i);
    }
  }
  const sim::DeviceCounters k = dev_a->counters();
  CHECK(k.uar_doorbells == 5);  // one surviving write per round
  CHECK(k.sq_dbr_advances == 15);
}

TEST_CASE("a BlueFlame copy is counted and consumed like a doorbell") {
  Pair p;
  p.connect();
  Buffer a = p.a.reg(64, all_remote(), 7);
  Buffer b = p.b.reg(64);
  Sge sge{a.addr(), 8, a.lkey()};
  SendWr wr = make_wr(WrOpcode::rdma_write, &sge, 1);
  wr.remote_addr = b.addr();
  wr.rkey = b.rkey();
  REQUIRE(p.a.post(wr) == Errc::ok);
  p.a.ring(/*blueflame=*/true);
  CHECK(p.wait_send(p.a).status == IBV_WC_SUCCESS);
  REQUIRE(p.a.post(wr) == Errc::ok);
  p.a.ring(false);
  CHECK(p.wait_send(p.a).status == IBV_WC_SUCCESS);
  const sim::DeviceCounters k = p.a.counters();
  CHECK(k.uar_doorbells == 2);
  CHECK(k.bf_writes == 1);
  CHECK(p.a.snapshot().uar_doorbells == 2);
  // Both halves were used and consumed.
  const auto* reg = static_cast<const uint64_t*>(p.a.view().dv.bf.reg);
  CHECK(reg[0] == 0);
  CHECK(reg[1] == 0);
  CHECK(reg[32] == 0);
}
