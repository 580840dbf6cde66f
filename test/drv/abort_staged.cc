// SPDX-License-Identifier: BSD-3-Clause
// QueuePair::abort_staged, as ibv_wr_abort: WRs built since the last doorbell and not given to
// the device are taken back. None runs, completes or is flushed; their room is free again; the
// next post runs as if they had never been staged. Where the device may already have seen
// them (a scanning device's SQ), the call refuses and they stay posted.
#include <catch2/catch.hpp>

#include <cstring>

#include "sim_env.h"

using namespace rnicdv;
using namespace rnicdv::test;

namespace {

// The 8 bytes of a node's buffer at `offset`, as a word.
uint64_t word_at(Node& n, size_t offset) {
  uint64_t v;
  std::memcpy(&v, n.bytes(offset), sizeof v);
  return v;
}

}  // namespace

TEST_CASE("WRs staged in RTS and aborted never run nor complete, and their room is free again",
          "[drv][abort_staged]") {
  const Threading threading =
      GENERATE(Threading::single, Threading::single_poster, Threading::thread_safe);
  INFO(threading_name(threading));
  QpConfig config = default_qp_config();
  config.threading = threading;
  Pair p = make_connected_pair(mlx5_profile(), config);
  fill(p.a.bytes(kSrc), 64, 0x11);
  const Sge sge = p.a.sge(kSrc, 8);
  const uint32_t depth = p.a.qp->core()->sq.bb_count;
  const sim::DeviceCounters before = p.a.counters();

  // A full queue of staged WRITEs, a typed and a generic one among them.
  SendWr wr = write_wr(1000, &sge, 1, p.b.addr(kDst), p.b.rkey(), send_flags::signaled);
  REQUIRE(p.a.qp->stage_send(wr) == Errc::ok);
  for (uint32_t i = 1; i < depth; ++i)
    REQUIRE(p.a.qp->stage_write(1000 + i, sge, p.b.addr(kDst + 8 * (i % 64)), p.b.rkey(),
                                send_flags::signaled) == Errc::ok);
  CHECK(p.a.qp->stage_write(1, sge, p.b.addr(kDst), p.b.rkey(), 0) == Errc::queue_full);

  const Result<uint32_t> aborted = p.a.qp->abort_staged();
  REQUIRE(aborted.is_ok());
  CHECK(aborted.value() == depth);
  CHECK(p.a.qp->abort_staged().value() == 0);  // nothing left to take back
  p.a.qp->ring_send();                          // nothing to ring
  step(*p.fabric, 256);
  CHECK(p.a.counters().uar_doorbells == before.uar_doorbells);
  CHECK(p.a.snapshot().wqes_executed == 0);
  CHECK(word_at(p.b, kDst) == 0);
  CHECK(poll_for(*p.fabric, *p.a.cq).empty());

  // The whole queue is free: as many WRs post again, and only these complete, in order.
  for (uint32_t i = 0; i < depth; ++i)
    REQUIRE(p.a.qp->stage_write(i, sge, p.b.addr(kDst), p.b.rkey(), send_flags::signaled) ==
            Errc::ok);
  p.a.qp->ring_send();
  const auto got = poll_n(*p.fabric, *p.a.cq, depth);
  REQUIRE(got.size() == depth);
  for (uint32_t i = 0; i < depth; ++i) {
    CHECK(got[i].wr_id == i);
    CHECK(got[i].status == IBV_WC_SUCCESS);
  }
  CHECK(word_at(p.b, kDst) == word_at(p.a, kSrc));
  CHECK(poll_for(*p.fabric, *p.a.cq).empty());
}

TEST_CASE("abort_staged takes back only what follows the last doorbell", "[drv][abort_staged]") {
  Pair p = make_connected_pair(mlx5_profile());
  fill(p.a.bytes(kSrc), 64, 0x22);
  const Sge sge = p.a.sge(kSrc, 8);
  REQUIRE(p.a.qp->stage_write(1, sge, p.b.addr(kDst), p.b.rkey(), send_flags::signaled) ==
          Errc::ok);
  REQUIRE(p.a.qp->post_write(2, sge, p.b.addr(kDst + 8), p.b.rkey(), send_flags::signaled) ==
          Errc::ok);  // rings for 1 and 2
  REQUIRE(p.a.qp->stage_write(3, sge, p.b.addr(kDst + 16), p.b.rkey(), send_flags::signaled) ==
          Errc::ok);
  CHECK(p.a.qp->abort_staged().value() == 1);
  const auto got = poll_n(*p.fabric, *p.a.cq, 2);
  REQUIRE(got.size() == 2);
  CHECK(got[0].wr_id == 1);
  CHECK(got[1].wr_id == 2);
  step(*p.fabric, 256);
  CHECK(poll_for(*p.fabric, *p.a.cq).empty());
  CHECK(word_at(p.b, kDst + 8) == word_at(p.a, kSrc));
  CHECK(word_at(p.b, kDst + 16) == 0);
}

TEST_CASE("early-posted WRs aborted in RTR are not released at RTS nor flushed",
          "[drv][abort_staged][early_post]") {
  const EarlyPost mode = GENERATE(EarlyPost::in_place, EarlyPost::shadow);
  const bool then_error = GENERATE(false, true);
  INFO(early_post_name(mode) << (then_error ? ", then ERR" : ", then RTS"));
  QpConfig config = default_qp_config();
  config.early_post = mode;
  Pair p = make_pair(mlx5_profile(), config);
  to_rtr(p);
  to_rts(p.b, kPsnB);
  fill(p.a.bytes(kSrc), 64, 0x33);
  const Sge sge = p.a.sge(kSrc, 8);
  REQUIRE(p.a.qp->post_write(1, sge, p.b.addr(kDst), p.b.rkey(), send_flags::signaled) ==
          Errc::ok);
  REQUIRE(p.a.qp->stage_write(2, sge, p.b.addr(kDst + 8), p.b.rkey(), send_flags::signaled) ==
          Errc::ok);
  REQUIRE(p.a.qp->withheld() == 2);
  CHECK(p.a.qp->abort_staged().value() == 2);
  CHECK(p.a.qp->withheld() == 0);
  if (then_error) {
    check(p.a.qp->to_error());
  } else {
    to_rts(p.a, kPsnA);
    REQUIRE(p.a.qp->post_write(3, sge, p.b.addr(kDst + 16), p.b.rkey(), send_flags::signaled) ==
            Errc::ok);
  }
  step(*p.fabric, 256);
  const auto got = poll_for(*p.fabric, *p.a.cq);
  if (then_error) {
    CHECK(got.empty());  // nothing to flush: the aborted WRs are gone
  } else {
    REQUIRE(got.size() == 1);
    CHECK(got[0].wr_id == 3);
    CHECK(got[0].status == IBV_WC_SUCCESS);
  }
  CHECK(word_at(p.b, kDst) == 0);
  CHECK(word_at(p.b, kDst + 8) == 0);
}

TEST_CASE("on a scanning device, WRs staged in the SQ are not taken back and still complete",
          "[drv][abort_staged]") {
  Pair p = make_connected_pair(scanning_profile());
  const Sge sge = p.a.sge(kSrc, 8);
  REQUIRE(p.a.qp->stage_write(7, sge, p.b.addr(kDst), p.b.rkey(), send_flags::signaled) ==
          Errc::ok);
  const Result<uint32_t> r = p.a.qp->abort_staged();
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().code() == Errc::bad_state);
  CHECK_THAT(r.status().message(), Catch::Contains("abort_staged") &&
                                       Catch::Contains("beyond the doorbell record"));
  p.a.qp->ring_send();
  const auto got = poll_n(*p.fabric, *p.a.cq, 1);
  REQUIRE(got.size() == 1);
  CHECK(got[0].wr_id == 7);
  CHECK(got[0].status == IBV_WC_SUCCESS);
}

TEST_CASE("abort_staged on a moved-from QueuePair is invalid_argument", "[drv][abort_staged]") {
  Pair p = make_connected_pair(mlx5_profile());
  QueuePair moved = std::move(*p.a.qp);
  const Result<uint32_t> r = p.a.qp->abort_staged();
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().code() == Errc::invalid_argument);
}
