// SPDX-License-Identifier: BSD-3-Clause
// The objects sim::Device hands out (hw::Pd, hw::Mr, hw::Cq, hw::Qp), and the internal
// creation paths for queues in memory the device did not allocate (external.h).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "external.h"
#include "hca.h"
#include "rnicdv/hw/device.h"
#include "rnicdv/sim/sim.h"

namespace rnicdv::sim {

// In a child of fork() a handle's destructor leaves the device alone: the objects are the
// parent's (Hca::forked_away).
class SimPd final : public hw::Pd {
 public:
  SimPd(std::shared_ptr<Hca> hca, uint32_t pdn) : hca_(std::move(hca)), pdn_(pdn) {}
  ~SimPd() override {
    if (!hca_->forked_away()) hca_->dealloc_pd(pdn_);
  }
  uint32_t pdn() const override { return pdn_; }
  const Hca* hca() const { return hca_.get(); }

 private:
  std::shared_ptr<Hca> hca_;
  uint32_t pdn_;
};

class SimMr final : public hw::Mr {
 public:
  SimMr(std::shared_ptr<Hca> hca, uint32_t key, void* addr, size_t length)
      : hca_(std::move(hca)), key_(key), addr_(addr), length_(length) {}
  ~SimMr() override {
    if (!hca_->forked_away()) hca_->dereg_mr(key_);
  }
  uint32_t lkey() const override { return key_; }
  uint32_t rkey() const override { return key_; }
  void* addr() const override { return addr_; }
  size_t length() const override { return length_; }
  Hca* hca() const { return hca_.get(); }
  // After a re-registration (rereg_mr).
  void set_range(void* addr, size_t length) {
    addr_ = addr;
    length_ = length;
  }

 private:
  std::shared_ptr<Hca> hca_;
  uint32_t key_;
  void* addr_;
  size_t length_;
};

class SimCq final : public hw::Cq {
 public:
  SimCq(std::shared_ptr<Hca> hca, CqObj* cq) : hca_(std::move(hca)), cq_(cq), view_(cq->view) {}
  ~SimCq() override {
    if (!hca_->forked_away()) hca_->release_cq(cq_);
  }
  const hw::CqView& view() const override { return view_; }
  CqObj* obj() const { return cq_; }
  const Hca* hca() const { return hca_.get(); }
  Hca& hca_ref() const { return *hca_; }

 private:
  std::shared_ptr<Hca> hca_;
  CqObj* cq_;
  hw::CqView view_;
};

class SimQp final : public hw::Qp {
 public:
  SimQp(std::shared_ptr<Hca> hca, QpObj* qp) : hca_(std::move(hca)), qp_(qp), view_(qp->view) {}
  ~SimQp() override {
    if (!hca_->forked_away()) hca_->destroy_qp(qp_);
  }
  const hw::QpView& view() const override { return view_; }
  Status modify(const hw::QpAttr& attr, uint32_t mask) override {
    return hca_->modify_qp(qp_, attr, mask);
  }
  hw::QpState state() const override { return hca_->qp_state(qp_); }
  Status set_rate_limit(const hw::RateLimit& limit) override {
    return hca_->set_qp_rate_limit(qp_, limit);
  }
  Status attach_multicast(const hw::Gid& mgid) override { return hca_->attach_mcast(qp_, mgid); }
  Status detach_multicast(const hw::Gid& mgid) override { return hca_->detach_mcast(qp_, mgid); }
  bool set_comm_est_notifier(void (*fn)(void* ctx), void* ctx) override {
    hca_->set_comm_est_notifier(qp_, fn, ctx);
    return true;
  }
  QpObj* obj() const { return qp_; }
  Hca& hca_ref() const { return *hca_; }

 private:
  std::shared_ptr<Hca> hca_;
  QpObj* qp_;
  hw::QpView view_;
};

// A CQ whose ring and doorbell record someone else allocated (libmlx5 under the shim).
Result<std::unique_ptr<hw::Cq>> create_cq_external(Device& device, const ExternalCqMemory& mem);

// Completion events (cq.h): once a handler is set, the device watches the CQ's arm requests,
// written as libmlx5 mlx5_arm_cq writes them (dbrec[MLX5_CQ_ARM_DB], then the CQ doorbell at
// page + 0x20 of a UAR page the device owns or was given with attach_uar_page), and calls
// `fn` once for every event the armed CQ raises. An empty `fn` turns events off. Setting a
// handler stores a mark (a reserved arm command) into dbrec[MLX5_CQ_ARM_DB] if that word is
// still 0, so that the CQ's first arm is seen even when another CQ's arm overwrote it in the
// shared register (cq.h kCqArmWatchMark); libmlx5 never reads that word.
//
// `fn` runs on the thread that runs the device's engine (the device thread, a progress hook
// or Fabric::step), after the device lock is released, one handler at a time per device. It
// must be quick and must not block, throw, or call back into the device or any of its
// objects (create, destroy, modify, set_cq_event_handler, progress): a handler that runs
// holds the lock that destroying a CQ takes, so doing so deadlocks. Writing 8 bytes to a
// non-blocking pipe is the intended use. Once set_cq_event_handler(cq, {}) or the CQ's
// destruction returns, its handler is never called again; a handler running on another
// thread at that moment is waited for.
//
// Latency: an arm wakes a sleeping threaded device as a doorbell does (rnicdv's driver kicks
// it, a store of libmlx5's into a watched UAR page wakes it, uar_watch.h); CQEs written by the
// engine fire their event in the same pass. Events raised by a control-path call (a modify to ERR that
// flushes into an armed CQ) are delivered at the device's next engine pass.
Status set_cq_event_handler(hw::Cq& cq, std::function<void()> fn);

// A QP whose buffers, doorbell record and register someone else placed. The register must be
// in a page given to attach_uar_page() first.
Result<std::unique_ptr<hw::Qp>> create_qp_external(Device& device, hw::Pd& pd, hw::Cq& send_cq,
                                                   hw::Cq& recv_cq, const ExternalQpMemory& mem);

// A shared receive queue whose ring and doorbell record someone else placed (libmlx5 under
// the shim). A QP takes its receives from it when created with ExternalQpMemory::srq.
Result<std::unique_ptr<hw::Srq>> create_srq_external(Device& device, hw::Pd& pd,
                                                     const ExternalSrqMemory& mem);
// The same for an XRC SRQ of `xrcd` (hw::QpType): its receives complete on `cq`, their CQEs
// carrying `user_index` (libmlx5's, CQE version 1; 0xffffff: the SRQ's number).
Result<std::unique_ptr<hw::Srq>> create_xrc_srq_external(Device& device, hw::Xrcd& xrcd,
                                                         hw::Pd& pd, hw::Cq& cq,
                                                         const ExternalSrqMemory& mem,
                                                         uint32_t user_index);

// Re-registers a region in place (ibv_rereg_mr): a new PD, translation or access rights under
// the same key, as mlx5 keeps the mkey when it can update it by UMR. The checks are
// reg_mr's; on failure the region is unchanged. Work already accepted by the device is
// checked against the new entry from the next access on.
Status rereg_mr(hw::Mr& mr, hw::Pd& pd, void* addr, size_t length, uint32_t access);

// Gives the device a 4 KiB UAR page that software maps (libmlx5 through the shim): software
// stores its doorbells and CQ arms into `app_view`; the device reads them through
// `device_view`, another mapping of the same page that the caller keeps mapped until
// detach_uar_page() returns (the application may unmap its own meanwhile, as it may unmap a
// ConnectX's UAR). A threaded device watches `app_view` so that a store into it wakes it when
// it sleeps (uar_watch.h). The QPs name their registers by their address in `app_view`.
Status attach_uar_page(Device& device, void* app_view, void* device_view);
void detach_uar_page(Device& device, void* app_view);

// How a sleeping device learns of a store into an attached page in this process:
// "userfaultfd", or why not and that it polls instead (for the shim's log).
const std::string& uar_wake_mechanism();

// The user index written to the QP's CQEs (srqn_uidx), as libmlx5 sets it with CQE v1.
void set_qp_user_index(hw::Qp& qp, uint32_t user_index);

}  // namespace rnicdv::sim
