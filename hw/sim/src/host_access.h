// SPDX-License-Identifier: BSD-3-Clause
// The device's access to memory it does not own: what an application may take away.
//
// Registered memory the kernel pinned is accessed through its pin (pinned_memory.h): the
// overloads taking a PinRef. The rest, and regions the kernel would not pin, as below.
//
// A ConnectX reads and writes host memory by DMA to pages the kernel pinned when the memory
// was registered or the queue created; an application that unmaps or write-protects its
// mapping of them afterwards cannot make the device fault, and does not bring the host down.
// The simulated device runs in the application's address space instead. Every access it makes
// to memory the application placed (the uverbs shim's rings, doorbell records and CQ rings)
// or registered (every region's data) goes through the functions here, which copy with
// process_vm_readv/process_vm_writev on the device's own process: the kernel copies, and a
// page that is unmapped, protected against the access or past the end of its file makes the
// call fail (EFAULT) instead of raising a signal. The device then treats the object as a real
// one whose memory failed: the QP or CQ goes to its error state with an asynchronous event,
// the work request completes with a protection error, or the peer gets a NAK; and
// `DeviceCounters::host_memory_faults` counts it. No signal handler, no longjmp: the library
// leaves the program's signal handling alone.
//
// The price is a system call per access (about 0.4 us on a KVM guest, most of it the kernel's
// page pinning; docs/performance.md). The device batches what it can: a doorbell's WQEs are
// read in one call (rc/queues.h), a CQ's consumer index only when the ring may be full.
//
// Where the kernel refuses the calls (seccomp, or a kernel without them), the same functions
// access the memory directly: the outcomes above are then lost, and a fault in a device
// access ends the process as a program's own fault would (host_access_supported() says which).
#pragma once

#include <cstddef>
#include <cstdint>

#include "pinned_memory.h"

namespace rnicdv::sim {

// Reads `n` bytes of host memory at `src` into the device's own `dst`. False if any of it
// could not be read.
bool host_read(void* dst, const void* src, size_t n) noexcept;

// Places `n` bytes into host memory at `dst` so that a reader polling the end of it can rely
// on what it sees (docs/design.md, invariant 10): each byte is stored once, and the final
// `last` bytes (the last 8, fewer when n < 8) in a copy of their own made after the rest, so
// that a reader that sees them sees everything before them. False if any of it could not be
// written; the bytes before the failure are placed.
bool host_place(void* dst, const void* src, size_t n, size_t last = 8) noexcept;

// A 32-bit word the application writes concurrently (a doorbell record): read until two
// reads agree, since the kernel's copy may read it a byte at a time. False if it faulted.
bool host_load32(const uint32_t* p, uint32_t* out) noexcept;
// One 32-bit store into host memory. False if it faulted.
bool host_store32(uint32_t* p, uint32_t value) noexcept;

enum class HostAtomic : uint8_t { fetch_add, compare_swap };
// A 64-bit atomic on registered memory: fetch-and-add `operand`, or compare-and-swap (`compare`
// against the word, `operand` stored if equal). The original value goes to `*original`. It is
// atomic with respect to every atomic of every simulated device in the process (the
// IBV_ATOMIC_HCA guarantee the devices report), not with respect to the CPU's own accesses.
// False if the word could not be read or written (nothing is changed then).
bool host_atomic64(uint64_t* p, HostAtomic op, uint64_t operand, uint64_t compare,
                   uint64_t* original) noexcept;

// The same accesses of a registered region's memory at `va`, through the region's pin when it
// has one. A region deregistered since `pin` was taken fails the access.
bool host_read(PinRef pin, void* dst, const void* va, size_t n) noexcept;
bool host_place(PinRef pin, void* va, const void* src, size_t n, size_t last = 8) noexcept;
bool host_atomic64(PinRef pin, uint64_t* va, HostAtomic op, uint64_t operand, uint64_t compare,
                   uint64_t* original) noexcept;

// True when accesses are fault-safe in this process (process_vm_readv/writev work).
bool host_access_supported() noexcept;

// Accesses that failed since the process started (every device).
uint64_t host_access_faults() noexcept;

}  // namespace rnicdv::sim
