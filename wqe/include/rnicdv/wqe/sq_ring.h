// SPDX-License-Identifier: BSD-3-Clause
// A send queue ring as the WQE builders see it, and the sizes every builder counts in.
// Ring rules: send_wqe.h.
#pragma once

#include <infiniband/mlx5dv.h>

#include <cstdint>

namespace rnicdv::wqe {

inline constexpr uint32_t kBbBytes = MLX5_SEND_WQE_BB;  // 64
inline constexpr uint32_t kDsBytes = 16;                // one WQE size unit
inline constexpr uint32_t kMaxWqeDs = 63;               // 6-bit DS field
inline constexpr uint32_t kMaxWqeBbs = 16;              // MLX5_SEND_WQE_MAX_WQEBBS (kernel)
inline constexpr uint32_t kAtomicOperandBytes = 8;      // MLX5_ATOMIC_SIZE

// A send queue ring as the device sees it (the sq half of mlx5dv_qp).
struct SqRing {
  uint8_t* buf = nullptr;  // mlx5dv_qp::sq.buf
  uint32_t bb_count = 0;   // mlx5dv_qp::sq.wqe_cnt, power of two

  uint8_t* bb(uint32_t index) const { return buf + ((index & (bb_count - 1)) * kBbBytes); }
  uint8_t* end() const { return buf + bb_count * kBbBytes; }
};

// Per-QP limits fixed at QP creation.
struct SqLimits {
  uint32_t max_sge = 1;     // data segments per WQE
  uint32_t max_inline = 0;  // inline payload bytes per WQE
};

// What a successful encode produced.
struct EncodedWqe {
  mlx5_wqe_ctrl_seg* ctrl = nullptr;  // the WQE's ctrl segment (for the doorbell)
  uint8_t ds = 0;                     // size in 16-byte units
  uint8_t bbs = 0;                    // size in basic blocks = ceil(ds / 4)
};

}  // namespace rnicdv::wqe
