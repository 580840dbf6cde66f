// SPDX-License-Identifier: BSD-3-Clause
// The device's access to memory it does not own: what an application may take away.
//
// A ConnectX reads and writes host memory by DMA to pages the kernel pinned when the memory
// was registered or the queue created; an application that unmaps or write-protects its
// mapping of them afterwards cannot make the device fault, and does not bring the host down.
// The simulated device runs in the application's address space instead, so it would take
// the application's SIGSEGV (or SIGBUS, for a truncated file mapping). Every access to
// memory the application placed (the uverbs shim's rings, doorbell records, UAR mappings,
// and every registered region's data) goes through the functions here instead: a fault
// inside one ends that access, which reports failure, and the device then treats the object
// as a real one whose memory failed: the QP or CQ goes to its error state with an
// asynchronous event, the work request completes with a protection error, or the peer gets a
// NAK; and `DeviceCounters::host_memory_faults` counts it.
//
// The mechanism is that of the kernel's copy_from_user: the handler of SIGSEGV and SIGBUS
// (installed with the doorbell watch's, doorbell_watch.cc) recognises a fault taken by a
// thread inside a guarded access and resumes that thread at the access's recovery point. A
// fault anywhere else goes to the previous handler, or to the default action, exactly as
// without the device. The fast path pays a sigsetjmp that saves no signal mask (no system
// call) per guarded access; only a fault costs a signal.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace rnicdv::sim {

// Runs `fn(ctx)` so that a fault it takes on unmapped, protected or truncated memory ends it:
// returns false then, true when `fn` returned. `fn` is left by siglongjmp, so it must only
// read and write memory: no locks, no allocation, no exceptions, no objects with destructors.
// Nested calls are allowed (the innermost one recovers).
bool host_access(void (*fn)(void*), void* ctx) noexcept;

template <class F>
bool host_guarded(F&& f) noexcept {
  using Fn = std::remove_reference_t<F>;
  return host_access([](void* c) { (*static_cast<Fn*>(c))(); },
                     const_cast<void*>(static_cast<const void*>(&f)));
}

// Reads `n` bytes of host memory at `src` into the device's own `dst`. False if it faulted.
bool host_read(void* dst, const void* src, size_t n) noexcept;

// Places `n` bytes into host memory at `dst`: each byte stored once, in increasing address
// order, the last one last (placement.h; never memcpy, which may store bytes twice). False if
// it faulted, with the bytes before the fault placed.
bool host_place(void* dst, const void* src, size_t n) noexcept;

// Acquire load of a 32-bit word in host memory (a doorbell record). False if it faulted.
bool host_load32(const uint32_t* p, uint32_t* out) noexcept;

// True when faults are recoverable in this process: the handler is in place (a runtime that
// keeps SIGSEGV to itself, such as a sanitizer configured so, refuses it). Without it a
// guarded access still works but a fault ends the process as before.
bool host_access_supported() noexcept;

// Faults recovered since the process started (every device).
uint64_t host_access_faults() noexcept;

// Called by the SIGSEGV/SIGBUS handler (doorbell_watch.cc): resumes the thread at its
// innermost guarded access's recovery point if it is inside one, and returns otherwise.
void host_access_recover_if_guarded() noexcept;

}  // namespace rnicdv::sim
