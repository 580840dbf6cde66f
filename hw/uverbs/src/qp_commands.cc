// SPDX-License-Identifier: BSD-3-Clause
// QPs: CREATE_QP (and its extended form), MODIFY_QP (and its extended form), QUERY_QP and
// DESTROY_QP, with mlx5's driver data. libmlx5 lays out the QP buffer (RQ then SQ) and its
// doorbell record; the shim assigns the BlueFlame register, as the kernel's static scheme does.
#include <errno.h>
#include <string.h>

#include <infiniband/verbs.h>
#include <rdma/ib_user_verbs.h>
#include <rdma/mlx5-abi.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "command.h"
#include "handles.h"
#include "shim.h"

namespace rnicdv::uverbs {

static_assert(sizeof(ib_uverbs_create_qp) == 56);
static_assert(sizeof(ib_uverbs_modify_qp) == 112);
static_assert(sizeof(ib_uverbs_query_qp_resp) == 128);

namespace {

// ---- QPs ----
// libmlx5's bfs[] index of register k (0 or 1) of UAR page p, and back.
uint32_t bfreg_of(uint32_t page, uint32_t k) { return page * kBfRegsPerUar + k; }

// As the kernel's static allocation: the last `low latency` registers go to one QP each,
// later QPs share the medium ones (least used first). Register 0 is never handed out: it
// is the doorbell-only register libmlx5 keeps for itself.
uint32_t pick_bfreg(Context& ctx) {
  const uint32_t pages = ctx.static_pages;
  const uint32_t low_latency = 4;
  std::vector<uint32_t> regs;  // in the kernel's bfregn order
  for (uint32_t n = 0; n < pages * kNonFpBfRegsPerUar; ++n)
    regs.push_back(bfreg_of(n / kNonFpBfRegsPerUar, n % kNonFpBfRegsPerUar));
  const uint32_t first_low = static_cast<uint32_t>(regs.size()) > low_latency + 1
                                 ? static_cast<uint32_t>(regs.size()) - low_latency
                                 : static_cast<uint32_t>(regs.size());
  for (uint32_t n = first_low; n < regs.size(); ++n)
    if (ctx.bfreg_users[regs[n]] == 0) return regs[n];
  uint32_t best = regs.size() > 1 ? regs[1] : 0;
  for (uint32_t n = 1; n < first_low; ++n)
    if (ctx.bfreg_users[regs[n]] < ctx.bfreg_users[best]) best = regs[n];
  return best;
}

// A new QP object of `ctx` for `qp`, created by `req`: its handle in *h.
QpObject& add_qp_object(Context& ctx, std::unique_ptr<hw::Qp> qp, const ib_uverbs_create_qp& req,
                        uint32_t* h) {
  *h = new_handle(ctx);
  QpObject& obj = ctx.qps[*h];
  obj.qp = std::move(qp);
  obj.user_handle = req.user_handle;
  obj.key = next_owner_key();
  obj.qpn = obj.qp->view().qpn;
  obj.pd = req.pd_handle;
  obj.sq_sig_all = req.sq_sig_all;
  return obj;
}

// The response to a CREATE_QP of either form.
int reply_create_qp(Cmd& c, bool extended, const ib_uverbs_create_qp_resp& r,
                    const mlx5_ib_create_qp_resp& mr) {
  if (extended) {
    ib_uverbs_ex_create_qp_resp rx{};
    rx.base = r;
    rx.response_length = static_cast<uint32_t>(std::min(sizeof rx, c.resp_core_len));
    return c.reply(&rx, sizeof rx, &mr, sizeof mr);
  }
  return c.reply(&r, sizeof r, &mr, sizeof mr);
}

// An XRC target (IBV_QPT_XRC_RECV): the request's PD handle is its XRC domain's. As mlx5's
// kernel driver, the shim ignores the buffer libmlx5 laid out for it (a target has no queue)
// and gives it no register of its own.
int create_xrc_target(Cmd& c, const ib_uverbs_create_qp& req, bool extended) {
  Context& ctx = c.ctx;
  auto x = ctx.xrcds.find(req.pd_handle);
  if (x == ctx.xrcds.end())
    return c.error(EINVAL, "XRC target QP: XRC domain handle %u: no such domain", req.pd_handle);
  if (req.is_srq)
    return c.error(EINVAL, "XRC target QP on XRC domain %u: an SRQ (its requests name theirs)",
                   x->second.shared->xrcd->xrcdn());
  Result<std::unique_ptr<hw::Qp>> qp = ctx.dev->dev->create_xrc_recv_qp(*x->second.shared->xrcd);
  if (!qp)
    return sim_error(c, "XRC target QP on XRC domain " + std::to_string(req.pd_handle),
                     qp.status());
  uint32_t h = 0;
  QpObject& obj = add_qp_object(ctx, std::move(qp.value()), req, &h);
  obj.type = hw::QpType::xrc_recv;
  ++x->second.users;

  ib_uverbs_create_qp_resp r{};
  r.qp_handle = h;
  r.qpn = obj.qpn;
  mlx5_ib_create_qp_resp mr{};
  const auto m = c.drv_as<mlx5_ib_create_qp>();
  // No register: a dynamic one is reported as none, a static one as register 0, the
  // doorbell-only register libmlx5 keeps (a target never rings).
  mr.bfreg_index = (m.flags & MLX5_QP_FLAG_BFREG_INDEX) ? UINT32_MAX : 0;
  if (int rc = reply_create_qp(c, extended, r, mr); rc != 0) {
    --x->second.users;
    ctx.qps.erase(h);
    return rc;
  }
  return 0;
}

// CREATE_QP, in its first form or the extended one: `req` holds the fields both share, and
// `extended` says which response to write.
int create_qp_common(Cmd& c, const ib_uverbs_create_qp& req_in, bool extended,
                     bool block_self_mcast = false) {
  Context& ctx = c.ctx;
  const auto m = c.drv_as<mlx5_ib_create_qp>();
  if (req_in.qp_type == IBV_QPT_XRC_RECV) return create_xrc_target(c, req_in, extended);
  if (req_in.qp_type != IBV_QPT_RC && req_in.qp_type != IBV_QPT_UC &&
      req_in.qp_type != IBV_QPT_UD && req_in.qp_type != IBV_QPT_XRC_SEND)
    return c.error(EOPNOTSUPP,
                   "QP on PD %u: QP type %u (the simulated HCA runs RC, UC, UD and XRC only)",
                   req_in.pd_handle, req_in.qp_type);
  ib_uverbs_create_qp req = req_in;
  const hw::QpType type = req.qp_type == IBV_QPT_UD         ? hw::QpType::ud
                          : req.qp_type == IBV_QPT_UC       ? hw::QpType::uc
                          : req.qp_type == IBV_QPT_XRC_SEND ? hw::QpType::xrc_send
                                                            : hw::QpType::rc;
  if (type == hw::QpType::xrc_send) {
    // An initiator receives nothing: libibverbs names no receive CQ; its send CQ stands in.
    if (req.is_srq)
      return c.error(EINVAL, "XRC initiator QP on PD %u: an SRQ (it receives nothing)",
                     req.pd_handle);
    req.recv_cq_handle = req.send_cq_handle;
    req.max_recv_wr = 0;
    req.max_recv_sge = 0;
  }
  if (type == hw::QpType::ud && req.is_srq)
    return c.error(EOPNOTSUPP, "QP on PD %u: a UD QP on a shared receive queue", req.pd_handle);
  if (m.flags & ~(MLX5_QP_FLAG_SCATTER_CQE | MLX5_QP_FLAG_ALLOW_SCATTER_CQE |
                  MLX5_QP_FLAG_BFREG_INDEX))
    return c.error(EOPNOTSUPP, "QP on PD %u: mlx5 QP flags %#x", req.pd_handle, m.flags);
  auto pd = ctx.pds.find(req.pd_handle);
  auto scq = ctx.cqs.find(req.send_cq_handle);
  auto rcq = ctx.cqs.find(req.recv_cq_handle);
  if (pd == ctx.pds.end()) return c.error(EINVAL, "QP on PD %u: no such PD", req.pd_handle);
  if (scq == ctx.cqs.end() || rcq == ctx.cqs.end())
    return c.error(EINVAL, "QP on PD %u: send CQ handle %u or receive CQ handle %u: no such CQ",
                   req.pd_handle, req.send_cq_handle, req.recv_cq_handle);
  SrqObject* srq = nullptr;
  if (req.is_srq) {
    auto s = ctx.srqs.find(req.srq_handle);
    if (s == ctx.srqs.end())
      return c.error(EINVAL, "QP on PD %u: SRQ handle %u: no such SRQ", req.pd_handle,
                     req.srq_handle);
    // As the kernel's create_qp: an XRC SRQ serves its domain's targets only.
    if (s->second.xrc)
      return c.error(EINVAL, "QP on PD %u: SRQ handle %u is an XRC SRQ", req.pd_handle,
                     req.srq_handle);
    srq = &s->second;
  }
  if (!m.buf_addr || !m.db_addr)
    return c.error(EINVAL, "QP on PD %u: no buffer or doorbell record", req.pd_handle);
  if (m.rq_wqe_count && (m.rq_wqe_shift < 4 || m.rq_wqe_shift > 12))
    return c.error(EINVAL, "QP on PD %u: receive WQE stride 2^%u", req.pd_handle, m.rq_wqe_shift);

  // A thread domain's QP names its dynamic register (the kernel's bfregn_to_uar_index with
  // dyn_bfreg); otherwise the register is assigned here.
  const bool dynamic = (m.flags & MLX5_QP_FLAG_BFREG_INDEX) != 0;
  if (dynamic && m.bfreg_index >= kDynBfRegs)
    return c.error(EINVAL, "QP on PD %u: dynamic BlueFlame register %u of %u", req.pd_handle,
                   m.bfreg_index, kDynBfRegs);
  const uint32_t bfreg = dynamic ? (ctx.static_pages + m.bfreg_index / kNonFpBfRegsPerUar) *
                                           kBfRegsPerUar +
                                       m.bfreg_index % kNonFpBfRegsPerUar
                                 : pick_bfreg(ctx);
  const uint32_t page = bfreg / kBfRegsPerUar;
  if (!ctx.uar_pages[page]) adopt_unseen_uar_mappings_locked(ctx);
  if (!ctx.uar_pages[page])
    return c.error(EINVAL, "QP on PD %u: UAR page %u of BlueFlame register %u is not mapped",
                   req.pd_handle, page, bfreg);

  sim::ExternalQpMemory mem;
  auto* buf = reinterpret_cast<uint8_t*>(m.buf_addr);
  const size_t rq_bytes = m.rq_wqe_count ? size_t{m.rq_wqe_count} << m.rq_wqe_shift : 0;
  const size_t sq_bytes = size_t{m.sq_wqe_count} * 64;  // MLX5_SEND_WQE_BB
  if (!user_range_ok(m.buf_addr, rq_bytes + sq_bytes, true) || !user_range_ok(m.db_addr, 8, true))
    return c.error(EFAULT,
                   "QP on PD %u: buffer %#llx (%zu bytes) or doorbell record %#llx is not writable",
                   req.pd_handle, static_cast<unsigned long long>(m.buf_addr), rq_bytes + sq_bytes,
                   static_cast<unsigned long long>(m.db_addr));
  // A QP without a receive queue (max_recv_wr 0, or an SRQ's) gives the device none: a ring of
  // 0 entries, so a receive doorbell record stored for it takes nothing.
  mem.rq_buf = m.rq_wqe_count ? buf : nullptr;
  mem.rq_wqe_cnt = m.rq_wqe_count;
  mem.rq_stride = m.rq_wqe_count ? 1u << m.rq_wqe_shift : 0;
  mem.sq_buf = buf + rq_bytes;
  mem.sq_wqe_cnt = m.sq_wqe_count;
  mem.dbrec = reinterpret_cast<uint32_t*>(m.db_addr);
  mem.bf_reg = ctx.uar_pages[page] + 0x800 + (bfreg % kBfRegsPerUar) * kBfRegSize;
  mem.bf_size = bfreg == 0 ? 0 : kBfRegSize / 2;
  mem.user_index = m.uidx & 0xffffff;
  mem.type = type;
  mem.block_self_mcast_loopback = block_self_mcast;
  mem.granted.max_send_wr = req.max_send_wr;
  mem.granted.max_recv_wr = req.max_recv_wr;
  mem.granted.max_send_sge = req.max_send_sge;
  mem.granted.max_recv_sge = req.max_recv_sge;
  mem.granted.max_inline_data = req.max_inline_data;
  if (srq) {
    mem.srq = srq->srq.get();
    mem.granted.max_recv_wr = 0;
    mem.granted.max_recv_sge = 0;
  }
  Result<std::unique_ptr<hw::Qp>> qp = sim::create_qp_external(
      *ctx.dev->dev, *pd->second.pd, *scq->second.cq, *rcq->second.cq, mem);
  if (!qp) return sim_error(c, "QP on PD " + std::to_string(req.pd_handle), qp.status());

  uint32_t h = 0;
  QpObject& obj = add_qp_object(ctx, std::move(qp.value()), req, &h);
  obj.send_cq = req.send_cq_handle;
  obj.recv_cq = req.recv_cq_handle;
  obj.has_srq = srq != nullptr;
  obj.srq = req.srq_handle;
  obj.bfreg = bfreg;
  obj.max_send_wr = req.max_send_wr;
  // What the receive ring libmlx5 laid out holds, as the kernel reports it (mlx5_ib_query_qp:
  // the ring's WQE count, and the data segments one stride has room for); libmlx5 refuses
  // receives beyond those.
  obj.max_recv_wr = srq ? 0 : m.rq_wqe_count;
  obj.max_send_sge = req.max_send_sge;
  obj.max_recv_sge = srq || !m.rq_wqe_count ? 0 : (1u << m.rq_wqe_shift) / 16;
  obj.max_inline = req.max_inline_data;
  obj.type = type;
  ++ctx.bfreg_users[bfreg];
  ++pd->second.users;
  ++scq->second.users;
  ++rcq->second.users;
  if (srq) ++srq->users;

  ib_uverbs_create_qp_resp r{};
  r.qp_handle = h;
  r.qpn = obj.qpn;
  r.max_send_wr = obj.max_send_wr;
  r.max_recv_wr = obj.max_recv_wr;
  r.max_send_sge = obj.max_send_sge;
  r.max_recv_sge = obj.max_recv_sge;
  r.max_inline_data = req.max_inline_data;
  mlx5_ib_create_qp_resp mr{};
  mr.bfreg_index = dynamic ? UINT32_MAX : bfreg;  // the kernel's MLX5_IB_INVALID_BFREG
  if (int rc = reply_create_qp(c, extended, r, mr); rc != 0) {
    // Destroyed again, as DESTROY_QP would; no event of it can be queued yet.
    --ctx.bfreg_users[bfreg];
    --pd->second.users;
    --scq->second.users;
    --rcq->second.users;
    if (srq) --srq->users;
    ctx.qps.erase(h);
    return rc;
  }
  return 0;
}

}  // namespace

int create_qp(Cmd& c) { return create_qp_common(c, c.core_as<ib_uverbs_create_qp>(), false); }

// The extended CREATE_QP, which libmlx5 sends when the application gives create flags, a TSO
// header size, an indirection table or an RX hash: none of them has a meaning for an RC QP of
// the model, so each is refused by name; the rest is the first form's request.
int create_qp_ex(Cmd& c) {
  const auto x = c.core_as<ib_uverbs_ex_create_qp>();
  if (x.comp_mask & IB_UVERBS_CREATE_QP_MASK_IND_TABLE)
    return c.error(EOPNOTSUPP, "QP on PD %u: receive work queue indirection table %u (RSS QPs)",
                   x.pd_handle, x.rwq_ind_tbl_handle);
  if (x.comp_mask & ~static_cast<uint32_t>(IB_UVERBS_CREATE_QP_SUP_COMP_MASK))
    return c.error(EINVAL, "QP on PD %u: unknown comp_mask bits %#x", x.pd_handle, x.comp_mask);
  // A UD QP may block its own multicast datagrams from coming back to it (mckey -l). Every
  // other flag is refused by name.
  uint32_t flags = x.create_flags;
  const bool block_self_mcast =
      x.qp_type == IBV_QPT_UD && (flags & IBV_QP_CREATE_BLOCK_SELF_MCAST_LB) != 0;
  if (x.qp_type == IBV_QPT_UD) flags &= ~static_cast<uint32_t>(IBV_QP_CREATE_BLOCK_SELF_MCAST_LB);
  if (flags)
    return c.error(EOPNOTSUPP, "QP on PD %u: create flags %#x (the simulated HCA takes none%s)",
                   x.pd_handle, flags,
                   x.qp_type == IBV_QPT_UD ? " but multicast loopback blocking" : "");
  ib_uverbs_create_qp req{};
  req.user_handle = x.user_handle;
  req.pd_handle = x.pd_handle;
  req.send_cq_handle = x.send_cq_handle;
  req.recv_cq_handle = x.recv_cq_handle;
  req.srq_handle = x.srq_handle;
  req.max_send_wr = x.max_send_wr;
  req.max_recv_wr = x.max_recv_wr;
  req.max_send_sge = x.max_send_sge;
  req.max_recv_sge = x.max_recv_sge;
  req.max_inline_data = x.max_inline_data;
  req.sq_sig_all = x.sq_sig_all;
  req.qp_type = x.qp_type;
  req.is_srq = x.is_srq;
  return create_qp_common(c, req, true, block_self_mcast);
}

namespace {

// IBV_QP_* attribute bits and the model's qp_attr bits.
int translate_modify(const Cmd& c, const QpObject& obj, const ib_uverbs_modify_qp& req,
                     hw::QpAttr* attr, uint32_t* mask) {
  // As the kernel's uverbs (modify_qp_mask) does before the transition is checked: an XRC
  // initiator's responder depths and RNR timer, and an XRC target's requester depth and retry
  // counts, are dropped (perftest sets RC's whole set on both).
  uint32_t m = req.attr_mask;
  if (obj.type == hw::QpType::xrc_send)
    m &= ~static_cast<uint32_t>(IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  if (obj.type == hw::QpType::xrc_recv)
    m &= ~static_cast<uint32_t>(IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY);
  constexpr uint32_t kKnown =
      IBV_QP_STATE | IBV_QP_CUR_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY | IBV_QP_ACCESS_FLAGS |
      IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY | IBV_QP_AV | IBV_QP_PATH_MTU |
      IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_RQ_PSN |
      IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_ALT_PATH | IBV_QP_MIN_RNR_TIMER | IBV_QP_SQ_PSN |
      IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_PATH_MIG_STATE | IBV_QP_CAP | IBV_QP_DEST_QPN;
  if (m & ~kKnown)
    return c.error(EINVAL, "QP %#x: unknown attribute bits %#x", obj.qpn, m & ~kKnown);
  const bool ud = obj.type == hw::QpType::ud;
  if ((m & IBV_QP_QKEY) && !ud)
    return c.error(EINVAL, "QP %#x: a Q_Key on a connected (%s) QP", obj.qpn,
                   obj.type == hw::QpType::uc ? "UC" : "RC");
  static constexpr std::pair<uint32_t, const char*> kConnectedOnly[] = {
      {IBV_QP_ACCESS_FLAGS, "IBV_QP_ACCESS_FLAGS"},
      {IBV_QP_AV, "IBV_QP_AV"},
      {IBV_QP_PATH_MTU, "IBV_QP_PATH_MTU"},
      {IBV_QP_TIMEOUT, "IBV_QP_TIMEOUT"},
      {IBV_QP_RETRY_CNT, "IBV_QP_RETRY_CNT"},
      {IBV_QP_RNR_RETRY, "IBV_QP_RNR_RETRY"},
      {IBV_QP_RQ_PSN, "IBV_QP_RQ_PSN"},
      {IBV_QP_MAX_QP_RD_ATOMIC, "IBV_QP_MAX_QP_RD_ATOMIC"},
      {IBV_QP_MIN_RNR_TIMER, "IBV_QP_MIN_RNR_TIMER"},
      {IBV_QP_MAX_DEST_RD_ATOMIC, "IBV_QP_MAX_DEST_RD_ATOMIC"},
      {IBV_QP_DEST_QPN, "IBV_QP_DEST_QPN"},
  };
  if (ud) {
    std::string named;
    for (const auto& [bit, name] : kConnectedOnly)
      if (m & bit) named += std::string(named.empty() ? "" : ", ") + name;
    if (!named.empty())
      return c.error(EINVAL, "QP %#x: %s: attributes of connected QPs, not UD", obj.qpn,
                     named.c_str());
  }
  if (m & (IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE))
    return c.error(EOPNOTSUPP, "QP %#x: alternate paths (automatic path migration)", obj.qpn);
  if (m & IBV_QP_CAP) return c.error(EINVAL, "QP %#x: resizing the queues", obj.qpn);
  if ((m & IBV_QP_CUR_STATE) &&
      req.cur_qp_state != static_cast<uint8_t>(obj.qp->state()))
    return c.error(EINVAL, "QP %#x: current state %u given, the QP is in %s", obj.qpn,
                   req.cur_qp_state, hw::qp_state_name(obj.qp->state()));
  *attr = obj.attr;
  *mask = 0;
  if (m & IBV_QP_STATE) {
    if (req.qp_state > IBV_QPS_ERR)
      return c.error(EINVAL, "QP %#x: state %u", obj.qpn, req.qp_state);
    attr->state = static_cast<hw::QpState>(req.qp_state);
    *mask |= hw::qp_attr::state;
  }
  if (m & IBV_QP_ACCESS_FLAGS) {
    attr->access_flags = req.qp_access_flags & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                                IBV_ACCESS_REMOTE_ATOMIC);
    *mask |= hw::qp_attr::access_flags;
  }
  if (m & (IBV_QP_PKEY_INDEX | IBV_QP_PORT)) {
    if (m & IBV_QP_PKEY_INDEX) attr->pkey_index = req.pkey_index;
    if (m & IBV_QP_PORT) attr->port_num = req.port_num;
    *mask |= hw::qp_attr::port;
  }
  if (m & IBV_QP_AV) {
    if (!req.dest.is_global)
      return c.error(EINVAL, "QP %#x: RoCE needs a GRH (is_global) in the address vector", obj.qpn);
    // The source GID is of the QP's port: the one this request names, or its last.
    const uint32_t port = (m & IBV_QP_PORT) ? req.port_num : obj.attr.port_num;
    const hw::IpAddress own = port_address(c.ctx.dev->dev->info(), port);
    if (const GidRefusal* no = source_gid_refusal(req.dest.sgid_index, own))
      return c.error(no->err, "QP %#x: source GID index %u %s", obj.qpn, req.dest.sgid_index,
                     no->reason);
    std::memcpy(attr->remote_gid.raw, req.dest.dgid, 16);
    if (attr->remote_gid.ip().is_v4() != own.is_v4())
      return c.error(EOPNOTSUPP,
                     "QP %#x: destination GID %s is %s, and the device's address %s is not (RoCE "
                     "v2 carries one IP version end to end)",
                     obj.qpn, attr->remote_gid.to_string().c_str(),
                     attr->remote_gid.ip().is_v4() ? "IPv4-mapped" : "IPv6",
                     own.to_string().c_str());
    attr->traffic_class = req.dest.traffic_class;
    attr->hop_limit = req.dest.hop_limit;
    // 20 bits, as mlx5 stores it (UCX passes ~0 for "any"). On the fabric's IPv4 path it is
    // kept and read back; a ConnectX would make it the UDP source port.
    attr->flow_label = req.dest.flow_label & 0xFFFFF;
    attr->sl = req.dest.sl;
    *mask |= hw::qp_attr::av;
  }
  if (m & IBV_QP_PATH_MTU) {
    if (req.path_mtu < IBV_MTU_256 || req.path_mtu > IBV_MTU_4096)
      return c.error(EINVAL, "QP %#x: path MTU code %u", obj.qpn, req.path_mtu);
    attr->path_mtu = static_cast<hw::Mtu>(req.path_mtu);
    *mask |= hw::qp_attr::path_mtu;
  }
  if (m & IBV_QP_TIMEOUT) attr->timeout = req.timeout, *mask |= hw::qp_attr::timeout;
  if (m & IBV_QP_RETRY_CNT) attr->retry_cnt = req.retry_cnt, *mask |= hw::qp_attr::retry_cnt;
  if (m & IBV_QP_RNR_RETRY) attr->rnr_retry = req.rnr_retry, *mask |= hw::qp_attr::rnr_retry;
  if (m & IBV_QP_RQ_PSN) attr->rq_psn = req.rq_psn, *mask |= hw::qp_attr::rq_psn;
  if (m & IBV_QP_SQ_PSN) attr->sq_psn = req.sq_psn, *mask |= hw::qp_attr::sq_psn;
  if (m & IBV_QP_MAX_QP_RD_ATOMIC)
    attr->max_rd_atomic = req.max_rd_atomic, *mask |= hw::qp_attr::max_rd_atomic;
  if (m & IBV_QP_MAX_DEST_RD_ATOMIC)
    attr->max_dest_rd_atomic = req.max_dest_rd_atomic, *mask |= hw::qp_attr::max_dest_rd_atomic;
  if (m & IBV_QP_MIN_RNR_TIMER)
    attr->min_rnr_timer = req.min_rnr_timer, *mask |= hw::qp_attr::min_rnr_timer;
  if (m & IBV_QP_DEST_QPN) attr->dest_qpn = req.dest_qp_num, *mask |= hw::qp_attr::dest_qpn;
  if (m & IBV_QP_QKEY) attr->qkey = req.qkey, *mask |= hw::qp_attr::qkey;
  return 0;
}

int modify_qp_common(Cmd& c, const ib_uverbs_modify_qp& req) {
  auto it = c.ctx.qps.find(req.qp_handle);
  if (it == c.ctx.qps.end()) return c.error(EINVAL, "QP handle %u: no such QP", req.qp_handle);
  QpObject& obj = it->second;
  hw::QpAttr attr;
  uint32_t mask = 0;
  if (int rc = translate_modify(c, obj, req, &attr, &mask); rc != 0) return rc;
  Status st = obj.qp->modify(attr, mask);
  if (!st) return sim_error(c, "QP " + hex_number(obj.qpn), st);
  obj.attr = attr;
  if ((mask & hw::qp_attr::state) && attr.state == hw::QpState::reset)
    obj.attr = hw::QpAttr{};
  return 0;
}

}  // namespace

int modify_qp(Cmd& c) { return modify_qp_common(c, c.core_as<ib_uverbs_modify_qp>()); }

int modify_qp_ex(Cmd& c) {
  const auto req = c.core_as<ib_uverbs_ex_modify_qp>();
  if (req.base.attr_mask & IBV_QP_RATE_LIMIT) {
    // ibv_modify_qp_rate_limit: libmlx5 sends the rate alone, with the burst in its driver
    // data (mlx5_ib_modify_qp's burst_info).
    if (req.base.attr_mask & ~static_cast<uint32_t>(IBV_QP_RATE_LIMIT))
      return c.error(EINVAL, "QP handle %u: a rate limit with other attributes (mask %#x)",
                     req.base.qp_handle, req.base.attr_mask);
    auto it = c.ctx.qps.find(req.base.qp_handle);
    if (it == c.ctx.qps.end())
      return c.error(EINVAL, "QP handle %u: no such QP", req.base.qp_handle);
    const auto drv = c.drv_as<mlx5_ib_modify_qp>();
    hw::RateLimit limit;
    limit.kbps = req.rate_limit;
    limit.max_burst_bytes = drv.burst_info.max_burst_sz;
    limit.typical_pkt_bytes = drv.burst_info.typical_pkt_sz;
    Status st = it->second.qp->set_rate_limit(limit);
    if (!st) return sim_error(c, "QP " + hex_number(it->second.qpn), st);
  } else if (int rc = modify_qp_common(c, req.base); rc != 0) {
    return rc;
  }
  ib_uverbs_ex_modify_qp_resp r{};
  r.response_length = static_cast<uint32_t>(std::min(sizeof r, c.resp_core_len));
  return c.reply(&r, sizeof r);
}

int query_qp(Cmd& c) {
  const auto req = c.core_as<ib_uverbs_query_qp>();
  auto it = c.ctx.qps.find(req.qp_handle);
  if (it == c.ctx.qps.end()) return c.error(EINVAL, "QP handle %u: no such QP", req.qp_handle);
  const QpObject& obj = it->second;
  const hw::QpAttr& a = obj.attr;
  ib_uverbs_query_qp_resp r{};
  if (obj.type != hw::QpType::ud) {
    std::memcpy(r.dest.dgid, a.remote_gid.raw, 16);
    r.dest.is_global = 1;
    r.dest.hop_limit = a.hop_limit;
    r.dest.traffic_class = a.traffic_class;
    r.dest.flow_label = a.flow_label;
    r.dest.sl = a.sl;
    r.dest.sgid_index =
        static_cast<uint8_t>(own_gid_index(port_address(c.ctx.dev->dev->info(), a.port_num)));
    r.dest.port_num = a.port_num;
  }
  r.qkey = a.qkey;
  r.max_send_wr = obj.max_send_wr;
  r.max_recv_wr = obj.max_recv_wr;
  r.max_send_sge = obj.max_send_sge;
  r.max_recv_sge = obj.max_recv_sge;
  r.max_inline_data = obj.max_inline;
  r.rq_psn = a.rq_psn;
  r.sq_psn = a.sq_psn;
  r.dest_qp_num = a.dest_qpn;
  r.qp_access_flags = a.access_flags;
  r.pkey_index = a.pkey_index;
  r.qp_state = static_cast<uint8_t>(obj.qp->state());
  r.cur_qp_state = r.qp_state;
  r.path_mtu = static_cast<uint8_t>(a.path_mtu);
  r.max_rd_atomic = a.max_rd_atomic;
  r.max_dest_rd_atomic = a.max_dest_rd_atomic;
  r.min_rnr_timer = a.min_rnr_timer;
  r.port_num = a.port_num;
  r.timeout = a.timeout;
  r.retry_cnt = a.retry_cnt;
  r.rnr_retry = a.rnr_retry;
  r.sq_sig_all = obj.sq_sig_all;
  return c.reply(&r, sizeof r);
}

namespace {

// ATTACH_MCAST and DETACH_MCAST share their request's layout.
static_assert(sizeof(ib_uverbs_attach_mcast) == sizeof(ib_uverbs_detach_mcast));

int mcast_command(Cmd& c, bool attach) {
  const auto req = c.core_as<ib_uverbs_attach_mcast>();
  auto it = c.ctx.qps.find(req.qp_handle);
  if (it == c.ctx.qps.end())
    return c.error(EINVAL, "QP handle %u: %s: no such QP", req.qp_handle,
                   attach ? "attach_mcast" : "detach_mcast");
  QpObject& obj = it->second;
  std::array<uint8_t, 16> gid;
  std::memcpy(gid.data(), req.gid, gid.size());
  auto known = std::find(obj.mcast.begin(), obj.mcast.end(), gid);
  hw::Gid mgid;
  std::memcpy(mgid.raw, req.gid, sizeof mgid.raw);
  const std::string what = "QP " + hex_number(obj.qpn);
  if (attach) {
    if (known != obj.mcast.end()) return 0;  // as the kernel: attached already
    if (Status st = obj.qp->attach_multicast(mgid); !st) return sim_error(c, what, st);
    obj.mcast.push_back(gid);
    return 0;
  }
  if (known == obj.mcast.end())
    return c.error(EINVAL, "QP %#x: detach_mcast %s: it is not attached to that group", obj.qpn,
                   mgid.to_string().c_str());
  if (Status st = obj.qp->detach_multicast(mgid); !st) return sim_error(c, what, st);
  obj.mcast.erase(known);
  return 0;
}

}  // namespace

int attach_mcast(Cmd& c) { return mcast_command(c, true); }
int detach_mcast(Cmd& c) { return mcast_command(c, false); }

int destroy_qp(Cmd& c) {
  Context& ctx = c.ctx;
  const auto req = c.core_as<ib_uverbs_destroy_qp>();
  auto it = ctx.qps.find(req.qp_handle);
  if (it == ctx.qps.end()) return c.error(EINVAL, "QP handle %u: no such QP", req.qp_handle);
  QpObject& obj = it->second;
  if (ctx.async) ctx.async->purge(obj.key);
  ib_uverbs_destroy_qp_resp r{};
  r.events_reported = obj.async_read->load();
  if (obj.type == hw::QpType::xrc_recv) {
    // A target holds its domain only (create_xrc_target).
    --ctx.xrcds[obj.pd].users;
    ctx.qps.erase(it);
    return c.reply(&r, sizeof r);
  }
  --ctx.bfreg_users[obj.bfreg];
  --ctx.pds[obj.pd].users;
  --ctx.cqs[obj.send_cq].users;
  --ctx.cqs[obj.recv_cq].users;
  if (obj.has_srq) --ctx.srqs[obj.srq].users;
  ctx.qps.erase(it);
  return c.reply(&r, sizeof r);
}

}  // namespace rnicdv::uverbs
