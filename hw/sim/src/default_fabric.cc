// SPDX-License-Identifier: BSD-3-Clause
// The process-wide fabric behind "sim0", "sim1", ... (sim.h), configured from the
// environment: RNICDV_SIM_WIRE, RNICDV_SIM_ADDR, RNICDV_SIM_PROFILE, RNICDV_SIM_PORTS,
// RNICDV_SIM_PORT2_ADDR, RNICDV_PCAP.
#include <arpa/inet.h>

#include <cstdlib>
#include <mutex>
#include <sstream>

#include "device_impl.h"

namespace rnicdv::sim {

namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

Result<std::vector<IpAddress>> parse_addresses(const std::string& list, const char* var) {
  std::vector<IpAddress> out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    Result<IpAddress> a = IpAddress::parse(item);
    if (!a) return a.status().prepend(var);
    out.push_back(*a);
  }
  return out;
}

}  // namespace

Result<std::shared_ptr<Fabric>> default_fabric() {
  static std::mutex mu;
  static std::weak_ptr<Fabric> current;
  std::lock_guard<std::mutex> lock(mu);
  // In a child of fork() the parent's fabric (its wire, its threads) is not the child's: the
  // child gets one of its own.
  if (auto f = current.lock(); f && f->impl().shared.owner_epoch == fork_epoch()) return f;

  FabricConfig cfg;
  cfg.mode = ExecMode::threaded;
  cfg.wire = WireKind::udp;
  if (const char* w = env("RNICDV_SIM_WIRE")) {
    const std::string wire = w;
    if (wire == "udp") {
      cfg.wire = WireKind::udp;
    } else if (wire == "inproc") {
      cfg.wire = WireKind::inproc;
    } else {
      return Status::error(Errc::invalid_argument,
                           "RNICDV_SIM_WIRE: unknown wire '%s' (udp, inproc)", w);
    }
  }
  std::optional<hw::DeviceProfile> profile;
  if (const char* p = env("RNICDV_SIM_PROFILE")) {
    Result<hw::DeviceProfile> parsed = parse_profile(p);
    if (!parsed) return parsed.status().prepend("RNICDV_SIM_PROFILE");
    profile = parsed.value();
  }
  std::vector<IpAddress> addresses;
  if (const char* a = env("RNICDV_SIM_ADDR")) {
    RNICDV_ASSIGN_OR_RETURN(addresses, parse_addresses(a, "RNICDV_SIM_ADDR"));
  }
  // Two-port HCAs (DeviceConfig::ports), their second ports at these addresses.
  uint8_t ports = 0;
  if (const char* n = env("RNICDV_SIM_PORTS")) {
    const std::string v = n;
    if (v != "1" && v != "2")
      return Status::error(Errc::invalid_argument,
                           "RNICDV_SIM_PORTS: '%s' (a simulated HCA has 1 or 2 ports)", n);
    ports = static_cast<uint8_t>(v[0] - '0');
  }
  std::vector<IpAddress> port2_addresses;
  if (const char* a = env("RNICDV_SIM_PORT2_ADDR")) {
    RNICDV_ASSIGN_OR_RETURN(port2_addresses, parse_addresses(a, "RNICDV_SIM_PORT2_ADDR"));
    if (ports == 0) ports = 2;
  }
  Result<std::shared_ptr<Fabric>> fabric = Fabric::create(cfg);  // RNICDV_PCAP read there
  if (!fabric) return fabric;
  FabricShared& s = fabric.value()->impl().shared;
  s.profile_override = profile;
  s.address_pool = std::move(addresses);
  s.ports_override = ports;
  s.port2_pool = std::move(port2_addresses);
  current = fabric.value();
  return fabric;
}

}  // namespace rnicdv::sim
