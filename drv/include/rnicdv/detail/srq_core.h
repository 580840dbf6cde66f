// SPDX-License-Identifier: BSD-3-Clause
// The state behind a SharedReceiveQueue. Public only so that poll() can retire SRQ receives
// inline; nothing here is API. The free list, the WQE layout and the doorbell record are
// mlx5's (wqe/srq_wqe.h); posters and the poller share the list under one spinlock.
#pragma once

#include <endian.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "rnicdv/detail/spinlock.h"
#include "rnicdv/doorbell/mmio.h"
#include "rnicdv/hw/device.h"
#include "rnicdv/wqe/cqe.h"
#include "rnicdv/wqe/srq_wqe.h"
#include "rnicdv/wqe/work_request.h"

namespace rnicdv::detail {

struct CqCore;
struct DeviceCore;
struct XrcdCore;

struct SrqCore {
  SrqCore() = default;
  SrqCore(const SrqCore&) = delete;
  SrqCore& operator=(const SrqCore&) = delete;
  ~SrqCore();

  Errc post(const RecvWr* wrs, size_t count, size_t* bad_index) noexcept;
  // The receive a CQE names (its wqe_counter is the WQE's index) goes back on the free list.
  // False for an index that is not posted (stale).
  bool retire(const mlx5_cqe64* cqe, uint64_t* wr_id) noexcept {
    const uint16_t index = static_cast<uint16_t>(be16toh(cqe->wqe_counter) & (ring.wqe_cnt - 1));
    lock.lock();
    if (!posted[index]) [[unlikely]] {
      lock.unlock();
      return false;
    }
    posted[index] = 0;
    *wr_id = wr_ids[index];
    ring.set_next(tail, index);  // linked after the tail (libmlx5 mlx5_free_srq_wqe)
    tail = index;
    lock.unlock();
    return true;
  }

  wqe::SrqRing ring;
  __be32* dbrec = nullptr;
  uint32_t max_sge = 0;
  uint32_t srqn = 0;
  Spinlock lock;
  uint16_t head = 0;  // next free WQE to post into
  uint16_t tail = 0;  // last free WQE (never handed out)
  uint32_t counter = 0;
  std::vector<uint64_t> wr_ids;
  std::vector<uint8_t> posted;
  std::atomic<uint64_t> limit_events{0};
  std::shared_ptr<DeviceCore> device;
  // An XRC SRQ: its domain, held open while it lives, and the value its receive CQEs carry
  // in srqn_uidx, by which pollers find it (DeviceCore::xrc_srqs).
  std::shared_ptr<XrcdCore> xrcd;
  uint32_t cqe_tag = 0;
  // The CQ an XRC SRQ's receives complete on, kept while the SRQ lives (as the kernel refuses
  // to destroy a CQ an SRQ uses).
  std::shared_ptr<CqCore> xrc_cq;
  std::unique_ptr<hw::Srq> hw_srq;
};

}  // namespace rnicdv::detail
