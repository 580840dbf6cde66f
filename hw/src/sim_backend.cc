// SPDX-License-Identifier: BSD-3-Clause
// The software HCA as a backend: its devices are named "simN" and live in librnicdv-sim,
// which is found in the process (a program that links it) or loaded on the first open of
// such a name (rnicdv/hw/sim_provider.h), never for a program that opens only real devices.
#include <dlfcn.h>

#include <cctype>
#include <mutex>

#include "backend_table.h"
#include "rnicdv/hw/loader.h"
#include "rnicdv/hw/sim_provider.h"

namespace rnicdv::hw::sim_loader {

namespace {

// librnicdv-sim.so.<soversion> (meson.build: rnicdv_sim_soname).
constexpr const char* kProviderLibrary = RNICDV_SIM_LIBRARY;

// "sim" followed by one or more digits.
Claim claims(const std::string& name) {
  if (name.size() <= 3 || name.compare(0, 3, "sim") != 0) return Claim::no;
  for (size_t i = 3; i < name.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(name[i]))) return Claim::no;
  return Claim::own;
}

const sim::Provider* provider(bool load, Status* why) {
  static std::mutex mu;
  static const sim::Provider* found = nullptr;
  std::lock_guard<std::mutex> lock(mu);
  if (found) return found;
  using Entry = const sim::Provider* (*)();
  std::string error = "not loaded";
  // RTLD_GLOBAL: the simulator's symbols serve later users in the process (the uverbs shim,
  // tools that reach its API) from this one copy.
  auto entry = reinterpret_cast<Entry>(
      load ? find_entry("rnicdv_sim_provider", kProviderLibrary,
                        reinterpret_cast<const void*>(&provider), RTLD_NOW | RTLD_GLOBAL, &error)
           : dlsym(RTLD_DEFAULT, "rnicdv_sim_provider"));
  if (!entry) {
    if (why)
      *why = Status::error(Errc::unsupported, "the software HCA (%s) cannot be loaded: %s",
                           kProviderLibrary, error.c_str());
    return nullptr;
  }
  const sim::Provider* p = entry();
  if (!p || p->abi != sim::kProviderAbi) {
    if (why)
      *why = Status::error(Errc::internal, "%s: provider ABI %u, expected %u",
                           kProviderLibrary, p ? p->abi : 0, sim::kProviderAbi);
    return nullptr;
  }
  found = p;
  return found;
}

// "sim0" first (it is created on open, and is the default device where there is no real
// one), then the default fabric's other devices if the simulator is in the process.
std::vector<std::string> list() {
  std::vector<std::string> names{"sim0"};
  if (const sim::Provider* p = provider(false, nullptr))
    for (std::string& n : p->list())
      if (n != "sim0") names.push_back(std::move(n));
  return names;
}

Result<std::shared_ptr<Device>> open(const std::string& name) {
  Status why;
  const sim::Provider* p = provider(true, &why);
  if (!p) return why.prepend("open " + name);
  return p->open(name);
}

}  // namespace

const Backend kBackend{"sim", false, claims, list, open};

}  // namespace rnicdv::hw::sim_loader
