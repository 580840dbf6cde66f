// SPDX-License-Identifier: BSD-3-Clause
// Entry points of the real-device backend: a ConnectX HCA through rdma-core (libibverbs and
// libmlx5 direct verbs). The backend table (rnicdv/hw/backend.h) reaches them through
// kBackend; the project's tests call them directly. Not installed.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "rnicdv/hw/backend.h"
#include "rnicdv/hw/device.h"
#include "rnicdv/status.h"

namespace rnicdv::hw::mlx5 {

// Names of the RDMA devices served by the mlx5 provider (mlx5dv_is_supported), in the order
// libibverbs lists them. Empty, not an error, when there is no device or no kernel support.
std::vector<std::string> list_devices();

// Opens device `name` ("mlx5_0").
// - Errc::not_found if no RDMA device has that name; the message lists what was found:
//   "no RDMA device 'mlx5_3'; found: mlx5_0, mlx5_1".
// - Errc::unsupported if the device exists but its provider is not mlx5.
// - the errno of ibv_open_device or of a query otherwise.
Result<std::shared_ptr<Device>> open_device(const std::string& name);

// Any name may be an rdma-core device's (Claim::fallback).
extern const Backend kBackend;

}  // namespace rnicdv::hw::mlx5
