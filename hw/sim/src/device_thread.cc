// SPDX-License-Identifier: BSD-3-Clause
// Threaded mode: one thread per device polls its registers, doorbell records and endpoint.
// While there is work it spins. When idle it backs off: a few passes, then short timed sleeps
// on the wire's fd and a kick eventfd (20, 40, 80 us), then a deep sleep with no timeout but
// the next timer's. Before the deep sleep it write-protects the UAR pages software rings
// (doorbell_watch.h): the first doorbell or CQ-arm store faults and kicks it awake, so the
// device reacts to a doorbell within microseconds after any idle period and an idle device
// costs no CPU. Where the fault handler is unavailable the deep sleep is capped at 1 ms.
#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "doorbell_watch.h"
#include "fabric_shared.h"
#include "hca.h"
#include "rnicdv/doorbell/mmio.h"

namespace rnicdv::sim {

namespace {

// A pass is not free: on the UDP wire it includes a recvmmsg system call (~2 us). A long spin
// takes the core from the application thread that is about to ring this device, which on a
// 2-core machine costs far more than the sleep it saves: perftest's ib_write_lat between two
// processes reported a t_typical (half a round trip) of ~105 us with 64 passes, 18-49 us
// with 4.
constexpr uint32_t kSpinPasses = 4;
constexpr uint64_t kFirstSleepNs = 20'000;
// Timed sleeps double up to this one; the next is the deep sleep.
constexpr uint64_t kLastTimedSleepNs = 80'000;
// Deep sleep without the doorbell watch (it is not available): the longest a doorbell waits.
constexpr uint64_t kPolledDeepSleepNs = 1'000'000;
// Deep sleep with the watch: a safety net for anything that moves without a UAR store (a
// doorbell record alone, a register reached through an unwatched alias mapping).
constexpr uint64_t kWatchedDeepSleepNs = 100'000'000;

// The device thread asks the scheduler for a short time slice (EEVDF's custom slice, Linux
// 6.12 and later; older kernels ignore the field). A thread woken by a doorbell then runs at
// once even when the CPU it lands on is busy with a polling application thread, instead of
// waiting for that thread's slice to end (about 2 ms on a 2-core VM with the default slice).
// Its priority and share of the CPU are unchanged.
constexpr uint64_t kSchedSliceNs = 100'000;

struct SchedAttr {  // struct sched_attr (linux/sched/types.h), which glibc does not declare
  uint32_t size;
  uint32_t sched_policy;
  uint64_t sched_flags;
  int32_t sched_nice;
  uint32_t sched_priority;
  uint64_t sched_runtime;
  uint64_t sched_deadline;
  uint64_t sched_period;
  uint32_t sched_util_min;
  uint32_t sched_util_max;
};

void request_short_slice() {
#ifdef SYS_sched_setattr
  SchedAttr a;
  std::memset(&a, 0, sizeof a);
  a.size = sizeof a;
  a.sched_policy = SCHED_OTHER;
  a.sched_nice = static_cast<int32_t>(::getpriority(PRIO_PROCESS, 0));
  a.sched_runtime = kSchedSliceNs;
  [[maybe_unused]] long rc = ::syscall(SYS_sched_setattr, 0, &a, 0u);
#endif
}

// A kick may come before the work that caused it is visible: a doorbell fault's kick follows
// the first store that faulted, and a BlueFlame copy's other stores (possibly the one that
// carries the doorbell word) come after it; a peer's frame may still be in the wire. For this
// long after a kick the idle passes yield the CPU rather than sleep, so that a storing thread
// on the same CPU finishes and the device sees the result at once.
constexpr uint64_t kYieldAfterKickNs = 50'000;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

}  // namespace

void Hca::kick() {
  if (kick_fd_ < 0) return;
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(kick_fd_, &one, sizeof one);
}

void Hca::watch_page(uint8_t* page) {
  if (kick_fd_ < 0 || !doorbell_watch_supported()) return;
  std::lock_guard lock(watch_mu_);
  for (const WatchedPage& w : watched_)
    if (w.page == page) return;
  const int slot = doorbell_watch_add(page, kUarPageBytes, kick_fd_);
  if (slot >= 0) watched_.push_back(WatchedPage{page, slot});
}

void Hca::unwatch_page(uint8_t* page) {
  std::lock_guard lock(watch_mu_);
  for (auto it = watched_.begin(); it != watched_.end(); ++it) {
    if (it->page != page) continue;
    doorbell_watch_remove(it->slot);
    watched_.erase(it);
    return;
  }
}

void Hca::unwatch_all() {
  std::lock_guard lock(watch_mu_);
  for (const WatchedPage& w : watched_) doorbell_watch_remove(w.slot);
  watched_.clear();
}

bool Hca::arm_watches() {
  if (!doorbell_watch_available()) return false;
  std::lock_guard lock(watch_mu_);
  if (watched_.empty()) return false;
  for (const WatchedPage& w : watched_) {
    if (doorbell_watch_arm(w.slot)) continue;
    for (const WatchedPage& u : watched_) doorbell_watch_disarm(u.slot);
    return false;
  }
  return true;
}

void Hca::disarm_watches() {
  std::lock_guard lock(watch_mu_);
  for (const WatchedPage& w : watched_) doorbell_watch_disarm(w.slot);
}

bool Hca::register_written() {
  std::lock_guard lock(mu_);
  const auto written = [](const uint8_t* p) { return doorbell::mmio_read64(p) != 0; };
  for (const auto& reg : registers_) {
    if (!reg->owned) continue;
    if (written(reg->base) || written(reg->base + kBfHalfBytes)) return true;
  }
  for (uint8_t* page : owned_pages_)
    if (written(page + kCqDoorbellOffset)) return true;
  // Pages the application mapped may be gone: a fault counts as a write, so that the engine
  // pass that follows finds it and fails what used them.
  bool any = false;
  const bool read = host_guarded([&] {
    for (const auto& reg : registers_)
      if (!reg->owned && !reg->failed && (written(reg->base) || written(reg->base + kBfHalfBytes)))
        any = true;
    for (uint8_t* page : external_pages_)
      if (written(page + kCqDoorbellOffset)) any = true;
  });
  return any || !read;
}

void Hca::thread_main() {
  uint32_t idle_passes = 0;
  uint64_t sleep_ns = kFirstSleepNs;
  uint64_t yield_until = 0;
  const int wire_fd = shared_.wire->wait_fd(endpoint_);
  // The default timer slack (50 us) would add to every sleep; the back-off is the device's
  // reaction time to a doorbell written while it sleeps, so the sleeps are kept exact.
  ::prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  if (const char* slice = std::getenv("RNICDV_SIM_SHORT_SLICE"); !slice || std::strcmp(slice, "0") != 0)
    request_short_slice();
  while (!stop_.load(std::memory_order_acquire)) {
    if (run_once()) {
      idle_passes = 0;
      sleep_ns = kFirstSleepNs;
      continue;
    }
    if (++idle_passes < kSpinPasses) {
      cpu_relax();
      continue;
    }
    if (yield_until != 0) {
      if (now() < yield_until) {
        ::sched_yield();
        continue;
      }
      yield_until = 0;
    }
    // Timed sleeps first; past them, a deep sleep, watched when the pages can be protected.
    const bool deep = sleep_ns > kLastTimedSleepNs;
    bool armed = false;
    uint64_t wait = sleep_ns;
    if (deep) {
      armed = arm_watches();
      wait = armed ? kWatchedDeepSleepNs : kPolledDeepSleepNs;
      // Loads only: a store that landed before the pages were protected is seen here, and
      // one after it faults and kicks.
      if (armed && register_written()) {
        disarm_watches();
        idle_passes = 0;
        continue;
      }
    } else {
      sleep_ns *= 2;
    }
    const uint64_t now_ns = now();
    const uint64_t deadline = next_deadline_ns();
    if (deadline != UINT64_MAX) wait = deadline > now_ns ? std::min(wait, deadline - now_ns) : 0;
    if (wait == 0) {
      if (armed) disarm_watches();
      continue;
    }

    pollfd fds[2];
    int nfds = 0;
    fds[nfds++] = pollfd{kick_fd_, POLLIN, 0};
    if (wire_fd >= 0) fds[nfds++] = pollfd{wire_fd, POLLIN, 0};
    sleeps_.fetch_add(1, std::memory_order_relaxed);
    if (armed) watched_sleeps_.fetch_add(1, std::memory_order_relaxed);
    sleeping_.store(true, std::memory_order_seq_cst);
    // Work that arrived between the last pass and the flag is caught by this last look.
    if (!stop_.load(std::memory_order_acquire)) {
      timespec ts{static_cast<time_t>(wait / 1'000'000'000),
                  static_cast<long>(wait % 1'000'000'000)};
      ::ppoll(fds, nfds, &ts, nullptr);
    }
    sleeping_.store(false, std::memory_order_seq_cst);
    // The pages stay protected: the device writes a register only to consume a value that
    // software stored, which unprotected its page; the rest fault on their first store.
    if (fds[0].revents & POLLIN) {
      uint64_t v;
      [[maybe_unused]] ssize_t n = ::read(kick_fd_, &v, sizeof v);
      sleep_ns = kFirstSleepNs;
      yield_until = now() + kYieldAfterKickNs;
    } else if (fds[nfds - 1].revents & POLLIN) {
      sleep_ns = kFirstSleepNs;
    }
    idle_passes = kSpinPasses;  // after a sleep, look once and sleep again if still idle
  }
}

void FabricShared::kick_sleepers(const Hca* except) {
  // The references are dropped outside the lock: the last one may destroy a device.
  thread_local std::vector<std::shared_ptr<Hca>> sleepers;
  {
    std::lock_guard<std::mutex> lock(mu);
    for (const Member& m : hcas) {
      if (m.raw == except || !m.raw->sleeping()) continue;
      if (auto h = m.weak.lock()) sleepers.push_back(std::move(h));
    }
  }
  for (auto& h : sleepers) h->kick();
  sleepers.clear();
}

void FabricShared::snapshot(std::vector<std::shared_ptr<Hca>>* out) const {
  out->clear();
  std::lock_guard<std::mutex> lock(mu);
  for (const Member& m : hcas)
    if (auto h = m.weak.lock()) out->push_back(std::move(h));
}

}  // namespace rnicdv::sim
