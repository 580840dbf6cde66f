// SPDX-License-Identifier: BSD-3-Clause
// PD, MR and CQ of the mlx5 backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

#include "mlx5_core.h"
#include "mlx5_verbs.h"
#include "rnicdv/hw/device.h"
#include "rnicdv/status.h"

namespace rnicdv::hw::mlx5 {

class Mlx5Pd final : public Pd {
 public:
  Mlx5Pd(std::shared_ptr<PdHandle> handle, uint32_t pdn) : handle_(std::move(handle)), pdn_(pdn) {}
  uint32_t pdn() const override { return pdn_; }
  const std::shared_ptr<PdHandle>& handle() const { return handle_; }

 private:
  std::shared_ptr<PdHandle> handle_;
  uint32_t pdn_;
};

class Mlx5Mr final : public Mr {
 public:
  Mlx5Mr(std::shared_ptr<PdHandle> pd, MrPtr mr) : pd_(std::move(pd)), mr_(std::move(mr)) {}
  uint32_t lkey() const override { return mr_->lkey; }
  uint32_t rkey() const override { return mr_->rkey; }
  void* addr() const override { return mr_->addr; }
  size_t length() const override { return mr_->length; }

 private:
  std::shared_ptr<PdHandle> pd_;  // declared first: the MR is deregistered before the PD goes
  MrPtr mr_;
};

// The CQ is handed to the driver through mlx5dv_init_obj, which marks it DV-owned in libmlx5
// (MLX5_CQ_FLAGS_DV_OWNED): libmlx5 then no longer removes the CQEs of a QP that is destroyed
// or reset (__mlx5_cq_clean returns early). Such CQEs stay in the ring and the driver's poll
// must drop CQEs whose QPN it no longer knows.
class Mlx5Cq final : public Cq {
 public:
  Mlx5Cq(std::shared_ptr<CqHandle> handle, const mlx5dv_cq& dv) : handle_(std::move(handle)) {
    view_.dv = dv;
  }
  const CqView& view() const override { return view_; }
  const std::shared_ptr<CqHandle>& handle() const { return handle_; }

 private:
  std::shared_ptr<CqHandle> handle_;
  CqView view_;
};

Result<std::unique_ptr<Pd>> create_pd(const DeviceCore& core);
// `access` is a set of access::* bits (ibv_access_flags values); local read is implicit.
Result<std::unique_ptr<Mr>> register_mr(const DeviceCore& core, Mlx5Pd& pd, void* addr,
                                        size_t length, uint32_t access);
// `channel`: null, or the completion channel the CQ's events go to.
Result<std::unique_ptr<Cq>> create_cq(const DeviceCore& core, uint32_t min_cqe,
                                      std::shared_ptr<CompChannelHandle> channel = nullptr);

// The verbs completion channel, its fd non-blocking. next_event takes one event with
// ibv_get_cq_event and acknowledges it to the kernel at once: the driver keeps its own count
// of events taken and acknowledged, and never holds a pointer to a CQ that an event names.
class Mlx5CompletionChannel final : public CompletionChannel {
 public:
  static Result<std::unique_ptr<Mlx5CompletionChannel>> create(const DeviceCore& core);
  int fd() const override { return handle_->channel->fd; }
  bool next_event(uint32_t* cqn) override;
  void forget(uint32_t) override {}  // the kernel drops a destroyed CQ's pending events
  const std::shared_ptr<CompChannelHandle>& handle() const { return handle_; }

 private:
  explicit Mlx5CompletionChannel(std::shared_ptr<CompChannelHandle> h) : handle_(std::move(h)) {}
  std::shared_ptr<CompChannelHandle> handle_;
};

}  // namespace rnicdv::hw::mlx5
