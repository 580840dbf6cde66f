// SPDX-License-Identifier: BSD-3-Clause
#include "async_events.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace rnicdv::sim {

AsyncEventQueue::~AsyncEventQueue() {
  if (fd_ >= 0) ::close(fd_);
}

Status AsyncEventQueue::open() {
  fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd_ < 0)
    return Status::error(Errc::io_error, "async events: eventfd: %s", std::strerror(errno));
  return Status::ok();
}

void AsyncEventQueue::push(const hw::AsyncEvent& ev) {
  std::lock_guard<std::mutex> lock(mu_);
  events_.push_back(ev);
  if (events_.size() == 1 && fd_ >= 0) {
    const uint64_t one = 1;
    // The counter only says "non-empty"; a failed write leaves it readable anyway.
    [[maybe_unused]] ssize_t n = ::write(fd_, &one, sizeof one);
  }
}

bool AsyncEventQueue::pop(hw::AsyncEvent* out) {
  std::lock_guard<std::mutex> lock(mu_);
  if (events_.empty()) return false;
  *out = events_.front();
  events_.pop_front();
  if (events_.empty() && fd_ >= 0) {
    uint64_t value = 0;
    [[maybe_unused]] ssize_t n = ::read(fd_, &value, sizeof value);
  }
  return true;
}

size_t AsyncEventQueue::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_.size();
}

}  // namespace rnicdv::sim
