// SPDX-License-Identifier: BSD-3-Clause
// Queues placed by someone else. The unmodified rdma-core libmlx5 (run on this model through
// the uverbs shim) allocates its SQ/RQ buffer, doorbell records and CQ ring in the
// application's heap and maps UAR pages that the model must watch; these describe such
// memory to the device, which then runs it exactly like memory it allocated itself.
#pragma once

#include <cstdint>

#include "rnicdv/hw/device.h"

namespace rnicdv::sim {

struct ExternalCqMemory {
  uint8_t* buf = nullptr;     // cqe_cnt * cqe_size bytes, initialised by the owner
  uint32_t cqe_cnt = 0;       // power of two
  uint32_t cqe_size = 64;     // 64 or 128
  uint32_t* dbrec = nullptr;  // 2 x __be32: [MLX5_CQ_SET_CI], [MLX5_CQ_ARM_DB]
  uint8_t* cq_uar = nullptr;  // reported in mlx5dv_cq.cq_uar; may be null
};

struct ExternalQpMemory {
  uint8_t* rq_buf = nullptr;  // rq_wqe_cnt * rq_stride bytes (libmlx5: the buffer start)
  uint8_t* sq_buf = nullptr;  // sq_wqe_cnt * 64 bytes (libmlx5: right after the RQ)
  uint32_t sq_wqe_cnt = 0;    // basic blocks, power of two; 0: no send queue (max_send_wr 0)
  uint32_t rq_wqe_cnt = 0;    // power of two; 0: no receive queue
  uint32_t rq_stride = 0;     // power of two, >= 16 (unused without a receive queue)
  uint32_t* dbrec = nullptr;  // 2 x __be32: [MLX5_RCV_DBR], [MLX5_SND_DBR]
  uint8_t* bf_reg = nullptr;  // a register (page + 0x800 + k * 512) of an attached UAR page
  uint32_t bf_size = 256;     // reported in mlx5dv_qp.bf.size (0: doorbell only)
  uint32_t user_index = 0;    // written to the CQEs' srqn_uidx
  hw::QpCaps granted;         // what the owner reports to its consumer
  hw::Srq* srq = nullptr;     // receives come from this SRQ (the RQ fields then go unused)
  hw::QpType type = hw::QpType::rc;  // UD: datagrams, with the port's MTU (no SRQ)
  // UD: what it sends to a multicast group it is attached to does not come back to it
  // (IBV_QP_CREATE_BLOCK_SELF_MCAST_LB).
  bool block_self_mcast_loopback = false;
};

// A shared receive queue libmlx5 laid out (mlx5_alloc_srq_buf): `wqe_cnt` WQEs of `stride`
// bytes, linked by their next segments from index 0, and a doorbell record whose low 16 bits
// count the WQEs posted.
struct ExternalSrqMemory {
  uint8_t* buf = nullptr;
  uint32_t wqe_cnt = 0;       // power of two
  uint32_t stride = 0;        // power of two, >= 32
  uint32_t max_sge = 0;       // data segments per WQE the owner granted
  uint32_t* dbrec = nullptr;  // big-endian
};

}  // namespace rnicdv::sim
