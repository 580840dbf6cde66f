// SPDX-License-Identifier: BSD-3-Clause
// Sizing and allocating the device's own memory: rings, doorbell records.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "uar.h"

namespace rnicdv::sim {

inline uint32_t next_pow2(uint64_t v) {
  uint64_t p = 1;
  while (p < v) p <<= 1;
  return static_cast<uint32_t>(std::min<uint64_t>(p, uint64_t{1} << 31));
}

inline bool is_pow2(uint32_t v) {
  return v != 0 && (v & (v - 1)) == 0;
}

inline size_t round_page(size_t n) {
  return (n + kUarPageBytes - 1) & ~(kUarPageBytes - 1);
}

inline uint8_t* alloc_zeroed(size_t align, size_t bytes) {
  void* p = std::aligned_alloc(align, bytes);
  if (p) std::memset(p, 0, bytes);
  return static_cast<uint8_t*>(p);
}

}  // namespace rnicdv::sim
