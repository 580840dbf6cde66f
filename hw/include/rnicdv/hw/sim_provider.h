// SPDX-License-Identifier: BSD-3-Clause
// The boundary between the driver (librnicdv) and the software HCA (librnicdv-sim), which is
// a library of its own: a program that opens only real devices never maps the simulator.
//
// librnicdv-sim exports one C entry point, rnicdv_sim_provider(), returning this table.
// librnicdv's backend for simN names (hw/src/sim_backend.cc) finds it in the process (a
// program that links the simulator) or loads the library from beside its own, or from the
// loader's path, when such a device is first opened, as libibverbs loads a provider for the
// devices present; the file name, librnicdv-sim.so.<soversion>, comes from meson.build
// (RNICDV_SIM_LIBRARY, as hw/src/sim_backend.cc is compiled). Both come from one build: the table carries C++ types, and its ABI number
// is checked.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rnicdv/hw/device.h"
#include "rnicdv/status.h"

namespace rnicdv::sim {

inline constexpr uint32_t kProviderAbi = 2;

struct Provider {
  uint32_t abi;
  // Opens simulated HCA `name` on the process-wide default fabric, creating it with the
  // defaults when it does not exist yet (rnicdv/sim/sim.h open_device).
  Result<std::shared_ptr<hw::Device>> (*open)(const std::string& name);
  // The names of the devices on the default fabric (none if it was never created).
  std::vector<std::string> (*list)();
};

}  // namespace rnicdv::sim

extern "C" const rnicdv::sim::Provider* rnicdv_sim_provider();
