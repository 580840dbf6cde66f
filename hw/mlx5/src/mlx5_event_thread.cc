// SPDX-License-Identifier: BSD-3-Clause
#include "mlx5_event_thread.h"

#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <system_error>

#include "mlx5_verbs.h"

namespace rnicdv::hw::mlx5 {

Result<ReadyFd> ReadyFd::create(const std::string& what) {
  const int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (fd < 0) return verbs_failure(errno, what, "eventfd");
  return ReadyFd(fd);
}

ReadyFd::~ReadyFd() {
  if (fd_ >= 0) ::close(fd_);
}

void ReadyFd::set() {
  const uint64_t one = 1;
  // Cannot fail: the count stays at 0 or 1, far from the eventfd's limit.
  [[maybe_unused]] const ssize_t n = ::write(fd_, &one, sizeof one);
}

void ReadyFd::clear() {
  uint64_t count = 0;
  [[maybe_unused]] const ssize_t n = ::read(fd_, &count, sizeof count);  // EAGAIN if clear
}

EventThread::Run::~Run() {
  if (wake_fd >= 0) ::close(wake_fd);
  if (epoll_fd >= 0) ::close(epoll_fd);
}

EventThread::~EventThread() {
  std::thread thread;
  {
    std::lock_guard lock(mu_);
    if (run_) stop_locked(&thread);
  }
  finish(std::move(thread));
}

bool EventThread::running() const {
  std::lock_guard lock(mu_);
  return run_ != nullptr;
}

Result<uint64_t> EventThread::watch(int fd, Handler on_readable, const std::string& what) {
  const std::string context = name_ + ": " + what + ": event thread";
  std::lock_guard lock(mu_);
  std::shared_ptr<Run> run = run_;
  if (!run) {
    run = std::make_shared<Run>();
    run->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    if (run->epoll_fd < 0) return verbs_failure(errno, context, "epoll_create1");
    run->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (run->wake_fd < 0) return verbs_failure(errno, context, "eventfd");
    epoll_event wake{};
    wake.events = EPOLLIN;
    wake.data.u64 = 0;
    if (epoll_ctl(run->epoll_fd, EPOLL_CTL_ADD, run->wake_fd, &wake) != 0)
      return verbs_failure(errno, context, "epoll_ctl(ADD) of the wake-up eventfd");
  }
  const uint64_t id = next_id_++;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = id;
  if (epoll_ctl(run->epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0)
    return verbs_failure(errno, context, "epoll_ctl(ADD)");
  watches_.emplace(id, Watch{fd, std::make_shared<Handler>(std::move(on_readable))});
  if (!run_) {
    try {
      thread_ = std::thread([this, run] { loop(run); });
    } catch (const std::system_error& e) {
      watches_.erase(id);
      return Status(Errc::no_resources, context + ": starting the thread: " + e.what());
    }
    // Named here rather than by the thread itself, so that it shows once watch() returns.
    pthread_setname_np(thread_.native_handle(), kThreadName);
    run_ = std::move(run);
  }
  return id;
}

void EventThread::unwatch(uint64_t id) {
  std::thread thread;
  std::shared_ptr<Handler> handler;  // released after mu_: it may own what owns this thread
  {
    std::lock_guard lock(mu_);
    auto it = watches_.find(id);
    if (it == watches_.end()) return;
    // ENOENT if the descriptor had failed and left the set already.
    (void)epoll_ctl(run_->epoll_fd, EPOLL_CTL_DEL, it->second.fd, nullptr);
    handler = std::move(it->second.handler);
    watches_.erase(it);
    if (watches_.empty()) stop_locked(&thread);
  }
  finish(std::move(thread));
}

void EventThread::stop_locked(std::thread* thread) {
  run_->stop.store(true, std::memory_order_release);
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(run_->wake_fd, &one, sizeof one);
  run_.reset();
  *thread = std::move(thread_);
}

void EventThread::finish(std::thread thread) {
  if (!thread.joinable()) return;
  // From a handler: this very thread sees `stop` when the handler returns and ends by itself.
  if (thread.get_id() == std::this_thread::get_id())
    thread.detach();
  else
    thread.join();
}

void EventThread::loop(const std::shared_ptr<Run>& run) {
  epoll_event events[16];
  while (!run->stop.load(std::memory_order_acquire)) {
    const int n = epoll_wait(run->epoll_fd, events, 16, -1);
    // Only EINTR can fail a wait on a valid epoll descriptor, which this run owns.
    if (n < 0) continue;
    for (int i = 0; i < n; ++i) {
      const uint64_t id = events[i].data.u64;
      if (id == 0) continue;  // the wake-up: the loop's condition sees `stop`
      std::shared_ptr<Handler> handler;
      int fd = -1;
      {
        std::lock_guard lock(mu_);
        // A stopped run hands nothing out: a watch added since belongs to the next run's
        // thread, and two readers of one descriptor could reorder its events.
        if (run_ != run) return;
        auto it = watches_.find(id);
        if (it == watches_.end()) continue;  // unwatched after epoll_wait returned
        handler = it->second.handler;
        fd = it->second.fd;
      }
      const bool keep = (*handler)();
      // The last reference to the handler, if unwatched meanwhile, may hold the last one to
      // this EventThread, whose destructor then stops this run.
      handler.reset();
      // Stopped from the handler, the EventThread may be gone: touch nothing of it.
      if (run->stop.load(std::memory_order_acquire)) return;
      if (keep) continue;
      std::lock_guard lock(mu_);
      if (run_ == run && watches_.count(id))
        (void)epoll_ctl(run->epoll_fd, EPOLL_CTL_DEL, fd, nullptr);
    }
  }
}

}  // namespace rnicdv::hw::mlx5
