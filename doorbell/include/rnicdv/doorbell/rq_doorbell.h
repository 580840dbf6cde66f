// SPDX-License-Identifier: BSD-3-Clause
// The receive doorbell: only the doorbell record, no register write (libmlx5 mlx5_post_recv;
// libmlx5's mlx5_post_recv).
#pragma once

#include <infiniband/mlx5dv.h>
#include <linux/types.h>

#include <cstdint>

#include "rnicdv/doorbell/barrier.h"
#include "rnicdv/doorbell/mmio.h"

namespace rnicdv::doorbell {

// Publishes receive WQEs up to `rq_head` (the free-running count of posted receive WQEs):
// the WQEs are in memory first, then dbrec[MLX5_RCV_DBR] = rq_head & 0xffff.
[[gnu::always_inline]] inline void ring_rq_doorbell(__be32* dbrec, uint32_t rq_head) noexcept {
  to_device_barrier();
  store_dbr(&dbrec[MLX5_RCV_DBR], rq_head & 0xffff);
}

}  // namespace rnicdv::doorbell
