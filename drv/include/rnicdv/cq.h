// SPDX-License-Identifier: BSD-3-Clause
// rnicdv::CompletionQueue: busy-polled completions decoded straight from the CQE ring.
//
// poll() is the fast path: no syscall, lock, allocation or virtual call per CQE. It decodes
// hardware CQEs (rnicdv/wqe/cqe.h), maps each to its work request's wr_id through the QP's
// tables, and updates the CQ doorbell record once per call. Completions the driver makes
// itself (WR_FLUSH_ERR for work withheld in RTR when the connection fails) are delivered
// through the same poll(), in posting order, after everything the hardware completed for
// that QP.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "rnicdv/status.h"
#include "rnicdv/wqe/work_request.h"

namespace rnicdv {

namespace detail {
struct DeviceCore;
struct CqCore;
struct ChannelCore;
}  // namespace detail

// A completion event: the CQ that raised it, by the context given when it was created
// (Device::create_cq) and its CQN.
struct CqEvent {
  uint64_t context = 0;
  uint32_t cqn = 0;
};

// Completion events for event loops (ibv_comp_channel, ibv_get_cq_event). Several CQs may
// share one channel. fd() is readable (poll, epoll) while an event is pending; get_event
// takes one without blocking. Each event answers one CompletionQueue::request_notify: the
// consumer polls the CQ dry, arms it, polls once more (a completion that landed before the
// arm still raises the event), sleeps on the fd, takes the event, acknowledges it, and polls.
// Events carry values, never a pointer to the CQ: an event taken for a CQ destroyed since
// names a CQN that is gone, and a destroyed CQ's pending events are dropped.
class CompletionChannel {
 public:
  CompletionChannel(CompletionChannel&&) noexcept;
  CompletionChannel& operator=(CompletionChannel&&) noexcept;
  ~CompletionChannel();

  int fd() const;
  // Takes one pending event. False when none is pending.
  bool get_event(CqEvent* out);
  // Waits up to `timeout_ms` (negative: without limit) for an event, letting a backend without
  // hardware progress meanwhile (as CompletionQueue::poll does). Errc::timeout when none came.
  Result<CqEvent> wait_event(int timeout_ms);

 private:
  friend class Device;
  explicit CompletionChannel(std::shared_ptr<detail::ChannelCore> core);
  std::shared_ptr<detail::ChannelCore> core_;  // shared with the CQs created on it
};

// A moved-from CompletionQueue holds no CQ: poll() returns 0, cqn() and entries() 0.
class CompletionQueue {
 public:
  CompletionQueue(CompletionQueue&&) noexcept;
  CompletionQueue& operator=(CompletionQueue&&) noexcept;
  ~CompletionQueue();

  // Fills up to `max` completions into `out`; returns how many (0 when none is ready).
  int poll(Completion* out, int max) noexcept;
  int poll(std::span<Completion> out) noexcept {
    return poll(out.data(), static_cast<int>(out.size()));
  }

  // The lean forms: the same completions, in the same order, with the same effects (the SQ
  // retired, the doorbell record updated once per call, ERR followed), but only wr_id,
  // status, opcode and byte count decoded. poll_each hands each to `on_completion`
  // (void(const LeanCompletion&)) as it is decoded, up to `max`; both return how many.
  int poll_lean(LeanCompletion* out, int max) noexcept;
  template <class F>
  int poll_each(int max, F&& on_completion) noexcept;

  uint32_t cqn() const;
  uint32_t entries() const;  // ring size

  // Completions dropped because their QP had been destroyed (reported, not leaked). CQEs
  // that name no outstanding work of a live QP (left over from before a RESET) count too.
  uint64_t orphaned_completions() const;

  // The device reported CQ_ERR (an overrun: CQEs were lost). poll() keeps returning what
  // is in the ring; the QPs using this CQ should be considered failed.
  bool in_error() const;

  // Completion events (a CQ created on a CompletionChannel). Arms the CQ for one event: the
  // next completion after those polled so far, or with `solicited_only` the next solicited
  // receive or error completion (ibv_req_notify_cq). A completion already in the CQ that poll
  // has not returned raises the event at once. Call it from the thread that polls the CQ.
  // Errc::invalid_argument for a CQ without a channel (or moved from).
  Errc request_notify(bool solicited_only = false) noexcept;
  // Acknowledges `count` events taken for this CQ (ibv_ack_cq_events); unacked_events() is
  // how many were taken and not yet acknowledged.
  void ack_events(uint32_t count) noexcept;
  uint32_t unacked_events() const;

  detail::CqCore* core() { return core_.get(); }

 private:
  friend class Device;
  explicit CompletionQueue(std::shared_ptr<detail::CqCore> core);
  // Shared with the QPs that use this CQ, so that either may be destroyed first.
  std::shared_ptr<detail::CqCore> core_;
};

}  // namespace rnicdv

#include "rnicdv/detail/cq_inl.h"  // IWYU pragma: export
