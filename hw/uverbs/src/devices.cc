// SPDX-License-Identifier: BSD-3-Clause
#include "devices.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include "cm/cm_agent.h"
#include "cm/sim_cm.h"
#include "exit_teardown.h"
#include "handles.h"
#include "quiet_thread.h"
#include "shim.h"

namespace rnicdv::uverbs {

namespace {
std::atomic<uint32_t> g_fork_generation{0};
}  // namespace

uint32_t fork_generation() noexcept {
  static const int registered = ::pthread_atfork(
      nullptr, nullptr, [] { g_fork_generation.fetch_add(1, std::memory_order_relaxed); });
  (void)registered;
  return g_fork_generation.load(std::memory_order_relaxed);
}

bool shutdown_contexts(const ExitDeadline& deadline);  // cdev.cc

namespace {

struct Registry {
  std::mutex mu;
  std::array<std::unique_ptr<SimDevice>, kMaxDevices> devices;
  std::thread events;
  int wake_fd = -1;
  // The teardown at exit runs on the event thread (at_exit): asked for with `teardown` (and
  // what the exiting thread was interrupted in), its end told through `done_fd`.
  std::atomic<bool> teardown{false};
  // at_exit has returned, whichever way (exit_barrier waits for it).
  std::atomic<bool> exit_hook_over{false};
  std::atomic<uint8_t> interrupted{0};
  int done_fd = -1;
  std::atomic<AsyncSink> sink{nullptr};
  bool exit_hook = false;
  pid_t pid = ::getpid();  // the process whose threads and devices these are
};

// Never destroyed: the atexit hook below releases the devices while the rest of the process
// (the sim's statics, libibverbs) is still intact.
Registry& registry() {
  return per_process_table<Registry>();
}

void teardown_at_exit(Registry& r);

// How long the farewell waits for each CM's lock, which the interrupted rdma_cm call may hold.
constexpr uint64_t kFarewellWaitNs = 200'000'000;

void event_loop() {
  Registry& r = registry();
  std::vector<pollfd> fds;
  std::vector<SimDevice*> devs;
  for (;;) {
    if (r.teardown.load(std::memory_order_acquire)) {
      teardown_at_exit(r);
      (void)::eventfd_write(r.done_fd, 1);
      return;
    }
    fds.clear();
    devs.clear();
    fds.push_back(pollfd{r.wake_fd, POLLIN, 0});
    {
      std::lock_guard<std::mutex> lock(r.mu);
      for (auto& d : r.devices) {
        if (!d) continue;
        fds.push_back(pollfd{d->dev->async_fd(), POLLIN, 0});
        devs.push_back(d.get());
      }
    }
    if (::poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) return;
    if (fds[0].revents & POLLIN) {
      uint64_t v;
      [[maybe_unused]] ssize_t n = libc::read(r.wake_fd, &v, sizeof v);
    }
    for (size_t i = 1; i < fds.size(); ++i) {
      if (!(fds[i].revents & POLLIN)) continue;
      hw::AsyncEvent ev{};
      while (devs[i - 1]->dev->next_async_event(&ev)) {
        AsyncSink sink = r.sink.load(std::memory_order_acquire);
        if (sink) sink(devs[i - 1]->index, ev);
      }
    }
  }
}

// eventfd_write is libc's own write, not the shim's interposed one (which may look its target
// up with dlsym on first use): safe from the exit path.
void wake() { (void)::eventfd_write(registry().wake_fd, 1); }

// Stops the devices' work without a lock (sim::Device::pause is a flag their threads read).
// The table is only written by device_for, which at_exit never runs beside (kInOpen).
void pause_devices() {
  for (auto& d : registry().devices)
    if (d) d->dev->pause();
}

// The teardown at exit, on the event thread: the rdma_cm IDs (DREQs to the peers), the
// contexts (their QPs and CQs hold the devices), then the devices themselves, so that no
// device thread runs while the process ends. It never waits for a lock the call that exit()
// interrupted may hold, and for no other lock longer than kExitWait in all
// (exit_teardown.h): what it cannot reach in time is left as it is, and the devices paused.
void teardown_at_exit(Registry& r) {
  const uint8_t interrupted = r.interrupted.load(std::memory_order_acquire);
  const ExitDeadline deadline(kExitWait);
  const bool ucma_done = !(interrupted & kInUcma) && shutdown_ucma(deadline);
  if (!ucma_done) {
    // The ID table stays locked (the interrupted rdma_cm call holds it, or another thread's):
    // the CMs underneath still tell every peer, without the IDs.
    for (auto& d : r.devices)
      if (d && d->dev->connection_manager())
        (void)sim::cm::cm_agent_of(*d->dev).farewell(kFarewellWaitNs);
  }
  const bool contexts_done = !(interrupted & (kInVerbs | kInUcma)) && shutdown_contexts(deadline);
  // Something left as it is may still use a device (another thread in its command): the
  // devices stay, paused, so that their threads do nothing more while the process ends.
  if (!ucma_done || !contexts_done || !deadline.lock(r.mu)) {
    pause_devices();
    return;
  }
  std::lock_guard<std::mutex> lock(r.mu, std::adopt_lock);
  for (auto& d : r.devices) d.reset();
}

// How long at_exit may take: the teardown's budget, a second for the event thread.
constexpr int64_t kAtExitLimitMs = kExitWait.count() + 1000;

int64_t ms_since(const timespec& start) {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  return (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1'000'000;
}

// The atexit hook. The exiting thread does nothing here that could wait on the program: it
// may be in a signal handler that interrupted a call holding any lock, the shim's or libc's
// (malloc's, when the handler interrupted an allocation). So it allocates nothing and takes
// no lock: it hands the teardown to the event thread (a flag and an eventfd) and waits for it
// at most kExitWait plus a second. If the teardown cannot finish in that time, the process
// ends without it, as it would have without the shim.
void teardown_and_wait(Registry& r) {
  // A child of fork() exits with the parent's objects in its copy of memory, but none of its
  // threads: joining them, or taking a lock one of them held at the fork, would crash or
  // hang the child. Its copy is left as it is (still reachable from here); the parent's
  // devices are the parent's.
  if (::getpid() != r.pid) return;
  const uint8_t interrupted = shim_work_of_this_thread();
  if (interrupted & kInOpen) return;  // the device table itself may be half made
  if (!r.events.joinable() || r.done_fd < 0) return;
  r.interrupted.store(interrupted, std::memory_order_release);
  r.teardown.store(true, std::memory_order_release);
  wake();
  timespec start{};
  ::clock_gettime(CLOCK_MONOTONIC, &start);
  for (;;) {
    const int64_t spent_ms = ms_since(start);
    // The event thread is stuck: the process ends as it is.
    if (spent_ms >= kAtExitLimitMs) return;
    pollfd p{r.done_fd, POLLIN, 0};
    const int n = ::poll(&p, 1, static_cast<int>(kAtExitLimitMs - spent_ms));
    if (n > 0) break;
    if (n < 0 && errno != EINTR) return;
  }
  // It has done all it does; what is left is the end of the thread: its thread_local
  // destructors, then libc's freeing of its malloc cache, which takes malloc's lock. That
  // lock may be held by this very thread, when exit() was called from a signal handler that
  // interrupted an allocation, and a join would then wait forever. So the join is bounded:
  // the thread has ended (and the statics that exit() destroys next are no longer its) within
  // a second, or it waits for that lock, which it will never get, and touches nothing more.
  // The Registry is never destroyed, so a thread left unjoined is never detached or joined
  // again.
  timespec until{};
  ::clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 1;
  (void)::pthread_timedjoin_np(r.events.native_handle(), nullptr, &until);
}

void at_exit() {
  Registry& r = registry();
  teardown_and_wait(r);
  r.exit_hook_over.store(true, std::memory_order_release);
}

// The second atexit hook, registered just before at_exit and so run just after it. glibc
// (2.36, as Debian 12 ships it) lets a second thread that calls exit() while the first is
// running the handlers take the next handler in the list, and call _exit when the list is
// empty: rping's client does so (its rdma_cm thread and its main thread both exit on an
// ADDR_ERROR). The process then ended in the middle of the teardown: no DREQ to the peers,
// no fault log's end line. The thread that runs this hook, whichever it is, waits for at_exit
// to return (at most its limit and half a second more), so that no exit() ends the process
// before the teardown is over. Like at_exit it allocates nothing and takes no lock.
void exit_barrier() {
  Registry& r = registry();
  if (::getpid() != r.pid) return;  // a child of fork(): at_exit returns at once there
  timespec start{};
  ::clock_gettime(CLOCK_MONOTONIC, &start);
  while (!r.exit_hook_over.load(std::memory_order_acquire)) {
    if (ms_since(start) >= kAtExitLimitMs + 500) return;
    const timespec pause{0, 1'000'000};
    ::nanosleep(&pause, nullptr);
  }
}

}  // namespace

void set_async_sink(AsyncSink sink) { registry().sink.store(sink, std::memory_order_release); }

Result<SimDevice*> device_for(uint32_t index) {
  Registry& r = registry();
  if (index >= config().devices)
    return Status::error(Errc::not_found, "uverbs%u: no such device (RNICDV_UVERBS_DEVICES=%u)",
                         index, config().devices);
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.devices[index]) return r.devices[index].get();
  Result<std::shared_ptr<sim::Fabric>> fabric = sim::default_fabric();
  // The process-wide fabric refused (a bad fault specification, say): the same reason for
  // every device, so it is not tied to one.
  if (!fabric) return fabric.status().prepend("simulated HCAs");
  sim::DeviceConfig cfg;
  cfg.name = device_name(index);
  Result<std::shared_ptr<sim::Device>> dev = fabric.value()->add_device(cfg);
  if (!dev) return dev.status().prepend("open " + device_name(index));
  auto sd = std::make_unique<SimDevice>();
  sd->index = index;
  sd->dev = std::move(dev.value());
  r.devices[index] = std::move(sd);
  // How libmlx5's doorbell stores reach a sleeping device (uar_watch.h), once per process.
  static std::once_flag said;
  std::call_once(said, [] {
    if (config().log_errors) log_line("doorbell wake-up: %s", sim::uar_wake_mechanism().c_str());
  });
  if (r.wake_fd < 0) {
    r.wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    r.done_fd = r.wake_fd < 0 ? -1 : ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (r.wake_fd < 0 || r.done_fd < 0) {
      const int err = errno;
      if (r.wake_fd >= 0) libc::close(r.wake_fd);
      r.wake_fd = -1;
      return Status::error(Errc::io_error, "open %s: eventfd: %s", device_name(index).c_str(),
                           strerror(err));
    }
    r.events = sim::start_quiet_thread(event_loop);
  } else {
    wake();  // poll the new device's async fd too
  }
  if (!r.exit_hook) {
    r.exit_hook = true;
    // In this order: handlers run last registered first, so exit_barrier runs after at_exit.
    ::atexit(exit_barrier);
    ::atexit(at_exit);
  }
  return r.devices[index].get();
}

}  // namespace rnicdv::uverbs
