// SPDX-License-Identifier: BSD-3-Clause
// Doorbell modes, resolved once at QP creation: automatic picks BlueFlame on a register the
// QP owns and DB_LOCK on a shared one; an explicit DB never copies the WQE to the register.
#include <catch2/catch.hpp>

#include "sim_env.h"

using namespace rnicdv;
using namespace rnicdv::test;

TEST_CASE("automatic doorbell mode follows the register's sharing", "[drv][doorbell]") {
  auto fabric = make_fabric();
  sim::DeviceConfig dc;
  dc.dedicated_bf_regs = 2;
  auto sim_dev = take(fabric->add_device(dc));
  Device dev = take(Device::wrap(sim_dev));
  ProtectionDomain pd = take(dev.alloc_pd());
  CompletionQueue cq = take(dev.create_cq(64));
  std::vector<QueuePair> qps;
  for (int i = 0; i < 4; ++i) qps.push_back(take(dev.create_qp(pd, cq, cq, default_qp_config())));
  CHECK(qps[0].doorbell_mode() == doorbell::DoorbellMode::bf);
  CHECK(qps[1].doorbell_mode() == doorbell::DoorbellMode::bf);
  CHECK(qps[2].doorbell_mode() == doorbell::DoorbellMode::db_lock);
  CHECK(qps[3].doorbell_mode() == doorbell::DoorbellMode::db_lock);
}

TEST_CASE("each doorbell mode rings exactly once per post, BlueFlame only in bf mode",
          "[drv][doorbell]") {
  const doorbell::DoorbellMode mode =
      GENERATE(doorbell::DoorbellMode::db, doorbell::DoorbellMode::bf,
               doorbell::DoorbellMode::db_lock, doorbell::DoorbellMode::automatic);
  INFO("mode " << doorbell::doorbell_mode_name(mode));
  QpConfig config = default_qp_config();
  config.doorbell = mode;
  Pair p = make_connected_pair(mlx5_profile(), config);
  const doorbell::DoorbellMode resolved =
      mode == doorbell::DoorbellMode::automatic ? doorbell::DoorbellMode::bf : mode;
  CHECK(p.a.qp->doorbell_mode() == resolved);

  const Sge sge = p.a.sge(0, 8);
  const sim::DeviceCounters before = p.a.counters();
  REQUIRE(p.a.qp->post_send(write_wr(1, &sge, 1, p.b.addr(0), p.b.rkey())) == Errc::ok);
  const SendWr two[2] = {write_wr(2, &sge, 1, p.b.addr(8), p.b.rkey()),
                         write_wr(3, &sge, 1, p.b.addr(16), p.b.rkey())};
  REQUIRE(p.a.qp->post_send(two) == Errc::ok);
  const auto got = poll_n(*p.fabric, *p.a.cq, 3);
  REQUIRE(got.size() == 3);
  const sim::DeviceCounters after = p.a.counters();
  CHECK(after.uar_doorbells - before.uar_doorbells == 2);
  CHECK(after.bf_writes - before.bf_writes == (resolved == doorbell::DoorbellMode::bf ? 1u : 0u));
}
