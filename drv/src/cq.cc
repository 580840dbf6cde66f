// SPDX-License-Identifier: BSD-3-Clause
// CompletionQueue: creation, and the cold parts of polling (software completions, the
// graveyard of destroyed QPs).
#include "rnicdv/cq.h"

#include <algorithm>
#include <utility>

#include "channel_core.h"
#include "device_core.h"
#include "rnicdv/detail/cq_core.h"
#include "rnicdv/detail/qp_core.h"
#include "rnicdv/device.h"
#include "rnicdv/wqe/cqe.h"

namespace rnicdv {

namespace {

Status check_entries(const hw::DeviceInfo& dev_info, uint32_t min_entries) {
  if (min_entries == 0)
    return Status::error(Errc::invalid_argument, "%s: create_cq: zero entries",
                         dev_info.name.c_str());
  if (dev_info.caps.max_cqe && min_entries > dev_info.caps.max_cqe)
    return Status::error(Errc::invalid_argument,
                         "%s: create_cq: %u entries exceeds the device limit %u",
                         dev_info.name.c_str(), min_entries, dev_info.caps.max_cqe);
  return Status::ok();
}

}  // namespace

Result<CompletionQueue> Device::create_cq(uint32_t min_entries) {
  RNICDV_TRY(check_entries(info(), min_entries));
  RNICDV_ASSIGN_OR_RETURN(auto cq, core_->hw->create_cq(min_entries));
  return adopt_cq(std::move(cq), nullptr, 0);
}

Result<CompletionQueue> Device::create_cq(uint32_t min_entries, CompletionChannel& channel,
                                          uint64_t context) {
  RNICDV_TRY(check_entries(info(), min_entries));
  if (!channel.core_)
    return Status::error(Errc::invalid_argument, "%s: create_cq: no completion channel",
                         info().name.c_str());
  RNICDV_ASSIGN_OR_RETURN(auto cq, core_->hw->create_evented_cq(min_entries, *channel.core_->hw));
  return adopt_cq(std::move(cq), channel.core_, context);
}

Result<CompletionQueue> Device::adopt_cq(std::unique_ptr<hw::Cq> cq,
                                         std::shared_ptr<detail::ChannelCore> channel,
                                         uint64_t context) {
  const mlx5dv_cq& dv = cq->view().dv;
  if (!dv.buf || !dv.dbrec || dv.cqe_cnt == 0 || (dv.cqe_cnt & (dv.cqe_cnt - 1)) != 0 ||
      (dv.cqe_size != 64 && dv.cqe_size != 128))
    return Status::error(Errc::internal,
                         "cq %#x: create: the device returned an unusable ring (%u entries of "
                         "%u bytes)",
                         dv.cqn, dv.cqe_cnt, dv.cqe_size);
  if (channel && !dv.cq_uar)
    return Status::error(Errc::internal,
                         "cq %#x: create: the device gave no doorbell page to arm the CQ with",
                         dv.cqn);

  auto core = std::make_shared<detail::CqCore>();
  core->ring = wqe::CqRing{static_cast<uint8_t*>(dv.buf), dv.cqe_cnt, dv.cqe_size};
  core->cqe_base = core->ring.buf + (dv.cqe_size - 64);
  core->cqe_mask = dv.cqe_cnt - 1;
  core->cqe_shift = static_cast<uint8_t>(__builtin_ctz(dv.cqe_size));
  core->lap_shift = static_cast<uint8_t>(__builtin_ctz(dv.cqe_cnt));
  core->dbrec = dv.dbrec;
  core->progress = core_->progress;
  core->qp_table = &core_->qp_table;
  core->cqn = dv.cqn;
  core->device = core_;
  core->cq_uar = dv.cq_uar;
  core->arm_wake.init(cq->view().wake.asleep, cq->view().wake.kick_fd);
  core->hw_cq = std::move(cq);
  // Every entry starts invalid and owned by the device (libmlx5 mlx5_alloc_cq_buf), so the
  // first lap's owner bit test cannot mistake a zeroed entry for a completion.
  wqe::init_cq_ring(core->ring);
  if (channel) {
    core->channel = std::move(channel);
    core->event_context = context;
    core->channel->attach(core.get());
  }
  {
    std::lock_guard lock(core_->mutex);
    core_->cqs.insert(core.get());
  }
  return CompletionQueue(std::move(core));
}

CompletionQueue::CompletionQueue(std::shared_ptr<detail::CqCore> core) : core_(std::move(core)) {}
CompletionQueue::CompletionQueue(CompletionQueue&&) noexcept = default;
CompletionQueue& CompletionQueue::operator=(CompletionQueue&&) noexcept = default;
CompletionQueue::~CompletionQueue() = default;

uint32_t CompletionQueue::cqn() const {
  return core_ ? core_->cqn : 0;
}
uint32_t CompletionQueue::entries() const {
  return core_ ? core_->ring.cqe_cnt : 0;
}
uint64_t CompletionQueue::orphaned_completions() const {
  return core_ ? core_->orphaned.load(std::memory_order_relaxed) : 0;
}
bool CompletionQueue::in_error() const {
  return core_ && core_->in_error.load(std::memory_order_acquire);
}

namespace detail {

CqCore::~CqCore() {
  if (device) {
    std::lock_guard lock(device->mutex);
    device->cqs.erase(this);
  }
  graveyard.clear();
  if (channel) channel->detach(this);  // no event is mapped to this CQ from here on
  hw_cq.reset();  // the device CQ before the device itself (member order does the rest)
  if (channel) channel->forget(cqn);
}

void CqCore::reap_graveyard() noexcept {
  std::vector<std::shared_ptr<QpCore>> dead;
  {
    std::lock_guard lock(graveyard_mutex);
    dead.swap(graveyard);
    graveyard_pending.store(false, std::memory_order_relaxed);
  }
  // Freed here, on the polling thread, at the start of a poll: no pointer to them is held.
}

void CqCore::bury(std::shared_ptr<QpCore> qp) {
  std::lock_guard lock(graveyard_mutex);
  graveyard.push_back(std::move(qp));
  graveyard_pending.store(true, std::memory_order_release);
}

void CqCore::attach(QpCore* qp) {
  std::lock_guard lock(attach_mutex);
  if (std::find(attached.begin(), attached.end(), qp) == attached.end()) attached.push_back(qp);
  sole_qp.store(attached.size() == 1 ? attached.front() : nullptr, std::memory_order_release);
}

void CqCore::detach(QpCore* qp) noexcept {
  std::lock_guard lock(attach_mutex);
  DeviceCore::erase_from(attached, qp);
  sole_qp.store(attached.size() == 1 ? attached.front() : nullptr, std::memory_order_release);
}

void CqCore::add_software_qp(QpCore* qp) noexcept {
  software_lock.lock();
  if (!qp->on_software_list) {
    qp->on_software_list = true;
    qp->software_next = software_head;
    software_head = qp;
  }
  software_pending.store(true, std::memory_order_seq_cst);
  software_lock.unlock();
  // An armed CQ learns of software completions from the driver: the device never sees them.
  if (channel && software_armed.load(std::memory_order_seq_cst) &&
      software_armed.exchange(false, std::memory_order_acq_rel))
    channel->push_software(cqn);
}

void CqCore::remove_software_qp(QpCore* qp) noexcept {
  software_lock.lock();
  if (qp->on_software_list) {
    for (QpCore** link = &software_head; *link; link = &(*link)->software_next) {
      if (*link == qp) {
        *link = qp->software_next;
        break;
      }
    }
    qp->on_software_list = false;
    qp->software_next = nullptr;
  }
  software_pending.store(software_head != nullptr, std::memory_order_release);
  software_lock.unlock();
}

int CqCore::poll_software(Completion* out, int max) noexcept {
  int n = 0;
  software_lock.lock();
  QpCore** link = &software_head;
  while (*link && n < max) {
    QpCore* qp = *link;
    n += qp->poll_software(out + n, max - n);
    // Drained: leave the list. A poster adding more re-adds the QP (under this lock), so
    // nothing appended after the check is missed.
    if (qp->sq_tail.load(std::memory_order_relaxed) == qp->sw_end.load(std::memory_order_acquire)) {
      *link = qp->software_next;
      qp->on_software_list = false;
      qp->software_next = nullptr;
    } else {
      link = &qp->software_next;
    }
  }
  software_pending.store(software_head != nullptr, std::memory_order_release);
  software_lock.unlock();
  return n;
}

}  // namespace detail
}  // namespace rnicdv
