// SPDX-License-Identifier: BSD-3-Clause
// Hot-path body of recv_wqe.h (libmlx5 mlx5_post_recv without the signature segment).
#pragma once

#include <cstdint>
#include <cstring>

#include "rnicdv/status.h"
#include "rnicdv/wqe/recv_wqe.h"
#include "rnicdv/wqe/segments.h"
#include "rnicdv/wqe/work_request.h"

namespace rnicdv::wqe {

inline Errc encode_recv_wqe(RqRing ring, uint32_t index, uint32_t max_sge,
                            const RecvWr& wr) noexcept {
  const uint32_t capacity = ring.max_sge();
  if (wr.num_sge > max_sge || wr.num_sge > capacity) [[unlikely]]
    return Errc::too_many_sge;
  if (wr.num_sge != 0 && wr.sg_list == nullptr) [[unlikely]]
    return Errc::invalid_argument;

  uint8_t* seg = ring.slot(index);
  for (uint32_t i = 0; i < wr.num_sge; ++i, seg += sizeof(mlx5_wqe_data_seg)) {
    const Sge& sge = wr.sg_list[i];
    const mlx5_wqe_data_seg data = data_segment(sge.length, sge.lkey, sge.addr);
    std::memcpy(seg, &data, sizeof data);
  }
  // The device stops at the first MLX5_INVALID_LKEY; a full WQE needs no terminator.
  if (wr.num_sge < capacity) {
    const mlx5_wqe_data_seg end = terminator_segment();
    std::memcpy(seg, &end, sizeof end);
  }
  return Errc::ok;
}

}  // namespace rnicdv::wqe
