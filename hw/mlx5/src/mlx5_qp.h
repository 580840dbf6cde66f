// SPDX-License-Identifier: BSD-3-Clause
// RC and UD QPs, and address handles, of the mlx5 backend.
//
// The QP is created in a parent domain with its own thread domain when libmlx5 allows it
// (ibv_alloc_td + ibv_alloc_parent_domain): libmlx5 then gives the QP a dedicated BlueFlame
// register (mlx5_attach_dedicated_bf, a dynamic bfreg with no lock), so the driver may copy
// whole WQEs to it without serialising against other QPs. When that fails (no dynamic bfregs
// left, an old kernel, a provider without thread domains) the QP is created in the plain PD,
// gets one of the context's static bfregs, and QpView::bf_shared is set: libmlx5 may hand the
// same register to other QPs (providers/mlx5/verbs.c, the bfreg allocation).
//
// Moving the QP to RESET makes libmlx5 zero both doorbell record words (mlx5_modify_qp); the
// driver must restart its producer counters from zero as well.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "mlx5_core.h"
#include "mlx5_objects.h"
#include "mlx5_verbs.h"
#include "rnicdv/hw/device.h"
#include "rnicdv/status.h"

namespace rnicdv::hw::mlx5 {

class Mlx5Qp final : public Qp {
 public:
  ~Mlx5Qp() override;
  const QpView& view() const override { return view_; }
  Status modify(const QpAttr& attr, uint32_t mask) override;
  // The device's view (ibv_query_qp): the hardware may have moved the QP to SQE or ERR on its
  // own. Falls back to the last state set through modify() if the query fails.
  QpState state() const override;
  // ibv_modify_qp_rate_limit: the device's packet pacing (EOPNOTSUPP without it).
  Status set_rate_limit(const RateLimit& limit) override;
  // ibv_attach_mcast and ibv_detach_mcast (LID 0: RoCE has none).
  Status attach_multicast(const Gid& mgid) override;
  Status detach_multicast(const Gid& mgid) override;
  // COMM_EST is learnt by reading the context's async fd: while a QP has a notifier, the
  // device's event thread reads it and calls the notifier there (mlx5_async_events.h).
  // False if the thread could not take the fd (the event then reaches the driver only
  // through next_async_event).
  bool set_comm_est_notifier(void (*fn)(void* ctx), void* ctx) override;

  // The state last set through modify(), without asking the device.
  QpState last_set_state() const;
  // Why the QP has no register of its own (empty when it has one).
  const std::string& shared_bfreg_reason() const { return shared_bfreg_reason_; }

 private:
  friend Result<std::unique_ptr<Qp>> create_rc_qp(std::shared_ptr<const DeviceCore> core,
                                                  Mlx5Pd& pd, Mlx5Cq& send_cq, Mlx5Cq& recv_cq,
                                                  const QpCaps& caps,
                                                  std::shared_ptr<SrqHandle> srq, QpType type);
  Mlx5Qp() = default;
  Status multicast_call(const Gid& mgid, bool attach);

  // Declaration order is destruction order reversed: the QP goes first, then its parent
  // domain, then the thread domain, then the CQs and PD it used, then the context.
  std::shared_ptr<const DeviceCore> core_;
  std::shared_ptr<PdHandle> pd_;
  std::shared_ptr<CqHandle> send_cq_;
  std::shared_ptr<CqHandle> recv_cq_;
  std::shared_ptr<SrqHandle> srq_;  // null without a shared receive queue
  TdPtr thread_domain_;
  PdPtr parent_domain_;
  QpPtr qp_;

  QpView view_;
  std::string shared_bfreg_reason_;

  mutable std::mutex mu_;  // serialises modify(); guards the two fields below
  QpState state_ = QpState::reset;
  uint8_t port_ = 0;  // set by RESET->INIT
  QpType type_ = QpType::rc;
};

// Creates an RC QP (or, with `type`, a UD one) in RESET, on `srq` if given. Errors name the
// device and the sizes.
Result<std::unique_ptr<Qp>> create_rc_qp(std::shared_ptr<const DeviceCore> core, Mlx5Pd& pd,
                                         Mlx5Cq& send_cq, Mlx5Cq& recv_cq, const QpCaps& caps,
                                         std::shared_ptr<SrqHandle> srq = nullptr,
                                         QpType type = QpType::rc);

// An address handle (ibv_create_ah, whose address vector mlx5dv_init_obj exposes: the one
// libmlx5 copies into a UD WQE, the destination MAC resolved by the kernel).
class Mlx5Ah final : public Ah {
 public:
  static Result<std::unique_ptr<Mlx5Ah>> create(const DeviceCore& core, Mlx5Pd& pd,
                                                const AhAttr& attr);
  ~Mlx5Ah() override;
  const mlx5_wqe_av& av() const override { return av_; }

 private:
  Mlx5Ah() = default;
  std::shared_ptr<PdHandle> pd_;
  ibv_ah* ah_ = nullptr;
  mlx5_wqe_av av_{};
};

// A shared receive queue (ibv_create_srq, seen through mlx5dv_init_obj).
class Mlx5Srq final : public Srq {
 public:
  static Result<std::unique_ptr<Mlx5Srq>> create(const DeviceCore& core, Mlx5Pd& pd,
                                                  uint32_t max_wr, uint32_t max_sge);
  const SrqView& view() const override { return view_; }
  Status arm_limit(uint32_t limit) override;
  const std::shared_ptr<SrqHandle>& handle() const { return handle_; }

 private:
  Mlx5Srq() = default;
  std::shared_ptr<SrqHandle> handle_;
  SrqView view_;
};

}  // namespace rnicdv::hw::mlx5
