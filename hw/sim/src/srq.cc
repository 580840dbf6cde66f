// SPDX-License-Identifier: BSD-3-Clause
// Shared receive queues: creation, the limit event, destruction, and QPs that use one.
#include "srq.h"

#include "alloc.h"
#include "hca.h"
#include "host_access.h"

namespace rnicdv::sim {

// WQE indexes are 16 bits (next_wqe_index, the CQE's wqe_counter), as is the posted count.

Result<SrqObj*> Hca::create_srq(uint32_t pdn, uint32_t max_wr, uint32_t max_sge) {
  RNICDV_TRY(check_owner("create_srq"));
  RNICDV_TRY(check_alive("create_srq"));
  std::lock_guard<std::mutex> lock(mu_);
  const char* name = info_.name.c_str();
  const hw::DeviceCaps& dev = info_.caps;
  if (pds_.count(pdn) == 0)
    return Status::error(Errc::not_found, "%s: create_srq: pd %u does not exist", name, pdn);
  if (max_wr == 0 || max_wr > dev.max_srq_wr)
    return Status::error(Errc::invalid_argument, "%s: create_srq: max_wr %u (1..%u)", name, max_wr,
                         dev.max_srq_wr);
  if (srqs_.size() >= dev.max_srq)
    return Status::error(Errc::no_resources, "%s: create_srq: %u SRQs in use", name, dev.max_srq);
  if (max_sge == 0 || max_sge > dev.max_recv_sge)
    return Status::error(Errc::invalid_argument, "%s: create_srq: max_sge %u (1..%u)", name,
                         max_sge, dev.max_recv_sge);
  // One WQE more than may be posted: the list's tail is never handed out (srq_wqe.h).
  const uint32_t cnt = next_pow2(uint64_t{max_wr} + 1);
  const uint32_t stride = next_pow2(16u * (1 + max_sge));
  auto srq = std::make_unique<SrqObj>();
  srq->owned_buf = alloc_zeroed(kUarPageBytes, round_page(size_t{cnt} * stride));
  srq->owned_dbrec = reinterpret_cast<uint32_t*>(alloc_zeroed(64, 64));
  if (!srq->owned_buf || !srq->owned_dbrec) {
    std::free(srq->owned_buf);
    std::free(srq->owned_dbrec);
    return Status::error(Errc::no_resources, "%s: create_srq: out of memory", name);
  }
  srq->ring = wqe::SrqRing{srq->owned_buf, cnt, stride};
  wqe::init_srq_ring(srq->ring);
  srq->dbrec = srq->owned_dbrec;
  return add_srq_locked(std::move(srq), pdn);
}

Result<SrqObj*> Hca::create_srq_external(uint32_t pdn, const ExternalSrqMemory& mem) {
  RNICDV_TRY(check_owner("create_srq"));
  RNICDV_TRY(check_alive("create_srq"));
  std::lock_guard<std::mutex> lock(mu_);
  const char* name = info_.name.c_str();
  if (pds_.count(pdn) == 0)
    return Status::error(Errc::not_found, "%s: create_srq: pd %u does not exist", name, pdn);
  const hw::DeviceCaps& dev = info_.caps;
  if (!mem.buf || !mem.dbrec || !is_pow2(mem.wqe_cnt) || mem.wqe_cnt < 2 ||
      mem.wqe_cnt - 1 > dev.max_srq_wr || !is_pow2(mem.stride) || mem.stride < 32 ||
      mem.max_sge == 0 || mem.max_sge > (mem.stride - 16) / 16)
    return Status::error(Errc::invalid_argument,
                         "%s: create_srq: an external SRQ needs a buffer, a doorbell record, a "
                         "power-of-two count of 2..%u WQEs and a power-of-two stride >= 32 "
                         "holding its SGEs",
                         name, dev.max_srq_wr + 1);
  if (srqs_.size() >= dev.max_srq)
    return Status::error(Errc::no_resources, "%s: create_srq: %u SRQs in use", name, dev.max_srq);
  auto srq = std::make_unique<SrqObj>();
  srq->mirror_buf = static_cast<uint8_t*>(std::calloc(mem.wqe_cnt, mem.stride));
  if (!srq->mirror_buf)
    return Status::error(Errc::no_resources, "%s: create_srq: no memory for %u WQEs", name,
                         mem.wqe_cnt);
  srq->ring_host = wqe::SrqRing{mem.buf, mem.wqe_cnt, mem.stride};
  srq->ring = wqe::SrqRing{srq->mirror_buf, mem.wqe_cnt, mem.stride};
  srq->dbrec = mem.dbrec;
  srq->external = true;
  return add_srq_locked(std::move(srq), pdn);
}

SrqObj* Hca::add_srq_locked(std::unique_ptr<SrqObj> srq, uint32_t pdn) {
  srq->srqn = next_srqn_++ & 0xffffff;
  srq->pdn = pdn;
  mlx5dv_srq& dv = srq->view.dv;
  dv.buf = srq->external ? srq->ring_host.buf : srq->ring.buf;
  dv.dbrec = reinterpret_cast<__be32*>(srq->dbrec);
  dv.stride = srq->ring.stride;
  dv.head = 0;
  dv.tail = srq->ring.wqe_cnt - 1;
  dv.srqn = srq->srqn;
  srq->view.wqe_cnt = srq->ring.wqe_cnt;
  SrqObj* raw = srq.get();
  srq_by_num_[raw->srqn] = raw;
  slot_push(srqs_, std::move(srq), &SrqObj::slot);
  return raw;
}

SrqObj* Hca::find_srq_locked(uint32_t srqn) const {
  const auto it = srq_by_num_.find(srqn);
  return it == srq_by_num_.end() ? nullptr : it->second;
}

Status Hca::arm_srq_limit(SrqObj* srq, uint32_t limit) {
  RNICDV_TRY(check_owner("arm_srq_limit"));
  RNICDV_TRY(check_alive("arm_srq_limit"));
  std::lock_guard<std::mutex> lock(mu_);
  if (limit >= srq->ring.wqe_cnt)
    return Status::error(Errc::invalid_argument, "%s: srq %#x: limit %u above its %u WQEs",
                         info_.name.c_str(), srq->srqn, limit, srq->ring.wqe_cnt - 1);
  srq->limit = limit;
  return Status::ok();
}

// With CQE version 1 (libmlx5 through the shim gives each QP a user index) a receive CQE names
// the QP by its user index even when the WQE came from an SRQ; the consumer finds the SRQ
// through the QP. The driver's own QPs, and libmlx5 with version 0 (index 0xffffff), get the
// SRQ's number.
uint32_t QpObj::recv_srqn_uidx() const {
  // An XRC receive names its SRQ (libmlx5 finds an XRC SRQ by its own user index).
  if (srq && srq->xrc) return srq->user_index != 0xffffff ? srq->user_index : srq->srqn;
  if (srq && (!external || user_index == 0xffffff)) return srq->srqn;
  return user_index;
}

CqObj* QpObj::receive_cq() const {
  return srq && srq->cq ? srq->cq : recv_cq;
}

Status Hca::destroy_srq(SrqObj* srq) {
  RNICDV_TRY(check_owner("destroy_srq"));
  std::lock_guard<std::mutex> lock(mu_);
  if (srq->qp_refs)
    return Status::error(Errc::busy, "%s: srq %#x: destroy: %u QPs still use it",
                         info_.name.c_str(), srq->srqn, srq->qp_refs);
  if (srq->xrc) {
    // A target QP filling a receive from it loses that message (its next packet names an SRQ
    // that is gone: rc/responder.cc), and no new one can name it.
    for (auto& qp : qps_) {
      if (qp->type != hw::QpType::xrc_recv || qp->srq != srq) continue;
      qp->srq = nullptr;
      qp->resp.recv.active = false;
    }
    --xrcds_[srq->xrcdn];
    CqObj* cq = srq->cq;
    --cq->qp_refs;
    maybe_free_cq(cq);
  }
  srq_by_num_.erase(srq->srqn);
  std::free(srq->owned_buf);
  std::free(srq->owned_dbrec);
  std::free(srq->mirror_buf);
  slot_erase(srqs_, srq, &SrqObj::slot);
  return Status::ok();
}

Result<uint32_t> Hca::alloc_xrcd() {
  RNICDV_TRY(check_owner("open_xrcd"));
  RNICDV_TRY(check_alive("open_xrcd"));
  std::lock_guard<std::mutex> lock(mu_);
  if (xrcds_.size() >= info_.caps.max_pd)
    return Status::error(Errc::no_resources, "%s: open_xrcd: %zu XRC domains in use",
                         info_.name.c_str(), xrcds_.size());
  const uint32_t xrcdn = next_xrcdn_++ & 0xffffff;
  xrcds_[xrcdn] = 0;
  return xrcdn;
}

Status Hca::dealloc_xrcd(uint32_t xrcdn) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = xrcds_.find(xrcdn);
  if (it == xrcds_.end())
    return Status::error(Errc::not_found, "%s: xrcd %u: close: no such XRC domain",
                         info_.name.c_str(), xrcdn);
  if (it->second != 0)
    return Status::error(Errc::busy, "%s: xrcd %u: close: %u SRQs and target QPs still use it",
                         info_.name.c_str(), xrcdn, it->second);
  xrcds_.erase(it);
  return Status::ok();
}

namespace {

Status no_xrcd(const hw::DeviceInfo& info, const char* op, uint32_t xrcdn) {
  return Status::error(Errc::not_found, "%s: %s: XRC domain %u does not exist", info.name.c_str(),
                       op, xrcdn);
}

}  // namespace

Result<SrqObj*> Hca::create_xrc_srq(uint32_t xrcdn, uint32_t pdn, CqObj* cq, uint32_t max_wr,
                                    uint32_t max_sge) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!xrcds_.count(xrcdn)) return no_xrcd(info_, "create_xrc_srq", xrcdn);
  }
  RNICDV_ASSIGN_OR_RETURN(SrqObj* const srq, create_srq(pdn, max_wr, max_sge));
  std::lock_guard<std::mutex> lock(mu_);
  return attach_xrc_srq_locked(srq, xrcdn, cq, 0xffffff);
}

Result<SrqObj*> Hca::create_xrc_srq_external(uint32_t xrcdn, uint32_t pdn, CqObj* cq,
                                             const ExternalSrqMemory& mem, uint32_t user_index) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!xrcds_.count(xrcdn)) return no_xrcd(info_, "create_xrc_srq", xrcdn);
  }
  RNICDV_ASSIGN_OR_RETURN(SrqObj* const srq, create_srq_external(pdn, mem));
  std::lock_guard<std::mutex> lock(mu_);
  return attach_xrc_srq_locked(srq, xrcdn, cq, user_index);
}

Result<SrqObj*> Hca::attach_xrc_srq_locked(SrqObj* srq, uint32_t xrcdn, CqObj* cq,
                                           uint32_t user_index) {
  const auto it = xrcds_.find(xrcdn);
  if (it == xrcds_.end()) {
    srq_by_num_.erase(srq->srqn);
    std::free(srq->owned_buf);
    std::free(srq->owned_dbrec);
    std::free(srq->mirror_buf);
    slot_erase(srqs_, srq, &SrqObj::slot);
    return no_xrcd(info_, "create_xrc_srq", xrcdn);
  }
  ++it->second;
  srq->xrc = true;
  srq->xrcdn = xrcdn;
  srq->cq = cq;
  srq->user_index = user_index & 0xffffff;
  ++cq->qp_refs;
  return srq;
}

Result<QpObj*> Hca::create_xrc_recv_qp(uint32_t xrcdn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!xrcds_.count(xrcdn)) return no_xrcd(info_, "create_xrc_recv_qp", xrcdn);
  }
  // As mlx5's kernel driver gives a target the device's own CQ and PD: nothing completes on
  // that CQ (receives go to their SRQ's), and no access is checked against that PD.
  CqObj* cq = nullptr;
  uint32_t pdn = 0;
  {
    std::lock_guard<std::mutex> once(placeholder_mu_);
    if (!xrc_placeholder_cq_) {
      RNICDV_ASSIGN_OR_RETURN(CqObj* const made, create_cq(1));
      Result<uint32_t> placeholder_pdn = alloc_pd();
      if (!placeholder_pdn) {
        release_cq(made);
        return placeholder_pdn.status();
      }
      xrc_placeholder_cq_ = made;
      xrc_placeholder_pdn_ = *placeholder_pdn;
    }
    cq = xrc_placeholder_cq_;
    pdn = xrc_placeholder_pdn_;
  }
  hw::QpCaps caps;
  caps.max_send_wr = 0;
  caps.max_recv_wr = 0;
  caps.max_send_sge = 0;
  caps.max_recv_sge = 0;
  RNICDV_ASSIGN_OR_RETURN(QpObj* const qp,
                          create_qp(pdn, cq, cq, caps, nullptr, hw::QpType::xrc_recv));
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = xrcds_.find(xrcdn);
  if (it != xrcds_.end()) ++it->second;
  qp->xrcdn = xrcdn;
  return qp;
}

}  // namespace rnicdv::sim
