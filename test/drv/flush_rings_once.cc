// SPDX-License-Identifier: BSD-3-Clause
// A batch posted in RTR is released at establishment with exactly one doorbell-record store
// and one register write, whatever its size: BlueFlame for a single WQE on a register the QP
// owns, an 8-byte doorbell for more.
#include <catch2/catch.hpp>

#include "sim_env.h"

using namespace rnicdv;
using namespace rnicdv::test;

TEST_CASE("a batch of N withheld WRs is released with one doorbell", "[drv][flush]") {
  const hw::DeviceProfile profile = GENERATE(mlx5_profile(), scanning_profile());
  Pair p = make_pair(profile);
  Node& a = p.a;
  Node& b = p.b;
  const uint32_t depth = a.qp->core()->sq.bb_count;
  const uint32_t n = GENERATE_COPY(1u, 7u, depth);
  INFO("profile " << profile_label(profile) << ", N = " << n << ", early_post "
                  << early_post_name(a.qp->early_post()));
  REQUIRE(a.qp->doorbell_mode() == doorbell::DoorbellMode::bf);  // a dedicated register
  to_rtr(p);
  to_rts(b, kPsnB);

  const Sge sge = a.sge(0, 16);
  for (uint32_t i = 0; i < n; ++i)
    REQUIRE(a.qp->post_send(write_wr(i, &sge, 1, b.addr(16 * (i % 1024)), b.rkey(),
                                     i + 1 == n ? send_flags::signaled : send_flags::none)) == Errc::ok);
  step(*p.fabric, 8);
  const sim::DeviceCounters before = a.counters();
  CHECK(a.snapshot().uar_doorbells == 0);

  to_rts(a, kPsnA);
  step(*p.fabric, 2);
  const sim::DeviceCounters after = a.counters();
  const sim::QpSnapshot s = a.snapshot();
  CHECK(s.uar_doorbells == 1);
  CHECK(after.uar_doorbells - before.uar_doorbells == 1);
  CHECK(after.sq_dbr_advances - before.sq_dbr_advances == 1);
  CHECK(s.sq_dbr == n % 0x10000);
  CHECK(after.bf_writes - before.bf_writes == (n == 1 ? 1u : 0u));

  const auto got = poll_n(*p.fabric, *a.cq, 1);
  REQUIRE(got.size() == 1);
  CHECK(got[0].wr_id == n - 1);
  CHECK(got[0].status == IBV_WC_SUCCESS);
  CHECK(a.snapshot().wqes_executed == n);
}

TEST_CASE("a single withheld WR on a shared register is released without BlueFlame",
          "[drv][flush]") {
  auto fabric = make_fabric();
  sim::DeviceConfig dc;
  dc.profile = mlx5_profile();
  dc.dedicated_bf_regs = 0;  // every QP shares the register
  Node a;
  a.sim = take(fabric->add_device(dc));
  a.dev.emplace(take(Device::wrap(a.sim)));
  a.pd.emplace(take(a.dev->alloc_pd()));
  a.cq.emplace(take(a.dev->create_cq(64)));
  a.mem.assign(4096, 0);
  a.mr.emplace(take(a.pd->reg_mr(a.mem.data(), a.mem.size(),
                                 hw::access::local_write | hw::access::remote_write)));
  a.qp.emplace(take(a.dev->create_qp(*a.pd, *a.cq, *a.cq, default_qp_config())));
  Node b = make_node(fabric, mlx5_profile(), default_qp_config());
  CHECK(a.qp->doorbell_mode() == doorbell::DoorbellMode::db_lock);

  Pair p{fabric, std::move(a), std::move(b)};
  to_rtr(p);
  to_rts(p.b, kPsnB);
  const Sge sge = p.a.sge(0, 16);
  REQUIRE(p.a.qp->post_send(write_wr(1, &sge, 1, p.b.addr(0), p.b.rkey())) == Errc::ok);
  const sim::DeviceCounters before = p.a.counters();
  to_rts(p.a, kPsnA);
  step(*p.fabric, 2);
  const sim::DeviceCounters after = p.a.counters();
  CHECK(after.uar_doorbells - before.uar_doorbells == 1);
  CHECK(after.bf_writes == before.bf_writes);
  CHECK(poll_n(*p.fabric, *p.a.cq, 1).size() == 1);
}
