// SPDX-License-Identifier: BSD-3-Clause
// 24-bit packet sequence numbers (IBA 9.7.1). "a is later than b" means a lies within the
// 2^23 PSNs after b, computed as the sign of (a - b) shifted into the top 24 bits.
#pragma once

#include <cstdint>

namespace rnicdv::sim {

inline constexpr uint32_t kPsnMask = 0xffffff;

constexpr uint32_t psn_add(uint32_t psn, uint32_t n) noexcept {
  return (psn + n) & kPsnMask;
}

// <0 if a is before b, 0 if equal, >0 if a is after b.
constexpr int32_t psn_cmp(uint32_t a, uint32_t b) noexcept {
  return static_cast<int32_t>((a - b) << 8);
}

// Number of PSNs from b forward to a (a must not be before b).
constexpr uint32_t psn_diff(uint32_t a, uint32_t b) noexcept {
  return (a - b) & kPsnMask;
}

}  // namespace rnicdv::sim
