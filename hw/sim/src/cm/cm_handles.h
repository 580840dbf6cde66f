// SPDX-License-Identifier: BSD-3-Clause
// The handles the simulated CM gives out: hw::CmConnection and hw::CmListener over a CmAgent.
#pragma once

#include <memory>
#include <string>

#include "cm/cm_agent.h"
#include "cm/event_queue.h"
#include "rnicdv/hw/cm.h"

namespace rnicdv::sim::cm {

class SimCmConnection final : public hw::CmConnection {
 public:
  SimCmConnection(std::shared_ptr<CmAgent> agent, uint32_t id, std::shared_ptr<CmEventQueue> events,
                  hw::CmAddress local, hw::CmAddress remote);
  ~SimCmConnection() override;

  // Until the connection is accepted, its listener's descriptor (event_queue.h).
  int event_fd() const override { return events_->fd(); }
  bool next_event(hw::CmEvent* out) override { return events_->pop(out); }
  Status qp_attr(hw::QpState target, hw::QpAttr* attr, uint32_t* mask) const override;
  Status accept(const hw::CmAcceptParams& params) override;
  Status reject(uint16_t reason, std::span<const uint8_t> private_data) override;
  Status establish() override;
  Status notify_comm_est() override;
  bool set_established_notifier(void (*fn)(void* ctx), void* ctx) override;
  Status disconnect() override;
  hw::CmAddress local_address() const override { return local_; }
  hw::CmAddress remote_address() const override { return remote_; }
  std::string name() const override;

  uint32_t comm_id() const { return id_; }
  CmAgent& agent() { return *agent_; }

 private:
  std::shared_ptr<CmAgent> agent_;
  uint32_t id_;
  std::shared_ptr<CmEventQueue> events_;
  hw::CmAddress local_;
  hw::CmAddress remote_;
};

class SimCmListener final : public hw::CmListener {
 public:
  SimCmListener(std::shared_ptr<CmAgent> agent, hw::CmAddress address, uint32_t key,
                std::shared_ptr<CmEventQueue> events);
  ~SimCmListener() override;

  int event_fd() const override { return events_->fd(); }
  // Takes the next request that is still waiting (event_queue.h: it gets its handle now).
  bool next_event(hw::CmEvent* out) override;
  hw::CmAddress address() const override { return address_; }
  Status set_backlog(int backlog) override;

 private:
  std::shared_ptr<CmAgent> agent_;
  hw::CmAddress address_;
  uint32_t key_;  // CmAgent::listen_key
  std::shared_ptr<CmEventQueue> events_;
};

}  // namespace rnicdv::sim::cm
