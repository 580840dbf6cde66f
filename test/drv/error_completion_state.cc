// SPDX-License-Identifier: BSD-3-Clause
// A completion error moves the QP to ERR on the device (IBA 10.3.1); the driver's state()
// follows as soon as the poller has seen the error CQE, as ibv_query_qp would report, and
// later posts complete with WR_FLUSH_ERR after whatever the device still held.
#include <catch2/catch.hpp>

#include "sim_env.h"

using namespace rnicdv;
using namespace rnicdv::test;

namespace {

// Posts one WRITE with `wr`'s fault on a, waits for its error completion.
Completion fail_one(Pair& p, const SendWr& wr) {
  REQUIRE(p.a.qp->post_send(wr) == Errc::ok);
  const auto got = poll_n(*p.fabric, *p.a.cq, 1);
  REQUIRE(got.size() == 1);
  return got[0];
}

}  // namespace

TEST_CASE("after a completion error the QP reports ERR and later posts complete with flush errors",
          "[drv][state]") {
  const Threading threading =
      GENERATE(Threading::single, Threading::single_poster, Threading::thread_safe);
  const bool bad_rkey = GENERATE(false, true);
  INFO(threading_name(threading) << (bad_rkey ? ", bad rkey" : ", bad lkey"));
  QpConfig config = default_qp_config();
  config.threading = threading;
  Pair p = make_connected_pair(mlx5_profile(), config);
  Sge sge = p.a.sge(0, 8);
  if (!bad_rkey) sge.lkey ^= 0x5a5a00;
  const SendWr bad = write_wr(1, &sge, 1, p.b.addr(0), bad_rkey ? p.b.rkey() ^ 0x5a5a00 : p.b.rkey());
  const Completion c = fail_one(p, bad);
  CHECK(c.wr_id == 1);
  CHECK(c.status == (bad_rkey ? IBV_WC_REM_ACCESS_ERR : IBV_WC_LOC_PROT_ERR));
  CHECK(p.a.qp->state() == hw::QpState::err);

  // Accepted, not run: completed with WR_FLUSH_ERR, in order, signaled or not.
  const Sge good = p.a.sge(0, 8);
  REQUIRE(p.a.qp->post_send(write_wr(2, &good, 1, p.b.addr(0), p.b.rkey())) == Errc::ok);
  REQUIRE(p.a.qp->post_send(write_wr(3, &good, 1, p.b.addr(0), p.b.rkey(), 0)) == Errc::ok);
  const auto flushed = poll_n(*p.fabric, *p.a.cq, 2);
  REQUIRE(flushed.size() == 2);
  CHECK(flushed[0].wr_id == 2);
  CHECK(flushed[1].wr_id == 3);
  CHECK(flushed[0].status == IBV_WC_WR_FLUSH_ERR);
  CHECK(flushed[1].status == IBV_WC_WR_FLUSH_ERR);
  CHECK(poll_for(*p.fabric, *p.a.cq).empty());
  CHECK(p.a.cq->orphaned_completions() == 0);

  // ERR is left only through RESET, as on any QP.
  CHECK(p.a.qp->to_rts(kPsnA).code() == Errc::bad_state);
  check(p.a.qp->reset());
  CHECK(p.a.qp->state() == hw::QpState::reset);
}

TEST_CASE("exhausted retries move the QP to ERR in the driver's view too", "[drv][state]") {
  // The peer's QP is in ERR and drops every request: no ACK, the local ACK timeout fires
  // retry_cnt times, and the WRITE completes with RETRY_EXC_ERR.
  Pair p = make_pair(mlx5_profile());
  to_rtr(p);
  to_rts(p.b, kPsnB);
  check(p.a.qp->to_rts(kPsnA, /*timeout=*/8, /*retry_cnt=*/1));
  check(p.b.qp->to_error());
  const Sge sge = p.a.sge(0, 8);
  REQUIRE(p.a.qp->post_send(write_wr(1, &sge, 1, p.b.addr(0), p.b.rkey())) == Errc::ok);
  CHECK(p.a.qp->state() == hw::QpState::rts);
  const auto got = poll_n(*p.fabric, *p.a.cq, 1);
  REQUIRE(got.size() == 1);
  CHECK(got[0].status == IBV_WC_RETRY_EXC_ERR);
  CHECK(p.a.qp->state() == hw::QpState::err);
}
