// SPDX-License-Identifier: BSD-3-Clause
// Checks on the views libmlx5 hands out (mlx5dv_init_obj), against what the fast path assumes.
//
// The driver indexes rings with masks and builds WQEs in 64-byte basic blocks, so a view that
// breaks those assumptions (a future libmlx5, an unusual environment such as MLX5_CQE_SIZE=256)
// is refused at creation with a message naming the field, rather than corrupting memory later.
#pragma once

#include <infiniband/mlx5dv.h>

#include <cstdint>
#include <string>

#include "rnicdv/status.h"

namespace rnicdv::hw::mlx5 {

constexpr bool is_power_of_two(uint64_t v) noexcept {
  return v != 0 && (v & (v - 1)) == 0;
}

// `what` names the object in messages ("qp 0x1c"). `has_rq` is false for a QP created with
// max_recv_wr == 0 (no receive queue), `has_sq` for one created with max_send_wr == 0 (no send
// queue: libmlx5 reports 0 blocks, and the send-queue fields are not checked).
Status check_qp_view(const mlx5dv_qp& view, bool has_rq, const std::string& what,
                     bool has_sq = true);
Status check_cq_view(const mlx5dv_cq& view, const std::string& what);

}  // namespace rnicdv::hw::mlx5
