// SPDX-License-Identifier: BSD-3-Clause
// Shared receive queues: CREATE_SRQ, CREATE_XSRQ (basic and XRC), MODIFY_SRQ, QUERY_SRQ and
// DESTROY_SRQ with mlx5's driver data. libmlx5 lays the ring out (mlx5_alloc_srq_buf: WQEs linked by their next segments,
// and a wait queue after the ones it hands out) and posts without a command; the kernel's
// part, reproduced here, is sizing the ring from max_wr and max_sge, checking that the
// memory is the application's, and the limit event.
#include <errno.h>

#include <infiniband/verbs.h>
#include <rdma/ib_user_verbs.h>
#include <rdma/mlx5-abi.h>

#include <algorithm>

#include "command.h"
#include "external.h"
#include "handles.h"

namespace rnicdv::uverbs {

namespace {

static_assert(sizeof(ib_uverbs_create_srq) == 32);
static_assert(sizeof(ib_uverbs_create_srq_resp) == 16);
static_assert(sizeof(mlx5_ib_create_srq) == 32);

uint32_t round_pow2(uint64_t v) {
  uint64_t p = 1;
  while (p < v) p <<= 1;
  return static_cast<uint32_t>(p);
}

// The WQE geometry the kernel derives (mlx5_ib create_srq_user), which libmlx5 derived the
// same way when it laid the ring out.
struct SrqGeometry {
  uint32_t wqe_cnt = 0;
  uint32_t stride = 0;
  uint32_t max_sge = 0;  // what the stride holds after the next segment
};

SrqGeometry srq_geometry(uint32_t max_wr, uint32_t max_sge) {
  SrqGeometry g;
  g.wqe_cnt = round_pow2(uint64_t{max_wr} + 1);
  g.stride = std::max<uint32_t>(32, round_pow2(16 + uint64_t{max_sge} * 16));
  g.max_sge = (g.stride - 16) / 16;
  return g;
}

}  // namespace

namespace {

// What CREATE_SRQ and CREATE_XSRQ share: the checks, the ring libmlx5 placed, the object.
// `xrc` names the XRC domain and CQ handles of an XRC SRQ; `uidx` is libmlx5's user index
// for it.
struct XrcPart {
  uint32_t xrcd_handle = 0;
  uint32_t cq_handle = 0;
  uint32_t uidx = 0xffffff;
};

int create_srq_common(Cmd& c, uint64_t user_handle, uint32_t pd_handle, uint32_t max_wr,
                      uint32_t max_sge, uint32_t srq_limit, const XrcPart* xrc) {
  Context& ctx = c.ctx;
  const auto m = c.drv_as<mlx5_ib_create_srq>();
  const hw::DeviceCaps& caps = ctx.dev->dev->info().caps;
  if (max_wr == 0 || max_wr >= caps.max_qp_wr)
    return c.error(EINVAL, "SRQ on PD %u: max_wr %u (1..%u)", pd_handle, max_wr,
                   caps.max_qp_wr - 1);
  if (max_sge == 0 || max_sge > caps.max_recv_sge)
    return c.error(EINVAL, "SRQ on PD %u: max_sge %u (1..%u)", pd_handle, max_sge,
                   caps.max_recv_sge);
  if (m.flags & MLX5_SRQ_FLAG_SIGNATURE)
    return c.error(EOPNOTSUPP, "SRQ on PD %u: WQE signatures (MLX5_SRQ_FLAG_SIGNATURE)",
                   pd_handle);
  if (m.flags) return c.error(EINVAL, "SRQ on PD %u: mlx5 SRQ flags %#x", pd_handle, m.flags);
  auto pd = ctx.pds.find(pd_handle);
  if (pd == ctx.pds.end()) return c.error(EINVAL, "SRQ on PD %u: no such PD", pd_handle);
  XrcdObject* xrcd = nullptr;
  CqObject* cq = nullptr;
  if (xrc) {
    auto x = ctx.xrcds.find(xrc->xrcd_handle);
    if (x == ctx.xrcds.end())
      return c.error(EINVAL, "XRC SRQ on PD %u: XRC domain handle %u: no such domain", pd_handle,
                     xrc->xrcd_handle);
    auto q = ctx.cqs.find(xrc->cq_handle);
    if (q == ctx.cqs.end())
      return c.error(EINVAL, "XRC SRQ on PD %u: CQ handle %u: no such CQ", pd_handle,
                     xrc->cq_handle);
    xrcd = &x->second;
    cq = &q->second;
  }
  const SrqGeometry g = srq_geometry(max_wr, max_sge);
  if (srq_limit >= g.wqe_cnt)
    return c.error(EINVAL, "SRQ on PD %u: limit %u above the SRQ's %u WQEs", pd_handle,
                   srq_limit, g.wqe_cnt - 1);
  const size_t bytes = size_t{g.wqe_cnt} * g.stride;
  if (!user_range_ok(m.buf_addr, bytes, true) || !user_range_ok(m.db_addr, 4, true))
    return c.error(EFAULT,
                   "SRQ on PD %u: ring %#llx (%zu bytes) or doorbell record %#llx is not writable",
                   pd_handle, static_cast<unsigned long long>(m.buf_addr), bytes,
                   static_cast<unsigned long long>(m.db_addr));
  sim::ExternalSrqMemory mem;
  mem.buf = reinterpret_cast<uint8_t*>(m.buf_addr);
  mem.wqe_cnt = g.wqe_cnt;
  mem.stride = g.stride;
  mem.max_sge = g.max_sge;
  mem.dbrec = reinterpret_cast<uint32_t*>(m.db_addr);
  Result<std::unique_ptr<hw::Srq>> srq =
      xrc ? sim::create_xrc_srq_external(*ctx.dev->dev, *xrcd->shared->xrcd, *pd->second.pd,
                                         *cq->cq, mem, xrc->uidx)
          : sim::create_srq_external(*ctx.dev->dev, *pd->second.pd, mem);
  if (!srq) return sim_error(c, "SRQ on PD " + std::to_string(pd_handle), srq.status());
  if (srq_limit) {
    Status st = srq.value()->arm_limit(srq_limit);
    if (!st) return sim_error(c, "SRQ on PD " + std::to_string(pd_handle), st);
  }

  const uint32_t h = new_handle(ctx);
  SrqObject& obj = ctx.srqs[h];
  obj.srq = std::move(srq.value());
  obj.user_handle = user_handle;
  obj.key = next_owner_key();
  obj.pd = pd_handle;
  obj.max_wr = g.wqe_cnt - 1;
  obj.max_sge = g.max_sge;
  obj.limit = srq_limit;
  ++pd->second.users;
  if (xrc) {
    obj.xrc = true;
    obj.xrcd = xrc->xrcd_handle;
    obj.cq = xrc->cq_handle;
    ++xrcd->users;
    ++cq->users;
  }

  ib_uverbs_create_srq_resp r{};
  r.srq_handle = h;
  r.max_wr = obj.max_wr;
  r.max_sge = obj.max_sge;
  r.srqn = obj.srq->view().dv.srqn;
  mlx5_ib_create_srq_resp mr{};
  mr.srqn = r.srqn;
  if (int rc = c.reply(&r, sizeof r, &mr, sizeof mr); rc != 0) {
    --pd->second.users;
    if (xrc) {
      --xrcd->users;
      --cq->users;
    }
    ctx.srqs.erase(h);
    return rc;
  }
  return 0;
}

}  // namespace

int create_srq(Cmd& c) {
  const auto req = c.core_as<ib_uverbs_create_srq>();
  return create_srq_common(c, req.user_handle, req.pd_handle, req.max_wr, req.max_sge,
                           req.srq_limit, nullptr);
}

// CREATE_XSRQ: ibv_create_srq_ex's command, for a basic SRQ (as CREATE_SRQ) or an XRC one.
// Tag-matching SRQs are refused by name.
int create_xsrq(Cmd& c) {
  const auto req = c.core_as<ib_uverbs_create_xsrq>();
  if (req.srq_type == IBV_SRQT_BASIC)
    return create_srq_common(c, req.user_handle, req.pd_handle, req.max_wr, req.max_sge,
                             req.srq_limit, nullptr);
  if (req.srq_type == IBV_SRQT_TM)
    return c.error(EOPNOTSUPP, "SRQ on PD %u: tag matching (IBV_SRQT_TM)", req.pd_handle);
  if (req.srq_type != IBV_SRQT_XRC)
    return c.error(EINVAL, "SRQ on PD %u: SRQ type %u", req.pd_handle, req.srq_type);
  const auto m = c.drv_as<mlx5_ib_create_srq>();
  XrcPart xrc;
  xrc.xrcd_handle = req.xrcd_handle;
  xrc.cq_handle = req.cq_handle;
  xrc.uidx = m.uidx & 0xffffff;
  return create_srq_common(c, req.user_handle, req.pd_handle, req.max_wr, req.max_sge,
                           req.srq_limit, &xrc);
}

int modify_srq(Cmd& c) {
  const auto req = c.core_as<ib_uverbs_modify_srq>();
  auto it = c.ctx.srqs.find(req.srq_handle);
  if (it == c.ctx.srqs.end()) return c.error(EINVAL, "SRQ handle %u: no such SRQ", req.srq_handle);
  SrqObject& obj = it->second;
  const uint32_t srqn = obj.srq->view().dv.srqn;
  if (req.attr_mask & ~uint32_t{IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT})
    return c.error(EINVAL, "SRQ %#x: unknown attribute bits %#x", srqn,
                   req.attr_mask & ~uint32_t{IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT});
  if (req.attr_mask & IBV_SRQ_MAX_WR)
    return c.error(EINVAL, "SRQ %#x: resizing (max_wr %u) is not supported", srqn, req.max_wr);
  if (req.attr_mask & IBV_SRQ_LIMIT) {
    if (req.srq_limit > obj.max_wr)
      return c.error(EINVAL, "SRQ %#x: limit %u above its %u WQEs", srqn, req.srq_limit,
                     obj.max_wr);
    Status st = obj.srq->arm_limit(req.srq_limit);
    if (!st) return sim_error(c, "SRQ " + hex_number(srqn), st);
    obj.limit = req.srq_limit;
  }
  return 0;
}

int query_srq(Cmd& c) {
  const auto req = c.core_as<ib_uverbs_query_srq>();
  auto it = c.ctx.srqs.find(req.srq_handle);
  if (it == c.ctx.srqs.end()) return c.error(EINVAL, "SRQ handle %u: no such SRQ", req.srq_handle);
  ib_uverbs_query_srq_resp r{};
  r.max_wr = it->second.max_wr;
  r.max_sge = it->second.max_sge;
  r.srq_limit = it->second.limit;
  return c.reply(&r, sizeof r);
}

int destroy_srq(Cmd& c) {
  Context& ctx = c.ctx;
  const auto req = c.core_as<ib_uverbs_destroy_srq>();
  auto it = ctx.srqs.find(req.srq_handle);
  if (it == ctx.srqs.end()) return c.error(EINVAL, "SRQ handle %u: no such SRQ", req.srq_handle);
  SrqObject& obj = it->second;
  if (obj.users)
    return c.error(EBUSY, "SRQ %#x is used by %u QPs", obj.srq->view().dv.srqn, obj.users);
  if (ctx.async) ctx.async->purge(obj.key);
  ib_uverbs_destroy_srq_resp r{};
  r.events_reported = obj.async_read->load();
  --ctx.pds[obj.pd].users;
  if (obj.xrc) {
    --ctx.xrcds[obj.xrcd].users;
    --ctx.cqs[obj.cq].users;
  }
  ctx.srqs.erase(it);
  return c.reply(&r, sizeof r);
}

}  // namespace rnicdv::uverbs
