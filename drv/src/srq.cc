// SPDX-License-Identifier: BSD-3-Clause
// SharedReceiveQueue: creation, posting, the limit event.
#include "rnicdv/srq.h"

#include <algorithm>
#include <mutex>

#include "device_core.h"
#include "rnicdv/detail/srq_core.h"
#include "rnicdv/device.h"
#include "rnicdv/pd.h"

namespace rnicdv {

namespace detail {

SrqCore::~SrqCore() {
  if (device) {
    std::lock_guard guard(device->mutex);
    device->srqs.erase(this);
  }
  if (device && xrcd) {
    std::lock_guard guard(device->xrc_mutex);
    device->xrc_srqs.erase(cqe_tag);
  }
  hw_srq.reset();  // before the device (member order does the rest)
}

Errc SrqCore::post(const RecvWr* wrs, size_t count, size_t* bad_index) noexcept {
  Errc err = Errc::ok;
  size_t i = 0;
  lock.lock();
  for (; i < count; ++i) {
    if (head == tail) {  // only the never-handed-out tail is free
      err = Errc::queue_full;
      break;
    }
    const uint16_t index = head;
    err = wqe::encode_recv_wqe(ring.data(index), 0, max_sge, wrs[i]);
    if (err != Errc::ok) break;
    wr_ids[index] = wrs[i].wr_id;
    posted[index] = 1;
    head = ring.next(index);
    ++counter;
  }
  // Release: the WQEs are written before the device reads the count that announces them.
  if (i != 0) doorbell::store_dbr(dbrec, counter);
  lock.unlock();
  if (err != Errc::ok && bad_index) *bad_index = i;
  return err;
}

}  // namespace detail

Result<SharedReceiveQueue> Device::create_srq(ProtectionDomain& pd, uint32_t max_wr,
                                              uint32_t max_sge) {
  const hw::DeviceInfo& dev_info = info();
  if (max_wr == 0 || max_sge == 0)
    return Status::error(Errc::invalid_argument,
                         "%s: create_srq: max_wr %u, max_sge %u: both "
                         "must be at least 1",
                         dev_info.name.c_str(), max_wr, max_sge);
  RNICDV_ASSIGN_OR_RETURN(std::unique_ptr<hw::Srq> created,
                          core_->hw->create_srq(pd.hw(), max_wr, max_sge));
  return adopt_srq(std::move(created), max_sge);
}

Result<SharedReceiveQueue> Device::adopt_srq(std::unique_ptr<hw::Srq> created, uint32_t max_sge) {
  const hw::SrqView& view = created->view();
  const mlx5dv_srq& dv = view.dv;
  const uint32_t cnt = view.wqe_cnt;
  if (!dv.buf || !dv.dbrec || cnt < 2 || (cnt & (cnt - 1)) != 0 || cnt > 65536 || dv.stride < 32 ||
      (dv.stride & (dv.stride - 1)) != 0 || dv.head != 0 || dv.tail != cnt - 1)
    return Status::error(Errc::internal,
                         "srq %#x: create: the device returned an unusable ring (%u WQEs of %u "
                         "bytes, head %u, tail %u)",
                         dv.srqn, cnt, dv.stride, dv.head, dv.tail);
  auto core = std::make_shared<detail::SrqCore>();
  core->ring = wqe::SrqRing{static_cast<uint8_t*>(dv.buf), cnt, dv.stride};
  core->dbrec = dv.dbrec;
  core->max_sge = std::min(max_sge, core->ring.max_sge());
  core->srqn = dv.srqn;
  core->head = static_cast<uint16_t>(dv.head);
  core->tail = static_cast<uint16_t>(dv.tail);
  core->wr_ids.assign(cnt, 0);
  core->posted.assign(cnt, 0);
  core->device = core_;
  core->hw_srq = std::move(created);
  {
    std::lock_guard lock(core_->mutex);
    core_->srqs.insert(core.get());
  }
  return SharedReceiveQueue(std::move(core));
}

SharedReceiveQueue::SharedReceiveQueue(std::shared_ptr<detail::SrqCore> core)
    : core_(std::move(core)) {}
SharedReceiveQueue::SharedReceiveQueue(SharedReceiveQueue&&) noexcept = default;
SharedReceiveQueue& SharedReceiveQueue::operator=(SharedReceiveQueue&&) noexcept = default;
SharedReceiveQueue::~SharedReceiveQueue() = default;

Errc SharedReceiveQueue::post_recv(std::span<const RecvWr> wrs, size_t* bad_index) noexcept {
  if (!core_) {
    if (bad_index) *bad_index = 0;
    return Errc::invalid_argument;
  }
  return core_->post(wrs.data(), wrs.size(), bad_index);
}

Status SharedReceiveQueue::arm_limit(uint32_t limit) {
  if (!core_) return Status::error(Errc::invalid_argument, "arm_limit: no shared receive queue");
  return core_->hw_srq->arm_limit(limit);
}

uint64_t SharedReceiveQueue::limit_events() const {
  return core_ ? core_->limit_events.load(std::memory_order_relaxed) : 0;
}

uint32_t SharedReceiveQueue::srqn() const {
  return core_ ? core_->srqn : 0;
}

uint32_t SharedReceiveQueue::max_wr() const {
  return core_ ? core_->ring.wqe_cnt - 1 : 0;
}

}  // namespace rnicdv
