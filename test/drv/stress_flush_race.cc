// SPDX-License-Identifier: BSD-3-Clause
// The race of design.md: application threads post while an event thread releases the
// withheld batch (RTR->RTS) or fails the QP (RTR->ERR), repeated over many rounds on a
// threaded simulator whose device thread runs concurrently. Every accepted WR must be
// accounted for exactly once (success, or WR_FLUSH_ERR), and each thread's WRs must complete
// in its posting order. Built to run under ThreadSanitizer.
#include <catch2/catch.hpp>

#include <atomic>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "rnicdv/doorbell/barrier.h"
#include "sim_env.h"

using namespace rnicdv;
using namespace rnicdv::test;

namespace {

constexpr uint32_t kRounds = 200;

uint64_t make_id(uint32_t round, uint32_t thread, uint32_t i) {
  return (uint64_t{round} << 32) | (uint64_t{thread} << 16) | i;
}

void bring_up_to_rtr(Pair& p) {
  check(p.a.qp->reset());
  check(p.b.qp->reset());
  to_rtr(p);
  to_rts(p.b, kPsnB);
}

// One round: `posters` threads post `per_thread` signaled WRITEs each while another thread
// moves the QP to RTS or ERR after a random delay. Returns nothing; checks everything.
void run_round(Pair& p, uint32_t round, uint32_t posters, uint32_t per_thread, bool to_error,
               std::mt19937& rng) {
  bring_up_to_rtr(p);
  const uint64_t executed_before = p.a.snapshot().wqes_executed;
  std::atomic<uint32_t> ready{0};
  std::atomic<uint32_t> rejected{0};
  const uint32_t delay = rng() % 2000;

  auto poster = [&](uint32_t t) {
    const Sge sge = p.a.sge(64 * t, 32);
    ready.fetch_add(1);
    while (ready.load() < posters + 1) {
    }
    for (uint32_t i = 0; i < per_thread; ++i) {
      const SendWr wr =
          write_wr(make_id(round, t, i), &sge, 1, p.b.addr(0x1000 + 64 * t), p.b.rkey());
      if (p.a.qp->post_send(wr) != Errc::ok) rejected.fetch_add(1);
    }
  };
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < posters; ++t) threads.emplace_back(poster, t);
  std::thread events([&] {
    ready.fetch_add(1);
    while (ready.load() < posters + 1) {
    }
    for (uint32_t spin = 0; spin < delay; ++spin) doorbell::cpu_relax();
    check(to_error ? p.a.qp->to_error() : p.a.qp->to_rts(kPsnA));
  });
  for (auto& t : threads) t.join();
  events.join();
  REQUIRE(rejected.load() == 0);

  const uint32_t total = posters * per_thread;
  const auto got = poll_n(*p.fabric, *p.a.cq, total, 5'000'000'000ull);
  REQUIRE(got.size() == total);
  std::map<uint64_t, int> seen;
  std::vector<int64_t> last_index(posters, -1);
  for (const Completion& c : got) {
    INFO("round " << round << " wr " << std::hex << c.wr_id);
    REQUIRE((c.wr_id >> 32) == round);
    CHECK(c.status == (to_error ? IBV_WC_WR_FLUSH_ERR : IBV_WC_SUCCESS));
    CHECK(++seen[c.wr_id] == 1);
    const uint32_t t = (c.wr_id >> 16) & 0xffff;
    const int64_t i = c.wr_id & 0xffff;
    REQUIRE(t < posters);
    CHECK(i > last_index[t]);  // per-thread posting order
    last_index[t] = i;
  }
  CHECK(seen.size() == total);
  const uint64_t executed = p.a.snapshot().wqes_executed - executed_before;
  CHECK(executed == (to_error ? 0 : total));
  CHECK(p.a.qp->withheld() == 0);
}

void run_stress(Threading threading, uint32_t posters, uint32_t per_thread) {
  QpConfig config = default_qp_config();
  config.caps.max_send_wr = 256;
  config.threading = threading;
  Pair p = make_pair(mlx5_profile(), config, sim::ExecMode::threaded);
  REQUIRE(posters * per_thread <= p.a.qp->core()->sq.bb_count);
  std::mt19937 rng(12345);
  for (uint32_t round = 0; round < kRounds; ++round)
    run_round(p, round, posters, per_thread, round % 2 == 1, rng);
}

}  // namespace

TEST_CASE("thread-safe QP: posters racing the flush lose and duplicate nothing", "[drv][stress]") {
  run_stress(Threading::thread_safe, 3, 24);
}

TEST_CASE("single-poster QP: one poster racing the event thread loses and duplicates nothing",
          "[drv][stress]") {
  run_stress(Threading::single_poster, 1, 48);
}
