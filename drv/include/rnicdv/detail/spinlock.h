// SPDX-License-Identifier: BSD-3-Clause
// A small test-and-test-and-set spinlock for the post path of thread-safe QPs (the role of
// libmlx5's sq.lock). Critical sections are a handful of WQE writes; a waiter spins on a
// plain load and yields the CPU after a while, so a descheduled holder on a small machine
// does not burn the waiter's whole time slice.
#pragma once

#include <sched.h>

#include <atomic>
#include <cstdint>

#include "rnicdv/doorbell/barrier.h"

namespace rnicdv::detail {

class Spinlock {
 public:
  void lock() noexcept {
    if (!locked_.exchange(true, std::memory_order_acquire)) [[likely]]
      return;
    lock_contended();
  }
  bool try_lock() noexcept {
    return !locked_.load(std::memory_order_relaxed) &&
           !locked_.exchange(true, std::memory_order_acquire);
  }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  [[gnu::noinline, gnu::cold]] void lock_contended() noexcept {
    uint32_t spins = 0;
    do {
      while (locked_.load(std::memory_order_relaxed)) {
        if (++spins < 128)
          doorbell::cpu_relax();
        else
          sched_yield();
      }
    } while (locked_.exchange(true, std::memory_order_acquire));
  }

  std::atomic<bool> locked_{false};
};

// Holds a Spinlock for a scope when `engaged` (QPs created Threading::single skip it).
class OptionalSpinGuard {
 public:
  OptionalSpinGuard(Spinlock& lock, bool engaged) noexcept : lock_(engaged ? &lock : nullptr) {
    if (lock_) lock_->lock();
  }
  ~OptionalSpinGuard() {
    if (lock_) lock_->unlock();
  }
  OptionalSpinGuard(const OptionalSpinGuard&) = delete;
  OptionalSpinGuard& operator=(const OptionalSpinGuard&) = delete;

 private:
  Spinlock* lock_;
};

}  // namespace rnicdv::detail
