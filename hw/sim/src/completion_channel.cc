// SPDX-License-Identifier: BSD-3-Clause
#include "completion_channel.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace rnicdv::sim {

SimCompletionChannel::Queue::~Queue() {
  if (fd >= 0) ::close(fd);
}

void SimCompletionChannel::Queue::push(uint32_t cqn) noexcept {
  std::lock_guard lock(mu);
  cqns.push_back(cqn);
  const uint64_t one = 1;
  // Cannot fail short of a counter overflow (2^64 - 2 pending writes).
  [[maybe_unused]] const ssize_t n = ::write(fd, &one, sizeof one);
}

bool SimCompletionChannel::Queue::pop(uint32_t* cqn) noexcept {
  std::lock_guard lock(mu);
  if (cqns.empty()) return false;
  *cqn = cqns.front();
  cqns.pop_front();
  if (cqns.empty()) {
    // Back to not readable: the counter is read (and so reset) under the same lock as every
    // push, so the fd and the queue never disagree.
    uint64_t count = 0;
    [[maybe_unused]] const ssize_t n = ::read(fd, &count, sizeof count);
  }
  return true;
}

void SimCompletionChannel::Queue::forget(uint32_t cqn) noexcept {
  std::lock_guard lock(mu);
  const bool had = !cqns.empty();
  std::erase(cqns, cqn);
  if (had && cqns.empty()) {
    uint64_t count = 0;
    [[maybe_unused]] const ssize_t n = ::read(fd, &count, sizeof count);
  }
}

Result<std::unique_ptr<SimCompletionChannel>> SimCompletionChannel::create(
    const char* device_name) {
  auto q = std::make_shared<Queue>();
  q->fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (q->fd < 0)
    return Status::error(Errc::no_resources, "%s: create_completion_channel: eventfd: %s",
                         device_name, std::strerror(errno));
  return std::unique_ptr<SimCompletionChannel>(new SimCompletionChannel(std::move(q)));
}

}  // namespace rnicdv::sim
