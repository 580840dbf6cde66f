// SPDX-License-Identifier: BSD-3-Clause
// A completion queue as the device sees it: the CQE ring, the doorbell record the driver
// publishes its consumer index in, and the device's producer index.
#pragma once

#include <cstdint>

#include "rnicdv/hw/device.h"
#include "rnicdv/wqe/cqe.h"

namespace rnicdv::sim {

// Words of a CQ's doorbell record. mlx5dv.h does not export their names; libmlx5 calls them
// MLX5_CQ_SET_CI and MLX5_CQ_ARM_DB (rdma-core providers/mlx5/mlx5.h).
inline constexpr unsigned kCqDbrConsumerIndex = 0;
inline constexpr unsigned kCqDbrArm = 1;

struct CqObj {
  uint32_t cqn = 0;
  wqe::CqRing ring;
  uint32_t* dbrec = nullptr;  // big-endian: [kCqDbrConsumerIndex], [kCqDbrArm]
  uint32_t pi = 0;            // free-running producer index
  bool overflowed = false;    // CQ_ERR raised; nothing more is written (IBA 11.4.2.1)
  bool handle_alive = true;   // the consumer still holds it
  uint32_t qp_refs = 0;       // QPs that complete into it
  uint8_t* owned_buf = nullptr;
  uint32_t* owned_dbrec = nullptr;
  hw::CqView view;
  uint64_t cqes_written = 0;
};

enum class CqPush : uint8_t { written, overflow, dead };

// Writes one CQE at the producer index unless that would pass the consumer index the driver
// published (24 bits, rdma-core mlx5_cq set_ci): then nothing is written, the CQ is marked
// overflowed and `overflow` is returned once; later pushes return `dead`.
CqPush cq_push(CqObj& cq, const wqe::CqeInit& init) noexcept;

// The consumer index the driver last published.
uint32_t cq_consumer_index(const CqObj& cq) noexcept;

}  // namespace rnicdv::sim
