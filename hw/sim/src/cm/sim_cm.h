// SPDX-License-Identifier: BSD-3-Clause
// The connection manager of a simulated HCA: the IB CM agent (cm_agent.h) on the HCA's QP1
// (gsi.h), with its timers on the fabric clock (virtual time in deterministic mode).
#pragma once

#include <cstdint>
#include <memory>

#include "cm/cm_agent.h"
#include "rnicdv/hw/cm.h"

namespace rnicdv::sim {

class Hca;
class Device;

namespace cm {

class SimConnectionManager final : public hw::ConnectionManager {
 public:
  // Registers the CM as the HCA's MAD handler. `seed` makes identifiers and PSNs reproducible
  // unless `fresh_entropy` (real-time fabrics) mixes the OS's entropy in.
  static std::shared_ptr<SimConnectionManager> create(Hca& hca, uint64_t seed,
                                                      bool fresh_entropy);
  // Unregisters from QP1. Connections still held fail cleanly ("device closed").
  ~SimConnectionManager() override;

  using hw::ConnectionManager::listen;
  Result<std::unique_ptr<hw::CmListener>> listen(const hw::CmAddress& local, int backlog) override {
    return agent_->listen(local, backlog);
  }
  Result<std::unique_ptr<hw::CmListener>> listen_ud(const hw::CmAddress& local,
                                                    int backlog) override {
    return agent_->listen_ud(local, backlog);
  }
  Result<std::unique_ptr<hw::CmConnection>> connect(const hw::CmConnectParams& params) override {
    return agent_->connect(params);
  }
  hw::IpAddress local_address() const override { return agent_->local_address(); }

  CmAgent& agent() { return *agent_; }

 private:
  class GsiPort;
  SimConnectionManager() = default;
  std::unique_ptr<GsiPort> port_;
  std::shared_ptr<CmAgent> agent_;
};

// The simulated CM of `device` (for tests: counters, the drop hook, dumps); never null.
CmAgent& cm_agent_of(Device& device);

}  // namespace cm
}  // namespace rnicdv::sim
