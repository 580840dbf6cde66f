// SPDX-License-Identifier: BSD-3-Clause
#include "stats.h"

#include <algorithm>
#include <cmath>

namespace rnicperf {

void deltas_from_posts(std::span<const uint64_t> tposted, std::span<uint64_t> out) noexcept {
  for (size_t i = 0; i + 1 < tposted.size() && i < out.size(); ++i)
    out[i] = tposted[i + 1] - tposted[i];
}

LatencyResult compute_latency(std::span<uint64_t> deltas, double ticks_per_us, int rtt_factor,
                              uint64_t size, uint64_t iterations) {
  LatencyResult r;
  r.size = size;
  r.iterations = iterations;
  if (deltas.size() <= kLatencyTail) return r;
  std::sort(deltas.begin(), deltas.end());
  const double quotient = ticks_per_us * rtt_factor;
  auto us = [&](size_t i) { return static_cast<double>(deltas[i]) / quotient; };

  const size_t n = deltas.size() - kLatencyTail;
  r.samples = n;
  r.t_min = us(0);
  r.t_max = us(n);
  r.t_typical = (n % 2 == 0) ? (us(n / 2 - 1) + us(n / 2)) / 2.0 : us(n / 2);

  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += us(i);
  r.t_avg = sum / static_cast<double>(n);
  double sq = 0;
  for (size_t i = 0; i < n; ++i) {
    double d = us(i) - r.t_avg;
    sq += d * d;
  }
  r.t_stdev = std::sqrt(sq / static_cast<double>(n));

  // perftest's indices: ceil(n * 0.99) into the sorted array (which still holds the two
  // dropped samples past n, so the index is always valid).
  auto idx99 = static_cast<size_t>(std::ceil(static_cast<double>(n) * 0.99));
  auto idx999 = static_cast<size_t>(std::ceil(static_cast<double>(n) * 0.999));
  // The 90th by the same rule (rnicperf's addition, for --plot's marks).
  auto idx90 = static_cast<size_t>(std::ceil(static_cast<double>(n) * 0.90));
  r.p90 = us(std::min(idx90, deltas.size() - 1));
  r.p99 = us(std::min(idx99, deltas.size() - 1));
  r.p999 = us(std::min(idx999, deltas.size() - 1));
  return r;
}

LatencyDurationResult compute_latency_duration(uint64_t window_ticks, double ticks_per_us,
                                               int rtt_factor, uint64_t size, uint64_t iterations) {
  LatencyDurationResult r;
  r.size = size;
  r.iterations = iterations;
  if (iterations == 0 || window_ticks == 0) return r;
  double window_us = static_cast<double>(window_ticks) / ticks_per_us;
  r.t_avg = window_us / rtt_factor / static_cast<double>(iterations);
  r.tps = static_cast<double>(iterations) / (window_us / 1e6);
  return r;
}

double bw_unit_bytes(BwUnit unit) noexcept {
  return unit == BwUnit::mib_per_sec ? 1048576.0 : 125000000.0;
}

BandwidthResult compute_bandwidth(uint64_t size, uint64_t iterations, uint64_t elapsed_ticks,
                                  double ticks_per_sec, BwUnit unit, uint64_t peak_ticks_per_msg) {
  BandwidthResult r;
  r.size = size;
  r.iterations = iterations;
  if (elapsed_ticks == 0) return r;
  const double unit_bytes = bw_unit_bytes(unit);
  const double seconds = static_cast<double>(elapsed_ticks) / ticks_per_sec;
  r.bw_avg = static_cast<double>(size) * static_cast<double>(iterations) / seconds / unit_bytes;
  r.msg_rate = static_cast<double>(iterations) / seconds / 1e6;
  if (peak_ticks_per_msg > 0)
    r.bw_peak = static_cast<double>(size) * ticks_per_sec /
                (static_cast<double>(peak_ticks_per_msg) * unit_bytes);
  return r;
}

BandwidthResult compute_bandwidth_per_port(uint64_t size, uint64_t iterations,
                                           uint64_t second_port_iterations, uint64_t elapsed_ticks,
                                           double ticks_per_sec, BwUnit unit) {
  BandwidthResult r = compute_bandwidth(size, iterations, elapsed_ticks, ticks_per_sec, unit, 0);
  const uint64_t second = std::min(second_port_iterations, iterations);
  const uint64_t per_port[2] = {iterations - second, second};
  for (size_t p = 0; p < 2; ++p) {
    const BandwidthResult share =
        compute_bandwidth(size, per_port[p], elapsed_ticks, ticks_per_sec, unit, 0);
    r.port[p] = PortShare{share.bw_avg, share.msg_rate};
  }
  return r;
}

uint64_t best_ticks_per_message(std::span<const uint64_t> tposted,
                                std::span<const uint64_t> tcompleted, uint32_t post_list,
                                uint32_t cq_mod) noexcept {
  const size_t n = std::min(tposted.size(), tcompleted.size());
  if (n == 0 || post_list == 0 || cq_mod == 0) return 0;
  uint64_t best = UINT64_MAX;
  auto consider = [&](size_t i, size_t j) {
    if (tcompleted[j] == 0 || tcompleted[j] < tposted[i]) return;
    uint64_t t = (tcompleted[j] - tposted[i]) / (j - i + 1);
    if (t < best) best = t;
  };
  for (size_t i = 0; i < n; i += post_list) {
    size_t first = ((i + 1 + cq_mod - 1) / cq_mod) * cq_mod - 1;  // ROUND_UP(i + 1, cq_mod) - 1
    for (size_t j = first; j < n; j += cq_mod) consider(i, j);
    if (n % cq_mod != 0) consider(i, n - 1);  // the last message is always signaled
  }
  return best == UINT64_MAX ? 0 : std::max<uint64_t>(best, 1);
}

BandwidthResult sum(const BandwidthResult& a, const BandwidthResult& b) noexcept {
  BandwidthResult r = a;
  r.bw_peak += b.bw_peak;
  r.bw_avg += b.bw_avg;
  r.msg_rate += b.msg_rate;
  for (size_t p = 0; p < 2; ++p) {
    r.port[p].bw_avg += b.port[p].bw_avg;
    r.port[p].msg_rate += b.port[p].msg_rate;
  }
  return r;
}

Cdf make_cdf(std::span<const uint64_t> sorted, double ticks_per_us, int rtt_factor,
             size_t max_points) {
  Cdf c;
  c.total = sorted.size();
  if (sorted.empty() || max_points < 2) return c;
  const double quotient = ticks_per_us * rtt_factor;
  auto point = [&](size_t i) {
    c.points.push_back({static_cast<double>(sorted[i]) / quotient,
                        static_cast<double>(i + 1) / static_cast<double>(sorted.size())});
  };
  const size_t n = sorted.size();
  if (n <= max_points) {
    for (size_t i = 0; i < n; ++i) point(i);
    return c;
  }
  // Evenly spaced ranks over the first part, then every sample of the tail, so that the
  // rare slow samples (the part a CDF on a log scale is read for) are all there.
  const size_t tail = std::min(n - 1, max_points / 4);
  const size_t head_points = max_points - tail;
  const size_t head_end = n - tail;  // ranks [0, head_end) are sampled
  size_t next = 0;  // ranks only increase: two steps never pick the same sample
  for (size_t j = 0; j < head_points; ++j) {
    size_t i = head_points == 1 ? 0 : j * (head_end - 1) / (head_points - 1);
    if (i < next) continue;
    point(i);
    next = i + 1;
  }
  for (size_t i = head_end; i < n; ++i) point(i);
  return c;
}

Histogram make_histogram(std::span<const uint64_t> deltas, double ticks_per_us, int rtt_factor) {
  Histogram h;
  if (deltas.empty()) return h;
  const double quotient = ticks_per_us * rtt_factor;
  // Bucket k holds [2^(k/B), 2^((k+1)/B)) nanoseconds; k may be negative below 1 ns.
  auto bucket_of = [](double ns) {
    if (ns < 1e-3) ns = 1e-3;
    return static_cast<int>(std::floor(std::log2(ns) * kBucketsPerOctave));
  };
  int lo_k = INT32_MAX, hi_k = INT32_MIN;
  for (uint64_t d : deltas) {
    int k = bucket_of(static_cast<double>(d) / quotient * 1000.0);
    lo_k = std::min(lo_k, k);
    hi_k = std::max(hi_k, k);
  }
  h.buckets.resize(static_cast<size_t>(hi_k - lo_k + 1));
  for (int k = lo_k; k <= hi_k; ++k) {
    auto& b = h.buckets[static_cast<size_t>(k - lo_k)];
    b.lo_us = std::exp2(static_cast<double>(k) / kBucketsPerOctave) / 1000.0;
    b.hi_us = std::exp2(static_cast<double>(k + 1) / kBucketsPerOctave) / 1000.0;
  }
  for (uint64_t d : deltas) {
    int k = bucket_of(static_cast<double>(d) / quotient * 1000.0);
    h.buckets[static_cast<size_t>(k - lo_k)].count++;
  }
  h.total = deltas.size();
  return h;
}

}  // namespace rnicperf
