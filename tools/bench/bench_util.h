// SPDX-License-Identifier: BSD-3-Clause
// What the benchmark programs share: the clock, medians, the JSON records they print, and the
// callgrind client requests that mark the regions whose instructions are counted.
//
// A record is {"name", "value", "unit", "baseline_name", "baseline_value", "ratio"}, ratio =
// value / baseline_value (lower is better). A program prints a JSON array of records on
// stdout; tools/bench/run.py merges them into bench.json.
//
// Instruction counts: run a program under `valgrind --tool=callgrind --collect-atstart=no`
// with --callgrind. Each counted region is bracketed by CALLGRIND_TOGGLE_COLLECT and followed
// by CALLGRIND_DUMP_STATS_AT("<name> ops=<n>"), so every dump file holds the instructions of
// exactly one region; run.py divides its total by n.
#pragma once

#include <errno.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#define RNICDV_BENCH_HAVE_CALLGRIND 1
#else
#define RNICDV_BENCH_HAVE_CALLGRIND 0
#endif

#include "clock.h"  // invariant TSC, calibrated against CLOCK_MONOTONIC_RAW

namespace rnicdv::bench {

struct Record {
  std::string name;
  double value = 0;
  std::string unit;
  std::string baseline_name;  // empty: no baseline (printed as null)
  double baseline_value = 0;
};

inline std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

// Names and units are plain ASCII identifiers chosen here; nothing needs escaping.
inline void print_records(const std::vector<Record>& records, FILE* out) {
  std::fprintf(out, "[\n");
  for (size_t i = 0; i < records.size(); ++i) {
    const Record& r = records[i];
    const bool has_base = !r.baseline_name.empty() && r.baseline_value > 0;
    std::fprintf(out,
                 "  {\"name\": \"%s\", \"value\": %s, \"unit\": \"%s\", \"baseline_name\": %s, "
                 "\"baseline_value\": %s, \"ratio\": %s}%s\n",
                 r.name.c_str(), json_number(r.value).c_str(), r.unit.c_str(),
                 has_base ? ("\"" + r.baseline_name + "\"").c_str() : "null",
                 has_base ? json_number(r.baseline_value).c_str() : "null",
                 has_base ? json_number(r.value / r.baseline_value).c_str() : "null",
                 i + 1 == records.size() ? "" : ",");
  }
  std::fprintf(out, "]\n");
}

// A count from a benchmark's command line, in 1..max; anything else ends the program with the
// reason on stderr.
inline uint32_t parse_count(const char* arg, const char* value, uint32_t max) {
  char* end = nullptr;
  const unsigned long v = std::strtoul(value, &end, 10);
  if (!*value || *end || v == 0 || v > max) {
    std::fprintf(stderr, "%s: %s: expected a number in 1..%u, got '%s'\n",
                 program_invocation_short_name, arg, max, value);
    std::exit(1);
  }
  return static_cast<uint32_t>(v);
}

inline double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Nanoseconds from the benchmark clock, with the cost of the two clock reads that bracket an
// interval (the median of empty intervals, measured once) taken off.
class Timer {
 public:
  Timer() : clock_(rnicperf::Clock::get()) {
    std::vector<double> empty;
    for (int i = 0; i < 1001; ++i) {
      const uint64_t t0 = clock_.now();
      const uint64_t t1 = clock_.now();
      empty.push_back(static_cast<double>(t1 - t0));
    }
    overhead_ticks_ = median(empty);
  }
  uint64_t now() const noexcept { return clock_.now(); }
  double ns(uint64_t t0, uint64_t t1) const noexcept {
    const double ticks = std::max(0.0, static_cast<double>(t1 - t0) - overhead_ticks_);
    return ticks * 1000.0 / clock_.ticks_per_us();
  }
  double overhead_ns() const noexcept { return overhead_ticks_ * 1000.0 / clock_.ticks_per_us(); }

 private:
  const rnicperf::Clock& clock_;
  double overhead_ticks_ = 0;
};

// Counted regions (no-ops when not under callgrind).
inline void count_begin() {
#if RNICDV_BENCH_HAVE_CALLGRIND
  CALLGRIND_TOGGLE_COLLECT;
#endif
}
inline void count_end(const std::string& name, uint64_t ops) {
#if RNICDV_BENCH_HAVE_CALLGRIND
  CALLGRIND_TOGGLE_COLLECT;
  const std::string tag = name + " ops=" + std::to_string(ops);
  CALLGRIND_DUMP_STATS_AT(tag.c_str());
#else
  (void)name;
  (void)ops;
#endif
}
inline bool under_valgrind() {
#if RNICDV_BENCH_HAVE_CALLGRIND
  return RUNNING_ON_VALGRIND != 0;
#else
  return false;
#endif
}

}  // namespace rnicdv::bench
