// SPDX-License-Identifier: BSD-3-Clause
#include "cm/event_queue.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace rnicdv::sim::cm {

Result<std::shared_ptr<CmEventQueue>> CmEventQueue::create() {
  const int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd < 0)
    return Status::error(Errc::io_error, "cm event queue: eventfd: %s", std::strerror(errno));
  return std::shared_ptr<CmEventQueue>(new CmEventQueue(fd));
}

CmEventQueue::~CmEventQueue() {
  ::close(fd_);
}

void CmEventQueue::push(hw::CmEvent event) {
  std::lock_guard lock(mu_);
  events_.push_back(std::move(event));
  if (events_.size() == 1) {
    // The counter saturates long before 2^64 - 1 pushes; a failed write only loses a wake-up
    // that an already non-zero counter provides anyway.
    [[maybe_unused]] int rc = eventfd_write(fd_, 1);
  }
}

bool CmEventQueue::pop(hw::CmEvent* out) {
  std::lock_guard lock(mu_);
  if (events_.empty()) return false;
  *out = std::move(events_.front());
  events_.pop_front();
  if (events_.empty()) {
    eventfd_t drained;
    [[maybe_unused]] int rc = eventfd_read(fd_, &drained);
  }
  return true;
}

size_t CmEventQueue::size() const {
  std::lock_guard lock(mu_);
  return events_.size();
}

}  // namespace rnicdv::sim::cm
