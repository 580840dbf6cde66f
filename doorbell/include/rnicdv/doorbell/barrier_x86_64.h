// SPDX-License-Identifier: BSD-3-Clause
// x86-64 barriers (include rnicdv/doorbell/barrier.h instead). Choices follow rdma-core's
// util/udma_barrier.h for x86_64 unless a comment says otherwise.
#pragma once

#if defined(__x86_64__)

namespace rnicdv::doorbell {

// udma_to_device_barrier(): a compiler barrier. x86-TSO never reorders a store with an
// earlier store, and WQEs and doorbell records live in write-back memory the device reads
// coherently. (Non-temporal stores or other memory types would need an sfence of their own.)
[[gnu::always_inline]] inline void to_device_barrier() noexcept {
  asm volatile("" ::: "memory");
}

// A compiler barrier: x86-TSO never reorders a load with an earlier load, so once the
// owner/valid flag has been read, later loads of the entry see at least what preceded the
// device's flag write. DPDK's rte_io_rmb() is a compiler barrier on x86 for the same reason.
// rdma-core's udma_from_device_barrier() issues lfence here, a conservative choice that write-
// back memory does not need.
[[gnu::always_inline]] inline void from_device_barrier() noexcept {
  asm volatile("" ::: "memory");
}

// mmio_wc_start(): sfence. Stores to write-combining memory are weakly ordered and may become
// visible before earlier write-back stores; the fence makes the doorbell record globally
// visible before the UAR/BlueFlame write that tells the device to read it.
[[gnu::always_inline]] inline void wc_start() noexcept {
  asm volatile("sfence" ::: "memory");
}

// mmio_flush_writes(): sfence drains the write-combining buffers, so the doorbell reaches the
// device now and, under a shared-register lock, before the next CPU's doorbell.
[[gnu::always_inline]] inline void wc_flush() noexcept {
  asm volatile("sfence" ::: "memory");
}

[[gnu::always_inline]] inline void cpu_relax() noexcept {
  asm volatile("pause" ::: "memory");
}

}  // namespace rnicdv::doorbell

#endif  // __x86_64__
