// SPDX-License-Identifier: BSD-3-Clause
// Device profiles: keeps_rtr_doorbell (mlx5: a doorbell rung below RTS runs after RTS) and
// fetches_beyond_dbr (a scanning device runs valid-looking WQEs past the doorbell record),
// in every combination.
#include <catch2/catch.hpp>

#include "sim_harness.h"

using namespace simtest;

namespace {

struct Profiled {
  Pair p;
  Buffer src, dst;

  explicit Profiled(const hw::DeviceProfile& prof)
      : p(FabricOptions{}, host(prof), Pair::default_host()) {
    src = p.a.reg(256, all_remote(), 0x33);
    dst = p.b.reg(256);
  }
  static HostOptions host(const hw::DeviceProfile& prof) {
    HostOptions o = Pair::default_host();
    o.device.profile = prof;
    return o;
  }
  // Writes one WRITE WQE into a's ring (no DBR, no doorbell).
  void write_wqe(uint32_t offset) {
    Sge sge{src.addr(offset), 8, src.lkey()};
    SendWr wr = make_wr(WrOpcode::rdma_write, &sge, 1);
    wr.remote_addr = dst.addr(offset);
    wr.rkey = dst.rkey();
    REQUIRE(p.a.post(wr) == Errc::ok);
  }
  bool arrived(uint32_t offset) const { return dst.mem[offset] == 0x33; }
  void bring_up_to_rtr() {
    to_init(p.a);
    to_init(p.b);
    to_rtr(p.a, p.b);
    to_rtr(p.b, p.a);
    to_rts(p.b);
  }
};

hw::DeviceProfile profile(bool scanning, bool keeps) {
  hw::DeviceProfile pr;
  pr.fetches_beyond_dbr = scanning;
  pr.keeps_rtr_doorbell = keeps;
  return pr;
}

}  // namespace

TEST_CASE("a doorbell rung in RTR runs after RTS on mlx5 and is dropped by a forgetful device") {
  for (bool scanning : {false, true}) {
    for (bool keeps : {true, false}) {
      INFO("scanning " << scanning << " keeps " << keeps);
      Profiled f(profile(scanning, keeps));
      f.bring_up_to_rtr();
      f.write_wqe(0);
      f.p.a.ring();
      f.p.settle();
      CHECK_FALSE(f.arrived(0));  // nothing executes below RTS, whatever the profile
      const sim::DeviceCounters c = f.p.a.counters();
      CHECK(c.uar_doorbells == 1);
      CHECK(c.rtr_doorbells_kept == (keeps ? 1u : 0u));
      CHECK(c.rtr_doorbells_dropped == (keeps ? 0u : 1u));
      CHECK(c.sq_dbr_advances == 1);

      to_rts(f.p.a);
      f.p.settle();
      // Kept: it runs now. Dropped: only a scanning device, which reads the DBR anyway,
      // runs it; a plain forgetful device waits for the next doorbell.
      CHECK(f.arrived(0) == (keeps || scanning));
      if (!keeps && !scanning) {
        f.p.a.write_register();  // the next doorbell
        f.p.settle();
        CHECK(f.arrived(0));
      }
      CHECK(f.p.a.counters().wqes_beyond_dbr == 0);
    }
  }
}

TEST_CASE("WQEs past the doorbell record run only on a scanning device") {
  for (bool scanning : {false, true}) {
    for (bool keeps : {true, false}) {
      INFO("scanning " << scanning << " keeps " << keeps);
      Profiled f(profile(scanning, keeps));
      f.p.connect();
      // Written in RTS, DBR untouched, no doorbell: a shadow-free "withheld in place" batch.
      f.write_wqe(0);
      f.write_wqe(8);
      f.p.settle();
      CHECK(f.arrived(0) == scanning);
      CHECK(f.arrived(8) == scanning);
      CHECK(f.p.a.counters().wqes_beyond_dbr == (scanning ? 2u : 0u));
      CHECK(f.p.a.counters().uar_doorbells == 0);
      // The doorbell record catches up: a non-scanning device now runs them, a scanning one
      // does not run them twice.
      f.p.a.ring();
      f.p.settle();
      CHECK(f.arrived(0));
      CHECK(f.arrived(8));
      CHECK(f.p.a.snapshot().wqes_executed == 2);
    }
  }
}

TEST_CASE("a scanning device runs a WQE written in RTR once the QP reaches RTS, not before") {
  Profiled f(profile(true, true));
  f.bring_up_to_rtr();
  f.write_wqe(0);
  f.p.settle();
  CHECK_FALSE(f.arrived(0));
  to_rts(f.p.a);
  f.p.settle();
  CHECK(f.arrived(0));
  CHECK(f.p.a.counters().wqes_beyond_dbr == 1);
}

TEST_CASE("a scanning device flushes valid-looking WQEs past the DBR when the QP fails") {
  Profiled f(profile(true, true));
  f.bring_up_to_rtr();
  f.write_wqe(0);
  f.write_wqe(8);
  to_state(f.p.a, hw::QpState::err);
  f.p.settle();
  Completion c;
  int flushed = 0;
  while (f.p.a.poll_send(&c)) {
    CHECK(c.status == IBV_WC_WR_FLUSH_ERR);
    ++flushed;
  }
  CHECK(flushed == 2);
  CHECK_FALSE(f.arrived(0));

  Profiled g(profile(false, true));
  g.bring_up_to_rtr();
  g.write_wqe(0);
  to_state(g.p.a, hw::QpState::err);
  g.p.settle();
  CHECK_FALSE(g.p.a.poll_send(&c));  // the device never knew of it: the driver flushes it
}

TEST_CASE("profile names parse and print") {
  for (const char* name : {"mlx5", "scanning", "forgetful", "scanning-forgetful"}) {
    auto pr = sim::parse_profile(name);
    REQUIRE(pr);
    CHECK(sim::profile_name(pr.value()) == name);
  }
  CHECK(sim::parse_profile("mlx5")->keeps_rtr_doorbell);
  CHECK_FALSE(sim::parse_profile("mlx5")->fetches_beyond_dbr);
  CHECK(sim::parse_profile("scanning-forgetful")->fetches_beyond_dbr);
  CHECK_FALSE(sim::parse_profile("scanning-forgetful")->keeps_rtr_doorbell);
  auto bad = sim::parse_profile("bogus");
  REQUIRE_FALSE(bad);
  CHECK(bad.status().message().find("bogus") != std::string::npos);
}
