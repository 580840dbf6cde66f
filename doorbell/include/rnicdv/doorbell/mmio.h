// SPDX-License-Identifier: BSD-3-Clause
// Stores and loads of doorbell records and device registers (rdma-core util/mmio.h, and
// providers/mlx5's doorbell and BlueFlame writes).
//
// Doorbell records are ordinary memory the device reads by DMA; the UAR doorbell/BlueFlame
// register is write-combining MMIO. Every access here is a single atomic instruction of the
// stated width, so a device model on another thread (the software HCA) can observe it without
// a data race, and the memory-order arguments carry the same ordering to that thread that the
// named barriers give a real device.
#pragma once

#include <endian.h>
#include <linux/types.h>

#include <cstdint>
#include <cstring>

#include "rnicdv/doorbell/barrier.h"
#include "rnicdv/wqe/send_wqe.h"

#if defined(__SANITIZE_THREAD__)
#define RNICDV_DOORBELL_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define RNICDV_DOORBELL_TSAN 1
#endif
#endif

#if !defined(RNICDV_DOORBELL_TSAN)
#if defined(__x86_64__)
#include <emmintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif
#endif

namespace rnicdv::doorbell {

// Stores htobe32(value) to a doorbell record word. Release: a device model that acquires the
// word sees every WQE store made before it. On x86 this is a plain mov.
[[gnu::always_inline]] inline void store_dbr(__be32* word, uint32_t value) noexcept {
  __atomic_store_n(word, htobe32(value), __ATOMIC_RELEASE);
}

// Acquire load of a doorbell record word, in host order (device side and tests).
[[gnu::always_inline]] inline uint32_t load_dbr(const __be32* word) noexcept {
  return be32toh(__atomic_load_n(word, __ATOMIC_ACQUIRE));
}

// One 8-byte store to a device register (rdma-core mmio_write64_be). `raw` holds the bytes as
// they lie in memory, e.g. the first 8 bytes of a ctrl segment copied into a uint64_t.
// `reg` must be 8-byte aligned.
[[gnu::always_inline]] inline void mmio_write64(void* reg, uint64_t raw) noexcept {
  __atomic_store_n(static_cast<uint64_t*>(reg), raw, __ATOMIC_RELAXED);
}

// One 8-byte load of a device register, the bytes as they lie in memory (device side).
[[gnu::always_inline]] inline uint64_t mmio_read64(const void* reg) noexcept {
  return __atomic_load_n(static_cast<const uint64_t*>(reg), __ATOMIC_RELAXED);
}

// Takes the 8 bytes of a device register and leaves zero (device side: a model consuming a
// doorbell write). Acquire: what the writer stored before its mmio_write64 (the doorbell
// record, the WQE) is visible after it.
[[gnu::always_inline]] inline uint64_t mmio_take64(void* reg) noexcept {
  return __atomic_exchange_n(static_cast<uint64_t*>(reg), 0, __ATOMIC_ACQUIRE);
}

namespace detail {

// Copies one 64-byte block to the register with the widest plain stores the ISA has, in
// ascending address order, so the write-combining buffer fills one whole line and the device
// receives it as one burst (rdma-core mmio_memcpy_x64).
[[gnu::always_inline]] inline void copy_block64(uint8_t* dst, const uint8_t* src) noexcept {
#if defined(RNICDV_DOORBELL_TSAN)
  // Under ThreadSanitizer: 8-byte relaxed atomic stores. The software HCA's device thread
  // reads the register with 8-byte atomic loads while it may be written; TSan sees vector
  // stores as plain writes and would report each such overlap as a data race.
  for (unsigned i = 0; i < 64; i += 8) {
    uint64_t word;
    std::memcpy(&word, src + i, sizeof word);
    __atomic_store_n(reinterpret_cast<uint64_t*>(static_cast<void*>(dst + i)), word,
                     __ATOMIC_RELAXED);
  }
#elif defined(__x86_64__)
  const __m128i* s = static_cast<const __m128i*>(static_cast<const void*>(src));
  __m128i* d = static_cast<__m128i*>(static_cast<void*>(dst));
  const __m128i a = _mm_loadu_si128(s + 0);
  const __m128i b = _mm_loadu_si128(s + 1);
  const __m128i c = _mm_loadu_si128(s + 2);
  const __m128i e = _mm_loadu_si128(s + 3);
  _mm_store_si128(d + 0, a);
  _mm_store_si128(d + 1, b);
  _mm_store_si128(d + 2, c);
  _mm_store_si128(d + 3, e);
#elif defined(__aarch64__)
  const uint64_t* s = static_cast<const uint64_t*>(static_cast<const void*>(src));
  uint64_t* d = static_cast<uint64_t*>(static_cast<void*>(dst));
  const uint64x2_t a = vld1q_u64(s + 0);
  const uint64x2_t b = vld1q_u64(s + 2);
  const uint64x2_t c = vld1q_u64(s + 4);
  const uint64x2_t e = vld1q_u64(s + 6);
  vst1q_u64(d + 0, a);
  vst1q_u64(d + 2, b);
  vst1q_u64(d + 4, c);
  vst1q_u64(d + 6, e);
#endif
}

}  // namespace detail

// BlueFlame copy (rdma-core mlx5_bf_copy): `bytes`, a multiple of 64, from the WQE at `wqe`
// to the register at `reg` (64-byte aligned), in ascending 64-byte blocks. The source follows
// the send ring: after ring.end() it continues at ring.buf. Never memcpy, which may copy
// backwards or with string instructions whose store order is unspecified.
[[gnu::always_inline]] inline void bf_copy(void* reg, const uint8_t* wqe, uint32_t bytes,
                                           wqe::SqRing ring) noexcept {
  uint8_t* dst = static_cast<uint8_t*>(reg);
  const uint8_t* src = wqe;
  const uint8_t* const ring_end = ring.end();
  for (uint32_t copied = 0; copied < bytes; copied += 64) {
    detail::copy_block64(dst, src);
    // Keep the blocks in order: the compiler may not merge or reorder them.
    asm volatile("" ::: "memory");
    dst += 64;
    src += 64;
    if (src == ring_end) [[unlikely]]
      src = ring.buf;
  }
}

}  // namespace rnicdv::doorbell
