// SPDX-License-Identifier: BSD-3-Clause
// The latency table's figures on fixed sample vectors, against hand-computed values.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "stats.h"

using rnicperf::compute_latency;
using rnicperf::compute_latency_duration;
using rnicperf::deltas_from_posts;

TEST_CASE("samples are the gaps between successive posts", "[latency]") {
  std::vector<uint64_t> posts = {100, 250, 330, 600};
  std::vector<uint64_t> deltas(3);
  deltas_from_posts(posts, deltas);
  CHECK(deltas == std::vector<uint64_t>{150, 80, 270});
}

TEST_CASE("the two largest samples are dropped and t_max is perftest's index", "[latency]") {
  // 1 tick = 1 ns; READ: full round trip (rtt factor 1).
  std::vector<uint64_t> d = {1000, 1200, 1100, 1300, 5000, 900, 1050, 1150, 1250, 9000};
  auto r = compute_latency(d, 1000.0, 1, 64, 11);
  CHECK(r.samples == 8);
  CHECK(r.size == 64);
  CHECK(r.iterations == 11);
  CHECK(r.t_min == Approx(0.900));
  // sorted[n] with n = 10 - 2: the second-largest raw sample (9000 never shows).
  CHECK(r.t_max == Approx(5.000));
  // Even count: the mean of the two middle kept values (1100, 1150).
  CHECK(r.t_typical == Approx(1.125));
  CHECK(r.t_avg == Approx(1.11875));
  // Population stdev of the kept eight: sqrt(124687.5 / 8) ns.
  CHECK(r.t_stdev == Approx(0.1248437).epsilon(1e-6));
  // ceil(8 * 0.99) = ceil(8 * 0.999) = 8.
  CHECK(r.p99 == Approx(5.000));
  CHECK(r.p999 == Approx(5.000));
}

TEST_CASE("odd sample counts take the middle value and WRITE halves the round trip", "[latency]") {
  std::vector<uint64_t> d = {70, 10, 60, 20, 50, 30, 40};  // ticks, 1 tick = 1 us
  auto r = compute_latency(d, 1.0, 2, 2, 8);
  CHECK(r.samples == 5);
  CHECK(r.t_min == Approx(5.0));
  CHECK(r.t_typical == Approx(15.0));
  CHECK(r.t_avg == Approx(15.0));
  CHECK(r.t_stdev == Approx(7.0710678));
  CHECK(r.t_max == Approx(30.0));
  CHECK(r.p99 == Approx(30.0));
}

TEST_CASE("sub-microsecond jitter is not printed as a zero stdev", "[latency]") {
  // perftest casts each deviation to int microseconds, so this jitter reads 0.00 there.
  std::vector<uint64_t> d;
  for (int i = 0; i < 100; ++i) d.push_back(i % 2 ? 1300 : 1100);  // 1.1 and 1.3 us
  auto r = compute_latency(d, 1000.0, 1, 2, 101);
  CHECK(r.t_stdev == Approx(0.1).epsilon(0.01));
  CHECK(r.t_stdev > 0.05);
}

TEST_CASE("percentiles index the sorted samples at ceil(0.99 n) and ceil(0.999 n)", "[latency]") {
  SECTION("1000 kept samples") {
    std::vector<uint64_t> d(1002);
    std::iota(d.begin(), d.end(), 1);  // 1..1002
    auto r = compute_latency(d, 1.0, 1, 2, 1003);
    CHECK(r.samples == 1000);
    CHECK(r.p99 == Approx(991.0));     // sorted[990]
    CHECK(r.p999 == Approx(1000.0));   // sorted[999]
    CHECK(r.t_max == Approx(1001.0));  // sorted[1000]
    CHECK(r.t_typical == Approx(500.5));
  }
  SECTION("perftest's default 1000 iterations: the 99.9th percentile is t_max") {
    std::vector<uint64_t> d(999);
    std::iota(d.begin(), d.end(), 1);  // 1..999, n = 997
    auto r = compute_latency(d, 1.0, 1, 2, 1000);
    CHECK(r.p99 == Approx(989.0));   // sorted[ceil(987.03)] = sorted[988]
    CHECK(r.p999 == Approx(998.0));  // sorted[997]
    CHECK(r.p999 == r.t_max);
  }
}

TEST_CASE("too few samples give an empty result instead of reading out of bounds", "[latency]") {
  std::vector<uint64_t> d = {5, 6};
  auto r = compute_latency(d, 1.0, 1, 2, 3);
  CHECK(r.samples == 0);
  CHECK(r.t_avg == 0);
}

TEST_CASE("duration mode reports the mean exchange time and exchanges per second", "[latency]") {
  // 2 s window at 1000 ticks/us, 1e6 exchanges, half round trip: 1 us each way.
  auto r = compute_latency_duration(2'000'000'000ull, 1000.0, 2, 2, 1'000'000);
  CHECK(r.t_avg == Approx(1.0));
  CHECK(r.tps == Approx(500000.0));
}

TEST_CASE("the histogram counts every sample in log-scaled buckets", "[latency][histogram]") {
  std::vector<uint64_t> d = {1000, 1000, 1100, 2000, 3900, 4000};  // ns at 1000 ticks/us
  auto h = rnicperf::make_histogram(d, 1000.0, 1);
  CHECK(h.total == 6);
  uint64_t sum = 0;
  for (const auto& b : h.buckets) {
    sum += b.count;
    CHECK(b.hi_us > b.lo_us);
    // kBucketsPerOctave buckets per doubling.
    CHECK(b.hi_us / b.lo_us == Approx(std::exp2(1.0 / rnicperf::kBucketsPerOctave)));
  }
  CHECK(sum == 6);
  REQUIRE(!h.buckets.empty());
  // 1000 ns lies in [2^9.75, 2^10) ns; 1100 ns in the next bucket.
  CHECK(h.buckets.front().count == 2);
  CHECK(h.buckets.front().lo_us == Approx(std::exp2(9.75) / 1000));
  CHECK(h.buckets[1].count == 1);
  // 3900 and 4000 ns share [2^11.75, 2^12) ns, two octaves above the first bucket.
  CHECK(h.buckets.back().count == 2);
  CHECK(h.buckets.back().hi_us == Approx(4.096));
  CHECK(h.buckets.size() == 9);
}

TEST_CASE("the 90th percentile indexes the sorted samples at ceil(0.90 n), as the others",
          "[latency]") {
  std::vector<uint64_t> d(1002);
  std::iota(d.begin(), d.end(), 1);  // 1..1002, n = 1000 kept
  std::reverse(d.begin(), d.end());  // compute_latency sorts
  auto r = compute_latency(d, 1.0, 1, 2, 1003);
  CHECK(r.p90 == Approx(901.0));  // sorted[900]
  CHECK(r.t_typical <= r.p90);
  CHECK(r.p90 <= r.p99);
}

TEST_CASE("the CDF keeps every sample when there are few, scaled as the table's figures",
          "[latency][cdf]") {
  std::vector<uint64_t> sorted = {10, 20, 20, 40};
  auto c = rnicperf::make_cdf(sorted, 5.0, 2);  // 10 ticks per usec of one-way time
  REQUIRE(c.points.size() == 4);
  CHECK(c.total == 4);
  CHECK(c.points[0].us == Approx(1.0));
  CHECK(c.points[0].fraction == Approx(0.25));
  CHECK(c.points[2].us == Approx(2.0));
  CHECK(c.points[2].fraction == Approx(0.75));
  CHECK(c.points[3].us == Approx(4.0));
  CHECK(c.points[3].fraction == Approx(1.0));
}

TEST_CASE("a long run's CDF is thinned evenly but keeps its whole tail, sample by sample",
          "[latency][cdf]") {
  std::vector<uint64_t> sorted(100000);
  std::iota(sorted.begin(), sorted.end(), 1);
  auto c = rnicperf::make_cdf(sorted, 1.0, 1, 400);
  CHECK(c.total == 100000);
  REQUIRE(c.points.size() == 400);
  CHECK(c.points.front().us == Approx(1.0));
  CHECK(c.points.back().us == Approx(100000.0));
  CHECK(c.points.back().fraction == Approx(1.0));
  for (size_t i = 1; i < c.points.size(); ++i) {
    INFO(i);
    CHECK(c.points[i].us > c.points[i - 1].us);
    CHECK(c.points[i].fraction > c.points[i - 1].fraction);
  }
  // The last 100 (max_points / 4) samples are all there.
  for (size_t k = 0; k < 100; ++k)
    CHECK(c.points[300 + k].us == Approx(static_cast<double>(99901 + k)));
}
