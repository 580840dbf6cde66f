// SPDX-License-Identifier: BSD-3-Clause
#include "rnicdv/hw/backend.h"

#include "backend_table.h"

namespace rnicdv::hw {

namespace {

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) {
    if (!out.empty()) out += ", ";
    out += n;
  }
  return out.empty() ? std::string("nothing") : out;
}

}  // namespace

const std::vector<const Backend*>& backends() {
  static const std::vector<const Backend*> table{&mlx5::kBackend, &sim_loader::kBackend};
  return table;
}

std::vector<std::string> list_devices() {
  std::vector<std::string> names;
  for (const Backend* b : backends())
    for (std::string& n : b->list()) names.push_back(std::move(n));
  return names;
}

std::string default_device_name() {
  for (const Backend* b : backends()) {
    if (!b->hardware) continue;
    auto names = b->list();
    if (!names.empty()) return names.front();
  }
  const auto all = list_devices();
  return all.empty() ? std::string() : all.front();
}

Result<std::shared_ptr<Device>> open_device(const std::string& name) {
  const Backend* chosen = nullptr;
  for (const Backend* b : backends()) {
    const Claim c = b->claims(name);
    if (c == Claim::own) {
      chosen = b;
      break;
    }
    if (c == Claim::fallback && !chosen) chosen = b;
  }
  if (chosen) {
    auto dev = chosen->open(name);
    if (dev) return dev;
    if (dev.status().code() != Errc::not_found) return dev.status();  // it names the device
  }
  return Status::error(Errc::not_found, "open %s: no such device; found: %s", name.c_str(),
                       join(list_devices()).c_str());
}

}  // namespace rnicdv::hw
