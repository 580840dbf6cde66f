// SPDX-License-Identifier: BSD-3-Clause
// sim::Device and sim::Fabric internals.
#pragma once

#include <memory>

#include "fabric_shared.h"
#include "hca.h"
#include "rnicdv/sim/sim.h"

namespace rnicdv::hw {
class ConnectionManager;
}

namespace rnicdv::sim {

struct Device::Impl {
  std::shared_ptr<Hca> hca;
  // Set by the connection manager once it exists (hw/sim's IB CM over QP1).
  std::shared_ptr<hw::ConnectionManager> cm;
};

struct Fabric::Impl {
  FabricShared shared;
};

}  // namespace rnicdv::sim
