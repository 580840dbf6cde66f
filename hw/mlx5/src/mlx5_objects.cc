// SPDX-License-Identifier: BSD-3-Clause
#include "mlx5_objects.h"

#include <fcntl.h>

#include <infiniband/mlx5dv.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <string>

#include "mlx5_views.h"

namespace rnicdv::hw::mlx5 {

namespace {

constexpr uint32_t kKnownAccess =
    access::local_write | access::remote_write | access::remote_read | access::remote_atomic;

std::string mr_context(const DeviceCore& core, const void* addr, size_t length, uint32_t access) {
  char buf[96];
  std::snprintf(buf, sizeof buf, ": reg mr %p+%zu access 0x%x", addr, length, access);
  return core.name + buf;
}

}  // namespace

Result<std::unique_ptr<Pd>> create_pd(const DeviceCore& core) {
  const std::string what = core.name + ": alloc pd";
  auto handle = std::make_shared<PdHandle>();
  handle->ctx = core.ctx;
  errno = 0;
  handle->pd.reset(ibv_alloc_pd(core.ctx.get()));
  if (!handle->pd) return verbs_failure(errno, what, "ibv_alloc_pd");

  mlx5dv_pd dv_pd{};
  mlx5dv_obj obj{};
  obj.pd.in = handle->pd.get();
  obj.pd.out = &dv_pd;
  if (int rc = mlx5dv_init_obj(&obj, MLX5DV_OBJ_PD); rc != 0) {
    return verbs_failure(rc, what, "mlx5dv_init_obj(PD)");
  }
  return std::unique_ptr<Pd>(std::make_unique<Mlx5Pd>(std::move(handle), dv_pd.pdn));
}

Result<std::unique_ptr<Mr>> register_mr(const DeviceCore& core, Mlx5Pd& pd, void* addr,
                                        size_t length, uint32_t access) {
  const std::string what = mr_context(core, addr, length, access);
  if (pd.handle()->ctx.get() != core.ctx.get()) {
    return Status(Errc::invalid_argument, what + ": the PD belongs to another device");
  }
  if (!addr || length == 0) {
    return Status(Errc::invalid_argument, what + ": empty region");
  }
  if (access & ~kKnownAccess) {
    return Status(Errc::invalid_argument, what + ": unknown access bits");
  }
  // ibv_reg_mr(3): remote write and remote atomic require local write.
  if ((access & (access::remote_write | access::remote_atomic)) &&
      !(access & access::local_write)) {
    return Status(Errc::invalid_argument,
                  what + ": remote write or atomic access requires local write");
  }
  if (core.caps.max_mr_size != 0 && length > core.caps.max_mr_size) {
    return Status(Errc::invalid_argument, what + ": longer than the device's max_mr_size " +
                                              std::to_string(core.caps.max_mr_size));
  }
  errno = 0;
  MrPtr mr(ibv_reg_mr(pd.handle()->pd.get(), addr, length, static_cast<int>(access)));
  if (!mr) return verbs_failure(errno, what, "ibv_reg_mr");
  return std::unique_ptr<Mr>(std::make_unique<Mlx5Mr>(pd.handle(), std::move(mr)));
}

Result<std::unique_ptr<Cq>> create_cq(const DeviceCore& core, uint32_t min_cqe,
                                      std::shared_ptr<CompChannelHandle> channel) {
  const std::string what = core.name + ": create cq (min_cqe " + std::to_string(min_cqe) + ")";
  if (min_cqe == 0) return Status(Errc::invalid_argument, what + ": min_cqe must be at least 1");
  if ((core.caps.max_cqe != 0 && min_cqe > core.caps.max_cqe) || min_cqe > INT_MAX) {
    return Status(Errc::invalid_argument,
                  what + ": above the device's max_cqe " + std::to_string(core.caps.max_cqe));
  }
  auto handle = std::make_shared<CqHandle>();
  handle->ctx = core.ctx;
  handle->channel = std::move(channel);
  // min_cqe is passed as is: verbs guarantees room for that many completions, and libmlx5
  // sizes the ring to the next power of two above it (roundup_pow_of_two(cqe + 1)).
  errno = 0;
  handle->cq.reset(
      ibv_create_cq(core.ctx.get(), static_cast<int>(min_cqe), handle.get(),
                    handle->channel ? handle->channel->channel.get() : nullptr, 0));
  if (!handle->cq) return verbs_failure(errno, what, "ibv_create_cq");

  mlx5dv_cq dv_cq{};
  mlx5dv_obj obj{};
  obj.cq.in = handle->cq.get();
  obj.cq.out = &dv_cq;
  if (int rc = mlx5dv_init_obj(&obj, MLX5DV_OBJ_CQ); rc != 0) {
    return verbs_failure(rc, what, "mlx5dv_init_obj(CQ)");
  }
  char cq_name[32];
  std::snprintf(cq_name, sizeof cq_name, "cq 0x%x", dv_cq.cqn);
  RNICDV_TRY(check_cq_view(dv_cq, core.name + ": " + cq_name));
  if (dv_cq.cqe_cnt < min_cqe) {
    return Status(Errc::internal, core.name + ": " + cq_name + ": libmlx5 gave " +
                                      std::to_string(dv_cq.cqe_cnt) + " CQEs for " +
                                      std::to_string(min_cqe) + " requested");
  }
  handle->cqn = dv_cq.cqn;
  return std::unique_ptr<Cq>(std::make_unique<Mlx5Cq>(std::move(handle), dv_cq));
}

Result<std::unique_ptr<Mlx5CompletionChannel>> Mlx5CompletionChannel::create(
    const DeviceCore& core) {
  const std::string what = core.name + ": create completion channel";
  auto h = std::make_shared<CompChannelHandle>();
  h->ctx = core.ctx;
  errno = 0;
  h->channel.reset(ibv_create_comp_channel(core.ctx.get()));
  if (!h->channel) return verbs_failure(errno, what, "ibv_create_comp_channel");
  const int flags = fcntl(h->channel->fd, F_GETFL);
  if (flags < 0 || fcntl(h->channel->fd, F_SETFL, flags | O_NONBLOCK) < 0)
    return verbs_failure(errno, what, "fcntl(O_NONBLOCK) on the channel fd");
  return std::unique_ptr<Mlx5CompletionChannel>(new Mlx5CompletionChannel(std::move(h)));
}

bool Mlx5CompletionChannel::next_event(uint32_t* cqn) {
  ibv_cq* cq = nullptr;
  void* context = nullptr;
  if (ibv_get_cq_event(handle_->channel.get(), &cq, &context) != 0) return false;  // EAGAIN
  *cqn = static_cast<const CqHandle*>(context)->cqn;
  ibv_ack_cq_events(cq, 1);
  return true;
}

}  // namespace rnicdv::hw::mlx5
