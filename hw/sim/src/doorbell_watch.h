// SPDX-License-Identifier: BSD-3-Clause
// Doorbell wake-up for a sleeping device thread.
//
// A ConnectX starts fetching a WQE within about a microsecond of the doorbell, whatever it
// did before. A simulated device thread that sleeps when idle cannot see a store to its UAR
// page, so before it sleeps it write-protects the pages that software rings (its own UAR
// pages, and every mapping of an external one). The first doorbell store after that faults;
// the SIGSEGV handler installed here recognises the page, makes it writable again and
// writes the device's kick eventfd, and the store is retried when the handler returns. The
// cost is one fault on the first doorbell after an idle period and nothing otherwise: no
// thread spins while idle and no device polls on a timer.
//
// Faults on any other address go to the handler that was installed before this one (or to
// the default action). `RNICDV_SIM_DOORBELL_WAKE=poll` turns the mechanism off (the device
// then backs off to sleeps of at most 1 ms); so does a SIGSEGV handler that the process
// installs later without chaining to this one, which is checked before each arming, until
// the device is given new memory of the application's (host_fault_handler_in_place).
#pragma once

#include <cstddef>
#include <cstdint>

namespace rnicdv::sim {

// True when the fault handler could be installed (the first call installs it): pages may be
// registered.
bool doorbell_watch_supported() noexcept;
// True when pages may be armed now: the handler is still in place (or the default action was
// restored, and it is put back), and no thread of the process blocks SIGSEGV (checked at most
// every 10 ms).
bool doorbell_watch_available() noexcept;

// Installs the SIGSEGV/SIGBUS handlers if that was not done yet, and puts the SIGSEGV one
// back in front if the process installed one of its own since (that one is then chained to).
// True when it is in place: guarded host accesses can recover (host_access.h). The device
// calls it whenever it is given memory the application may take away.
bool host_fault_handler_in_place() noexcept;

// One watched range: whole pages, page-aligned. `kick_fd` is written (an eventfd, 1) when a
// store faults on the range while it is armed. Returns a slot number, or -1 when the table
// is full (the range is then not watched and the caller falls back to polling).
int doorbell_watch_add(void* addr, size_t len, int kick_fd) noexcept;
// Removes a slot: the range is made writable and, when this returns, no fault handler is
// still using the slot's kick fd.
void doorbell_watch_remove(int slot) noexcept;

// Write-protects (arm) or unprotects (disarm) a slot's range. arm() fails (false) if the
// range could not be protected; the caller must then not sleep without a timeout.
bool doorbell_watch_arm(int slot) noexcept;
void doorbell_watch_disarm(int slot) noexcept;

// Faults taken and served (for counters and tests).
uint64_t doorbell_watch_faults() noexcept;

}  // namespace rnicdv::sim
