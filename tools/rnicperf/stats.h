// SPDX-License-Identifier: BSD-3-Clause
// The figures of perftest's result tables, computed as perftest computes them
// (perftest_parameters.c print_report_lat / print_report_bw) but in floating point
// throughout, so that sub-microsecond jitter is not truncated to zero.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace rnicperf {

// ---- Latency ------------------------------------------------------------------------------

// Number of largest samples perftest leaves out of t_min..t_avg, t_stdev (LAT_MEASURE_TAIL).
inline constexpr size_t kLatencyTail = 2;

struct LatencyResult {
  uint64_t size = 0;
  uint64_t iterations = 0;
  double t_min = 0, t_max = 0, t_typical = 0, t_avg = 0, t_stdev = 0;  // usec
  double p99 = 0, p999 = 0;                                            // usec
  double p90 = 0;  // usec, sorted[ceil(0.90 n)] (rnicperf's addition; not in the table)
  size_t samples = 0;  // samples the mean, median and stdev are over (iterations - 3)
};

// Sample i = tposted[i + 1] - tposted[i]: the time between two posts on the initiating side
// is one full round trip. `out` must hold tposted.size() - 1 entries.
void deltas_from_posts(std::span<const uint64_t> tposted, std::span<uint64_t> out) noexcept;

// From raw tick deltas (sorted in place). Each delta is divided by ticks_per_us * rtt_factor
// (2 for SEND and WRITE: half the round trip; 1 for READ and atomics). Then, as perftest:
// sorted ascending, the two largest are left out (n = count - 2 kept); t_min = d[0];
// t_max = d[n] (the second-largest raw sample, perftest's index); t_typical = median of the
// kept n (the mean of the two middle values when n is even); t_avg and the population
// t_stdev over the kept n; the 99th and 99.9th percentiles are d[ceil(0.99 n)] and
// d[ceil(0.999 n)]. Needs at least kLatencyTail + 1 deltas.
LatencyResult compute_latency(std::span<uint64_t> deltas, double ticks_per_us, int rtt_factor,
                              uint64_t size, uint64_t iterations);

// Duration mode (-D): perftest prints only the mean and the exchanges per second.
struct LatencyDurationResult {
  uint64_t size = 0;
  uint64_t iterations = 0;  // exchanges completed inside the measured window
  double t_avg = 0;         // usec
  double tps = 0;           // exchanges per second
  double cpu_util = -1;     // --cpu_util: percent; negative: not measured
};
LatencyDurationResult compute_latency_duration(uint64_t window_ticks, double ticks_per_us,
                                               int rtt_factor, uint64_t size, uint64_t iterations);

// ---- Bandwidth ----------------------------------------------------------------------------

enum class BwUnit : uint8_t { mib_per_sec, gbit_per_sec };
// Bytes per reported unit: 2^20 (MiB/sec) or 1.25e8 (Gb/sec: 10^9 bits).
double bw_unit_bytes(BwUnit unit) noexcept;

// --report-per-port: what the QPs on one port did over the run's window.
struct PortShare {
  double bw_avg = 0;    // in the unit
  double msg_rate = 0;  // Mpps
};

struct BandwidthResult {
  uint64_t size = 0;
  uint64_t iterations = 0;
  double bw_peak = 0;  // in the unit; 0 when peak is not measured
  double bw_avg = 0;
  double msg_rate = 0;  // Mpps
  double cpu_util = -1;  // --cpu_util: this side's percent; negative: not measured (not sent)
  // Port 1's and port 2's shares (perftest's bw_avg_p1, msgRate_avg_p1, bw_avg_p2,
  // msgRate_avg_p2), which --report-per-port shows: set by compute_bandwidth_per_port, 0
  // otherwise.
  PortShare port[2] = {};
};

// perftest's average: size * iterations / (elapsed ticks / tick rate), in the unit; msg_rate
// = iterations / elapsed seconds / 10^6. `peak_ticks_per_msg` 0 means "no peak".
BandwidthResult compute_bandwidth(uint64_t size, uint64_t iterations, uint64_t elapsed_ticks,
                                  double ticks_per_sec, BwUnit unit, uint64_t peak_ticks_per_msg);

// The same with each port's share (--report-per-port): of the `iterations` in the window,
// `second_port_iterations` were on the QPs of port 2 and the rest on those of port 1. The
// shares are over the same time as the total, as perftest's iters_per_port are.
BandwidthResult compute_bandwidth_per_port(uint64_t size, uint64_t iterations,
                                           uint64_t second_port_iterations, uint64_t elapsed_ticks,
                                           double ticks_per_sec, BwUnit unit);

// perftest's peak: the smallest per-message time over any window from the post of message i
// (i a multiple of post_list) to the completion of a later signaled message j (j + 1 a
// multiple of cq_mod, or the last one): (tcompleted[j] - tposted[i]) / (j - i + 1), integer
// ticks. Entries of tcompleted that were never stamped (0, or before tposted[i]) are skipped.
// Returns 0 when no window exists.
uint64_t best_ticks_per_message(std::span<const uint64_t> tposted,
                                std::span<const uint64_t> tcompleted, uint32_t post_list,
                                uint32_t cq_mod) noexcept;

// Bidirectional runs report the sum of both sides (each port's share too).
BandwidthResult sum(const BandwidthResult& a, const BandwidthResult& b) noexcept;

// ---- Histogram ----------------------------------------------------------------------------

// Log-scaled buckets, kBucketsPerOctave per power of two of nanoseconds.
inline constexpr int kBucketsPerOctave = 4;

struct HistogramBucket {
  double lo_us = 0, hi_us = 0;  // [lo, hi)
  uint64_t count = 0;
};
struct Histogram {
  std::vector<HistogramBucket> buckets;  // from the first non-empty to the last non-empty
  uint64_t total = 0;
};

// The empirical CDF of every delta, for --plot: point i is (sorted[i] in usec, (i + 1) / count).
// At most `max_points` points: every sample when there are that few, otherwise evenly spaced
// ranks and the last max_points / 4 samples one by one (the tail). `sorted` is ascending.
struct CdfPoint {
  double us = 0;
  double fraction = 0;
};
struct Cdf {
  std::vector<CdfPoint> points;
  uint64_t total = 0;
};
inline constexpr size_t kCdfPoints = 2000;
Cdf make_cdf(std::span<const uint64_t> sorted, double ticks_per_us, int rtt_factor,
             size_t max_points = kCdfPoints);

// Every delta (none dropped: the histogram is for the tail), scaled as compute_latency does.
Histogram make_histogram(std::span<const uint64_t> deltas, double ticks_per_us, int rtt_factor);

}  // namespace rnicperf
