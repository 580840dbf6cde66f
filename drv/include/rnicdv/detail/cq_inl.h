// SPDX-License-Identifier: BSD-3-Clause
// Hot path of CompletionQueue::poll. Included by rnicdv/cq.h.
//
// Per call: the backend's progress hook (null on hardware), then CQEs in ring order while the
// software owner bit matches (rdma-core cq.c get_sw_cqe), each mapped to its QP by QPN and to
// its wr_id by wqe_counter, then one store of the consumer index into the CQ doorbell record
// (dbrec[MLX5_CQ_SET_CI] = ci & 0xffffff). Software completions (flush errors the driver
// produces) follow on the cold path.
#pragma once

#include <endian.h>
#include <infiniband/mlx5dv.h>

#include <atomic>
#include <cstdint>

#include "rnicdv/cq.h"
#include "rnicdv/detail/cq_core.h"
#include "rnicdv/detail/qp_core.h"
#include "rnicdv/detail/qp_inl.h"
#include "rnicdv/doorbell/cq_doorbell.h"
#include "rnicdv/wqe/cqe.h"

namespace rnicdv {
namespace detail {

inline int CqCore::poll(Completion* out, int max) noexcept {
  progress();
  if (graveyard_pending.load(std::memory_order_acquire)) [[unlikely]]
    reap_graveyard();

  uint32_t index = ci;
  int n = 0;
  while (n < max) {
    const mlx5_cqe64* cqe = wqe::cqe_for_sw(ring, index);
    if (!cqe) break;
    ++index;
    const uint32_t qpn = be32toh(cqe->sop_drop_qpn) & wqe::kCqeQpnMask;
    QpCore* qp = find_qp(qpn);
    if (!qp) [[unlikely]] {
      count_orphan();
      continue;
    }
    const uint8_t opcode = cqe->op_own >> 4;
    Retired retired;
    if (opcode == MLX5_CQE_REQ || opcode == MLX5_CQE_REQ_ERR) [[likely]]
      retired = qp->retire_send(cqe, &out[n]);
    else if (opcode <= MLX5_CQE_RESP_SEND_INV || opcode == MLX5_CQE_RESP_ERR)
      retired = qp->retire_recv(cqe, &out[n]);
    else
      continue;  // RESIZE_CQ, NO_PACKET, SIG_ERR: nothing an RC consumer is owed
    if (retired == Retired::report) [[likely]] {
      ++n;
      // The device moved the QP to ERR with this CQE: the driver's state follows.
      if (opcode == MLX5_CQE_REQ_ERR || opcode == MLX5_CQE_RESP_ERR) [[unlikely]]
        qp->on_error_completion();
    } else if (retired == Retired::stale) {
      count_orphan();
    }
  }
  if (index != ci) {
    ci = index;
    doorbell::update_cq_ci(dbrec, index);
  }
  if (software_pending.load(std::memory_order_acquire) && n < max) [[unlikely]]
    n += poll_software(out + n, max - n);
  return n;
}

}  // namespace detail

// A moved-from CompletionQueue holds no CQ: nothing to poll.
inline int CompletionQueue::poll(Completion* out, int max) noexcept {
  if (!core_) [[unlikely]]
    return 0;
  return core_->poll(out, max);
}

}  // namespace rnicdv
