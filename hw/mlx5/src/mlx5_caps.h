// SPDX-License-Identifier: BSD-3-Clause
// Device capabilities: ibv_query_device_ex + ibv_query_port, and the inline-data limit, which
// neither verbs nor mlx5dv_query_device report and which is therefore probed.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <functional>
#include <optional>

#include "mlx5_port.h"
#include "rnicdv/hw/device.h"

namespace rnicdv::hw::mlx5 {

// Fills everything but max_inline_data from the device attributes and port 1.
DeviceCaps caps_from_attrs(const ibv_device_attr& dev, const PortAddressing* port1);

// The largest max_inline_data a QP can be created with.
//
// `try_create(n)` attempts a QP with max_inline_data = n and returns the value granted
// (libmlx5 rounds the WQE up to 64-byte blocks and reports all the room left, so the grant is
// >= n), or nothing if creation failed. Creation is assumed monotonic: if n fails, so does
// every larger n. Gallops from the first grant in growing steps, then bisects, so it costs
// O(log limit) creations (about ten for a 1 KiB WQE). Returns 0 if even n = 0 fails.
// Requests above `ceiling` are never made.
uint32_t find_max_inline(const std::function<std::optional<uint32_t>(uint32_t)>& try_create,
                         uint32_t ceiling);

// find_max_inline() on `ctx` with throwaway RC QPs (one send WQE, one SGE). The PD and CQ the
// probe needs are created and destroyed inside.
uint32_t probe_max_inline(ibv_context* ctx);

}  // namespace rnicdv::hw::mlx5
