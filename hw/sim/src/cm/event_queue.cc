// SPDX-License-Identifier: BSD-3-Clause
#include "cm/event_queue.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace rnicdv::sim::cm {

namespace {

Result<int> open_eventfd(const char* what) {
  const int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd < 0)
    return Status::error(errno == EMFILE || errno == ENFILE ? Errc::no_resources : Errc::io_error,
                         "%s: eventfd: %s", what, std::strerror(errno));
  return fd;
}

}  // namespace

Result<std::shared_ptr<CmEventQueue>> CmEventQueue::create() {
  return open_eventfd("cm event queue").transform([](int fd) {
    return std::shared_ptr<CmEventQueue>(new CmEventQueue(fd));
  });
}

std::shared_ptr<CmEventQueue> CmEventQueue::create_relayed(std::shared_ptr<CmEventQueue> parent) {
  auto q = std::shared_ptr<CmEventQueue>(new CmEventQueue(-1));
  q->parent_ = std::move(parent);
  return q;
}

CmEventQueue::~CmEventQueue() {
  if (parent_ && watched_ && !events_.empty())
    parent_->add_relayed(-static_cast<int64_t>(events_.size()));
  if (fd_ >= 0) ::close(fd_);
}

Status CmEventQueue::attach_fd() {
  std::lock_guard lock(mu_);
  if (fd_ >= 0) return Status::ok();
  RNICDV_ASSIGN_OR_RETURN(fd_, open_eventfd("cm event queue"));
  if (parent_ && watched_ && !events_.empty())
    parent_->add_relayed(-static_cast<int64_t>(events_.size()));
  parent_.reset();
  update_signal_locked();
  return Status::ok();
}

void CmEventQueue::update_signal_locked() {
  const bool want = !events_.empty() || relayed_ > 0;
  if (want == signalled_) return;
  // The counter never nears 2^64 - 1 (one count at a time); a failed write or read only
  // leaves a spurious or an already-present wake-up.
  if (want) {
    [[maybe_unused]] int rc = eventfd_write(fd_, 1);
  } else {
    eventfd_t drained;
    [[maybe_unused]] int rc = eventfd_read(fd_, &drained);
  }
  signalled_ = want;
}

void CmEventQueue::add_relayed(int64_t delta) {
  std::lock_guard lock(mu_);
  relayed_ = delta < 0 ? relayed_ - std::min<uint64_t>(relayed_, static_cast<uint64_t>(-delta))
                       : relayed_ + static_cast<uint64_t>(delta);
  if (fd_ >= 0) update_signal_locked();
}

void CmEventQueue::push(hw::CmEvent event, uint32_t request) {
  std::lock_guard lock(mu_);
  events_.push_back(Entry{std::move(event), request});
  if (fd_ >= 0)
    update_signal_locked();
  else if (parent_ && watched_)
    parent_->add_relayed(1);
}

bool CmEventQueue::pop(hw::CmEvent* out, uint32_t* request) {
  std::lock_guard lock(mu_);
  if (events_.empty()) return false;
  *out = std::move(events_.front().event);
  if (request) *request = events_.front().request;
  events_.pop_front();
  if (fd_ >= 0)
    update_signal_locked();
  else if (parent_ && watched_)
    parent_->add_relayed(-1);
  return true;
}

void CmEventQueue::remove_request(uint32_t request) {
  std::lock_guard lock(mu_);
  const size_t before = events_.size();
  std::erase_if(events_, [request](const Entry& e) { return e.request == request; });
  const size_t removed = before - events_.size();
  if (removed == 0) return;
  if (fd_ >= 0)
    update_signal_locked();
  else if (parent_ && watched_)
    parent_->add_relayed(-static_cast<int64_t>(removed));
}

size_t CmEventQueue::size() const {
  std::lock_guard lock(mu_);
  return events_.size();
}

int CmEventQueue::fd() const {
  std::lock_guard lock(mu_);
  if (fd_ >= 0) return fd_;
  if (!parent_) return -1;
  if (!watched_) {
    watched_ = true;
    if (!events_.empty()) parent_->add_relayed(static_cast<int64_t>(events_.size()));
  }
  return parent_->fd();
}

}  // namespace rnicdv::sim::cm
