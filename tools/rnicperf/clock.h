// SPDX-License-Identifier: BSD-3-Clause
// The benchmark clock: the TSC when it is invariant (constant_tsc and nonstop_tsc), calibrated
// once against CLOCK_MONOTONIC_RAW; otherwise CLOCK_MONOTONIC_RAW itself (vDSO, in ns).
//
// Why: perftest reads the TSC and converts with a "cpu MHz" it samples for 0.2 s per report,
// and warns when /proc/cpuinfo disagrees. An invariant TSC ticks at a fixed rate whatever the
// core frequency, so one calibration at start-up is enough and a read costs ~20 cycles with no
// syscall. MONOTONIC_RAW is not slewed by NTP, so the calibration is not skewed by it either.
#pragma once

#include <cstdint>
#include <ctime>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define RNICPERF_HAVE_TSC 1
#else
#define RNICPERF_HAVE_TSC 0
#endif

namespace rnicperf {

class Clock {
 public:
  enum class Source : uint8_t { tsc, monotonic_raw };

  // Calibrated on first use (about 100 ms). $RNICPERF_CLOCK=monotonic forces the fallback.
  static const Clock& get();

  // A tick count; only differences are meaningful.
  uint64_t now() const noexcept {
#if RNICPERF_HAVE_TSC
    if (source_ == Source::tsc) [[likely]]
      return __rdtsc();
#endif
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
  }

  double ticks_per_us() const noexcept {
    return ticks_per_us_;
  }
  double ticks_per_sec() const noexcept {
    return ticks_per_us_ * 1e6;
  }
  double to_us(uint64_t ticks) const noexcept {
    return static_cast<double>(ticks) / ticks_per_us_;
  }
  uint64_t from_us(double us) const noexcept {
    return static_cast<uint64_t>(us * ticks_per_us_);
  }
  Source source() const noexcept {
    return source_;
  }
  // "TSC 2445.41 MHz (invariant, calibrated against CLOCK_MONOTONIC_RAW)" or
  // "CLOCK_MONOTONIC_RAW".
  const char* description() const noexcept {
    return description_;
  }

  // For tests: a clock with a fixed rate (no calibration).
  static Clock fixed(Source source, double ticks_per_us);

 private:
  Clock() = default;
  Source source_ = Source::monotonic_raw;
  double ticks_per_us_ = 1000.0;
  char description_[96] = "CLOCK_MONOTONIC_RAW";
};

// perftest's -F warning: "Conflicting CPU frequency values detected: A != B. CPU Frequency is
// not max." when the "cpu MHz" lines of /proc/cpuinfo differ by more than 2 %. Empty when
// they agree or cannot be read. `cpuinfo` is the file's text (a parameter, for tests).
std::string cpu_frequency_warning(const std::string& cpuinfo);
std::string read_cpuinfo();

}  // namespace rnicperf
