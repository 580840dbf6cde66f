// SPDX-License-Identifier: BSD-3-Clause
#include "mlx5_qp.h"

#include <infiniband/mlx5dv.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "mlx5_async_events.h"
#include "mlx5_modify.h"
#include "mlx5_views.h"

namespace rnicdv::hw::mlx5 {

namespace {

std::string qp_name(uint32_t qpn) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "qp 0x%x", qpn);
  return buf;
}

std::string create_context(const DeviceCore& core, const QpCaps& caps) {
  char buf[160];
  std::snprintf(buf, sizeof buf,
                ": create qp (send_wr %u, recv_wr %u, send_sge %u, recv_sge %u, inline %u)",
                caps.max_send_wr, caps.max_recv_wr, caps.max_send_sge, caps.max_recv_sge,
                caps.max_inline_data);
  return core.name + buf;
}

Status check_caps(const DeviceCore& core, const QpCaps& caps, const std::string& what) {
  const DeviceCaps& dev = core.caps;
  auto too_big = [&](const char* name, uint32_t value, uint32_t limit) {
    return Status(Errc::invalid_argument, what + ": " + name + " " + std::to_string(value) +
                                              " above the device limit " + std::to_string(limit));
  };
  // max_send_wr == 0 is passed on: libmlx5 then lays out no send queue, as mlx5 allows.
  if (dev.max_qp_wr && caps.max_send_wr > dev.max_qp_wr) {
    return too_big("max_send_wr", caps.max_send_wr, dev.max_qp_wr);
  }
  if (dev.max_qp_wr && caps.max_recv_wr > dev.max_qp_wr) {
    return too_big("max_recv_wr", caps.max_recv_wr, dev.max_qp_wr);
  }
  if (dev.max_send_sge && caps.max_send_sge > dev.max_send_sge) {
    return too_big("max_send_sge", caps.max_send_sge, dev.max_send_sge);
  }
  if (dev.max_recv_sge && caps.max_recv_sge > dev.max_recv_sge) {
    return too_big("max_recv_sge", caps.max_recv_sge, dev.max_recv_sge);
  }
  // A zero limit means the probe could not run; libmlx5 then decides.
  if (dev.max_inline_data && caps.max_inline_data > dev.max_inline_data) {
    return too_big("max_inline_data", caps.max_inline_data, dev.max_inline_data);
  }
  return Status::ok();
}

ibv_qp* create_in(ibv_context* ctx, ibv_pd* pd, ibv_cq* send_cq, ibv_cq* recv_cq,
                  const QpCaps& caps, ibv_srq* srq, QpType type) {
  ibv_qp_init_attr_ex init;
  std::memset(&init, 0, sizeof init);
  init.qp_type = type == QpType::ud ? IBV_QPT_UD : type == QpType::uc ? IBV_QPT_UC : IBV_QPT_RC;
  init.send_cq = send_cq;
  init.recv_cq = recv_cq;
  init.cap.max_send_wr = caps.max_send_wr;
  init.cap.max_recv_wr = caps.max_recv_wr;
  init.cap.max_send_sge = caps.max_send_sge;
  init.cap.max_recv_sge = caps.max_recv_sge;
  init.cap.max_inline_data = caps.max_inline_data;
  if (srq) {
    init.srq = srq;
    init.cap.max_recv_wr = 0;
    init.cap.max_recv_sge = 0;
  }
  init.sq_sig_all = 0;  // the driver sets CQ_UPDATE per WQE
  init.comp_mask = IBV_QP_INIT_ATTR_PD;
  init.pd = pd;
  if (caps.block_self_multicast_loopback) {
    init.comp_mask |= IBV_QP_INIT_ATTR_CREATE_FLAGS;
    init.create_flags = IBV_QP_CREATE_BLOCK_SELF_MCAST_LB;
  }
  errno = 0;
  return ibv_create_qp_ex(ctx, &init);
}

}  // namespace

Result<std::unique_ptr<Qp>> create_rc_qp(std::shared_ptr<const DeviceCore> core, Mlx5Pd& pd,
                                         Mlx5Cq& send_cq, Mlx5Cq& recv_cq, const QpCaps& caps,
                                         std::shared_ptr<SrqHandle> srq, QpType type) {
  const std::string what = create_context(*core, caps);
  ibv_context* ctx = core->ctx.get();
  if (pd.handle()->ctx.get() != ctx || send_cq.handle()->ctx.get() != ctx ||
      recv_cq.handle()->ctx.get() != ctx) {
    return Status(Errc::invalid_argument, what + ": the PD or a CQ belongs to another device");
  }
  RNICDV_TRY(check_caps(*core, caps, what));

  std::unique_ptr<Mlx5Qp> qp(new Mlx5Qp());
  qp->core_ = core;
  qp->pd_ = pd.handle();
  qp->send_cq_ = send_cq.handle();
  qp->recv_cq_ = recv_cq.handle();
  qp->srq_ = srq;
  qp->type_ = type;
  ibv_srq* shared = srq ? srq->srq.get() : nullptr;
  if (srq && srq->ctx.get() != ctx)
    return Status(Errc::invalid_argument, what + ": the SRQ belongs to another device");
  ibv_cq* scq = send_cq.handle()->cq.get();
  ibv_cq* rcq = recv_cq.handle()->cq.get();

  // A thread domain of its own gives the QP a dedicated bfreg (libmlx5 verbs.c,
  // mlx5_alloc_td -> mlx5_attach_dedicated_bf; create_qp passes its index to the kernel).
  ibv_td_init_attr td_attr;
  std::memset(&td_attr, 0, sizeof td_attr);
  errno = 0;
  qp->thread_domain_.reset(ibv_alloc_td(ctx, &td_attr));
  if (!qp->thread_domain_) {
    qp->shared_bfreg_reason_ = "ibv_alloc_td: " + errno_text(errno);
  } else {
    ibv_parent_domain_init_attr pd_attr;
    std::memset(&pd_attr, 0, sizeof pd_attr);
    pd_attr.pd = pd.handle()->pd.get();
    pd_attr.td = qp->thread_domain_.get();
    errno = 0;
    qp->parent_domain_.reset(ibv_alloc_parent_domain(ctx, &pd_attr));
    if (!qp->parent_domain_) {
      qp->shared_bfreg_reason_ = "ibv_alloc_parent_domain: " + errno_text(errno);
    } else {
      qp->qp_.reset(create_in(ctx, qp->parent_domain_.get(), scq, rcq, caps, shared, type));
      if (!qp->qp_) {
        qp->shared_bfreg_reason_ = "ibv_create_qp_ex in a parent domain: " + errno_text(errno);
      }
    }
  }
  if (!qp->qp_) {
    // Fall back to the plain PD and a static, possibly shared, bfreg.
    qp->parent_domain_.reset();
    qp->thread_domain_.reset();
    qp->qp_.reset(create_in(ctx, pd.handle()->pd.get(), scq, rcq, caps, shared, type));
    if (!qp->qp_) return verbs_failure(errno, what, "ibv_create_qp_ex");
    qp->view_.bf_shared = true;
  }

  const uint32_t qpn = qp->qp_->qp_num;
  const std::string name = core->name + ": " + qp_name(qpn);
  qp->view_.qpn = qpn;

  mlx5dv_obj obj{};
  obj.qp.in = qp->qp_.get();
  obj.qp.out = &qp->view_.dv;
  qp->view_.dv.comp_mask = 0;  // no optional outputs requested
  if (int rc = mlx5dv_init_obj(&obj, MLX5DV_OBJ_QP); rc != 0) {
    return verbs_failure(rc, name, "mlx5dv_init_obj(QP)");
  }
  RNICDV_TRY(check_qp_view(qp->view_.dv, caps.max_recv_wr > 0, name, caps.max_send_wr > 0));

  // What was granted after rounding: libmlx5's query_qp reports its own send-side figures
  // (sq.max_post, sq.max_gs, max_inline_data) and the kernel's receive-side ones.
  ibv_qp_attr attr;
  ibv_qp_init_attr init;
  std::memset(&attr, 0, sizeof attr);
  std::memset(&init, 0, sizeof init);
  if (int rc = ibv_query_qp(qp->qp_.get(), &attr, IBV_QP_CAP, &init); rc != 0) {
    return verbs_failure(rc, name, "ibv_query_qp(CAP)");
  }
  qp->view_.granted.max_send_wr = init.cap.max_send_wr;
  qp->view_.granted.max_recv_wr = init.cap.max_recv_wr;
  qp->view_.granted.max_send_sge = init.cap.max_send_sge;
  qp->view_.granted.max_recv_sge = init.cap.max_recv_sge;
  qp->view_.granted.max_inline_data = init.cap.max_inline_data;
  return std::unique_ptr<Qp>(std::move(qp));
}

Mlx5Qp::~Mlx5Qp() {
  // Before the QP goes (ibv_destroy_qp waits for its async events to be acknowledged, which
  // the event thread does at once); the last notifier hands the async fd back.
  if (qp_) (void)core_->async->set_comm_est_notifier(view_.qpn, nullptr, nullptr);
}

bool Mlx5Qp::set_comm_est_notifier(void (*fn)(void* ctx), void* ctx) {
  return core_->async->set_comm_est_notifier(view_.qpn, fn, ctx).is_ok();
}

Status Mlx5Qp::modify(const QpAttr& attr, uint32_t mask) {
  std::lock_guard<std::mutex> lock(mu_);
  ModifyContext mc;
  mc.qpn = view_.qpn;
  mc.current = state_;
  mc.current_port = port_;
  mc.ports = core_->ports;
  mc.max_rd_atomic = core_->caps.max_qp_init_rd_atom;
  mc.max_dest_rd_atomic = core_->caps.max_qp_rd_atom;
  mc.type = type_;
  RNICDV_ASSIGN_OR_RETURN(VerbsModify request, translate_modify(attr, mask, mc));

  errno = 0;
  int rc = ibv_modify_qp(qp_.get(), &request.attr, request.mask);
  if (rc != 0) {
    if (rc < 0) rc = errno;  // a provider that follows the -1/errno convention
    char what[64];
    std::snprintf(what, sizeof what, "qp 0x%x: modify %s->%s", view_.qpn, qp_state_name(state_),
                  qp_state_name(request.target));
    return verbs_failure(rc, what, "ibv_modify_qp");
  }
  state_ = request.target;
  port_ = request.port;
  return Status::ok();
}

QpState Mlx5Qp::state() const {
  ibv_qp_attr attr;
  ibv_qp_init_attr init;
  std::memset(&attr, 0, sizeof attr);
  std::memset(&init, 0, sizeof init);
  if (ibv_query_qp(qp_.get(), &attr, IBV_QP_STATE, &init) == 0) {
    return from_ibv_state(attr.qp_state);
  }
  return last_set_state();
}

Status Mlx5Qp::set_rate_limit(const RateLimit& limit) {
  ibv_qp_rate_limit_attr attr;
  std::memset(&attr, 0, sizeof attr);
  attr.rate_limit = limit.kbps;
  attr.max_burst_sz = limit.max_burst_bytes;
  attr.typical_pkt_sz = limit.typical_pkt_bytes;
  const int rc = ibv_modify_qp_rate_limit(qp_.get(), &attr);
  if (rc == 0) return Status::ok();
  const Errc code = rc == EOPNOTSUPP || rc == ENOSYS ? Errc::unsupported : Errc::invalid_argument;
  return Status::error(code, "%s: qp %#x: set_rate_limit (%u kb/s, burst %u bytes): %s",
                       core_->name.c_str(), view_.qpn, limit.kbps, limit.max_burst_bytes,
                       std::strerror(rc));
}

namespace {

Errc errc_for_mcast(int rc) {
  switch (rc) {
    case ENOMEM:
    case ENOSPC:
      return Errc::no_resources;
    case EOPNOTSUPP:
    case ENOSYS:
      return Errc::unsupported;
    default:
      return Errc::invalid_argument;
  }
}

}  // namespace

// ibv_attach_mcast or ibv_detach_mcast (LID 0: RoCE has none), its errno named.
Status Mlx5Qp::multicast_call(const Gid& mgid, bool attach) {
  ibv_gid gid;
  std::memcpy(gid.raw, mgid.raw, sizeof gid.raw);
  const int rc =
      attach ? ibv_attach_mcast(qp_.get(), &gid, 0) : ibv_detach_mcast(qp_.get(), &gid, 0);
  if (rc == 0) return Status::ok();
  return Status::error(errc_for_mcast(rc), "%s: qp %#x: %s %s: %s", core_->name.c_str(),
                       view_.qpn, attach ? "attach_multicast" : "detach_multicast",
                       mgid.to_string().c_str(), std::strerror(rc));
}

Status Mlx5Qp::attach_multicast(const Gid& mgid) { return multicast_call(mgid, true); }

Status Mlx5Qp::detach_multicast(const Gid& mgid) { return multicast_call(mgid, false); }

QpState Mlx5Qp::last_set_state() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_;
}

Result<std::unique_ptr<Mlx5Srq>> Mlx5Srq::create(const DeviceCore& core, Mlx5Pd& pd,
                                                 uint32_t max_wr, uint32_t max_sge) {
  const std::string what = core.name + ": create srq (max_wr " + std::to_string(max_wr) +
                           ", max_sge " + std::to_string(max_sge) + ")";
  if (pd.handle()->ctx.get() != core.ctx.get())
    return Status(Errc::invalid_argument, what + ": the PD belongs to another device");
  auto h = std::make_shared<SrqHandle>();
  h->ctx = core.ctx;
  h->pd = pd.handle();
  ibv_srq_init_attr attr;
  std::memset(&attr, 0, sizeof attr);
  attr.srq_context = h.get();
  attr.attr.max_wr = max_wr;
  attr.attr.max_sge = max_sge;
  errno = 0;
  h->srq.reset(ibv_create_srq(pd.handle()->pd.get(), &attr));
  if (!h->srq) return verbs_failure(errno, what, "ibv_create_srq");
  mlx5dv_srq dv{};
  mlx5dv_obj obj{};
  obj.srq.in = h->srq.get();
  obj.srq.out = &dv;
  if (int rc = mlx5dv_init_obj(&obj, MLX5DV_OBJ_SRQ); rc != 0)
    return verbs_failure(rc, what, "mlx5dv_init_obj(SRQ)");
  h->srqn = dv.srqn;
  std::unique_ptr<Mlx5Srq> srq(new Mlx5Srq());
  srq->handle_ = std::move(h);
  srq->view_.dv = dv;
  // libmlx5's ring: tail + 1 WQEs (the head starts at 0, the tail at the last index).
  srq->view_.wqe_cnt = dv.tail + 1;
  return srq;
}

Status Mlx5Srq::arm_limit(uint32_t limit) {
  ibv_srq_attr attr;
  std::memset(&attr, 0, sizeof attr);
  attr.srq_limit = limit;
  if (int rc = ibv_modify_srq(handle_->srq.get(), &attr, IBV_SRQ_LIMIT); rc != 0)
    return verbs_failure(rc, "srq " + std::to_string(handle_->srqn) + ": arm limit",
                         "ibv_modify_srq");
  return Status::ok();
}

}  // namespace rnicdv::hw::mlx5

namespace rnicdv::hw::mlx5 {

Result<std::unique_ptr<Mlx5Ah>> Mlx5Ah::create(const DeviceCore& core, Mlx5Pd& pd,
                                               const AhAttr& attr) {
  const std::string what = core.name + ": create ah to " + attr.remote_gid.to_string();
  if (pd.handle()->ctx.get() != core.ctx.get())
    return Status(Errc::invalid_argument, what + ": the PD belongs to another device");
  if (attr.port < 1 || attr.port > core.ports.size())
    return Status(Errc::invalid_argument, what + ": port " + std::to_string(attr.port) +
                                              ": the device has " +
                                              std::to_string(core.ports.size()));
  const PortAddressing& port = core.ports[attr.port - 1u];
  if (!port.source_gid)
    return Status(Errc::unsupported, what + ": port " + std::to_string(attr.port) +
                                         " has no usable source GID (no IP address on its "
                                         "interface?)");
  if (attr.flow_label > 0xfffff || attr.sl > 15)
    return Status(Errc::invalid_argument,
                  what + ": flow label " + std::to_string(attr.flow_label) + " (20 bits) or SL " +
                      std::to_string(attr.sl) + " (0..15) out of range");
  ibv_ah_attr a;
  std::memset(&a, 0, sizeof a);
  a.port_num = attr.port;
  a.sl = attr.sl;
  a.is_global = 1;
  std::memcpy(a.grh.dgid.raw, attr.remote_gid.raw, sizeof a.grh.dgid.raw);
  a.grh.sgid_index = static_cast<uint8_t>(port.source_gid->index);
  a.grh.hop_limit = attr.hop_limit ? attr.hop_limit : 64;
  a.grh.traffic_class = attr.traffic_class;
  a.grh.flow_label = attr.flow_label;
  std::unique_ptr<Mlx5Ah> ah(new Mlx5Ah());
  ah->pd_ = pd.handle();
  errno = 0;
  ah->ah_ = ibv_create_ah(pd.handle()->pd.get(), &a);
  if (!ah->ah_) return verbs_failure(errno, what, "ibv_create_ah");
  mlx5dv_ah dv{};
  mlx5dv_obj obj{};
  obj.ah.in = ah->ah_;
  obj.ah.out = &dv;
  if (int rc = mlx5dv_init_obj(&obj, MLX5DV_OBJ_AH); rc != 0 || !dv.av)
    return verbs_failure(rc ? rc : EINVAL, what, "mlx5dv_init_obj(AH)");
  ah->av_ = *dv.av;
  return ah;
}

Mlx5Ah::~Mlx5Ah() {
  if (ah_ && ibv_destroy_ah(ah_) != 0) note_teardown_failure();
}

}  // namespace rnicdv::hw::mlx5
