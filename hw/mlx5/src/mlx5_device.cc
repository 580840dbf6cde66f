// SPDX-License-Identifier: BSD-3-Clause
#include "mlx5_device.h"

#include <endian.h>
#include <fcntl.h>
#include <infiniband/mlx5dv.h>

#include <cerrno>
#include <cstring>

#include "mlx5_async_events.h"
#include "mlx5_caps.h"
#include "mlx5_event_thread.h"
#include "mlx5_objects.h"
#include "mlx5_port.h"
#include "mlx5_qp.h"
#include "mlx5_verbs.h"

namespace rnicdv::hw::mlx5 {

namespace {

Status set_nonblocking(int fd, const std::string& what) {
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0) return verbs_failure(errno, what, "fcntl(F_GETFL) on the async fd");
  if (fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    return verbs_failure(errno, what, "fcntl(F_SETFL, O_NONBLOCK) on the async fd");
  }
  return Status::ok();
}

// The backend's own objects: a Pd or Cq from another backend is a caller error.
template <class Concrete, class Base>
Concrete* as_mlx5(Base& object) {
  return dynamic_cast<Concrete*>(&object);
}

}  // namespace

Result<std::shared_ptr<Mlx5Device>> Mlx5Device::create(ContextRef ctx, const std::string& name) {
  const std::string what = "open " + name;
  ibv_device_attr_ex attr;
  std::memset(&attr, 0, sizeof attr);
  if (int rc = ibv_query_device_ex(ctx.get(), nullptr, &attr); rc != 0) {
    return verbs_failure(rc, what, "ibv_query_device_ex");
  }
  // Direct verbs must work on this context: the driver depends on mlx5dv_init_obj.
  mlx5dv_context dv;
  std::memset(&dv, 0, sizeof dv);
  if (int rc = mlx5dv_query_device(ctx.get(), &dv); rc != 0) {
    return verbs_failure(rc, what, "mlx5dv_query_device");
  }

  auto core = std::make_shared<DeviceCore>();
  core->ctx = ctx;
  core->name = name;
  for (int port = 1; port <= attr.orig_attr.phys_port_cnt; ++port) {
    Result<PortAddressing> addressing =
        query_port_addressing(ctx.get(), static_cast<uint8_t>(port));
    if (!addressing) return addressing.status().prepend(what);
    core->ports.push_back(*addressing);
  }
  const PortAddressing* port1 = core->ports.empty() ? nullptr : &core->ports.front();
  core->caps = caps_from_attrs(attr.orig_attr, port1);
  // Packet pacing (ibv_modify_qp_rate_limit) where the device offers it for RC QPs.
  if (attr.packet_pacing_caps.supported_qpts & (1u << IBV_QPT_RC)) {
    core->caps.rate_limit_min_kbps = attr.packet_pacing_caps.qp_rate_limit_min;
    core->caps.rate_limit_max_kbps = attr.packet_pacing_caps.qp_rate_limit_max;
  }
  core->caps.max_inline_data = probe_max_inline(ctx.get());

  RNICDV_TRY(set_nonblocking(ctx->async_fd, what));
  core->events = std::make_shared<EventThread>(name);
  RNICDV_ASSIGN_OR_RETURN(core->async, AsyncEvents::create(ctx, core->events, name));

  std::shared_ptr<Mlx5Device> device(new Mlx5Device(core));
  DeviceInfo& info = device->info_;
  info.name = name;
  info.kind = "mlx5";
  info.transport = port1 ? "mlx5 " + port_transport_name(*port1) : "mlx5 (no ports)";
  info.node_guid = be64toh(attr.orig_attr.node_guid);
  if (port1 && port1->source_gid) {
    info.gid = port1->source_gid->gid;
    info.gid_index = static_cast<uint8_t>(port1->source_gid->index);
  }
  for (const PortAddressing& port : core->ports) {
    PortInfo p;
    if (port.source_gid) {
      p.gid = port.source_gid->gid;
      p.gid_index = static_cast<uint8_t>(port.source_gid->index);
    }
    info.ports.push_back(p);
  }
  // mlx5 remembers a send doorbell rung in RTR and executes it after RTS, and fetches no WQE
  // beyond the doorbell record (rdma-core commit 988f90bc):
  // the driver withholds both the DBR and the UAR write, in place.
  info.profile.fetches_beyond_dbr = false;
  info.profile.keeps_rtr_doorbell = true;
  info.caps = core->caps;
  device->cm_ = std::make_unique<cm::RdmaCmConnectionManager>(
      ctx.get(), info.gid.ip(), name, core->events);
  return device;
}

Result<std::unique_ptr<Pd>> Mlx5Device::alloc_pd() {
  return mlx5::create_pd(*core_);
}

Result<std::unique_ptr<Mr>> Mlx5Device::reg_mr(Pd& pd, void* addr, size_t length, uint32_t access) {
  auto* mlx5_pd = as_mlx5<Mlx5Pd>(pd);
  if (!mlx5_pd) {
    return Status(Errc::invalid_argument, info_.name + ": reg mr: the PD is not an mlx5 PD");
  }
  return register_mr(*core_, *mlx5_pd, addr, length, access);
}

Result<std::unique_ptr<Cq>> Mlx5Device::create_cq(uint32_t min_cqe) {
  return mlx5::create_cq(*core_, min_cqe);
}

Result<std::unique_ptr<CompletionChannel>> Mlx5Device::create_completion_channel() {
  return Mlx5CompletionChannel::create(*core_);
}

Result<std::unique_ptr<Cq>> Mlx5Device::create_evented_cq(uint32_t min_cqe,
                                                          CompletionChannel& channel) {
  auto* ch = as_mlx5<Mlx5CompletionChannel>(channel);
  if (!ch)
    return Status(Errc::invalid_argument,
                  core_->name + ": create cq: the completion channel is not this backend's");
  return mlx5::create_cq(*core_, min_cqe, ch->handle());
}

Result<std::unique_ptr<Qp>> Mlx5Device::create_typed_qp(Pd& pd, Cq& send_cq, Cq& recv_cq,
                                                        const QpCaps& caps, QpType type) {
  auto* mlx5_pd = as_mlx5<Mlx5Pd>(pd);
  auto* mlx5_send = as_mlx5<Mlx5Cq>(send_cq);
  auto* mlx5_recv = as_mlx5<Mlx5Cq>(recv_cq);
  if (!mlx5_pd || !mlx5_send || !mlx5_recv) {
    return Status(Errc::invalid_argument,
                  info_.name + ": create qp: the PD or a CQ is not an mlx5 object");
  }
  return create_rc_qp(core_, *mlx5_pd, *mlx5_send, *mlx5_recv, caps, nullptr, type);
}

Result<std::unique_ptr<Qp>> Mlx5Device::create_qp(Pd& pd, Cq& send_cq, Cq& recv_cq,
                                                  const QpCaps& caps) {
  return create_typed_qp(pd, send_cq, recv_cq, caps, QpType::rc);
}

Result<std::unique_ptr<Qp>> Mlx5Device::create_ud_qp(Pd& pd, Cq& send_cq, Cq& recv_cq,
                                                     const QpCaps& caps) {
  return create_typed_qp(pd, send_cq, recv_cq, caps, QpType::ud);
}

Result<std::unique_ptr<Qp>> Mlx5Device::create_uc_qp(Pd& pd, Cq& send_cq, Cq& recv_cq, Srq* srq,
                                                     const QpCaps& caps) {
  if (!srq) return create_typed_qp(pd, send_cq, recv_cq, caps, QpType::uc);
  auto* mlx5_pd = as_mlx5<Mlx5Pd>(pd);
  auto* mlx5_send = as_mlx5<Mlx5Cq>(send_cq);
  auto* mlx5_recv = as_mlx5<Mlx5Cq>(recv_cq);
  auto* mlx5_srq = as_mlx5<Mlx5Srq>(*srq);
  if (!mlx5_pd || !mlx5_send || !mlx5_recv || !mlx5_srq) {
    return Status(Errc::invalid_argument,
                  info_.name + ": create qp: the PD, a CQ or the SRQ is not an mlx5 object");
  }
  return create_rc_qp(core_, *mlx5_pd, *mlx5_send, *mlx5_recv, caps, mlx5_srq->handle(),
                      QpType::uc);
}

Result<uint64_t> Mlx5Device::read_port_counter(uint8_t port, const std::string& name) {
  return read_port_counter_file("/sys/class/infiniband", info_.name, port, name);
}

Result<std::unique_ptr<Ah>> Mlx5Device::create_ah(Pd& pd, const AhAttr& attr) {
  auto* mlx5_pd = as_mlx5<Mlx5Pd>(pd);
  if (!mlx5_pd)
    return Status(Errc::invalid_argument, info_.name + ": create ah: the PD is not an mlx5 object");
  RNICDV_ASSIGN_OR_RETURN(std::unique_ptr<Mlx5Ah> ah, Mlx5Ah::create(*core_, *mlx5_pd, attr));
  return std::unique_ptr<Ah>(std::move(ah));
}

Result<std::unique_ptr<Srq>> Mlx5Device::create_srq(Pd& pd, uint32_t max_wr, uint32_t max_sge) {
  auto* mlx5_pd = as_mlx5<Mlx5Pd>(pd);
  if (!mlx5_pd)
    return Status(Errc::invalid_argument, info_.name + ": create srq: the PD is not an mlx5 object");
  return Mlx5Srq::create(*core_, *mlx5_pd, max_wr, max_sge);
}

Result<std::unique_ptr<Qp>> Mlx5Device::create_qp_on_srq(Pd& pd, Cq& send_cq, Cq& recv_cq,
                                                         Srq& srq, const QpCaps& caps) {
  auto* mlx5_pd = as_mlx5<Mlx5Pd>(pd);
  auto* mlx5_send = as_mlx5<Mlx5Cq>(send_cq);
  auto* mlx5_recv = as_mlx5<Mlx5Cq>(recv_cq);
  auto* mlx5_srq = as_mlx5<Mlx5Srq>(srq);
  if (!mlx5_pd || !mlx5_send || !mlx5_recv || !mlx5_srq) {
    return Status(Errc::invalid_argument,
                  info_.name + ": create qp: the PD, a CQ or the SRQ is not an mlx5 object");
  }
  return create_rc_qp(core_, *mlx5_pd, *mlx5_send, *mlx5_recv, caps, mlx5_srq->handle());
}

int Mlx5Device::async_fd() const {
  return core_->async->fd();
}

bool Mlx5Device::next_async_event(AsyncEvent* out) {
  return core_->async->next(out);
}

uint64_t Mlx5Device::skipped_async_events() const {
  return core_->async->skipped();
}

}  // namespace rnicdv::hw::mlx5
