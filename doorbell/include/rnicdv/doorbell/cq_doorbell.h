// SPDX-License-Identifier: BSD-3-Clause
// CQ doorbells: the consumer index record and the arm request (libmlx5 update_cons_index and
// mlx5_arm_cq in providers/mlx5/cq.c).
#pragma once

#include <endian.h>
#include <infiniband/mlx5dv.h>
#include <linux/types.h>

#include <cstdint>

#include "rnicdv/doorbell/barrier.h"
#include "rnicdv/doorbell/mmio.h"

namespace rnicdv::doorbell {

// Words of the CQ doorbell record (mlx5dv_cq::dbrec). mlx5dv.h does not export their names;
// libmlx5 calls them MLX5_CQ_SET_CI and MLX5_CQ_ARM_DB (rdma-core providers/mlx5/mlx5.h).
inline constexpr unsigned kCqDbrConsumerIndex = 0;
inline constexpr unsigned kCqDbrArm = 1;

// Tells the device that CQEs before the free-running consumer index `ci` are consumed and
// their slots may be reused: dbrec[kCqDbrConsumerIndex] = ci & 0xffffff.
[[gnu::always_inline]] inline void update_cq_ci(__be32* cq_dbrec, uint32_t ci) noexcept {
  store_dbr(&cq_dbrec[kCqDbrConsumerIndex], ci & 0xffffff);
}

// Requests one completion event for the next CQE after `ci` (any, or solicited only).
// `arm_sn` is the CQ's event sequence number, incremented by the caller on every CQ event.
// The arm word goes to dbrec[kCqDbrArm], then, behind wc_start, the same word and the
// CQN as one 8-byte big-endian write to cq_uar + MLX5_CQ_DOORBELL.
[[gnu::always_inline]] inline void arm_cq(__be32* cq_dbrec, void* cq_uar, uint32_t cqn, uint32_t ci,
                                          uint32_t arm_sn, bool solicited_only) noexcept {
  const uint32_t command = solicited_only ? MLX5_CQ_DB_REQ_NOT_SOL : MLX5_CQ_DB_REQ_NOT;
  const uint32_t arm = ((arm_sn & 3) << 28) | command | (ci & 0xffffff);
  store_dbr(&cq_dbrec[kCqDbrArm], arm);
  wc_start();
  mmio_write64(static_cast<uint8_t*>(cq_uar) + MLX5_CQ_DOORBELL,
               htobe64((static_cast<uint64_t>(arm) << 32) | cqn));
  wc_flush();
}

}  // namespace rnicdv::doorbell
