// SPDX-License-Identifier: BSD-3-Clause
// Device profile names (sim.h).
#include "rnicdv/sim/sim.h"

namespace rnicdv::sim {

namespace {

struct NamedProfile {
  const char* name;
  bool fetches_beyond_dbr;
  bool keeps_rtr_doorbell;
};

constexpr NamedProfile kProfiles[] = {
    {"mlx5", false, true},
    {"scanning", true, true},
    {"forgetful", false, false},
    {"scanning-forgetful", true, false},
};

}  // namespace

Result<hw::DeviceProfile> parse_profile(const std::string& name) {
  for (const NamedProfile& p : kProfiles) {
    if (name == p.name) {
      hw::DeviceProfile out;
      out.fetches_beyond_dbr = p.fetches_beyond_dbr;
      out.keeps_rtr_doorbell = p.keeps_rtr_doorbell;
      return out;
    }
  }
  return Status::error(Errc::invalid_argument,
                       "unknown device profile '%s' (mlx5, scanning, forgetful, "
                       "scanning-forgetful)",
                       name.c_str());
}

std::string profile_name(const hw::DeviceProfile& profile) {
  for (const NamedProfile& p : kProfiles)
    if (p.fetches_beyond_dbr == profile.fetches_beyond_dbr &&
        p.keeps_rtr_doorbell == profile.keeps_rtr_doorbell)
      return p.name;
  return "?";
}

}  // namespace rnicdv::sim
