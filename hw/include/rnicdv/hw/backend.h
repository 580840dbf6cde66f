// SPDX-License-Identifier: BSD-3-Clause
// Backend discovery: which code serves a device name. The driver asks here and knows no
// backend; each backend is one entry in the table of hw/src/backends.cc, so another one (a
// different RNIC model, a remote simulator) is added in hw/ alone.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "rnicdv/hw/device.h"
#include "rnicdv/status.h"

namespace rnicdv::hw {

// How strongly a backend claims a device name.
enum class Claim : uint8_t {
  no,
  fallback,  // any name it might have (rdma-core device names are free-form: "mlx5_0")
  own,       // its naming scheme ("sim3")
};

struct Backend {
  const char* kind;  // DeviceInfo::kind of its devices: "mlx5", "sim"
  bool hardware;     // real devices: the default device is the first of these
  Claim (*claims)(const std::string& name);
  // Its devices now, in its order. Cheap, and loads nothing: a backend in a library not
  // loaded yet lists what it would create on open (the software HCA: "sim0").
  std::vector<std::string> (*list)();
  // Opens `name`. Errc::not_found if it has no such device.
  Result<std::shared_ptr<Device>> (*open)(const std::string& name);
};

// Every backend, in the order devices are listed and preferred: real devices first.
const std::vector<const Backend*>& backends();

// The devices of every backend, in that order.
std::vector<std::string> list_devices();

// The first device of a hardware backend if there is one, else the first listed ("sim0").
std::string default_device_name();

// Opens `name` with the backend that owns its naming scheme, else the first that may have it.
// A name nobody has gets Errc::not_found naming what exists:
// "open mlx5_3: no such device; found: sim0".
Result<std::shared_ptr<Device>> open_device(const std::string& name);

}  // namespace rnicdv::hw
