// SPDX-License-Identifier: BSD-3-Clause
// XRC (rnicdv/xrc.h): domains, XRC SRQs, target QPs, and the retirement of a target's receives.
#include "rnicdv/xrc.h"

#include <algorithm>
#include <mutex>
#include <utility>

#include "device_core.h"
#include "rnicdv/cq.h"
#include "rnicdv/detail/cq_core.h"
#include "rnicdv/detail/qp_core.h"
#include "rnicdv/detail/srq_core.h"
#include "rnicdv/device.h"
#include "rnicdv/pd.h"
#include "rnicdv/qp.h"
#include "rnicdv/srq.h"
#include "rnicdv/wqe/cqe.h"

namespace rnicdv {

namespace detail {

struct XrcdCore {
  std::shared_ptr<DeviceCore> device;
  std::unique_ptr<hw::Xrcd> hw_xrcd;
  ~XrcdCore() { hw_xrcd.reset(); }  // before the device
};

namespace {

// The XRC SRQ a receive CQE names (srqn_uidx) retires its WR. The lookup and the retirement
// run under the table's lock, so that the SRQ cannot go meanwhile. `cq`: only an SRQ that
// completes on it (null: any).
Retired retire_through_xrc_srq(DeviceCore& dev, const CqCore* cq, const mlx5_cqe64* cqe,
                               Completion* out) noexcept {
  const uint32_t tag = be32toh(cqe->srqn_uidx) & 0xffffff;
  uint64_t wr_id = 0;
  {
    std::lock_guard lock(dev.xrc_mutex);
    const auto it = dev.xrc_srqs.find(tag);
    if (it == dev.xrc_srqs.end() || (cq && it->second->xrc_cq.get() != cq) ||
        !it->second->retire(cqe, &wr_id))
      return Retired::stale;
  }
  wqe::cqe_to_completion(cqe, out);
  out->wr_id = wr_id;
  return Retired::report;
}

}  // namespace

Retired QpCore::retire_xrc_recv(const mlx5_cqe64* cqe, Completion* out) noexcept {
  return retire_through_xrc_srq(*device, nullptr, cqe, out);
}

Retired CqCore::retire_xrc_orphan(const mlx5_cqe64* cqe, uint8_t opcode,
                                  Completion* out) noexcept {
  const bool receive =
      opcode == MLX5_CQE_RESP_ERR || (opcode != MLX5_CQE_REQ && opcode <= MLX5_CQE_RESP_SEND_INV);
  if (!receive) return Retired::stale;
  // Only an XRC SRQ that completes here: a plain SRQ's number is never one of the table's,
  // and the CQ check keeps a stray tag from retiring a receive another CQ owes.
  return retire_through_xrc_srq(*device, this, cqe, out);
}

}  // namespace detail

XrcDomain::XrcDomain(std::shared_ptr<detail::XrcdCore> core) : core_(std::move(core)) {}
XrcDomain::XrcDomain(XrcDomain&&) noexcept = default;
XrcDomain& XrcDomain::operator=(XrcDomain&&) noexcept = default;
XrcDomain::~XrcDomain() = default;

uint32_t XrcDomain::xrcdn() const {
  return core_ ? core_->hw_xrcd->xrcdn() : 0;
}

Result<XrcDomain> Device::open_xrc_domain() {
  RNICDV_ASSIGN_OR_RETURN(std::unique_ptr<hw::Xrcd> created, core_->hw->open_xrcd());
  auto core = std::make_shared<detail::XrcdCore>();
  core->device = core_;
  core->hw_xrcd = std::move(created);
  return XrcDomain(std::move(core));
}

namespace {

Status not_this_device(const hw::DeviceInfo& info, const char* op, const char* what) {
  return Status::error(Errc::invalid_argument, "%s: %s: the %s belongs to another device",
                       info.name.c_str(), op, what);
}

}  // namespace

Result<SharedReceiveQueue> Device::create_xrc_srq(XrcDomain& domain, ProtectionDomain& pd,
                                                  CompletionQueue& cq, uint32_t max_wr,
                                                  uint32_t max_sge) {
  const hw::DeviceInfo& dev_info = info();
  detail::XrcdCore* xrcd = domain.core();
  if (!xrcd)
    return Status::error(Errc::invalid_argument, "%s: create_xrc_srq: no XRC domain (moved from)",
                         dev_info.name.c_str());
  if (xrcd->device != core_) return not_this_device(dev_info, "create_xrc_srq", "XRC domain");
  if (!cq.core() || cq.core()->device != core_)
    return not_this_device(dev_info, "create_xrc_srq", "completion queue");
  if (max_wr == 0 || max_sge == 0)
    return Status::error(Errc::invalid_argument,
                         "%s: create_xrc_srq: max_wr %u, max_sge %u: both must be at least 1",
                         dev_info.name.c_str(), max_wr, max_sge);
  RNICDV_ASSIGN_OR_RETURN(std::unique_ptr<hw::Srq> created,
                          core_->hw->create_xrc_srq(*xrcd->hw_xrcd, pd.hw(), *cq.core()->hw_cq,
                                                    max_wr, max_sge));
  RNICDV_ASSIGN_OR_RETURN(SharedReceiveQueue srq, adopt_srq(std::move(created), max_sge));
  detail::SrqCore* core = srq.core();
  core->xrcd = domain.core_;
  core->xrc_cq = cq.core_;
  // The driver's XRC SRQs carry no user index: their receive CQEs name them by number.
  core->cqe_tag = core->srqn;
  {
    std::lock_guard lock(core_->xrc_mutex);
    core_->xrc_srqs[core->cqe_tag] = core;
  }
  return srq;
}

Result<QueuePair> Device::create_xrc_target(XrcDomain& domain) {
  const hw::DeviceInfo& dev_info = info();
  detail::XrcdCore* xrcd = domain.core();
  if (!xrcd)
    return Status::error(Errc::invalid_argument,
                         "%s: create_xrc_target: no XRC domain (moved from)",
                         dev_info.name.c_str());
  if (xrcd->device != core_) return not_this_device(dev_info, "create_xrc_target", "XRC domain");
  RNICDV_ASSIGN_OR_RETURN(std::unique_ptr<hw::Qp> hw_qp,
                          core_->hw->create_xrc_recv_qp(*xrcd->hw_xrcd));
  auto qp = std::make_unique<detail::QpCore>();
  qp->qpn = hw_qp->view().qpn;
  qp->xrc_target = true;
  qp->threading = Threading::thread_safe;
  qp->early_post = EarlyPost::strict;
  qp->rts_gate = qp->gate_in_rts();
  // No queues: one placeholder entry each, so that nothing indexes a null table.
  qp->sq_entry_storage.reset(new (std::nothrow) detail::SqEntry[1]());
  qp->rq_wr_id_storage.reset(new (std::nothrow) uint64_t[1]());
  if (!qp->sq_entry_storage || !qp->rq_wr_id_storage)
    return Status::error(Errc::no_resources, "qp %#x: create: out of memory", qp->qpn);
  qp->sq_entries = qp->poll_sq_entries = qp->sq_entry_storage.get();
  qp->rq_wr_ids = qp->poll_rq_wr_ids = qp->rq_wr_id_storage.get();
  qp->device = core_;
  qp->xrcd = domain.core_;
  qp->hw_qp = std::move(hw_qp);
  RNICDV_TRY(core_->register_qp(qp.get()));
  return QueuePair(std::move(qp));
}

}  // namespace rnicdv
