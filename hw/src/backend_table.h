// SPDX-License-Identifier: BSD-3-Clause
// The backends hw/src/backends.cc lists (rnicdv/hw/backend.h). Each is defined beside its
// code: the real-device backend in hw/mlx5 (rnicdv/hw/mlx5.h), the software HCA's loader
// in hw/src.
#pragma once

#include "rnicdv/hw/backend.h"
#include "rnicdv/hw/mlx5.h"

namespace rnicdv::hw {

namespace sim_loader {
extern const Backend kBackend;
}

}  // namespace rnicdv::hw
