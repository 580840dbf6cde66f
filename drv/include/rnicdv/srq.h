// SPDX-License-Identifier: BSD-3-Clause
// rnicdv::SharedReceiveQueue: one pool of receive buffers for many QPs (ibv_srq). QPs take
// their receives from it when created with QpConfig::srq; a receive completion arrives on
// the receiving QP's receive CQ and names that QP (Completion::qp_num). When a QP fails, only
// the receive it was filling is flushed; the rest stay posted for the others.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "rnicdv/status.h"
#include "rnicdv/wqe/work_request.h"

namespace rnicdv {

namespace detail {
struct SrqCore;
}

class SharedReceiveQueue {
 public:
  SharedReceiveQueue(SharedReceiveQueue&&) noexcept;
  SharedReceiveQueue& operator=(SharedReceiveQueue&&) noexcept;
  ~SharedReceiveQueue();

  // Posts receives; thread-safe. Errc::queue_full when every WQE is posted (max_wr()),
  // invalid_argument for more SGEs than the SRQ was created with. `bad_index` names the
  // first WR not posted.
  Errc post_recv(std::span<const RecvWr> wrs, size_t* bad_index = nullptr) noexcept;
  Errc post_recv(const RecvWr& wr) noexcept { return post_recv(std::span(&wr, 1)); }

  // Arms the limit event (ibv_modify_srq, IBV_SRQ_LIMIT): once fewer than `limit` receives
  // remain posted, the device raises SRQ_LIMIT_REACHED, Device::process_events counts it in
  // limit_events(), and the arm is spent. 0 disarms.
  Status arm_limit(uint32_t limit);
  uint64_t limit_events() const;

  uint32_t srqn() const;
  uint32_t max_wr() const;  // receives that can be posted at once

  detail::SrqCore* core() { return core_.get(); }

 private:
  friend class Device;
  explicit SharedReceiveQueue(std::shared_ptr<detail::SrqCore> core);
  // Shared with the QPs on it, so that either may be destroyed first.
  std::shared_ptr<detail::SrqCore> core_;
};

}  // namespace rnicdv
