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
}  // namespace detail

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

  detail::CqCore* core() { return core_.get(); }

 private:
  friend class Device;
  explicit CompletionQueue(std::shared_ptr<detail::CqCore> core);
  // Shared with the QPs that use this CQ, so that either may be destroyed first.
  std::shared_ptr<detail::CqCore> core_;
};

}  // namespace rnicdv

#include "rnicdv/detail/cq_inl.h"  // IWYU pragma: export
