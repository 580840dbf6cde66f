// SPDX-License-Identifier: BSD-3-Clause
// Hot path of send_doorbell.h.
#pragma once

#include <infiniband/mlx5dv.h>

#include <cstdint>
#include <cstring>

#include "rnicdv/doorbell/barrier.h"
#include "rnicdv/doorbell/mmio.h"
#include "rnicdv/doorbell/send_doorbell.h"
#include "rnicdv/wqe/send_wqe.h"

namespace rnicdv::doorbell {

[[gnu::always_inline]] inline void SendDoorbell::ring_with_head(
    __be32* dbrec, uint32_t pi, uint64_t last_head, const uint8_t* last_wqe, uint32_t last_ds,
    uint32_t& staged, wqe::SqRing ring) noexcept {
  // The WQEs are in memory before the device can learn of them from the record.
  to_device_barrier();
  // The record holds the next free BB index, not a WQE count (post_send_db).
  store_dbr(&dbrec[MLX5_SND_DBR], pi & 0xffff);

  uint8_t* const reg = reg_ + offset_;
  if (plain_db_) [[likely]] {
    // db mode on a device that needs no wake-up (all hardware): the common path.
    wc_start();
    // opmod_idx_opcode and qpn_ds: the device reads the WQE index and QPN from them.
    mmio_write64(reg, last_head);
    wc_flush();
    offset_ ^= bf_size_;
    staged = 0;
    return;
  }
  const bool locked = mode_ == DoorbellMode::db_lock;
  if (locked) lock_->lock();
  wc_start();
  const uint32_t wqe_bytes = last_ds * wqe::kDsBytes;
  if (mode_ == DoorbellMode::bf && staged == 0 && wqe_bytes <= bf_size_)
    bf_copy(reg, last_wqe, (wqe_bytes + wqe::kBbBytes - 1) & ~(wqe::kBbBytes - 1), ring);
  else
    mmio_write64(reg, last_head);
  wc_flush();
  if (locked) lock_->unlock();
  // Consecutive doorbells alternate between the register's two halves so that a BlueFlame
  // write never lands in a buffer the device may still be draining (libmlx5 bf->offset).
  offset_ ^= bf_size_;
  staged = 0;
  // Last, so that its rare call can be a tail call that asks nothing of the caller's frame.
  wake_.after_register_write();
}

inline void SendDoorbell::ring(__be32* dbrec, uint32_t pi, const uint8_t* last_wqe,
                               uint32_t last_ds, uint32_t nreq, wqe::SqRing ring) noexcept {
  if (nreq == 0) [[unlikely]]
    return;
  uint64_t ctrl_head;
  std::memcpy(&ctrl_head, last_wqe, sizeof ctrl_head);
  uint32_t staged = nreq - 1;
  ring_with_head(dbrec, pi, ctrl_head, last_wqe, last_ds, staged, ring);
}

}  // namespace rnicdv::doorbell
