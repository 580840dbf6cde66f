// SPDX-License-Identifier: BSD-3-Clause
// rnicdv: a kernel-bypass mlx5 direct-verbs driver with early posting in RTR.
// The umbrella header for applications.
#pragma once

#include "rnicdv/connection.h"  // IWYU pragma: export
#include "rnicdv/cq.h"        // IWYU pragma: export
#include "rnicdv/device.h"    // IWYU pragma: export
#include "rnicdv/pd.h"        // IWYU pragma: export
#include "rnicdv/qp.h"        // IWYU pragma: export
#include "rnicdv/srq.h"       // IWYU pragma: export
#include "rnicdv/status.h"    // IWYU pragma: export
#include "rnicdv/wqe/work_request.h"  // IWYU pragma: export
#include "rnicdv/xrc.h"       // IWYU pragma: export
