// SPDX-License-Identifier: BSD-3-Clause
// Threaded mode: one thread per device polls its registers, doorbell records and endpoint.
// While there is work it spins; when idle it backs off (a short spin, then sleeps on the
// wire's fd and a kick eventfd with timeouts growing to about 1 ms, never past the next
// timer), so two idle devices on a 2-core machine cost almost nothing.
#include <poll.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>

#include "fabric_shared.h"
#include "hca.h"

namespace rnicdv::sim {

namespace {

// A pass is not free: on the UDP wire it includes a recvmmsg system call (~2 us). A long spin
// takes the core from the application thread that is about to ring this device, which on a
// 2-core machine costs far more than the sleep it saves: perftest's ib_write_lat between two
// processes reported a t_typical (half a round trip) of ~105 us with 64 passes, 18-49 us
// with 4.
constexpr uint32_t kSpinPasses = 4;
constexpr uint64_t kFirstSleepNs = 20'000;
constexpr uint64_t kMaxSleepNs = 1'000'000;

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

void Hca::thread_main() {
  uint32_t idle_passes = 0;
  uint64_t sleep_ns = kFirstSleepNs;
  const int wire_fd = shared_.wire->wait_fd(endpoint_);
  // The default timer slack (50 us) would add to every sleep; the back-off is the device's
  // reaction time to a doorbell written while it sleeps, so the sleeps are kept exact.
  ::prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
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
    const uint64_t now_ns = now();
    const uint64_t deadline = next_deadline_ns();
    uint64_t wait = sleep_ns;
    if (deadline != UINT64_MAX) wait = deadline > now_ns ? std::min(wait, deadline - now_ns) : 0;
    sleep_ns = std::min(sleep_ns * 2, kMaxSleepNs);
    if (wait == 0) continue;

    pollfd fds[2];
    int nfds = 0;
    fds[nfds++] = pollfd{kick_fd_, POLLIN, 0};
    if (wire_fd >= 0) fds[nfds++] = pollfd{wire_fd, POLLIN, 0};
    const int timeout_ms = static_cast<int>((wait + 999'999) / 1'000'000);
    sleeping_.store(true, std::memory_order_seq_cst);
    // Work that arrived between the last pass and the flag is caught by this last look.
    if (!stop_.load(std::memory_order_acquire)) {
      if (wait < 1'000'000) {
        // Sub-millisecond waits: poll() cannot express them; ppoll can.
        timespec ts{0, static_cast<long>(wait)};
        ::ppoll(fds, nfds, &ts, nullptr);
      } else {
        ::poll(fds, nfds, timeout_ms);
      }
    }
    sleeping_.store(false, std::memory_order_seq_cst);
    if (fds[0].revents & POLLIN) {
      uint64_t v;
      [[maybe_unused]] ssize_t n = ::read(kick_fd_, &v, sizeof v);
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
