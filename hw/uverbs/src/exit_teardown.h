// SPDX-License-Identifier: BSD-3-Clause
// What the teardown at exit may wait for.
//
// The shim releases its objects at exit (devices.cc at_exit): the rdma_cm IDs first (each
// established connection sends its DREQ, as the kernel's ucma does when the file of a process
// that ended is closed), then the contexts and the devices. A program may call exit() from a
// signal handler, and the handler may have interrupted the same thread anywhere: inside
// malloc (whose lock any allocation would then wait for), or inside one of the shim's entry
// points, whose locks are never released. So the exiting thread only hands the teardown to
// the event thread and waits for it a bounded time, allocating nothing and taking no lock;
// and two rules keep the teardown itself from waiting for the interrupted call:
//
// - The entry points mark the thread for the length of the call (ShimCall). If the exiting
//   thread is marked, the teardown leaves alone what the interrupted call may hold: after an
//   open, everything; after an rdma_cm call, the IDs (the CMs still tell the peers:
//   CmAgent::farewell), the contexts and the devices; after a
//   verbs call, the contexts and the devices (the IDs are destroyed and their DREQs sent:
//   that path takes no lock a verbs call holds).
// - Every other lock it takes (another thread may be in the middle of a command) is waited
//   for until one deadline shared by the whole teardown (kExitWait); what cannot be locked by
//   then is left as it is, never freed. The process is ending: its memory goes with it.
// Devices left behind are paused (a flag their threads read), so that they do no more work
// while the rest of the process's exit runs, and are not destroyed.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>

namespace rnicdv::uverbs {

// What a thread is doing inside the shim (bits: a call may nest another, close in a dup2).
enum ShimWork : uint8_t {
  kInOpen = 1,   // opening a cdev: the device registry, the fabric, a new device
  kInVerbs = 2,  // a uverbs descriptor or an event file: a context's lock, its device's
  kInUcma = 4,   // an rdma_cm descriptor: the ID table, the CM
};

// Marks the calling thread as inside an entry point for the scope of the object.
class ShimCall {
 public:
  explicit ShimCall(ShimWork work) noexcept;
  ~ShimCall();
  ShimCall(const ShimCall&) = delete;
  ShimCall& operator=(const ShimCall&) = delete;

 private:
  uint8_t saved_;
};

// Within a call, a wait that holds none of the shim's locks (GET_EVENT, an event file's
// read, blocked in poll): the thread counts as outside the shim meanwhile, so that exit()
// from a handler that interrupts the wait tears everything down as usual.
class ShimIdle {
 public:
  ShimIdle() noexcept;
  ~ShimIdle();
  ShimIdle(const ShimIdle&) = delete;
  ShimIdle& operator=(const ShimIdle&) = delete;

 private:
  uint8_t saved_;
};

// The entry points the calling thread is inside now (0: none). In the atexit hook: what a
// signal handler that called exit() interrupted.
uint8_t shim_work_of_this_thread() noexcept;

// How long the teardown at exit waits, in all, for locks other threads hold.
inline constexpr std::chrono::milliseconds kExitWait{2000};

class ExitDeadline {
 public:
  explicit ExitDeadline(std::chrono::milliseconds budget)
      : until_(std::chrono::steady_clock::now() + budget) {}
  // Locks `m` if it comes free before the deadline; false (not locked) otherwise.
  bool lock(std::mutex& m) const;

 private:
  std::chrono::steady_clock::time_point until_;
};

}  // namespace rnicdv::uverbs
