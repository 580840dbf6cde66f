// SPDX-License-Identifier: BSD-3-Clause
#include "cm/sim_cm.h"

#include "gsi.h"
#include "hca.h"
#include "rnicdv/sim/sim.h"

namespace rnicdv::sim::cm {

// CM MADs as UD SEND_ONLY on QP1 (gsi.h), timers on the fabric clock.
class SimConnectionManager::GsiPort final : public MadPort {
 public:
  explicit GsiPort(Gsi& gsi) : gsi_(gsi) {}

  void set_agent(std::weak_ptr<CmAgent> agent) { agent_ = std::move(agent); }

  void send(const hw::IpAddress& dst, const MadBytes& mad) override {
    // A send fails for a bad length, which a 256-byte MAD never has, or a destination of the
    // other IP version, which CmAgent::check_remote refuses before anything is sent; a frame
    // the wire cannot carry is dropped as a link would, and the CM's timers recover.
    [[maybe_unused]] Status st = gsi_.send_mad(dst, mad.data(), mad.size());
  }

  void schedule(uint64_t at_ns) override {
    gsi_.schedule_at(at_ns, [agent = agent_] {
      if (auto a = agent.lock()) a->on_timer();
    });
  }

  uint64_t now_ns() const override { return gsi_.now_ns(); }

  void remove_handler() {
    gsi_.set_mad_handler({});
    gsi_.set_unreachable_handler({});
  }

 private:
  Gsi& gsi_;
  std::weak_ptr<CmAgent> agent_;
};

std::shared_ptr<SimConnectionManager> SimConnectionManager::create(Hca& hca, uint64_t seed,
                                                                    bool fresh_entropy) {
  std::shared_ptr<SimConnectionManager> cm(new SimConnectionManager());
  const hw::DeviceInfo& info = hca.info();
  CmAgentConfig cfg;
  cfg.address = hca.address();
  cfg.ca_guid = info.node_guid;
  cfg.max_mtu = info.caps.max_mtu;
  cfg.active_mtu = info.caps.active_mtu;
  cfg.seed = seed ^ info.node_guid;
  cfg.fresh_entropy = fresh_entropy;
  cfg.device_name = info.name;
  cfg.faults = hca.fault_schedule();
  cfg.device_index = hca.index();
  cm->port_ = std::make_unique<GsiPort>(hca.gsi());
  cm->agent_ = CmAgent::create(cfg, cm->port_.get());
  cm->port_->set_agent(cm->agent_);
  cm->agent_->start_fault_timers();
  hca.gsi().set_mad_handler(
      [agent = std::weak_ptr<CmAgent>(cm->agent_)](const hw::IpAddress& src, const uint8_t* mad, size_t len) {
        if (auto a = agent.lock()) a->on_mad(src, std::span(mad, len));
      });
  hca.gsi().set_unreachable_handler([agent = std::weak_ptr<CmAgent>(cm->agent_)](const IpAddress& ip) {
    if (auto a = agent.lock()) a->on_peer_unreachable(ip);
  });
  return cm;
}

SimConnectionManager::~SimConnectionManager() {
  // The handler and timers only hold weak references; detaching waits for calls in flight
  // from application threads, after which the agent never touches QP1 again.
  port_->remove_handler();
  agent_->detach_port();
}

CmAgent& cm_agent_of(Device& device) {
  return static_cast<SimConnectionManager*>(device.connection_manager())->agent();
}

}  // namespace rnicdv::sim::cm
