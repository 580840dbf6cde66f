// SPDX-License-Identifier: BSD-3-Clause
// hw::Device for a ConnectX HCA.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cm/rdmacm_cm.h"
#include "mlx5_core.h"
#include "rnicdv/hw/device.h"
#include "rnicdv/status.h"

namespace rnicdv::hw::mlx5 {

class Mlx5Device final : public Device {
 public:
  // Takes an open context. Queries the device and its ports, picks the source GIDs and probes
  // the inline limit.
  static Result<std::shared_ptr<Mlx5Device>> create(ContextRef ctx, const std::string& name);

  const DeviceInfo& info() const override { return info_; }

  Result<std::unique_ptr<Pd>> alloc_pd() override;
  Result<std::unique_ptr<Mr>> reg_mr(Pd& pd, void* addr, size_t length, uint32_t access) override;
  Result<std::unique_ptr<Cq>> create_cq(uint32_t min_cqe) override;
  Result<std::unique_ptr<CompletionChannel>> create_completion_channel() override;
  Result<std::unique_ptr<Cq>> create_evented_cq(uint32_t min_cqe,
                                                CompletionChannel& channel) override;
  Result<std::unique_ptr<Qp>> create_qp(Pd& pd, Cq& send_cq, Cq& recv_cq,
                                        const QpCaps& caps) override;
  Result<std::unique_ptr<Srq>> create_srq(Pd& pd, uint32_t max_wr, uint32_t max_sge) override;
  Result<std::unique_ptr<Qp>> create_qp_on_srq(Pd& pd, Cq& send_cq, Cq& recv_cq, Srq& srq,
                                               const QpCaps& caps) override;
  Result<std::unique_ptr<Qp>> create_ud_qp(Pd& pd, Cq& send_cq, Cq& recv_cq,
                                           const QpCaps& caps) override;
  Result<std::unique_ptr<Qp>> create_uc_qp(Pd& pd, Cq& send_cq, Cq& recv_cq, Srq* srq,
                                           const QpCaps& caps) override;
  Result<std::unique_ptr<Ah>> create_ah(Pd& pd, const AhAttr& attr) override;

  // Readable while an async event is pending: an epoll descriptor over the verbs context's
  // async fd (non-blocking) and the queue the event thread fills while a QP has a COMM_EST
  // notifier (mlx5_async_events.h). The same descriptor for the device's life.
  int async_fd() const override;
  // One event, read, mapped and acknowledged here or by the event thread, in the order the
  // device raised them. Events the interface does not carry are acknowledged, counted and
  // skipped. False when none is pending (or reading failed).
  bool next_async_event(AsyncEvent* out) override;

  ProgressHook progress_hook() override { return {}; }  // hardware progresses on its own
  // Read from /sys/class/infiniband/<device>/ports/<port>/<name>, the kernel's own figure.
  Result<uint64_t> read_port_counter(uint8_t port, const std::string& name) override;
  // librdmacm with a driver-managed QP (cm/rdmacm_cm.h).
  ConnectionManager* connection_manager() override { return cm_.get(); }

  // Async events skipped because the interface has no type for them.
  uint64_t skipped_async_events() const;
  const std::vector<PortAddressing>& ports() const { return core_->ports; }

 private:
  explicit Mlx5Device(std::shared_ptr<DeviceCore> core) : core_(std::move(core)) {}
  Result<std::unique_ptr<Qp>> create_typed_qp(Pd& pd, Cq& send_cq, Cq& recv_cq,
                                              const QpCaps& caps, QpType type);

  std::shared_ptr<DeviceCore> core_;
  DeviceInfo info_;
  std::unique_ptr<cm::RdmaCmConnectionManager> cm_;
};

}  // namespace rnicdv::hw::mlx5
