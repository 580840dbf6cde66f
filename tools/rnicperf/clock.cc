// SPDX-License-Identifier: BSD-3-Clause
#include "clock.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace rnicperf {

namespace {

uint64_t monotonic_raw_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

bool tsc_is_invariant(const std::string& cpuinfo) {
  std::istringstream in(cpuinfo);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::string padded = " " + line + " ";
    return padded.find(" constant_tsc ") != std::string::npos &&
           padded.find(" nonstop_tsc ") != std::string::npos;
  }
  return false;
}

#if RNICPERF_HAVE_TSC
// One (tsc, ns) pair whose ns read is bracketed by the tightest of a few TSC pairs.
void paired_read(uint64_t* tsc, uint64_t* ns) {
  uint64_t best_gap = UINT64_MAX;
  for (int i = 0; i < 5; ++i) {
    uint64_t t0 = __rdtsc();
    uint64_t n = monotonic_raw_ns();
    uint64_t t1 = __rdtsc();
    if (t1 - t0 < best_gap) {
      best_gap = t1 - t0;
      *tsc = t0 + (t1 - t0) / 2;
      *ns = n;
    }
  }
}
#endif

}  // namespace

const Clock& Clock::get() {
  static const Clock clock = [] {
    Clock c;
    const char* force = std::getenv("RNICPERF_CLOCK");
    bool want_tsc = !(force && std::strcmp(force, "monotonic") == 0);
#if RNICPERF_HAVE_TSC
    if (want_tsc && tsc_is_invariant(read_cpuinfo())) {
      uint64_t tsc0 = 0, ns0 = 0, tsc1 = 0, ns1 = 0;
      paired_read(&tsc0, &ns0);
      timespec pause{0, 100'000'000};
      while (nanosleep(&pause, &pause) != 0) {
      }
      paired_read(&tsc1, &ns1);
      if (ns1 > ns0 && tsc1 > tsc0) {
        c.source_ = Source::tsc;
        c.ticks_per_us_ =
            static_cast<double>(tsc1 - tsc0) * 1000.0 / static_cast<double>(ns1 - ns0);
        std::snprintf(c.description_, sizeof c.description_,
                      "TSC %.2f MHz (invariant; calibrated against CLOCK_MONOTONIC_RAW)",
                      c.ticks_per_us_);
        return c;
      }
    }
#else
    (void)want_tsc;
#endif
    c.source_ = Source::monotonic_raw;
    c.ticks_per_us_ = 1000.0;
    std::snprintf(c.description_, sizeof c.description_, "CLOCK_MONOTONIC_RAW");
    return c;
  }();
  return clock;
}

Clock Clock::fixed(Source source, double ticks_per_us) {
  Clock c;
  c.source_ = source;
  c.ticks_per_us_ = ticks_per_us;
  std::snprintf(c.description_, sizeof c.description_, "fixed %.2f ticks/us", ticks_per_us);
  return c;
}

std::string read_cpuinfo() {
  std::ifstream f("/proc/cpuinfo");
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

std::string cpu_frequency_warning(const std::string& cpuinfo) {
  std::istringstream in(cpuinfo);
  std::string line;
  double lo = 0, hi = 0;
  bool any = false;
  while (std::getline(in, line)) {
    if (line.rfind("cpu MHz", 0) != 0) continue;
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    double mhz = std::strtod(line.c_str() + colon + 1, nullptr);
    if (mhz <= 0) continue;
    if (!any) {
      lo = hi = mhz;
      any = true;
    }
    if (mhz < lo) lo = mhz;
    if (mhz > hi) hi = mhz;
  }
  if (!any || hi <= lo * 1.02) return {};
  char buf[160];
  std::snprintf(buf, sizeof buf,
                "Conflicting CPU frequency values detected: %lf != %lf. CPU Frequency is not max.",
                lo, hi);
  return buf;
}

}  // namespace rnicperf
