// SPDX-License-Identifier: BSD-3-Clause
// Receive-WQE encoding into an mlx5 receive queue ring (no signature segment).
//
// A receive WQE is `stride` bytes (power of two, >= 16): up to stride/16 data segments; when
// fewer than that are used, a terminator segment follows (byte_count 0, lkey
// MLX5_INVALID_LKEY = 0x100, addr 0). The slot is rq.buf + (index & (wqe_cnt-1)) * stride;
// the RQ counter counts WQEs, not bytes, and goes in dbrec[MLX5_RCV_DBR].
#pragma once

#include <cstdint>

#include "rnicdv/status.h"
#include "rnicdv/wqe/work_request.h"

namespace rnicdv::wqe {

struct RqRing {
  uint8_t* buf = nullptr;  // mlx5dv_qp::rq.buf
  uint32_t wqe_cnt = 0;    // power of two
  uint32_t stride = 0;     // bytes per WQE, power of two

  uint8_t* slot(uint32_t index) const { return buf + (index & (wqe_cnt - 1)) * stride; }
  uint32_t max_sge() const { return stride / 16; }
};

// Writes `wr` into slot `index`. Errors: too_many_sge (over `max_sge`, which is at most
// ring.max_sge()). Zero-length SGEs are kept (a zero-length receive is valid). Nothing is
// written on error.
Errc encode_recv_wqe(RqRing ring, uint32_t index, uint32_t max_sge, const RecvWr& wr) noexcept;

}  // namespace rnicdv::wqe

#include "rnicdv/wqe/recv_wqe_inl.h"
