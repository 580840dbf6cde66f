// SPDX-License-Identifier: BSD-3-Clause
#include "mlx5_async_events.h"

#include <sys/epoll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include "mlx5_async.h"

namespace rnicdv::hw::mlx5 {

namespace {

Status epoll_add(int epoll_fd, int fd, const std::string& what) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  if (epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0)
    return verbs_failure(errno, what, "epoll_ctl(ADD)");
  return Status::ok();
}

}  // namespace

Result<std::shared_ptr<AsyncEvents>> AsyncEvents::create(ContextRef ctx,
                                                         std::shared_ptr<EventThread> thread,
                                                         const std::string& device_name) {
  const std::string what = device_name + ": async events";
  RNICDV_ASSIGN_OR_RETURN(ReadyFd ready, ReadyFd::create(what));
  const int app_fd = epoll_create1(EPOLL_CLOEXEC);
  if (app_fd < 0) return verbs_failure(errno, what, "epoll_create1");
  for (int fd : {ready.fd(), ctx->async_fd}) {
    if (Status st = epoll_add(app_fd, fd, what); !st) {
      ::close(app_fd);
      return st;
    }
  }
  return std::shared_ptr<AsyncEvents>(
      new AsyncEvents(std::move(ctx), std::move(thread), what, app_fd, std::move(ready)));
}

AsyncEvents::~AsyncEvents() {
  ::close(app_fd_);
}

uint64_t AsyncEvents::skipped() const {
  std::lock_guard lock(mu_);
  return skipped_;
}

bool AsyncEvents::next(AsyncEvent* out) {
  std::lock_guard lock(mu_);
  if (!queue_.empty()) {
    *out = queue_.front();
    queue_.pop_front();
    if (queue_.empty()) ready_.clear();
    return true;
  }
  if (owned_) return false;
  std::optional<AsyncEvent> ev;
  while (read_locked(&ev)) {
    if (ev) {
      *out = *ev;
      return true;
    }
  }
  return false;
}

bool AsyncEvents::read_locked(std::optional<AsyncEvent>* out) {
  ibv_async_event event;
  std::memset(&event, 0, sizeof event);
  // Non-blocking fd: -1 with EAGAIN when nothing is pending.
  if (ibv_get_async_event(ctx_.get(), &event) != 0) return false;
  // Map before acknowledging: the ack allows the QP or CQ to be destroyed.
  *out = map_async_event(event);
  ibv_ack_async_event(&event);
  if (!*out) ++skipped_;
  return true;
}

void AsyncEvents::push_locked(const AsyncEvent& ev) {
  if (queue_.empty()) ready_.set();
  queue_.push_back(ev);
}

bool AsyncEvents::on_readable() {
  for (;;) {
    std::pair<void (*)(void*), void*> notifier{nullptr, nullptr};
    {
      std::lock_guard lock(mu_);
      if (!owned_) return true;  // handed back while this call was on its way
      std::optional<AsyncEvent> ev;
      errno = 0;
      // Anything but EAGAIN is a context that is gone (a device removed): stop watching it.
      if (!read_locked(&ev)) return errno == EAGAIN;
      if (!ev) continue;
      push_locked(*ev);
      // Looked up under the lock that also covers the read: the QP the event named cannot
      // have been destroyed, and its number reused, in between.
      if (ev->type == AsyncEventType::comm_est) {
        if (auto it = notifiers_.find(ev->qpn); it != notifiers_.end()) notifier = it->second;
      }
    }
    if (notifier.first) notifier.first(notifier.second);
  }
}

Status AsyncEvents::set_comm_est_notifier(uint32_t qpn, void (*fn)(void*), void* ctx) {
  std::lock_guard control(control_mu_);
  bool none_left = false;
  {
    std::lock_guard lock(mu_);
    if (fn) {
      notifiers_[qpn] = {fn, ctx};
    } else if (notifiers_.erase(qpn) == 0) {
      return Status::ok();
    }
    none_left = notifiers_.empty();
  }
  if (!none_left && watch_ == 0) {
    if (Status st = hand_to_thread(); !st) {
      std::lock_guard lock(mu_);
      notifiers_.erase(qpn);
      return st;
    }
  } else if (none_left && watch_ != 0) {
    take_back();
  }
  return Status::ok();
}

Status AsyncEvents::hand_to_thread() {
  const int fd = ctx_->async_fd;
  {
    std::lock_guard lock(mu_);
    owned_ = true;
    // What is pending stays in the fd (level-triggered) for the thread to read.
    if (epoll_ctl(app_fd_, EPOLL_CTL_DEL, fd, nullptr) != 0) {
      owned_ = false;
      return verbs_failure(errno, name_, "epoll_ctl(DEL) of the context's fd");
    }
  }
  Result<uint64_t> id = thread_->watch(
      fd, [self = shared_from_this()] { return self->on_readable(); }, "async events");
  if (!id) {
    std::lock_guard lock(mu_);
    owned_ = false;
    (void)epoll_add(app_fd_, fd, name_);
    return id.status();
  }
  watch_ = id.value();
  return Status::ok();
}

void AsyncEvents::take_back() {
  // Unwatched first: a handler call still under way reads and queues under mu_, before the
  // application may read the fd again, so the order holds.
  thread_->unwatch(watch_);
  watch_ = 0;
  std::lock_guard lock(mu_);
  owned_ = false;
  // Cannot fail short of memory; the application would then see the fd as never readable.
  (void)epoll_add(app_fd_, ctx_->async_fd, name_);
}

}  // namespace rnicdv::hw::mlx5
