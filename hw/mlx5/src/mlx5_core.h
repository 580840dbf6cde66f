// SPDX-License-Identifier: BSD-3-Clause
// State of an open device that its objects share: the verbs context, the ports and the caps.
#pragma once

#include <string>
#include <vector>

#include "mlx5_port.h"
#include "mlx5_verbs.h"
#include "rnicdv/hw/device.h"

namespace rnicdv::hw::mlx5 {

struct DeviceCore {
  ContextRef ctx;
  std::string name;                   // "mlx5_0"
  std::vector<PortAddressing> ports;  // index i describes port i + 1
  DeviceCaps caps;
};

}  // namespace rnicdv::hw::mlx5
