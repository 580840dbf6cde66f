// SPDX-License-Identifier: BSD-3-Clause
// How the early-posting strategy is chosen, and why: EarlyPost::automatic picks the shadow
// queue on a device that fetches beyond the doorbell record and in-place withholding on the
// mlx5 profile; strict keeps IB's immediate error in RTR. In-place withholding is refused on a
// scanning device, and the hazard it would meet is shown: the device runs WQEs it finds in
// the SQ with no doorbell at all.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>

#include "sim_env.h"

using namespace rnicdv;
using namespace rnicdv::test;

TEST_CASE("automatic early posting follows the device profile", "[drv][early_post]") {
  Pair scanning = make_pair(scanning_profile());
  CHECK(scanning.a.qp->early_post() == EarlyPost::shadow);
  Pair mlx5 = make_pair(mlx5_profile());
  CHECK(mlx5.a.qp->early_post() == EarlyPost::in_place);

  QpConfig forced = default_qp_config();
  forced.early_post = EarlyPost::shadow;
  CHECK(make_pair(mlx5_profile(), forced).a.qp->early_post() == EarlyPost::shadow);
  CHECK(make_pair(scanning_profile(), forced).a.qp->early_post() == EarlyPost::shadow);
}

TEST_CASE("in-place withholding is refused on a device that fetches beyond the doorbell record",
          "[drv][early_post]") {
  const char* name = GENERATE("mlx5", "forgetful", "scanning", "scanning-forgetful");
  INFO("profile " << name);
  hw::DeviceProfile profile;
  REQUIRE(hw::device_profile_from_name(name, &profile));
  auto fabric = make_fabric();
  sim::DeviceConfig dc;
  dc.profile = profile;
  auto sim_dev = take(fabric->add_device(dc));
  Device dev = take(Device::wrap(sim_dev));
  ProtectionDomain pd = take(dev.alloc_pd());
  CompletionQueue cq = take(dev.create_cq(64));
  QpConfig config = default_qp_config();
  config.early_post = EarlyPost::in_place;
  auto qp = dev.create_qp(pd, cq, cq, config);
  if (!profile.fetches_beyond_dbr) {
    REQUIRE(qp.is_ok());
    CHECK(qp.value().early_post() == EarlyPost::in_place);
    return;
  }
  REQUIRE_FALSE(qp.is_ok());
  CHECK(qp.status().code() == Errc::unsupported);
  const std::string message = qp.status().message();
  INFO(message);
  CHECK(message.find(dev.name()) != std::string::npos);  // the object
  CHECK(message.find("create_qp") != std::string::npos);  // the operation
  CHECK(message.find(std::string("'") + name + "'") != std::string::npos);  // the profile
  CHECK(message.find("beyond the doorbell record") != std::string::npos);  // the reason
  // The same device still gives a QP that withholds safely.
  config.early_post = EarlyPost::automatic;
  CHECK(take(dev.create_qp(pd, cq, cq, config)).early_post() == EarlyPost::shadow);
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

// Four signaled WRITEs of 0xab bytes into b sit in a's SQ with no doorbell: withheld by a
// shadow-queue QP, or written straight into the SQ as in-place withholding would leave them
// (built here with the driver's encoder, since the driver refuses that policy on this
// device). Then a's device QP is moved to RTS behind the driver's back (no flush, no
// doorbell) and the device runs.
struct ScanOutcome {
  uint64_t beyond_dbr = 0;
  uint64_t executed = 0;
  bool remote_written = false;
};

ScanOutcome run_device_in_rts_without_doorbell(bool wqes_in_sq) {
  QpConfig config = default_qp_config();
  config.early_post = EarlyPost::shadow;
  Pair p = make_pair(scanning_profile(), config);
  to_rtr(p);
  to_rts(p.b, kPsnB);
  std::memset(p.a.bytes(0), 0xab, 64);
  const Sge sge = p.a.sge(0, 64);
  detail::QpCore& core = *p.a.qp->core();
  for (uint32_t i = 0; i < 4; ++i) {
    const SendWr wr = write_wr(i, &sge, 1, p.b.addr(64 * i), p.b.rkey());
    if (wqes_in_sq) {
      wqe::EncodedWqe enc;
      REQUIRE(wqe::encode_send_wqe(core.sq, i, core.sq.bb_count - i, core.qpn, wr, core.limits,
                                   0, &enc) == Errc::ok);
    } else {
      REQUIRE(p.a.qp->post_send(wr) == Errc::ok);
    }
  }

  hw::QpAttr attr;
  attr.state = hw::QpState::rts;
  attr.sq_psn = kPsnA;
  namespace q = hw::qp_attr;
  check(core.hw_qp->modify(
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

TEST_CASE("a scanning device executes WQEs left in the SQ without a doorbell, and none in a "
          "shadow queue",
          "[drv][early_post][hazard]") {
  const ScanOutcome in_sq = run_device_in_rts_without_doorbell(true);
  CHECK(in_sq.beyond_dbr == 4);
  CHECK(in_sq.executed == 4);
  CHECK(in_sq.remote_written);

  const ScanOutcome shadow = run_device_in_rts_without_doorbell(false);
  CHECK(shadow.beyond_dbr == 0);
  CHECK(shadow.executed == 0);
  CHECK_FALSE(shadow.remote_written);
}

TEST_CASE("a shadow queue on a scanning device completes each withheld WR once on ERR",
          "[drv][early_post]") {
  QpConfig config = default_qp_config();
  config.early_post = EarlyPost::shadow;
  Pair p = make_pair(scanning_profile(), config);
  to_rtr(p);
  const Sge sge = p.a.sge(0, 8);
  for (uint32_t i = 0; i < 5; ++i)
    REQUIRE(p.a.qp->post_send(write_wr(i, &sge, 1, p.b.addr(0), p.b.rkey())) == Errc::ok);
  check(p.a.qp->to_error());
  const auto got = poll_n(*p.fabric, *p.a.cq, 5);
  CHECK(poll_for(*p.fabric, *p.a.cq).empty());
  REQUIRE(got.size() == 5);
  for (uint32_t i = 0; i < 5; ++i) {
    CHECK(got[i].wr_id == i);
    CHECK(got[i].status == IBV_WC_WR_FLUSH_ERR);
  }
  // The device found nothing in the SQ to flush on its own.
  CHECK(p.a.counters().wqes_beyond_dbr == 0);
  CHECK(p.a.cq->orphaned_completions() == 0);
}
