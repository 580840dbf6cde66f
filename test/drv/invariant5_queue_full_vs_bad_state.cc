// SPDX-License-Identifier: BSD-3-Clause
// Invariant 5 (design.md): the withheld batch never exceeds the SQ, and a full queue is
// reported as Errc::queue_full, never as a state error; state errors are Errc::bad_state.
#include <catch2/catch.hpp>

#include "sim_env.h"

using namespace rnicdv;
using namespace rnicdv::test;

TEST_CASE("invariant 5: filling the SQ in RTR gives queue_full, then the batch runs at RTS",
          "[drv][invariant]") {
  const hw::DeviceProfile profile = GENERATE(mlx5_profile(), scanning_profile());
  const bool typed = GENERATE(false, true);  // post_send, or post_write
  INFO("profile " << profile_label(profile) << (typed ? ", post_write" : ", post_send"));
  Pair p = make_pair(profile);
  Node& a = p.a;
  Node& b = p.b;
  to_rtr(p);
  to_rts(b, kPsnB);

  const uint32_t sq_blocks = a.qp->core()->sq.bb_count;
  REQUIRE(sq_blocks >= a.qp->caps().max_send_wr);
  const Sge sge = a.sge(0, 8);
  uint32_t accepted = 0;
  Errc err = Errc::ok;
  while (accepted <= sq_blocks) {
    const uint64_t dst = b.addr(8 * (accepted % 512));
    err = typed ? a.qp->post_write(accepted, sge, dst, b.rkey(), send_flags::signaled)
                : a.qp->post_send(write_wr(accepted, &sge, 1, dst, b.rkey(), send_flags::signaled));
    if (err != Errc::ok) break;
    ++accepted;
  }
  CHECK(err == Errc::queue_full);
  CHECK(accepted == sq_blocks);  // one block per WQE: the SQ holds exactly this many
  CHECK(a.qp->withheld() == sq_blocks);
  CHECK(a.qp->state() == hw::QpState::rtr);
  // Still full, still queue_full: the state is not the reason.
  size_t bad = 99;
  const SendWr again[2] = {write_wr(1, &sge, 1, b.addr(0), b.rkey()),
                           write_wr(2, &sge, 1, b.addr(0), b.rkey())};
  CHECK(a.qp->post_send(again, &bad) == Errc::queue_full);
  CHECK(bad == 0);

  to_rts(a, kPsnA);
  const auto got = poll_n(*p.fabric, *a.cq, sq_blocks);
  REQUIRE(got.size() == sq_blocks);
  for (uint32_t i = 0; i < sq_blocks; ++i) CHECK(got[i].wr_id == i);
  // Room again.
  CHECK(a.qp->post_send(write_wr(7, &sge, 1, b.addr(0), b.rkey())) == Errc::ok);
}

TEST_CASE("invariant 5: posting sends in RESET and INIT is bad_state, not queue_full",
          "[drv][invariant]") {
  const hw::DeviceProfile profile = GENERATE(mlx5_profile(), scanning_profile());
  Pair p = make_pair(profile);
  Node& a = p.a;
  const Sge sge = a.sge(0, 8);
  const SendWr wr = write_wr(1, &sge, 1, p.b.addr(0), p.b.rkey());
  size_t bad = 99;
  REQUIRE(a.qp->state() == hw::QpState::reset);
  CHECK(a.qp->post_send(std::span(&wr, 1), &bad) == Errc::bad_state);
  CHECK(bad == 0);
  CHECK(a.qp->stage_send(wr) == Errc::bad_state);
  RecvWr rwr;
  rwr.sg_list = &sge;
  rwr.num_sge = 1;
  CHECK(a.qp->post_recv(rwr) == Errc::bad_state);  // IBA C10-22

  check(a.qp->to_init());
  CHECK(a.qp->post_send(wr) == Errc::bad_state);  // IBA C10-25
  CHECK(a.qp->post_write(1, sge, p.b.addr(0), p.b.rkey(), 0) == Errc::bad_state);
  CHECK(a.qp->stage_write(1, sge, p.b.addr(0), p.b.rkey(), 0) == Errc::bad_state);
  CHECK(a.qp->post_recv(rwr) == Errc::ok);
  CHECK(a.qp->withheld() == 0);
  CHECK(a.snapshot().sq_dbr == 0);
}

TEST_CASE("invariant 5: a full SQ in RTS is queue_full", "[drv][invariant]") {
  Pair p = make_connected_pair(mlx5_profile());
  Node& a = p.a;
  // Nothing executes (so nothing retires) while the SQ is filled.
  a.sim->pause();
  const Sge sge = a.sge(0, 8);
  const uint32_t sq_blocks = a.qp->core()->sq.bb_count;
  for (uint32_t i = 0; i < sq_blocks; ++i)
    REQUIRE(a.qp->post_send(write_wr(i, &sge, 1, p.b.addr(0), p.b.rkey())) == Errc::ok);
  CHECK(a.qp->post_send(write_wr(9999, &sge, 1, p.b.addr(0), p.b.rkey())) == Errc::queue_full);
  CHECK(a.qp->post_write(9999, sge, p.b.addr(0), p.b.rkey(), 0) == Errc::queue_full);
  CHECK(a.qp->post_fetch_add(9999, sge, p.b.addr(0), p.b.rkey(), 1, 0) == Errc::queue_full);
  CHECK(a.qp->post_message_inline(9999, "x", 1, 0) == Errc::queue_full);
  a.sim->resume();
  CHECK(poll_n(*p.fabric, *a.cq, sq_blocks).size() == sq_blocks);
}
