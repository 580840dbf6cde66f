// SPDX-License-Identifier: BSD-3-Clause
// Completion events: CompletionChannel, arming a CQ and acknowledging its events.
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "channel_core.h"
#include "device_core.h"
#include "rnicdv/cq.h"
#include "rnicdv/detail/cq_core.h"
#include "rnicdv/device.h"
#include "rnicdv/doorbell/cq_doorbell.h"

namespace rnicdv {

namespace detail {

ChannelCore::~ChannelCore() {
  if (epoll_fd >= 0) ::close(epoll_fd);
  if (software_fd >= 0) ::close(software_fd);
}

Status ChannelCore::open(std::unique_ptr<hw::CompletionChannel> hw_channel,
                         const std::string& device) {
  hw = std::move(hw_channel);
  const auto failed = [&](const char* call) {
    return Status::error(Errc::no_resources, "%s: create_completion_channel: %s: %s",
                         device.c_str(), call, std::strerror(errno));
  };
  software_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (software_fd < 0) return failed("eventfd");
  epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd < 0) return failed("epoll_create1");
  for (int fd : {hw->fd(), software_fd}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0) return failed("epoll_ctl");
  }
  return Status::ok();
}

void ChannelCore::attach(CqCore* cq) {
  std::lock_guard lock(mu_);
  cqs_[cq->cqn] = cq;
}

void ChannelCore::detach(CqCore* cq) noexcept {
  std::lock_guard lock(mu_);
  auto it = cqs_.find(cq->cqn);
  if (it != cqs_.end() && it->second == cq) cqs_.erase(it);
}

void ChannelCore::forget(uint32_t cqn) noexcept {
  hw->forget(cqn);
  std::lock_guard lock(mu_);
  const bool had = !software_.empty();
  std::erase(software_, cqn);
  if (had && software_.empty()) {
    uint64_t count;
    [[maybe_unused]] ssize_t n = ::read(software_fd, &count, sizeof count);
  }
}

void ChannelCore::push_software(uint32_t cqn) noexcept {
  std::lock_guard lock(mu_);
  software_.push_back(cqn);
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(software_fd, &one, sizeof one);
}

bool ChannelCore::take_software(uint32_t* cqn) noexcept {
  if (software_.empty()) return false;
  *cqn = software_.front();
  software_.pop_front();
  if (software_.empty()) {
    // Read under the lock every push takes: the fd is readable exactly while events wait.
    uint64_t count;
    [[maybe_unused]] ssize_t n = ::read(software_fd, &count, sizeof count);
  }
  return true;
}

bool ChannelCore::next(CqEvent* out) {
  for (;;) {
    uint32_t cqn = 0;
    bool from_device = false;
    std::lock_guard lock(mu_);
    if (!take_software(&cqn)) {
      if (!hw->next_event(&cqn)) return false;
      from_device = true;
    }
    auto it = cqs_.find(cqn);
    if (it == cqs_.end()) continue;  // its CQ was destroyed meanwhile
    CqCore& cq = *it->second;
    // The device moves to the next sequence number with every event it raised (libmlx5
    // mlx5_cq_event); the next arm must carry it, or the device takes it for a repeat.
    if (from_device) cq.arm_sn.fetch_add(1, std::memory_order_relaxed);
    cq.software_armed.store(false, std::memory_order_relaxed);
    cq.events_taken.fetch_add(1, std::memory_order_relaxed);
    out->context = cq.event_context;
    out->cqn = cqn;
    return true;
  }
}

Errc CqCore::request_notify(bool solicited_only) noexcept {
  if (!channel) return Errc::invalid_argument;
  // Software completions (flush errors made by the driver) are not solicited receives, but
  // they are errors, which fire a solicited-only arm too (IBA 11.4.2.2).
  software_armed.store(true, std::memory_order_seq_cst);
  doorbell::arm_cq(dbrec, cq_uar, cqn, ci, arm_sn.load(std::memory_order_relaxed), solicited_only);
  arm_wake.after_register_write();
  // A software completion that was queued before the arm fires it now (one queued after it
  // sees software_armed and fires it in add_software_qp).
  if (software_pending.load(std::memory_order_seq_cst) &&
      software_armed.exchange(false, std::memory_order_acq_rel))
    channel->push_software(cqn);
  return Errc::ok;
}

}  // namespace detail

CompletionChannel::CompletionChannel(std::shared_ptr<detail::ChannelCore> core)
    : core_(std::move(core)) {}
CompletionChannel::CompletionChannel(CompletionChannel&&) noexcept = default;
CompletionChannel& CompletionChannel::operator=(CompletionChannel&&) noexcept = default;
CompletionChannel::~CompletionChannel() = default;

int CompletionChannel::fd() const {
  return core_ ? core_->epoll_fd : -1;
}

bool CompletionChannel::get_event(CqEvent* out) {
  return core_ && core_->next(out);
}

Result<CqEvent> CompletionChannel::wait_event(int timeout_ms) {
  if (!core_) return Status::error(Errc::invalid_argument, "wait_event: no completion channel");
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::milliseconds(std::max(timeout_ms, 0));
  for (;;) {
    CqEvent ev;
    if (core_->next(&ev)) return ev;
    core_->progress();
    if (core_->next(&ev)) return ev;
    int slice = -1;
    if (timeout_ms >= 0) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0)
        return Status::error(Errc::timeout, "wait_event: no completion event within %d ms",
                             timeout_ms);
      slice = static_cast<int>(left);
    }
    // A backend that progresses on the caller's thread only moves between polls.
    if (core_->progress.fn) slice = slice < 0 ? 1 : std::min(slice, 1);
    pollfd p{core_->epoll_fd, POLLIN, 0};
    if (::poll(&p, 1, slice) < 0 && errno != EINTR)
      return Status::error(Errc::io_error, "wait_event: poll: %s", std::strerror(errno));
  }
}

Result<CompletionChannel> Device::create_completion_channel() {
  RNICDV_ASSIGN_OR_RETURN(auto hw_channel, core_->hw->create_completion_channel());
  auto core = std::make_shared<detail::ChannelCore>();
  RNICDV_TRY(core->open(std::move(hw_channel), info().name));
  core->progress = core_->progress;
  return CompletionChannel(std::move(core));
}

Errc CompletionQueue::request_notify(bool solicited_only) noexcept {
  return core_ ? core_->request_notify(solicited_only) : Errc::invalid_argument;
}

void CompletionQueue::ack_events(uint32_t count) noexcept {
  if (!core_) return;
  // Never more than were taken: acknowledging an event twice is the caller's error, not a
  // count that wraps.
  uint32_t acked = core_->events_acked.load(std::memory_order_relaxed);
  const uint32_t taken = core_->events_taken.load(std::memory_order_relaxed);
  const uint32_t next = acked + std::min(count, taken - acked);
  core_->events_acked.store(next, std::memory_order_relaxed);
}

uint32_t CompletionQueue::unacked_events() const {
  if (!core_) return 0;
  return core_->events_taken.load(std::memory_order_relaxed) -
         core_->events_acked.load(std::memory_order_relaxed);
}

}  // namespace rnicdv
