// SPDX-License-Identifier: BSD-3-Clause
// Opening devices by name (rnicdv/sim/sim.h open_device), and librnicdv-sim's entry point for
// the backend table of librnicdv (rnicdv/hw/sim_provider.h).
#include "rnicdv/hw/sim_provider.h"

#include "rnicdv/sim/sim.h"

namespace rnicdv::sim {

Result<std::shared_ptr<Device>> open_device(const std::string& name,
                                            std::shared_ptr<Fabric> fabric,
                                            const DeviceConfig* given_config) {
  if (!fabric) {
    auto def = default_fabric();
    if (!def) return Status(def.status()).prepend("open " + name);
    fabric = std::move(def.value());
  }
  for (const auto& dev : fabric->devices())
    if (dev->info().name == name) return dev;
  DeviceConfig config = given_config ? *given_config : DeviceConfig{};
  config.name = name;
  auto added = fabric->add_device(config);
  if (!added) return Status(added.status()).prepend("open " + name);
  return std::move(added.value());
}

namespace {

Result<std::shared_ptr<hw::Device>> open(const std::string& name) {
  return open_device(name);
}

std::vector<std::string> list() {
  std::vector<std::string> names;
  if (auto fabric = default_fabric())
    for (const auto& dev : fabric.value()->devices()) names.push_back(dev->info().name);
  return names;
}

const Provider kProvider{kProviderAbi, open, list};

}  // namespace
}  // namespace rnicdv::sim

extern "C" __attribute__((visibility("default"))) const rnicdv::sim::Provider*
rnicdv_sim_provider() {
  return &rnicdv::sim::kProvider;
}
