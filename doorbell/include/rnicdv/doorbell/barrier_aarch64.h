// SPDX-License-Identifier: BSD-3-Clause
// AArch64 barriers (include rnicdv/doorbell/barrier.h instead). The choices of rdma-core
// master's util/udma_barrier.h and util/mmio.h for aarch64 (v44 used dsb st / dsb ld for the
// first two; the dmb forms order the same accesses for the outer-shareable domain, which
// includes coherent DMA masters, without waiting for completion).
#pragma once

#if defined(__aarch64__)

namespace rnicdv::doorbell {

// udma_to_device_barrier(): orders prior stores before later stores, outer-shareable domain.
[[gnu::always_inline]] inline void to_device_barrier() noexcept {
  asm volatile("dmb oshst" ::: "memory");
}

// udma_from_device_barrier(): orders prior loads before later loads, outer-shareable domain.
[[gnu::always_inline]] inline void from_device_barrier() noexcept {
  asm volatile("dmb oshld" ::: "memory");
}

// mmio_wc_start() = mmio_flush_writes(): dsb st waits until prior stores complete, so the
// doorbell record is visible before the write to the device-memory register.
[[gnu::always_inline]] inline void wc_start() noexcept {
  asm volatile("dsb st" ::: "memory");
}

// mmio_flush_writes(): dsb st.
[[gnu::always_inline]] inline void wc_flush() noexcept {
  asm volatile("dsb st" ::: "memory");
}

[[gnu::always_inline]] inline void cpu_relax() noexcept {
  asm volatile("yield" ::: "memory");
}

}  // namespace rnicdv::doorbell

#endif  // __aarch64__
