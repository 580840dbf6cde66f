// SPDX-License-Identifier: BSD-3-Clause
// How the early-posting strategy is chosen, and why: EarlyPost::automatic picks the shadow
// queue on a device that fetches beyond the doorbell record and in-place withholding on the
// mlx5 profile; strict keeps IB's immediate error in RTR. Forcing in-place onto a scanning
// device shows the hazard the shadow queue avoids: the device finds the withheld WQEs with no
// doorbell at all.
#include <catch2/catch.hpp>

#include <cstring>

#include "sim_env.h"

using namespace rnicdv;
using namespace rnicdv::test;

TEST_CASE("automatic early posting follows the device profile", "[drv][early_post]") {
  Pair scanning = make_pair(scanning_profile());
  CHECK(scanning.a.qp->early_post() == EarlyPost::shadow);
  Pair mlx5 = make_pair(mlx5_profile());
  CHECK(mlx5.a.qp->early_post() == EarlyPost::in_place);

  QpConfig forced = default_qp_config();
  forced.early_post = EarlyPost::in_place;
  CHECK(make_pair(scanning_profile(), forced).a.qp->early_post() == EarlyPost::in_place);
  forced.early_post = EarlyPost::shadow;
  CHECK(make_pair(mlx5_profile(), forced).a.qp->early_post() == EarlyPost::shadow);
}

TEST_CASE("strict early posting rejects sends in RTR with bad_state", "[drv][early_post]") {
  const hw::DeviceProfile profile = GENERATE(mlx5_profile(), scanning_profile());
  QpConfig config = default_qp_config();
  config.early_post = EarlyPost::strict;
  Pair p = make_pair(profile, config);
  CHECK(p.a.qp->early_post() == EarlyPost::strict);
  to_rtr(p);
  const Sge sge = p.a.sge(0, 8);
  size_t bad = 99;
  const SendWr wr = write_wr(1, &sge, 1, p.b.addr(0), p.b.rkey());
  CHECK(p.a.qp->post_send(std::span(&wr, 1), &bad) == Errc::bad_state);  // IBA C10-29
  CHECK(bad == 0);
  CHECK(p.a.qp->withheld() == 0);
  to_rts(p.b, kPsnB);
  to_rts(p.a, kPsnA);
  CHECK(p.a.qp->post_send(wr) == Errc::ok);
  CHECK(poll_n(*p.fabric, *p.a.cq, 1).size() == 1);
}

namespace {

// Withholds four signaled WRITEs of 0xab bytes into b, then moves a's device QP to RTS behind
// the driver's back (no flush, no doorbell) and lets the device run.
struct ScanOutcome {
  uint64_t beyond_dbr = 0;
  uint64_t executed = 0;
  bool remote_written = false;
};

ScanOutcome run_device_in_rts_without_doorbell(EarlyPost mode) {
  QpConfig config = default_qp_config();
  config.early_post = mode;
  Pair p = make_pair(scanning_profile(), config);
  to_rtr(p);
  to_rts(p.b, kPsnB);
  std::memset(p.a.bytes(0), 0xab, 64);
  const Sge sge = p.a.sge(0, 64);
  for (uint32_t i = 0; i < 4; ++i)
    REQUIRE(p.a.qp->post_send(write_wr(i, &sge, 1, p.b.addr(64 * i), p.b.rkey())) == Errc::ok);

  hw::QpAttr attr;
  attr.state = hw::QpState::rts;
  attr.sq_psn = kPsnA;
  namespace q = hw::qp_attr;
  check(p.a.qp->core()->hw_qp->modify(
      attr, q::state | q::sq_psn | q::timeout | q::retry_cnt | q::rnr_retry | q::max_rd_atomic));
  step(*p.fabric, 200);
  ScanOutcome out;
  out.beyond_dbr = p.a.counters().wqes_beyond_dbr;
  out.executed = p.a.snapshot().wqes_executed;
  out.remote_written = p.b.bytes(0)[0] == 0xab;
  CHECK(p.a.snapshot().sq_dbr == 0);  // the driver never announced anything
  return out;
}

}  // namespace

TEST_CASE("in-place withholding on a scanning device lets it execute withheld WQEs",
          "[drv][early_post][hazard]") {
  const ScanOutcome in_place = run_device_in_rts_without_doorbell(EarlyPost::in_place);
  CHECK(in_place.beyond_dbr > 0);
  CHECK(in_place.executed > 0);
  CHECK(in_place.remote_written);

  const ScanOutcome shadow = run_device_in_rts_without_doorbell(EarlyPost::shadow);
  CHECK(shadow.beyond_dbr == 0);
  CHECK(shadow.executed == 0);
  CHECK_FALSE(shadow.remote_written);
}

TEST_CASE("in-place withholding on a scanning device lets ERR flush withheld WQEs twice",
          "[drv][early_post][hazard]") {
  const EarlyPost mode = GENERATE(EarlyPost::in_place, EarlyPost::shadow);
  INFO("early_post " << early_post_name(mode));
  QpConfig config = default_qp_config();
  config.early_post = mode;
  Pair p = make_pair(scanning_profile(), config);
  to_rtr(p);
  const Sge sge = p.a.sge(0, 8);
  for (uint32_t i = 0; i < 5; ++i)
    REQUIRE(p.a.qp->post_send(write_wr(i, &sge, 1, p.b.addr(0), p.b.rkey())) == Errc::ok);
  check(p.a.qp->to_error());
  const auto got = poll_n(*p.fabric, *p.a.cq, 5);
  CHECK(poll_for(*p.fabric, *p.a.cq).empty());
  // The application sees each WR once either way: the driver completes the withheld WRs...
  REQUIRE(got.size() == 5);
  for (uint32_t i = 0; i < 5; ++i) CHECK(got[i].wr_id == i);
  if (mode == EarlyPost::in_place) {
    // ...but the scanning device also found them in the SQ and flushed them itself: CQEs for
    // work it was never given, which the driver can only drop.
    CHECK(p.a.counters().wqes_beyond_dbr == 5);
    CHECK(p.a.cq->orphaned_completions() == 5);
  } else {
    CHECK(p.a.counters().wqes_beyond_dbr == 0);
    CHECK(p.a.cq->orphaned_completions() == 0);
  }
}
