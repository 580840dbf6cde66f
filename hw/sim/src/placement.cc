// SPDX-License-Identifier: BSD-3-Clause
#include "placement.h"

#include <atomic>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace rnicdv::sim {

namespace {

// The empty asm keeps every store where the loop puts it: the compiler may neither merge the
// loop into a call to memcpy nor reorder or combine the stores.
inline void keep_store_order() noexcept {
  asm volatile("" ::: "memory");
}

template <class Word>
inline void store_one(uint8_t*& dst, const uint8_t*& src, size_t& n) noexcept {
  Word w;
  std::memcpy(&w, src, sizeof w);
  if (n == sizeof w) std::atomic_thread_fence(std::memory_order_release);
  std::memcpy(dst, &w, sizeof w);
  keep_store_order();
  dst += sizeof w;
  src += sizeof w;
  n -= sizeof w;
}

inline void store_16(uint8_t*& dst, const uint8_t*& src, size_t& n) noexcept {
#if defined(__SSE2__)
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
  if (n == 16) std::atomic_thread_fence(std::memory_order_release);
  _mm_store_si128(reinterpret_cast<__m128i*>(dst), v);  // aligned: one store
  keep_store_order();
  dst += 16;
  src += 16;
  n -= 16;
#else
  store_one<uint64_t>(dst, src, n);
  store_one<uint64_t>(dst, src, n);
#endif
}

}  // namespace

void place_in_order(uint8_t* dst, const uint8_t* src, size_t n) noexcept {
  // Head: widen one power of two at a time until the address is 16-byte aligned, or until
  // the next width no longer fits. Either way the address is then aligned to every width
  // still to be used, since the tail only narrows.
  const auto misaligned = [&](uintptr_t width) {
    return (reinterpret_cast<uintptr_t>(dst) & width) != 0 && n >= width;
  };
  if (misaligned(1)) store_one<uint8_t>(dst, src, n);
  if (misaligned(2)) store_one<uint16_t>(dst, src, n);
  if (misaligned(4)) store_one<uint32_t>(dst, src, n);
  if (misaligned(8)) store_one<uint64_t>(dst, src, n);
  while (n >= 16) store_16(dst, src, n);
  if (n >= 8) store_one<uint64_t>(dst, src, n);
  if (n >= 4) store_one<uint32_t>(dst, src, n);
  if (n >= 2) store_one<uint16_t>(dst, src, n);
  if (n >= 1) store_one<uint8_t>(dst, src, n);
}

}  // namespace rnicdv::sim
