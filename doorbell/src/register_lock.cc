// SPDX-License-Identifier: BSD-3-Clause
#include "rnicdv/doorbell/register_lock.h"

#include <cstdint>

namespace rnicdv::doorbell {

namespace {

constexpr unsigned kLockTableBits = 8;  // 256 locks, 16 KiB

// Constant-initialised: usable from any static constructor, never destroyed early.
RegisterLock lock_table[1u << kLockTableBits];

}  // namespace

RegisterLock& register_lock_for(const void* reg) noexcept {
  // Registers are at least 64 bytes apart (BlueFlame registers 256-512): drop the offset bits,
  // then spread with a Fibonacci multiplicative hash so neighbouring registers differ.
  const uint64_t line = reinterpret_cast<uintptr_t>(reg) >> 6;
  const uint64_t index = (line * 0x9e3779b97f4a7c15ull) >> (64 - kLockTableBits);
  return lock_table[index];
}

}  // namespace rnicdv::doorbell
