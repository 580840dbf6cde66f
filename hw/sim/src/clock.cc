// SPDX-License-Identifier: BSD-3-Clause
#include "clock.h"

#include <ctime>

namespace rnicdv::sim {

uint64_t MonotonicClock::now_ns() const {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace rnicdv::sim
