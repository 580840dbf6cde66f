// SPDX-License-Identifier: BSD-3-Clause
// Invariant 1 (design.md): no send doorbell — the SQ word of the doorbell record or a UAR
// write — is written while the QP is below RTS. The receive word is written from INIT on.
// Checked with what the simulated device saw, with the device stepped between posts.
#include <catch2/catch.hpp>

#include "sim_env.h"

using namespace rnicdv;
using namespace rnicdv::test;

TEST_CASE("invariant 1: no SQ doorbell record or UAR write while below RTS", "[drv][invariant]") {
  // Every withholding strategy each profile accepts (in place is refused on a scanning
  // device: early_post_policy.cc).
  const auto [profile, mode] = GENERATE(table<hw::DeviceProfile, EarlyPost>(
      {{mlx5_profile(), EarlyPost::in_place},
       {mlx5_profile(), EarlyPost::shadow},
       {scanning_profile(), EarlyPost::shadow}}));
  // The WRITEs through post_send(SendWr), or through the typed post_write / stage_write.
  const bool typed = GENERATE(false, true);
  INFO("profile " << profile_label(profile) << ", early_post " << early_post_name(mode)
                  << (typed ? ", typed calls" : ", post_send"));
  QpConfig config = default_qp_config();
  config.early_post = mode;
  Pair p = make_pair(profile, config);
  Node& a = p.a;
  Node& b = p.b;
  REQUIRE(a.qp->early_post() == mode);

  to_rtr(p);
  to_rts(b, kPsnB);
  const sim::DeviceCounters before = a.counters();

  // Receives are posted and announced from INIT on: the RQ word moves.
  const Sge rsge = a.sge(0x8000, 64);
  RecvWr rwr;
  rwr.wr_id = 77;
  rwr.sg_list = &rsge;
  rwr.num_sge = 1;
  REQUIRE(a.qp->post_recv(rwr) == Errc::ok);

  const Sge sge = a.sge(0, 32);
  uint32_t posted = 0;
  for (uint32_t i = 0; i < 12; ++i) {
    const SendWr wr =
        write_wr(i, &sge, 1, b.addr(64 * i), b.rkey(), i % 3 == 2 ? send_flags::signaled : send_flags::none);
    if (i % 4 == 3) {
      REQUIRE((typed ? a.qp->stage_write(wr.wr_id, sge, wr.remote_addr, wr.rkey, wr.flags)
                     : a.qp->stage_send(wr)) == Errc::ok);
      a.qp->ring_send();  // withheld as well: nothing to ring below RTS
    } else {
      REQUIRE((typed ? a.qp->post_write(wr.wr_id, sge, wr.remote_addr, wr.rkey, wr.flags)
                     : a.qp->post_send(wr)) == Errc::ok);
    }
    ++posted;
    // Let the device run between posts, and poll (the progress hook runs it too).
    step(*p.fabric, 8);
    Completion c[4];
    REQUIRE(a.cq->poll(c, 4) == 0);

    const sim::QpSnapshot s = a.snapshot();
    INFO("after post " << i);
    CHECK(s.state == hw::QpState::rtr);
    CHECK(s.sq_dbr == 0);
    CHECK(s.uar_doorbells == 0);
    CHECK(s.sq_dbr_advances == 0);
    const sim::DeviceCounters now = a.counters();
    CHECK(now.uar_doorbells == before.uar_doorbells);
    CHECK(now.sq_dbr_advances == before.sq_dbr_advances);
    CHECK(now.rtr_doorbells_kept == 0);
    CHECK(now.rtr_doorbells_dropped == 0);
  }
  REQUIRE(a.qp->withheld() == posted);
  CHECK(a.snapshot().rq_dbr == 1);
  CHECK(a.counters().rq_dbr_advances > before.rq_dbr_advances);

  // Reaching RTS releases the batch: one doorbell record store, one register write.
  to_rts(a, kPsnA);
  CHECK(a.qp->withheld() == 0);
  CHECK(a.snapshot().sq_dbr == posted);  // 1-block WQEs
  step(*p.fabric, 4);                    // the device notices register writes when its engine runs
  const sim::QpSnapshot after = a.snapshot();
  CHECK(after.uar_doorbells == 1);
  CHECK(after.sq_dbr_advances == 1);
  const auto done = poll_n(*p.fabric, *a.cq, posted / 3);
  CHECK(done.size() == posted / 3);
}
