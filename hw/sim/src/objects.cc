// SPDX-License-Identifier: BSD-3-Clause
// Creating and destroying PDs, MRs, CQs and QPs, with memory in the mlx5 layouts: a QP buffer
// with the RQ first and the SQ after it (libmlx5 mlx5_calc_wq_size), 64-byte CQEs set to
// op_own 0xF0, two big-endian doorbell-record words per object.
#include <endian.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "alloc.h"
#include "fabric_shared.h"
#include "hca.h"
#include "rc/queues.h"
#include "host_access.h"

namespace rnicdv::sim {

namespace {

constexpr uint32_t kKnownAccess = hw::access::local_write | hw::access::remote_write |
                                  hw::access::remote_read | hw::access::remote_atomic;

}  // namespace

Result<uint32_t> Hca::alloc_pd() {
  RNICDV_TRY(check_owner("alloc_pd"));
  RNICDV_TRY(check_alive("alloc_pd"));
  std::lock_guard<std::mutex> lock(mu_);
  if (pds_.size() >= info_.caps.max_pd)
    return Status::error(Errc::no_resources, "%s: alloc_pd: %u protection domains in use",
                         info_.name.c_str(), info_.caps.max_pd);
  const uint32_t pdn = next_pdn_++;
  pds_.insert(pdn);
  return pdn;
}

void Hca::dealloc_pd(uint32_t pdn) {
  std::lock_guard<std::mutex> lock(mu_);
  pds_.erase(pdn);
}

bool Hca::has_pd(uint32_t pdn) const {
  std::lock_guard<std::mutex> lock(mu_);
  return pds_.count(pdn) != 0;
}

Status Hca::check_region_locked(const char* op, uint32_t pdn, const void* addr, size_t length,
                                uint32_t access) const {
  const char* name = info_.name.c_str();
  if (pds_.count(pdn) == 0)
    return Status::error(Errc::not_found, "%s: %s: pd %u does not exist", name, op, pdn);
  if (!addr || length == 0)
    return Status::error(Errc::invalid_argument, "%s: %s: empty region", name, op);
  if (length > info_.caps.max_mr_size)
    return Status::error(Errc::invalid_argument, "%s: %s: %zu bytes above max_mr_size", name, op,
                         length);
  if (access & ~kKnownAccess)
    return Status::error(Errc::invalid_argument, "%s: %s: unknown access flags %#x", name, op,
                         access);
  // IBA 10.6.3.1 (ibv_reg_mr): remote write or atomic access requires local write.
  if ((access & (hw::access::remote_write | hw::access::remote_atomic)) &&
      !(access & hw::access::local_write))
    return Status::error(Errc::invalid_argument,
                         "%s: %s: remote write or atomic access needs local write", name, op);
  return Status::ok();
}

// The region's pages are pinned first, outside the device lock (pinning a large region
// faults in every page, as ib_umem_get does), then the region is checked and entered.
Result<uint32_t> Hca::reg_mr(uint32_t pdn, void* addr, size_t length, uint32_t access) {
  RNICDV_TRY(check_owner("reg_mr"));
  RNICDV_TRY(check_alive("reg_mr"));
  {
    std::lock_guard<std::mutex> lock(mu_);
    RNICDV_TRY(check_region_locked("reg_mr", pdn, addr, length, access));
  }
  RNICDV_ASSIGN_OR_RETURN(const PinRef pin, pins_.pin(static_cast<uint8_t*>(addr), length));
  std::lock_guard<std::mutex> lock(mu_);
  if (Status st = check_region_locked("reg_mr", pdn, addr, length, access); !st) {
    pins_.unpin(pin);
    return st;
  }
  Result<uint32_t> key = mrs_.add(pdn, static_cast<uint8_t*>(addr), length, access, pin);
  if (!key) {
    pins_.unpin(pin);
    return Status(key.status()).prepend(info_.name);
  }
  return key;
}

void Hca::dereg_mr(uint32_t key) {
  PinRef pin;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (const MrEntry* e = mrs_.find(key)) pin = e->pin;
    mrs_.remove(key);
  }
  // No pass can reach the region now: its pages are let go (put_page at ib_umem_release).
  pins_.unpin(pin);
}

// A new translation gets new pages, pinned before the old ones are let go (the pages the
// region holds when it changes, whoever changed it last); a change of PD or rights keeps them.
Status Hca::rereg_mr(uint32_t key, uint32_t pdn, void* addr, size_t length, uint32_t access) {
  RNICDV_TRY(check_owner("rereg_mr"));
  RNICDV_TRY(check_alive("rereg_mr"));
  bool same_range = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    RNICDV_TRY(check_region_locked("rereg_mr", pdn, addr, length, access));
    const MrEntry* e = mrs_.find(key);
    if (!e)
      return Status::error(Errc::not_found, "%s: rereg_mr: key %#x names no region",
                           info_.name.c_str(), key);
    same_range = e->addr == addr && e->length == length;
  }
  PinRef pin;
  if (!same_range) {
    RNICDV_ASSIGN_OR_RETURN(pin, pins_.pin(static_cast<uint8_t*>(addr), length));
  }
  PinRef released;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const MrEntry* e = mrs_.find(key);
    if (e && same_range) pin = e->pin;
    if (e) released = e->pin;
    if (!e || !mrs_.update(key, pdn, static_cast<uint8_t*>(addr), length, access, pin)) {
      if (!same_range) pins_.unpin(pin);
      return Status::error(Errc::not_found, "%s: rereg_mr: key %#x names no region",
                           info_.name.c_str(), key);
    }
  }
  if (!same_range) pins_.unpin(released);
  return Status::ok();
}

Result<CqObj*> Hca::create_cq(uint32_t min_cqe) {
  RNICDV_TRY(check_owner("create_cq"));
  RNICDV_TRY(check_alive("create_cq"));
  std::lock_guard<std::mutex> lock(mu_);
  const char* name = info_.name.c_str();
  if (min_cqe == 0 || min_cqe > info_.caps.max_cqe)
    return Status::error(Errc::invalid_argument, "%s: create_cq: %u entries (1..%u)", name, min_cqe,
                         info_.caps.max_cqe);
  if (cqs_.size() >= info_.caps.max_cq)
    return Status::error(Errc::no_resources, "%s: create_cq: %u CQs in use", name,
                         info_.caps.max_cq);
  const uint32_t cnt = next_pow2(std::max<uint32_t>(min_cqe, 2));
  auto cq = std::make_unique<CqObj>();
  cq->owned_buf = alloc_zeroed(kUarPageBytes, round_page(size_t{cnt} * 64));
  cq->owned_dbrec = reinterpret_cast<uint32_t*>(alloc_zeroed(64, 64));
  if (!cq->owned_buf || !cq->owned_dbrec) {
    std::free(cq->owned_buf);
    std::free(cq->owned_dbrec);
    return Status::error(Errc::no_resources, "%s: create_cq: out of memory for %u CQEs", name, cnt);
  }
  cq->cqn = next_cqn_++;
  cq->ring = wqe::CqRing{cq->owned_buf, cnt, 64};
  cq->dbrec = cq->owned_dbrec;
  wqe::init_cq_ring(cq->ring);
  mlx5dv_cq& dv = cq->view.dv;
  dv.buf = cq->owned_buf;
  dv.dbrec = reinterpret_cast<__be32*>(cq->dbrec);
  dv.cqe_cnt = cnt;
  dv.cqe_size = 64;
  dv.cq_uar = owned_pages_.empty() ? nullptr : owned_pages_[0];
  dv.cqn = cq->cqn;
  cq->view.wake = wake_view();
  CqObj* raw = cq.get();
  slot_push(cqs_, std::move(cq), &CqObj::slot);
  return raw;
}

Result<CqObj*> Hca::create_cq_external(const ExternalCqMemory& mem) {
  RNICDV_TRY(check_owner("create_cq"));
  RNICDV_TRY(check_alive("create_cq"));
  std::lock_guard<std::mutex> lock(mu_);
  if (!mem.buf || !mem.dbrec || !is_pow2(mem.cqe_cnt) || mem.cqe_cnt > info_.caps.max_cqe ||
      (mem.cqe_size != 64 && mem.cqe_size != 128))
    return Status::error(Errc::invalid_argument,
                         "%s: create_cq: external ring needs a buffer, a doorbell record, a "
                         "power-of-two count and 64- or 128-byte CQEs",
                         info_.name.c_str());
  if (cqs_.size() >= info_.caps.max_cq)
    return Status::error(Errc::no_resources, "%s: create_cq: %u CQs in use", info_.name.c_str(),
                         info_.caps.max_cq);
  auto cq = std::make_unique<CqObj>();
  cq->mirror_buf = static_cast<uint8_t*>(std::calloc(mem.cqe_cnt, mem.cqe_size));
  if (!cq->mirror_buf)
    return Status::error(Errc::no_resources, "%s: create_cq: no memory for %u CQEs",
                         info_.name.c_str(), mem.cqe_cnt);
  cq->cqn = next_cqn_++;
  cq->ring_host = wqe::CqRing{mem.buf, mem.cqe_cnt, mem.cqe_size};
  cq->ring = wqe::CqRing{cq->mirror_buf, mem.cqe_cnt, mem.cqe_size};
  cq->dbrec = mem.dbrec;
  cq->external = true;
  mlx5dv_cq& dv = cq->view.dv;
  dv.buf = mem.buf;
  dv.dbrec = reinterpret_cast<__be32*>(mem.dbrec);
  dv.cqe_cnt = mem.cqe_cnt;
  dv.cqe_size = mem.cqe_size;
  dv.cq_uar = mem.cq_uar;
  dv.cqn = cq->cqn;
  CqObj* raw = cq.get();
  slot_push(cqs_, std::move(cq), &CqObj::slot);
  return raw;
}

void Hca::maybe_free_cq(CqObj* cq) {
  if (cq->handle_alive || cq->qp_refs != 0) return;
  slot_erase(evented_cqs_, cq, &CqObj::evented_slot);
  std::free(cq->owned_buf);
  std::free(cq->owned_dbrec);
  std::free(cq->mirror_buf);
  slot_erase(cqs_, cq, &CqObj::slot);
}

void Hca::release_cq(CqObj* cq) {
  // event_mu_ first: a handler of this CQ that is running finishes before it is removed, and
  // none is called after this returns (engine.cc deliver_cq_events).
  std::lock_guard<std::mutex> events(event_mu_);
  std::lock_guard<std::mutex> lock(mu_);
  cq_event_handlers_.erase(cq->cqn);
  if (cq->events_on) {
    cq->events_on = false;
    cq->arm = CqArm::off;
    cq->arm_check_pending = false;
    slot_erase(evented_cqs_, cq, &CqObj::evented_slot);
  }
  cq->handle_alive = false;
  maybe_free_cq(cq);
}

uint32_t Hca::alloc_qpn() {
  for (;;) {
    const uint32_t qpn = next_qpn_;
    next_qpn_ = (next_qpn_ + 1) & 0xffffff;
    if (next_qpn_ < 0x100) next_qpn_ = 0x100;
    if (!qp_by_num_.count(qpn)) return qpn;
  }
}

// An RC or UC QP's SRQ is a basic one: an XRC SRQ serves its domain's XRC targets only, which
// find it by the XRCETH of each message (the kernel's create_qp refuses one with EINVAL).
Status Hca::check_receive_srq(const SrqObj* srq) const {
  if (srq && srq->xrc)
    return Status::error(Errc::invalid_argument,
                         "%s: create_qp: SRQ %u is an XRC SRQ, which only its domain's XRC "
                         "targets take receives from",
                         info_.name.c_str(), srq->srqn);
  return Status::ok();
}

Result<QpObj*> Hca::create_qp(uint32_t pdn, CqObj* send_cq, CqObj* recv_cq,
                              const hw::QpCaps& caps, SrqObj* srq, hw::QpType type) {
  RNICDV_TRY(check_owner("create_qp"));
  RNICDV_TRY(check_alive("create_qp"));
  std::lock_guard<std::mutex> lock(mu_);
  const hw::DeviceCaps& dev = info_.caps;
  const char* name = info_.name.c_str();
  RNICDV_TRY(check_receive_srq(srq));
  const auto too_big = [&](const char* what, uint32_t asked, uint32_t limit) {
    return Status::error(Errc::invalid_argument, "%s: create_qp: %s %u above the device's %u", name,
                         what, asked, limit);
  };
  if (caps.max_send_wr > dev.max_qp_wr)
    return too_big("max_send_wr", caps.max_send_wr, dev.max_qp_wr);
  if (caps.max_recv_wr > dev.max_qp_wr)
    return too_big("max_recv_wr", caps.max_recv_wr, dev.max_qp_wr);
  if (caps.max_send_sge > dev.max_send_sge)
    return too_big("max_send_sge", caps.max_send_sge, dev.max_send_sge);
  if (caps.max_recv_sge > dev.max_recv_sge)
    return too_big("max_recv_sge", caps.max_recv_sge, dev.max_recv_sge);
  if (caps.max_inline_data > dev.max_inline_data)
    return too_big("max_inline_data", caps.max_inline_data, dev.max_inline_data);

  const bool ud = type == hw::QpType::ud;
  const bool xrc_send = type == hw::QpType::xrc_send;
  if ((ud || type == hw::QpType::xrc_recv || xrc_send) && srq)
    return Status::error(Errc::unsupported, "%s: create_qp: a UD QP on a shared receive queue",
                         name);
  if (!ud && caps.block_self_multicast_loopback)
    return Status::error(Errc::invalid_argument,
                         "%s: create_qp: blocking multicast loopback is for UD QPs only", name);
  // The largest WQE this QP may post, in 16-byte units. RC: RDMA with all its SGEs, an atomic
  // (ctrl + raddr + atomic + data = 4), or inline data after ctrl + raddr. UD: SEND after ctrl
  // and the 48-byte datagram segment (4 units), with its SGEs or its inline data. XRC: RC's,
  // with the XRC segment after ctrl.
  const uint32_t header = ud ? 4 : xrc_send ? 3 : 2;
  uint32_t ds = std::max<uint32_t>(header + std::max<uint32_t>(caps.max_send_sge, 1),
                                   xrc_send ? 5 : 4);
  if (caps.max_inline_data)
    ds = std::max<uint32_t>(ds, header + (caps.max_inline_data + 4 + 15) / 16);
  const uint32_t wqe_bbs = (ds + 3) / 4;
  // max_send_wr 0: no send queue, as mlx5 gives it (a QP that only receives and answers).
  const bool has_sq = caps.max_send_wr != 0;
  const uint32_t sq_bbs = has_sq ? next_pow2(uint64_t{caps.max_send_wr} * wqe_bbs) : 0;
  if (sq_bbs > kMaxSqBbs)
    return Status::error(Errc::no_resources,
                         "%s: create_qp: send queue of %u basic blocks above %u", name, sq_bbs,
                         kMaxSqBbs);
  const uint32_t rq_cnt = next_pow2(std::max<uint32_t>(caps.max_recv_wr, 1));
  const uint32_t rq_stride = next_pow2(16u * std::max<uint32_t>(caps.max_recv_sge, 1));
  const size_t rq_bytes = size_t{rq_cnt} * rq_stride;
  const size_t sq_bytes = size_t{sq_bbs} * 64;

  auto qp = std::make_unique<QpObj>();
  qp->owned_buf = alloc_zeroed(kUarPageBytes, round_page(rq_bytes + sq_bytes));
  qp->owned_dbrec = reinterpret_cast<uint32_t*>(alloc_zeroed(64, 64));
  if (!qp->owned_buf || !qp->owned_dbrec) {
    std::free(qp->owned_buf);
    std::free(qp->owned_dbrec);
    return Status::error(Errc::no_resources, "%s: create_qp: out of memory", name);
  }
  qp->rq = wqe::RqRing{qp->owned_buf, rq_cnt, rq_stride};
  qp->sq = wqe::SqRing{has_sq ? qp->owned_buf + rq_bytes : nullptr, sq_bbs};
  qp->dbrec = qp->owned_dbrec;
  hw::QpCaps& g = qp->caps;
  g.max_send_wr = sq_bbs / wqe_bbs;
  g.max_recv_wr = rq_cnt;
  g.max_send_sge = has_sq ? std::min(dev.max_send_sge, wqe_bbs * 4 - header) : 0;
  g.max_recv_sge = std::min(dev.max_recv_sge, rq_stride / 16);
  g.max_inline_data = has_sq && caps.max_inline_data
                          ? std::min(dev.max_inline_data, wqe_bbs * 64 - header * 16 - 4)
                          : 0;
  g.block_self_multicast_loopback = caps.block_self_multicast_loopback;
  qp->type = type;
  qp->block_self_mcast_loopback = caps.block_self_multicast_loopback;
  if (ud) {
    // A datagram is one packet: the port's MTU bounds it, and no path MTU is ever set.
    qp->mtu = hw::mtu_bytes(info_.caps.active_mtu);
    qp->mtu_shift = 7 + static_cast<uint32_t>(info_.caps.active_mtu);
  }
  if (srq) {
    // Receives come from the SRQ; the QP's own receive queue stays empty.
    qp->srq = srq;
    g.max_recv_wr = 0;
    g.max_recv_sge = 0;
  }
  if (xrc_send || type == hw::QpType::xrc_recv) {
    // XRC QPs receive nothing of their own: a target's receives come from the SRQs its
    // requests name.
    g.max_recv_wr = 0;
    g.max_recv_sge = 0;
  }
  Result<QpObj*> made = finish_create_qp(std::move(qp), pdn, send_cq, recv_cq);
  if (made && srq) ++srq->qp_refs;
  return made;
}

Result<QpObj*> Hca::create_qp_external(uint32_t pdn, CqObj* send_cq, CqObj* recv_cq,
                                       const ExternalQpMemory& mem, SrqObj* srq) {
  RNICDV_TRY(check_owner("create_qp"));
  RNICDV_TRY(check_alive("create_qp"));
  std::lock_guard<std::mutex> lock(mu_);
  const char* name = info_.name.c_str();
  RNICDV_TRY(check_receive_srq(srq));
  // A ring of 0 entries is a queue the QP does not have (mlx5: max_send_wr = 0 gives no send
  // queue, max_recv_wr = 0 or an SRQ no receive queue); any other ring is a power of two.
  if (!mem.dbrec)
    return Status::error(Errc::invalid_argument, "%s: create_qp: no doorbell record", name);
  if (mem.sq_wqe_cnt != 0 &&
      (!mem.sq_buf || !is_pow2(mem.sq_wqe_cnt) || mem.sq_wqe_cnt > kMaxSqBbs))
    return Status::error(Errc::invalid_argument,
                         "%s: create_qp: a send queue of %u basic blocks at %p: it needs a buffer "
                         "and a power-of-two count up to %u (or 0: no send queue)",
                         name, mem.sq_wqe_cnt, static_cast<void*>(mem.sq_buf), kMaxSqBbs);
  if (mem.rq_wqe_cnt != 0 &&
      (!mem.rq_buf || !is_pow2(mem.rq_wqe_cnt) || !is_pow2(mem.rq_stride) || mem.rq_stride < 16))
    return Status::error(Errc::invalid_argument,
                         "%s: create_qp: a receive queue of %u WQEs of %u bytes at %p: it needs a "
                         "buffer, a power-of-two count and a power-of-two stride >= 16 (or 0 "
                         "WQEs: no receive queue)",
                         name, mem.rq_wqe_cnt, mem.rq_stride, static_cast<void*>(mem.rq_buf));
  auto qp = std::make_unique<QpObj>();
  const size_t rq_bytes = size_t{mem.rq_wqe_cnt} * mem.rq_stride;
  const size_t sq_bytes = size_t{mem.sq_wqe_cnt} * 64;
  qp->mirror_buf = static_cast<uint8_t*>(std::calloc(1, std::max<size_t>(rq_bytes + sq_bytes, 1)));
  if (!qp->mirror_buf)
    return Status::error(Errc::no_resources, "%s: create_qp: no memory for the rings", name);
  qp->rq_host = wqe::RqRing{mem.rq_wqe_cnt ? mem.rq_buf : nullptr, mem.rq_wqe_cnt,
                            mem.rq_wqe_cnt ? mem.rq_stride : 0};
  qp->sq_host = wqe::SqRing{mem.sq_wqe_cnt ? mem.sq_buf : nullptr, mem.sq_wqe_cnt};
  qp->rq = wqe::RqRing{qp->mirror_buf, mem.rq_wqe_cnt, qp->rq_host.stride};
  qp->sq = wqe::SqRing{qp->mirror_buf + rq_bytes, mem.sq_wqe_cnt};
  qp->dbrec = mem.dbrec;
  qp->caps = mem.granted;
  qp->user_index = mem.user_index;
  qp->reg = reinterpret_cast<BfRegister*>(mem.bf_reg);  // resolved in finish_create_qp
  qp->view.dv.bf.size = mem.bf_size;
  if (!mem.bf_reg) {
    std::free(qp->mirror_buf);
    return Status::error(Errc::invalid_argument, "%s: create_qp: no doorbell register",
                         info_.name.c_str());
  }
  qp->srq = srq;
  qp->type = mem.type;
  qp->block_self_mcast_loopback = mem.block_self_mcast_loopback;
  if (mem.type == hw::QpType::ud) {
    if (srq) {
      std::free(qp->mirror_buf);
      return Status::error(Errc::unsupported, "%s: create_qp: a UD QP on a shared receive queue",
                           info_.name.c_str());
    }
    // A datagram is one packet: the port's MTU bounds it, and no path MTU is ever set.
    qp->mtu = hw::mtu_bytes(info_.caps.active_mtu);
    qp->mtu_shift = 7 + static_cast<uint32_t>(info_.caps.active_mtu);
  }
  Result<QpObj*> made = finish_create_qp(std::move(qp), pdn, send_cq, recv_cq);
  if (made && srq) ++srq->qp_refs;
  return made;
}

Result<QpObj*> Hca::finish_create_qp(std::unique_ptr<QpObj> qp, uint32_t pdn, CqObj* send_cq,
                                     CqObj* recv_cq) {
  const char* name = info_.name.c_str();
  const bool external = qp->owned_buf == nullptr;
  qp->external = external;
  const auto fail = [&](Status s) {
    std::free(qp->owned_buf);
    std::free(qp->owned_dbrec);
    std::free(qp->mirror_buf);
    return s;
  };
  if (pds_.count(pdn) == 0)
    return fail(Status::error(Errc::not_found, "%s: create_qp: pd %u does not exist", name, pdn));
  if (!send_cq || !recv_cq)
    return fail(Status::error(Errc::invalid_argument, "%s: create_qp: no CQ", name));
  if (qps_.size() >= info_.caps.max_qp)
    return fail(
        Status::error(Errc::no_resources, "%s: create_qp: %u QPs in use", name, info_.caps.max_qp));
  qp->qpn = alloc_qpn();
  qp->pdn = pdn;
  qp->send_cq = send_cq;
  qp->recv_cq = recv_cq;

  Result<BfRegister*> reg = Status();
  if (external) {
    uint8_t* base = reinterpret_cast<uint8_t*>(qp->reg);
    qp->reg = nullptr;
    reg = bind_external_register(*qp, base);
  } else {
    reg = bind_register(*qp);
  }
  if (!reg) return fail(reg.status());

  ++send_cq->qp_refs;
  ++recv_cq->qp_refs;
  // At least one record, so that wqe_at() stays defined for a QP without a send queue.
  qp->wqes.resize(std::clamp<uint32_t>(qp->sq.bb_count, 1, 16));
  qp->seen_sq_dbr = rc::load_sq_dbr(*qp);
  qp->seen_rq_dbr = rc::load_rq_dbr(*qp);

  mlx5dv_qp& dv = qp->view.dv;
  dv.dbrec = reinterpret_cast<__be32*>(qp->dbrec);
  dv.sq.buf = external ? qp->sq_host.buf : qp->sq.buf;
  dv.sq.wqe_cnt = qp->sq.bb_count;
  dv.sq.stride = 64;
  dv.rq.buf = external ? qp->rq_host.buf : qp->rq.buf;
  dv.rq.wqe_cnt = qp->rq.wqe_cnt;
  dv.rq.stride = qp->rq.stride;
  dv.bf.reg = external ? qp->reg->app_base : qp->reg->base;
  if (!external) dv.bf.size = kBfHalfBytes;
  qp->view.qpn = qp->qpn;
  qp->view.bf_shared = qp->reg->shared;
  if (!external) qp->view.wake = wake_view();
  qp->view.granted = qp->caps;

  QpObj* raw = qp.get();
  qp_by_num_[raw->qpn] = raw;
  slot_push(qps_, std::move(qp), &QpObj::slot);
  return raw;
}

// The first dedicated_bf_regs QPs get a register of their own; later ones share one.
Result<BfRegister*> Hca::bind_register(QpObj& qp) {
  BfRegister* reg = nullptr;
  if (!free_dedicated_.empty()) {
    reg = free_dedicated_.back();
    free_dedicated_.pop_back();
  } else {
    reg = shared_register_;
  }
  if (!reg)
    return Status::error(Errc::internal, "%s: create_qp: no doorbell register", info_.name.c_str());
  reg->qps.push_back(&qp);
  qp.reg = reg;
  return reg;
}

Result<BfRegister*> Hca::bind_external_register(QpObj& qp, uint8_t* app_base) {
  for (auto& r : registers_) {
    if (r->owned || r->app_base != app_base) continue;
    r->qps.push_back(&qp);
    r->shared = r->qps.size() > 1 || r.get() == shared_register_;
    if (r->shared)
      for (QpObj* other : r->qps) other->view.bf_shared = true;
    qp.reg = r.get();
    return r.get();
  }
  const uintptr_t addr = reinterpret_cast<uintptr_t>(app_base);
  uint8_t* page = reinterpret_cast<uint8_t*>(addr & ~(kUarPageBytes - 1));
  const size_t offset = addr & (kUarPageBytes - 1);
  auto it = std::find_if(external_pages_.begin(), external_pages_.end(),
                         [page](const ExternalUarPage& p) { return p.app == page; });
  if (it == external_pages_.end() || offset < kBfRegOffset ||
      (offset - kBfRegOffset) % kBfRegBytes != 0)
    return Status::error(Errc::invalid_argument,
                         "%s: create_qp: register %p is not a BlueFlame register of an attached "
                         "UAR page",
                         info_.name.c_str(), static_cast<void*>(app_base));
  auto reg = std::make_unique<BfRegister>();
  reg->base = it->device + offset;
  reg->app_base = app_base;
  reg->owned = false;
  reg->qps.push_back(&qp);
  qp.reg = reg.get();
  registers_.push_back(std::move(reg));
  return qp.reg;
}

void Hca::unbind_register(QpObj& qp) {
  BfRegister* reg = qp.reg;
  if (!reg) return;
  reg->qps.erase(std::remove(reg->qps.begin(), reg->qps.end(), &qp), reg->qps.end());
  if (reg->owned && reg != shared_register_ && reg->qps.empty()) free_dedicated_.push_back(reg);
  qp.reg = nullptr;
}

void Hca::destroy_qp(QpObj* qp) {
  std::lock_guard<std::mutex> lock(mu_);
  send_rung_datagrams_locked(*qp);
  detach_all_mcast_locked(*qp);
  forget_qp_locked(*qp);
  unbind_register(*qp);
  qp_by_num_.erase(qp->qpn);
  CqObj* scq = qp->send_cq;
  CqObj* rcq = qp->recv_cq;
  if (qp->type == hw::QpType::xrc_recv) {
    // Its SRQ is only the one its last message named: not counted.
    if (const auto it = xrcds_.find(qp->xrcdn); it != xrcds_.end()) --it->second;
  } else if (qp->srq) {
    --qp->srq->qp_refs;
  }
  std::free(qp->owned_buf);
  std::free(qp->owned_dbrec);
  std::free(qp->mirror_buf);
  slot_erase(qps_, qp, &QpObj::slot);
  --scq->qp_refs;
  --rcq->qp_refs;
  maybe_free_cq(scq);
  if (rcq != scq) maybe_free_cq(rcq);
}

void Hca::set_user_index(QpObj* qp, uint32_t user_index) {
  std::lock_guard<std::mutex> lock(mu_);
  qp->user_index = user_index & 0xffffff;
}

Status Hca::attach_uar_page(uint8_t* app_view, uint8_t* device_view) {
  RNICDV_TRY(check_owner("attach_uar_page"));
  const auto aligned = [](const uint8_t* p) {
    return p && (reinterpret_cast<uintptr_t>(p) & (kUarPageBytes - 1)) == 0;
  };
  if (!aligned(app_view) || !aligned(device_view))
    return Status::error(Errc::invalid_argument,
                         "%s: attach UAR page %p (device view %p): not page-aligned",
                         info_.name.c_str(), static_cast<void*>(app_view),
                         static_cast<void*>(device_view));
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const ExternalUarPage& p : external_pages_)
      if (p.app == app_view) return Status::ok();
    external_pages_.push_back(ExternalUarPage{app_view, device_view});
  }
  // Stores into the application's view wake the device thread; the same view as the
  // device's cannot be protected without blocking the device itself.
  if (!shared_.deterministic() && app_view != device_view) (void)uar_watch_.add(app_view);
  kick_if_sleeping();  // the next sleep protects the new page too
  return Status::ok();
}

void Hca::detach_uar_page(uint8_t* app_view) {
  uar_watch_.remove(app_view);
  std::lock_guard<std::mutex> lock(mu_);
  registers_.erase(std::remove_if(registers_.begin(), registers_.end(),
                                  [app_view](const std::unique_ptr<BfRegister>& r) {
                                    return !r->owned && r->qps.empty() &&
                                           r->app_base >= app_view &&
                                           r->app_base < app_view + kUarPageBytes;
                                  }),
                   registers_.end());
  external_pages_.erase(std::remove_if(external_pages_.begin(), external_pages_.end(),
                                       [app_view](const ExternalUarPage& p) {
                                         return p.app == app_view;
                                       }),
                        external_pages_.end());
  rung_pages_.erase(std::remove(rung_pages_.begin(), rung_pages_.end(), app_view),
                    rung_pages_.end());
}

}  // namespace rnicdv::sim
