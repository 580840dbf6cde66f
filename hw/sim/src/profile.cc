// SPDX-License-Identifier: BSD-3-Clause
// Device profile names (sim.h); the table is hw's (hw::device_profile_name).
#include "rnicdv/sim/sim.h"

namespace rnicdv::sim {

Result<hw::DeviceProfile> parse_profile(const std::string& name) {
  hw::DeviceProfile out;
  if (hw::device_profile_from_name(name.c_str(), &out)) return out;
  return Status::error(Errc::invalid_argument,
                       "unknown device profile '%s' (mlx5, scanning, forgetful, "
                       "scanning-forgetful)",
                       name.c_str());
}

std::string profile_name(const hw::DeviceProfile& profile) {
  return hw::device_profile_name(profile);
}

}  // namespace rnicdv::sim
