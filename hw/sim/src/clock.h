// SPDX-License-Identifier: BSD-3-Clause
// The fabric's clocks: virtual time for deterministic runs, CLOCK_MONOTONIC for threaded ones.
#pragma once

#include <atomic>
#include <cstdint>

#include "wire/wire.h"

namespace rnicdv::sim {

// Time moves only when the fabric says so (Fabric::step, advance_time).
class VirtualClock final : public Clock {
 public:
  uint64_t now_ns() const override { return now_.load(std::memory_order_acquire); }
  void advance_to(uint64_t t) {
    uint64_t cur = now_.load(std::memory_order_relaxed);
    while (t > cur && !now_.compare_exchange_weak(cur, t, std::memory_order_acq_rel)) {
    }
  }
  void advance_by(uint64_t ns) { now_.fetch_add(ns, std::memory_order_acq_rel); }

 private:
  std::atomic<uint64_t> now_{0};
};

class MonotonicClock final : public Clock {
 public:
  uint64_t now_ns() const override;
};

}  // namespace rnicdv::sim
