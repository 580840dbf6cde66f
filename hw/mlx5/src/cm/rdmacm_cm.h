// SPDX-License-Identifier: BSD-3-Clause
// hw::ConnectionManager for real devices, over librdmacm, with the QP managed by the driver:
// rdma_create_id without rdma_create_qp, so that librdmacm never moves the QP and RTR is a real
// window (docs/connections.md):
//   active:  rdma_resolve_addr, rdma_resolve_route, rdma_connect(qp_num) ... CONNECT_RESPONSE
//            -> the driver moves the QP to RTR and RTS (rdma_init_qp_attr) -> rdma_establish
//   passive: CONNECT_REQUEST -> the driver moves the QP to INIT and RTR -> rdma_accept(qp_num)
//            ... ESTABLISHED (RTU, or rdma_notify(COMM_EST)) -> the driver moves it to RTS.
// Each connection and listener has its own event channel (non-blocking), whose fd is the
// object's event_fd(); accepted connections are migrated to a channel of their own. A passive
// connection given an establishment notifier is read by the device's event thread from then
// on (cm/rdmacm_watch.h), and its event_fd() becomes the eventfd of the thread's queue.
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "rnicdv/hw/cm.h"

namespace rnicdv::hw::mlx5 {
class EventThread;  // mlx5_event_thread.h
}

namespace rnicdv::hw::mlx5::cm {

class RdmaCmConnectionManager final : public ConnectionManager {
 public:
  // `verbs` is the device's context: addresses that resolve to another device are refused.
  // `address` is the device's address (its default GID's), bound as the source of connections
  // to its IP version unless it is link-local; unspecified: none.
  // `events` is the device's event thread, which reads the channels of passive connections
  // with an establishment notifier.
  RdmaCmConnectionManager(ibv_context* verbs, const IpAddress& address, std::string device_name,
                          std::shared_ptr<EventThread> events);

  using ConnectionManager::listen;
  Result<std::unique_ptr<CmListener>> listen(const CmAddress& local, int backlog) override;
  Result<std::unique_ptr<CmConnection>> connect(const CmConnectParams& params) override;
  IpAddress local_address() const override { return address_; }

  ibv_context* verbs() const { return verbs_; }
  const std::string& device_name() const { return name_; }
  const std::shared_ptr<EventThread>& events() const { return events_; }

 private:
  ibv_context* verbs_;
  IpAddress address_;
  std::string name_;
  std::shared_ptr<EventThread> events_;
};

// ---- Conversions, exposed for tests ------------------------------------------------------

// rdma_init_qp_attr's result as the driver's QpAttr and qp_attr::* mask.
QpAttr qp_attr_from_ibv(const ibv_qp_attr& attr, int ibv_mask, uint32_t* mask);
// An rdma_cm event as the backend event it stands for; false for events the driver does not
// see (address and route resolution, TIMEWAIT_EXIT).
bool translate_event(const rdma_cm_event& ev, CmEvent* out);
const char* rdma_cm_event_name(rdma_cm_event_type t) noexcept;

}  // namespace rnicdv::hw::mlx5::cm
