// SPDX-License-Identifier: BSD-3-Clause
// What the devices of one fabric share: configuration, clock, wire and the device list.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "clock.h"
#include "faults/schedule.h"
#include "rnicdv/sim/sim.h"
#include "wire/wire.h"

namespace rnicdv::sim {

class Hca;

// References to the devices one call works on, held for that call: the first kInline in place
// (no allocation in a fabric of a few devices), any more in a vector. It lives on the caller's
// stack. A thread_local list would register a destructor in every thread that calls in, the
// application's threads, and glibc's registration is no place for a signal handler's call to
// exit to find half done (it crashed there, once in thousands of exit-in-handler runs).
class HcaRefs {
 public:
  static constexpr size_t kInline = 8;
  void push_back(std::shared_ptr<Hca> h) {
    if (n_ < kInline)
      inline_[n_++] = std::move(h);
    else
      more_.push_back(std::move(h));
  }
  template <class F>
  void for_each(F&& f) const {
    for (size_t i = 0; i < n_; ++i) f(*inline_[i]);
    for (const auto& h : more_) f(*h);
  }

 private:
  std::array<std::shared_ptr<Hca>, kInline> inline_;
  size_t n_ = 0;
  std::vector<std::shared_ptr<Hca>> more_;
};

struct FabricShared {
  FabricConfig config;
  uint32_t owner_epoch = 0;  // fork_epoch() of the process that made it (hca.h)
  std::unique_ptr<Clock> clock;
  VirtualClock* virtual_clock = nullptr;  // set in deterministic mode
  // Faults on demand (faults/schedule.h); null when no specification is in force. Declared
  // before the wire, which holds a pointer to it, so that it is destroyed after.
  std::unique_ptr<faults::FaultSchedule> faults;
  std::unique_ptr<Wire> wire;

  mutable std::mutex mu;  // the lists below
  struct Member {
    Hca* raw;
    std::weak_ptr<Hca> weak;
  };
  std::vector<Member> hcas;  // attached devices, creation order
  std::vector<std::weak_ptr<Device>> devices;
  uint32_t next_index = 0;

  // default_fabric(): environment overrides for devices added with default settings.
  std::optional<hw::DeviceProfile> profile_override;
  std::vector<IpAddress> address_pool;
  // RNICDV_SIM_PORTS and RNICDV_SIM_PORT2_ADDR: the default fabric's devices' port count and
  // their second ports' addresses, by device index (0: as DeviceConfig says).
  uint8_t ports_override = 0;
  std::vector<IpAddress> port2_pool;

  bool deterministic() const { return config.mode == ExecMode::deterministic; }
  // Wakes the threads of sleeping devices other than `except` (in-process wire only: a UDP
  // device thread wakes on its socket).
  void kick_sleepers(const Hca* except);
  // The live devices, into `out` (empty).
  void snapshot(HcaRefs* out) const;
  bool step();  // Fabric::step
};

}  // namespace rnicdv::sim
