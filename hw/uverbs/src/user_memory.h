// SPDX-License-Identifier: BSD-3-Clause
// The application's memory as the kernel reaches it: copy_from_user and copy_to_user, and the
// check get_user_pages makes before an MR or a ring is pinned. A pointer that is not mapped,
// or not mapped with the access needed, gives EFAULT; it never raises a signal in the shim or
// in a device thread.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rnicdv::uverbs {

// Copies n bytes; false (errno = EFAULT) if any byte cannot be read or written. They go
// through process_vm_readv/process_vm_writev on this process, which fault-check like the
// kernel's copies.
bool copy_from_user(void* dst, uint64_t src, size_t n) noexcept;
bool copy_to_user(uint64_t dst, const void* src, size_t n) noexcept;

// True if every page of [addr, addr + len) is mapped readable, and writable when `write`
// (the mappings listed in /proc/self/maps, read again only after the address space changed:
// user_memory.cc). len 0 is true; an address range that wraps is not.
bool user_range_ok(uint64_t addr, size_t len, bool write) noexcept;

// The process changed its address space (mmap over a mapping, munmap, mremap, mprotect, brk,
// sbrk; interpose.cc calls it after each returns): the next check reads the maps again.
// Async-signal-safe: one atomic increment.
void address_space_changed() noexcept;
// How many times /proc/self/maps was read for user_range_ok (for tests).
uint64_t maps_reads() noexcept;

}  // namespace rnicdv::uverbs
