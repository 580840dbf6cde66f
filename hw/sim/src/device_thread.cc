// SPDX-License-Identifier: BSD-3-Clause
// Threaded mode: one thread per device runs its engine. While there is work it spins; after a
// few idle passes it sleeps in ppoll on its eventfd, its wire endpoint and, when the
// application maps UAR pages of it, a userfaultfd (uar_watch.h), until something needs it or
// its next timer is due. What wakes it:
// - rnicdv's driver, after a doorbell or CQ-arm register write, when the device published
//   that it sleeps (doorbell/device_wake.h: the flag `asleep_` and the eventfd);
// - a store of libmlx5's into a UAR page the device write-protected before it slept
//   (uar_watch.h); where userfaultfd is refused, it sleeps at most kPolledDeepSleepNs instead;
// - a frame on its wire endpoint, or another device of the process that sent it one; a wire
//   with nothing to wait on (a DPDK port) is polled after sleeps of 20 us doubling to 1 ms;
// - the control path (a modify, a new handler), and stop().
// No signal is involved, and an idle device costs no CPU.
#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

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
// The first sleeps of an idle device are timed, doubling from the first to the last: a device
// that was just busy is likely to be rung again soon, and a short sleep ends without a store
// having to wait for it or a protection to be set. Past them comes the deep sleep.
constexpr uint64_t kFirstSleepNs = 20'000;
constexpr uint64_t kLastTimedSleepNs = 80'000;
// The longest sleep while the application maps UAR pages that cannot be watched
// (userfaultfd refused): the longest a libmlx5 doorbell then waits.
constexpr uint64_t kPolledDeepSleepNs = 1'000'000;
// A wire that must be polled (wire.h polled(): a DPDK port) is looked at after sleeps that
// double from the first to the last while nothing arrives.
constexpr uint64_t kFirstWirePollNs = 20'000;
constexpr uint64_t kLastWirePollNs = 1'000'000;

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

hw::DeviceWakeView Hca::wake_view() const {
  if (shared_.deterministic() || kick_fd_ < 0) return {};
  return hw::DeviceWakeView{&asleep_, kick_fd_};
}

void Hca::thread_main() {
  uint32_t idle_passes = 0;
  const bool wire_polled = shared_.wire->polled();
  uint64_t wire_poll_ns = kFirstWirePollNs;
  std::vector<uint8_t*> rung, watch;
  // The default timer slack (50 us) would add to every timed sleep (a protocol timer, or the
  // polled bound).
  ::prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  if (const char* slice = std::getenv("RNICDV_SIM_SHORT_SLICE"); !slice || std::strcmp(slice, "0") != 0)
    request_short_slice();
  uint64_t sleep_ns = kFirstSleepNs;
  while (!stop_.load(std::memory_order_acquire)) {
    if (run_engine_pass()) {
      idle_passes = 0;
      sleep_ns = kFirstSleepNs;
      wire_poll_ns = kFirstWirePollNs;
      continue;
    }
    if (++idle_passes < kSpinPasses) {
      cpu_relax();
      continue;
    }
    // Going to sleep: publish the flag and look once more. A doorbell stored before the flag
    // is seen by this pass; one after it finds the flag, and the driver kicks
    // (doorbell/device_wake.h). The first sleeps are short and timed, and libmlx5's stores
    // are found when they end; past them the deep sleep has no timer of its own, and the
    // application's UAR mappings are write-protected first, so that libmlx5's first store
    // wakes it (uar_watch.h).
    const bool deep = sleep_ns > kLastTimedSleepNs;
    bool watched = false;
    if (deep) {
      pages_to_watch(&watch);
      watched = uar_watch_.arm(watch);
    }
    asleep_.store(1, std::memory_order_seq_cst);
    if (run_engine_pass()) {
      asleep_.store(0, std::memory_order_relaxed);
      if (deep) uar_watch_.disarm();
      idle_passes = 0;
      sleep_ns = kFirstSleepNs;
      continue;
    }
    uint64_t wait = sleep_ns;
    if (deep) {
      wait = watched ? UINT64_MAX : kPolledDeepSleepNs;
    } else {
      sleep_ns *= 2;
    }
    if (errored_external_.load(std::memory_order_relaxed) != 0) wait = std::min(wait, kErroredLookNs);
    if (wire_polled) {
      wait = std::min(wait, wire_poll_ns);
      wire_poll_ns = std::min(wire_poll_ns * 2, kLastWirePollNs);
    }
    const uint64_t now_ns = now();
    const uint64_t deadline = next_deadline_ns();
    if (deadline != UINT64_MAX) wait = deadline > now_ns ? std::min(wait, deadline - now_ns) : 0;
    pollfd fds[4];
    nfds_t nfds = 0;
    // Read before each wait: joining a multicast group may change it (wire.h), and a join
    // kicks the device.
    const int wire_fd = attached_ ? shared_.wire->wait_fd(endpoint_) : -1;
    const int wire2_fd = attached_ && two_ports_ ? shared_.wire->wait_fd(endpoint2_) : -1;
    fds[nfds++] = pollfd{kick_fd_, POLLIN, 0};
    if (wire_fd >= 0) fds[nfds++] = pollfd{wire_fd, POLLIN, 0};
    const nfds_t wire2_slot = nfds;
    if (wire2_fd >= 0) fds[nfds++] = pollfd{wire2_fd, POLLIN, 0};
    if (watched) fds[nfds++] = pollfd{uar_watch_.fd(), POLLIN, 0};
    if (wait != 0 && !stop_.load(std::memory_order_acquire)) {
      sleeps_.fetch_add(1, std::memory_order_relaxed);
      if (watched) watched_sleeps_.fetch_add(1, std::memory_order_relaxed);
      timespec ts{};
      if (wait != UINT64_MAX)
        ts = timespec{static_cast<time_t>(wait / 1'000'000'000), static_cast<long>(wait % 1'000'000'000)};
      ::ppoll(fds, nfds, wait == UINT64_MAX ? nullptr : &ts, nullptr);
    }
    asleep_.store(0, std::memory_order_relaxed);
    // The work first, the bookkeeping (the eventfd's read, the protection's release) after it:
    // a store of libmlx5's that the userfaultfd caught names its page, whose doorbell this
    // pass takes before the store is let go; a kick (a doorbell, a frame from a device of
    // this process, a control-path change) or a frame is work for the pass as it is.
    const bool kicked = (fds[0].revents & POLLIN) != 0;
    // POLLERR on the wire's socket: an ICMP error waits to be read (udp_wire.cc).
    bool woken = kicked || (wire_fd >= 0 && (fds[1].revents & (POLLIN | POLLERR))) ||
                 (wire2_fd >= 0 && (fds[wire2_slot].revents & (POLLIN | POLLERR)));
    if (deep && (fds[nfds - 1].revents & POLLIN) && watched) {
      uar_watch_.take_events(&rung);
      if (!rung.empty()) {
        note_rung_pages(rung);
        rung.clear();
        woken = true;
      }
    }
    if (woken && !stop_.load(std::memory_order_acquire)) run_engine_pass();
    if (kicked) {
      uint64_t kicks;
      [[maybe_unused]] const ssize_t n = ::read(kick_fd_, &kicks, sizeof kicks);
    }
    if (deep) {
      // A store caught after ppoll returned: its doorbell, then its release.
      uar_watch_.take_events(&rung);
      if (!rung.empty()) {
        note_rung_pages(rung);
        rung.clear();
        woken = true;
        run_engine_pass();
      }
      uar_watch_.disarm();
    }
    // Woken by something: back to spinning and short sleeps. A timed sleep that simply ended
    // looks once (the next pass) and sleeps longer.
    if (woken) sleep_ns = kFirstSleepNs;
    idle_passes = kSpinPasses - 1;
  }
  asleep_.store(0, std::memory_order_relaxed);
}

void FabricShared::kick_sleepers(const Hca* except) {
  // The references are dropped outside the lock: the last one may destroy a device.
  HcaRefs sleepers;
  // The frames sent before, the devices' sleep words after (the device publishes its word,
  // fences, and looks at its wire once more: one of the two sees the other's store).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  {
    std::lock_guard<std::mutex> lock(mu);
    for (const Member& m : hcas) {
      if (m.raw == except || !m.raw->sleeping()) continue;
      if (auto h = m.weak.lock()) sleepers.push_back(std::move(h));
    }
  }
  sleepers.for_each([](Hca& h) { h.kick(); });
}

void FabricShared::snapshot(HcaRefs* out) const {
  std::lock_guard<std::mutex> lock(mu);
  for (const Member& m : hcas)
    if (auto h = m.weak.lock()) out->push_back(std::move(h));
}

}  // namespace rnicdv::sim
