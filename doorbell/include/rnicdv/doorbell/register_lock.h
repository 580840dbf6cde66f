// SPDX-License-Identifier: BSD-3-Clause
// The lock that serialises doorbells on a register shared by several QPs (DoorbellMode::
// db_lock; libmlx5's bf->lock with need_lock). Shared doorbell registers must see whole,
// ordered writes: the lock is held across the register write and the write-combining flush
// (rdma-core post_send_db, mmio_wc_spinlock / mmio_wc_spinunlock).
#pragma once

#include <atomic>
#include <cstdint>

#include "rnicdv/doorbell/barrier.h"

namespace rnicdv::doorbell {

inline constexpr uint32_t kCacheLineBytes = 64;

// A test-and-test-and-set spinlock alone on its cache line. Held for a few stores only.
class alignas(kCacheLineBytes) RegisterLock {
 public:
  void lock() noexcept {
    while (locked_.exchange(true, std::memory_order_acquire)) {
      while (locked_.load(std::memory_order_relaxed)) cpu_relax();
    }
  }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};
static_assert(sizeof(RegisterLock) == kCacheLineBytes);

// The lock for the register at `reg`, from a fixed process-wide table indexed by a hash of the
// address: every QP that rings the same register gets the same lock, and nothing here needs
// to know which device the register belongs to. Distinct registers may share a lock; that
// costs contention, never correctness.
RegisterLock& register_lock_for(const void* reg) noexcept;

}  // namespace rnicdv::doorbell
