// SPDX-License-Identifier: BSD-3-Clause
// The bandwidth table's figures against hand-computed values, and the receive refill.
#include <catch2/catch.hpp>

#include <vector>

#include "run_context.h"
#include "stats.h"

using rnicperf::best_ticks_per_message;
using rnicperf::BwUnit;
using rnicperf::compute_bandwidth;

TEST_CASE("average bandwidth and message rate use 2^20-byte MiB and 10^9-bit Gb", "[bw]") {
  // 1000 messages of 64 KiB in one second (1e9 ticks at 1e9 ticks/s).
  auto mib = compute_bandwidth(65536, 1000, 1'000'000'000ull, 1e9, BwUnit::mib_per_sec, 0);
  CHECK(mib.bw_avg == Approx(62.5));
  CHECK(mib.msg_rate == Approx(0.001));
  CHECK(mib.bw_peak == 0);
  auto gb = compute_bandwidth(65536, 1000, 1'000'000'000ull, 1e9, BwUnit::gbit_per_sec, 0);
  CHECK(gb.bw_avg == Approx(0.524288));
  CHECK(gb.msg_rate == Approx(0.001));
}

TEST_CASE("peak bandwidth is the best window from a post to a signaled completion", "[bw]") {
  SECTION("iterations a multiple of the CQ moderation") {
    std::vector<uint64_t> posted = {0, 10, 20, 30};
    std::vector<uint64_t> completed = {0, 50, 0, 70};  // cq_mod 2: indices 1 and 3 signaled
    // Windows: (50-0)/2=25 (70-0)/4=17 (50-10)/1=40 (70-10)/3=20 (70-20)/2=25 (70-30)/1=40.
    CHECK(best_ticks_per_message(posted, completed, 1, 2) == 17);
    auto r = compute_bandwidth(1048576, 4, 70, 1e9, BwUnit::mib_per_sec, 17);
    CHECK(r.bw_peak == Approx(1e9 / 17.0));
  }
  SECTION("the last message is signaled even off the moderation grid") {
    std::vector<uint64_t> posted = {0, 10, 20, 30, 40};
    std::vector<uint64_t> completed = {0, 50, 0, 80, 85};
    // Best: (85 - 0) / 5 = 17 over the whole run.
    CHECK(best_ticks_per_message(posted, completed, 1, 2) == 17);
  }
  SECTION("post lists start windows only at list boundaries") {
    std::vector<uint64_t> posted = {0, 0, 100, 100};
    std::vector<uint64_t> completed = {0, 40, 0, 110};  // lists of 2, one CQE per list
    // i=0: j=1 40/2=20, j=3 110/4=27; i=2: j=3 (110-100)/2=5.
    CHECK(best_ticks_per_message(posted, completed, 2, 2) == 5);
    // Starting inside a list (i=1 or 3) would be wrong; with lists of 1 they count:
    CHECK(best_ticks_per_message(posted, completed, 1, 2) == 5);
  }
  SECTION("no stamped completion: no peak") {
    std::vector<uint64_t> posted = {0, 10};
    std::vector<uint64_t> completed = {0, 0};
    CHECK(best_ticks_per_message(posted, completed, 1, 1) == 0);
  }
}

TEST_CASE("bidirectional results are the sum of both directions", "[bw]") {
  rnicperf::BandwidthResult a{65536, 1000, 100, 90, 0.5}, b{65536, 1000, 50, 40, 0.25};
  auto s = rnicperf::sum(a, b);
  CHECK(s.bw_peak == Approx(150));
  CHECK(s.bw_avg == Approx(130));
  CHECK(s.msg_rate == Approx(0.75));
  CHECK(s.iterations == 1000);
}

TEST_CASE("receives are refilled in whole lists once a list's worth is consumed, up to the "
          "count the run expects",
          "[bw][recv_post_list]") {
  // perftest's run_iter_bw_server: 32 posted at the start (4 lists of 8), 96 expected.
  rnicperf::RecvRefill refill(8, 32, 96);
  std::vector<uint64_t> lists_at;  // the completion after which a list is posted
  for (uint64_t done = 1; done <= 96; ++done)
    if (refill.completed()) lists_at.push_back(done);
  CHECK(lists_at == std::vector<uint64_t>{8, 16, 24, 32, 40, 48, 56, 64});
  CHECK(refill.posted() == 96);  // never more than the run consumes

  // One at a time (the default) is the old behaviour: a receive for each one consumed.
  rnicperf::RecvRefill single(1, 4, 10);
  int posts = 0;
  for (int done = 0; done < 10; ++done) posts += single.completed() ? 1 : 0;
  CHECK(posts == 6);
  CHECK(single.posted() == 10);

  // Duration mode expects no end: every list's worth consumed is posted again.
  rnicperf::RecvRefill endless(4, 8, UINT64_MAX);
  int lists = 0;
  for (int done = 0; done < 1000; ++done) lists += endless.completed() ? 1 : 0;
  CHECK(lists == 250);

  // A last partial list is not posted: the run expects fewer than a list more.
  rnicperf::RecvRefill tail(4, 8, 14);
  int tail_lists = 0;
  for (int done = 0; done < 14; ++done) tail_lists += tail.completed() ? 1 : 0;
  CHECK(tail_lists == 1);
  CHECK(tail.posted() == 12);
}

TEST_CASE("--report-per-port: each port's share is over the window's time, and the shares add "
          "up to the total",
          "[bw][dual_port]") {
  // 3000 operations of 4096 bytes in one second (at 1e9 ticks a second), 1000 on port 2's QPs.
  const auto r = rnicperf::compute_bandwidth_per_port(4096, 3000, 1000, 1'000'000'000, 1e9,
                                                      rnicperf::BwUnit::mib_per_sec);
  CHECK(r.iterations == 3000);
  CHECK(r.bw_peak == 0);
  CHECK(r.bw_avg == Approx(3000.0 * 4096 / 1048576));
  CHECK(r.msg_rate == Approx(0.003));
  CHECK(r.port[0].bw_avg == Approx(2000.0 * 4096 / 1048576));
  CHECK(r.port[0].msg_rate == Approx(0.002));
  CHECK(r.port[1].bw_avg == Approx(1000.0 * 4096 / 1048576));
  CHECK(r.port[1].msg_rate == Approx(0.001));
  CHECK(r.port[0].bw_avg + r.port[1].bw_avg == Approx(r.bw_avg));
  // perftest's formula: tsize * iters_per_port * cycles_to_units / (cycles * format_factor).
  const auto g = rnicperf::compute_bandwidth_per_port(65536, 10, 4, 2'000'000'000, 1e9,
                                                      rnicperf::BwUnit::gbit_per_sec);
  CHECK(g.port[1].bw_avg == Approx(65536.0 * 4 / 2 / 125000000));
  // Without -O every operation is port 1's.
  const auto one = rnicperf::compute_bandwidth_per_port(64, 10, 0, 1'000'000'000, 1e9,
                                                        rnicperf::BwUnit::mib_per_sec);
  CHECK(one.port[0].msg_rate == Approx(one.msg_rate));
  CHECK(one.port[1].msg_rate == 0);
  // -b: the two sides' shares add up, port by port.
  const auto both = rnicperf::sum(r, r);
  CHECK(both.port[0].bw_avg == Approx(2 * r.port[0].bw_avg));
  CHECK(both.port[1].msg_rate == Approx(0.002));
}

TEST_CASE("a duration window counts port 2's operations at the same edges as the total",
          "[bw][dual_port]") {
  rnicperf::DurationWindow w;
  w.sample_from = 100;
  w.sample_to = 200;
  w.end = 300;
  rnicperf::WindowCount c;
  c.observe(w, 50, 10, 4);
  c.observe(w, 100, 20, 9);   // the window opens
  c.observe(w, 150, 60, 30);
  c.observe(w, 210, 90, 41);  // and closes
  c.observe(w, 250, 99, 50);
  CHECK(c.iterations() == 70);
  CHECK(c.second_port_iterations() == 32);
  CHECK(c.ticks() == 110);
}
