// SPDX-License-Identifier: BSD-3-Clause
// Shared receive queue WQEs in mlx5 layout (libmlx5 providers/mlx5/srq.c; mlx5dv_srq).
//
// An SRQ WQE is `stride` bytes (power of two, >= 32): a 16-byte next segment
// (mlx5_wqe_srq_next_seg: next_wqe_index, big-endian, at byte 2) and then data segments laid
// out as in a receive queue WQE (recv_wqe.h), terminated when fewer than the stride holds.
// Free WQEs form a list through next_wqe_index. The consumer posts at the list's head and
// moves the head to the posted WQE's next; the device consumes posted WQEs in list order,
// keeping its own position, and names the WQE it used in the CQE's wqe_counter; the consumer
// then links that WQE after the list's tail. The doorbell record's word 0 holds the number of
// WQEs posted (a free-running counter). The ring has one WQE more than the consumer may post:
// the tail's next pointer is rewritten on every free, so the tail is never handed out.
#pragma once

#include <endian.h>

#include <cstdint>
#include <cstring>

#include "rnicdv/wqe/recv_wqe.h"

namespace rnicdv::wqe {

struct SrqRing {
  uint8_t* buf = nullptr;
  uint32_t wqe_cnt = 0;  // power of two
  uint32_t stride = 0;   // bytes per WQE, power of two, >= 32

  uint8_t* slot(uint32_t index) const { return buf + (index & (wqe_cnt - 1)) * stride; }
  uint32_t max_sge() const { return stride / 16 - 1; }
  // Where WQE `index`'s data segments go, as a one-WQE receive ring for encode_recv_wqe
  // (its stride, stride - 16, holds max_sge() segments; decode with decode_srq_wqe).
  RqRing data(uint32_t index) const { return RqRing{slot(index) + 16, 1, stride - 16}; }

  uint16_t next(uint32_t index) const {
    uint16_t be;
    std::memcpy(&be, slot(index) + 2, sizeof be);
    return be16toh(be);
  }
  void set_next(uint32_t index, uint16_t next_index) const {
    const uint16_t be = htobe16(next_index);
    std::memcpy(slot(index) + 2, &be, sizeof be);
  }
};

// Links every WQE to the following one, the last to the first (libmlx5 mlx5_alloc_srq_buf):
// head 0, tail wqe_cnt - 1.
inline void init_srq_ring(const SrqRing& ring) {
  std::memset(ring.buf, 0, size_t{ring.wqe_cnt} * ring.stride);
  for (uint32_t i = 0; i < ring.wqe_cnt; ++i)
    ring.set_next(i, static_cast<uint16_t>((i + 1) & (ring.wqe_cnt - 1)));
}

}  // namespace rnicdv::wqe
