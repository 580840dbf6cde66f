// SPDX-License-Identifier: BSD-3-Clause
// Destroying objects with work outstanding, in any order: the device QP goes away, withheld
// work is discarded, CQEs the device already wrote for the QP are dropped and counted, and
// nothing leaks (the suite runs under ASan).
#include <catch2/catch.hpp>

#include "sim_env.h"

using namespace rnicdv;
using namespace rnicdv::test;

TEST_CASE("destroying a QP with completions in its CQ counts them as orphaned", "[drv][destroy]") {
  const hw::DeviceProfile profile = GENERATE(mlx5_profile(), scanning_profile());
  Pair p = make_connected_pair(profile);
  const Sge sge = p.a.sge(0, 8);
  for (uint32_t i = 0; i < 5; ++i)
    REQUIRE(p.a.qp->post_send(write_wr(i, &sge, 1, p.b.addr(8 * i), p.b.rkey())) == Errc::ok);
  // Let the device finish the work without polling the CQ.
  REQUIRE(p.fabric->run_until([&] { return p.a.counters().cqes_written >= 5; }));
  const uint32_t qpn = p.a.qp->qpn();
  p.a.qp.reset();
  CHECK_FALSE(p.a.sim->qp_snapshot(qpn).is_ok());  // the device QP is gone
  Completion c[8];
  CHECK(p.a.cq->poll(c, 8) == 0);
  CHECK(p.a.cq->orphaned_completions() == 5);
}

TEST_CASE("destroying a QP with withheld work discards it without completions", "[drv][destroy]") {
  const hw::DeviceProfile profile = GENERATE(mlx5_profile(), scanning_profile());
  Pair p = make_pair(profile);
  to_rtr(p);
  const Sge sge = p.a.sge(0, 8);
  for (uint32_t i = 0; i < 7; ++i)
    REQUIRE(p.a.qp->post_send(write_wr(i, &sge, 1, p.b.addr(0), p.b.rkey())) == Errc::ok);
  REQUIRE(p.a.qp->withheld() == 7);
  p.a.qp.reset();
  CHECK(poll_for(*p.fabric, *p.a.cq).empty());
  CHECK(p.a.cq->orphaned_completions() == 0);
  CHECK(p.a.counters().uar_doorbells == 0);
}

TEST_CASE("destroying a QP with software flush errors pending drops them", "[drv][destroy]") {
  Pair p = make_pair(mlx5_profile());
  to_rtr(p);
  const Sge sge = p.a.sge(0, 8);
  for (uint32_t i = 0; i < 3; ++i)
    REQUIRE(p.a.qp->post_send(write_wr(i, &sge, 1, p.b.addr(0), p.b.rkey())) == Errc::ok);
  check(p.a.qp->to_error());
  p.a.qp.reset();
  Completion c[8];
  CHECK(p.a.cq->poll(c, 8) == 0);
}

TEST_CASE("objects may be destroyed in any order", "[drv][destroy]") {
  const int order = GENERATE(0, 1, 2, 3);
  INFO("order " << order);
  Pair p = make_connected_pair(mlx5_profile());
  const Sge sge = p.a.sge(0, 8);
  for (uint32_t i = 0; i < 4; ++i)
    REQUIRE(p.a.qp->post_send(write_wr(i, &sge, 1, p.b.addr(0), p.b.rkey())) == Errc::ok);
  Node& a = p.a;
  REQUIRE(p.fabric->run_until([&] { return a.counters().cqes_written >= 4; }));
  switch (order) {
    case 0:  // the device handle first: every object keeps the device alive
      a.dev.reset();
      a.mr.reset();
      a.pd.reset();
      a.cq.reset();
      a.qp.reset();
      break;
    case 1:  // the CQ and PD before the QP that uses them
      a.cq.reset();
      a.pd.reset();
      step(*p.fabric, 50);
      a.qp.reset();
      a.mr.reset();
      a.dev.reset();
      break;
    case 2:  // the QP, then poll the CQ that still holds its completions
    {
      a.qp.reset();
      Completion c[8];
      CHECK(a.cq->poll(c, 8) == 0);
      CHECK(a.cq->orphaned_completions() == 4);
      a.cq.reset();
      break;
    }
    case 3:  // the sim device's last handle dropped while driver objects live
      a.sim.reset();
      a.qp.reset();
      a.cq.reset();
      break;
  }
  SUCCEED("no crash, no leak");
}

TEST_CASE("moving a QueuePair transfers ownership; assigning over one destroys it",
          "[drv][destroy]") {
  Pair p = make_pair(mlx5_profile());
  const uint32_t first = p.a.qp->qpn();
  QueuePair moved = std::move(*p.a.qp);
  CHECK(moved.qpn() == first);
  QueuePair other = take(p.a.dev->create_qp(*p.a.pd, *p.a.cq, *p.a.cq, default_qp_config()));
  const uint32_t second = other.qpn();
  other = std::move(moved);  // destroys QP `second`
  CHECK(other.qpn() == first);
  CHECK_FALSE(p.a.sim->qp_snapshot(second).is_ok());
  CHECK(p.a.sim->qp_snapshot(first).is_ok());
}

TEST_CASE("a moved-from QueuePair or CompletionQueue answers every call with a clear error",
          "[drv][destroy]") {
  Pair p = make_connected_pair(mlx5_profile());
  QueuePair live = std::move(*p.a.qp);
  QueuePair& gone = *p.a.qp;  // moved from
  const Sge sge = p.a.sge(0, 8);
  const SendWr wr = write_wr(1, &sge, 1, p.b.addr(0), p.b.rkey());
  size_t bad = 99;
  CHECK(gone.post_send(std::span(&wr, 1), &bad) == Errc::invalid_argument);
  CHECK(bad == 0);
  CHECK(gone.stage_send(wr) == Errc::invalid_argument);
  gone.ring_send();
  RecvWr rwr;
  rwr.wr_id = 2;
  rwr.sg_list = &sge;
  rwr.num_sge = 1;
  CHECK(gone.post_recv(rwr) == Errc::invalid_argument);
  CHECK(gone.post_send(std::span<const SendWr>()) == Errc::ok);  // nothing asked, nothing done
  CHECK(gone.state() == hw::QpState::reset);
  CHECK(gone.qpn() == 0);
  CHECK(gone.withheld() == 0);
  const Status s = gone.to_error();
  CHECK(s.code() == Errc::invalid_argument);
  CHECK_THAT(s.message(), Catch::Matchers::Contains("moved from"));
  CHECK(gone.to_rts(kPsnA).code() == Errc::invalid_argument);

  // The QP it moved to still works, and nothing reached the device from the moved-from one.
  REQUIRE(live.post_send(wr) == Errc::ok);
  const auto got = poll_n(*p.fabric, *p.a.cq, 1);
  REQUIRE(got.size() == 1);
  CHECK(got[0].wr_id == 1);

  CompletionQueue cq = std::move(*p.a.cq);
  Completion c[4];
  CHECK(p.a.cq->poll(c, 4) == 0);
  CHECK(p.a.cq->cqn() == 0);
  CHECK(p.a.cq->entries() == 0);
  CHECK_FALSE(p.a.cq->in_error());
}
