// SPDX-License-Identifier: BSD-3-Clause
// Invariant 3 (design.md): every accepted WR either executes exactly once, or completes exactly
// once with a flush error. Fetch-and-add of distinct powers of two makes double execution
// visible in the remote counter (a repeated bit carries).
#include <catch2/catch.hpp>

#include <cstring>
#include <map>

#include "sim_env.h"

using namespace rnicdv;
using namespace rnicdv::test;

namespace {

constexpr size_t kCounter = 0x3000;

uint64_t remote_counter(Node& n) {
  uint64_t v;
  std::memcpy(&v, n.bytes(kCounter), 8);
  return v;
}

// WR i adds 1 << i; signaled when `signal(i)`.
SendWr add_bit(Node& a, Node& b, uint32_t i, bool signaled, const Sge& local) {
  SendWr wr =
      write_wr(i, &local, 1, b.addr(kCounter), b.rkey(), signaled ? send_flags::signaled : send_flags::none);
  wr.opcode = WrOpcode::atomic_fetch_add;
  wr.compare_add = uint64_t{1} << i;
  (void)a;
  return wr;
}

// Posts `wr` (a fetch-and-add) through post_send(SendWr), or through post_fetch_add.
Errc post(QueuePair& qp, const SendWr& wr, bool typed) {
  if (!typed) return qp.post_send(wr);
  return qp.post_fetch_add(wr.wr_id, *wr.sg_list, wr.remote_addr, wr.rkey, wr.compare_add,
                           wr.flags);
}

}  // namespace

TEST_CASE("invariant 3: withheld WRs released at RTS execute exactly once", "[drv][invariant]") {
  const hw::DeviceProfile profile = GENERATE(mlx5_profile(), scanning_profile());
  const int mix = GENERATE(0, 1, 2);  // all signaled, every third, only the last
  const bool typed = GENERATE(false, true);  // post_send, or post_fetch_add
  INFO("profile " << profile_label(profile) << ", signal mix " << mix
                  << (typed ? ", post_fetch_add" : ", post_send"));
  Pair p = make_pair(profile);
  Node& a = p.a;
  Node& b = p.b;
  to_rtr(p);
  to_rts(b, kPsnB);

  constexpr uint32_t kWithheld = 20, kAfter = 10;
  auto signaled = [&](uint32_t i) {
    return mix == 0 || (mix == 1 && i % 3 == 0) || i == kWithheld + kAfter - 1 ||
           i == kWithheld - 1;
  };
  const Sge local = a.sge(0x100, 8);
  uint32_t expected_completions = 0;
  for (uint32_t i = 0; i < kWithheld; ++i) {
    REQUIRE(post(*a.qp, add_bit(a, b, i, signaled(i), local), typed) == Errc::ok);
    expected_completions += signaled(i);
  }
  step(*p.fabric, 16);
  to_rts(a, kPsnA);
  for (uint32_t i = kWithheld; i < kWithheld + kAfter; ++i) {
    REQUIRE(post(*a.qp, add_bit(a, b, i, signaled(i), local), typed) == Errc::ok);
    expected_completions += signaled(i);
  }
  const auto got = poll_n(*p.fabric, *a.cq, expected_completions);
  const auto extra = poll_for(*p.fabric, *a.cq, 20'000'000);
  CHECK(extra.empty());
  REQUIRE(got.size() == expected_completions);
  std::map<uint64_t, int> seen;
  for (const Completion& c : got) {
    CHECK(c.status == IBV_WC_SUCCESS);
    CHECK(signaled(static_cast<uint32_t>(c.wr_id)));
    ++seen[c.wr_id];
  }
  for (const auto& [id, count] : seen) CHECK(count == 1);
  CHECK(remote_counter(b) == (uint64_t{1} << (kWithheld + kAfter)) - 1);
  CHECK(a.snapshot().wqes_executed == kWithheld + kAfter);
}

TEST_CASE("invariant 3: withheld WRs flushed by ERR complete exactly once, in order",
          "[drv][invariant]") {
  const hw::DeviceProfile profile = GENERATE(mlx5_profile(), scanning_profile());
  const int mix = GENERATE(0, 1, 2);
  const bool typed = GENERATE(false, true);  // post_send, or post_fetch_add
  INFO("profile " << profile_label(profile) << ", signal mix " << mix
                  << (typed ? ", post_fetch_add" : ", post_send"));
  Pair p = make_pair(profile);
  Node& a = p.a;
  Node& b = p.b;
  to_rtr(p);
  to_rts(b, kPsnB);

  constexpr uint32_t kWithheld = 16, kAfterError = 5;
  const Sge local = a.sge(0x100, 8);
  for (uint32_t i = 0; i < kWithheld; ++i) {
    const bool sig = mix == 0 || (mix == 1 && i % 3 == 0);
    REQUIRE(post(*a.qp, add_bit(a, b, i, sig, local), typed) == Errc::ok);
  }
  step(*p.fabric, 16);
  check(a.qp->to_error());
  CHECK(a.qp->state() == hw::QpState::err);
  CHECK(a.qp->withheld() == 0);
  // Posting in ERR is accepted and flushed too, after the withheld ones.
  for (uint32_t i = kWithheld; i < kWithheld + kAfterError; ++i)
    REQUIRE(post(*a.qp, add_bit(a, b, i, i % 2 == 0, local), typed) == Errc::ok);

  const uint32_t total = kWithheld + kAfterError;
  const auto got = poll_n(*p.fabric, *a.cq, total);
  CHECK(poll_for(*p.fabric, *a.cq, 20'000'000).empty());
  REQUIRE(got.size() == total);
  for (uint32_t i = 0; i < total; ++i) {
    INFO("completion " << i);
    CHECK(got[i].wr_id == i);  // posting order, unsignaled WRs included
    CHECK(got[i].status == IBV_WC_WR_FLUSH_ERR);
    CHECK(got[i].qp_num == a.qp->qpn());
  }
  CHECK(remote_counter(b) == 0);
  CHECK(a.snapshot().wqes_executed == 0);
}

TEST_CASE("invariant 3: WRs posted in ERR after RTS complete after everything the device had",
          "[drv][invariant]") {
  const hw::DeviceProfile profile = GENERATE(mlx5_profile(), scanning_profile());
  const bool typed = GENERATE(false, true);  // post_send, or post_fetch_add
  INFO("profile " << profile_label(profile) << (typed ? ", post_fetch_add" : ", post_send"));
  Pair p = make_connected_pair(profile);
  Node& a = p.a;
  Node& b = p.b;
  const Sge local = a.sge(0x100, 8);

  // Unsignaled work the device executes and never reports.
  for (uint32_t i = 0; i < 6; ++i)
    REQUIRE(post(*a.qp, add_bit(a, b, i, false, local), typed) == Errc::ok);
  CHECK(poll_for(*p.fabric, *a.cq, 50'000'000).empty());
  CHECK(remote_counter(b) == 0x3f);
  // Staged, not rung, when the QP fails.
  REQUIRE(a.qp->stage_send(add_bit(a, b, 6, false, local)) == Errc::ok);
  check(a.qp->to_error());
  for (uint32_t i = 7; i < 10; ++i)
    REQUIRE(post(*a.qp, add_bit(a, b, i, false, local), typed) == Errc::ok);

  const auto got = poll_n(*p.fabric, *a.cq, 4);
  CHECK(poll_for(*p.fabric, *a.cq, 20'000'000).empty());
  // The staged WR is flushed by the device; the three posted in ERR by the driver.
  REQUIRE(got.size() == 4);
  for (uint32_t i = 0; i < 4; ++i) {
    CHECK(got[i].wr_id == 6 + i);
    CHECK(got[i].status == IBV_WC_WR_FLUSH_ERR);
  }
  CHECK(remote_counter(b) == 0x3f);
}
