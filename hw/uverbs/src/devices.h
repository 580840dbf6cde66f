// SPDX-License-Identifier: BSD-3-Clause
// The simulated HCAs behind /dev/infiniband/uverbsN in this process, created on first use on
// the process-wide default fabric (threaded; RNICDV_SIM_WIRE, RNICDV_SIM_ADDR and
// RNICDV_SIM_PROFILE apply), and the thread that forwards their asynchronous events to the
// async descriptors of the contexts that own the affected QPs and CQs.
#pragma once

#include <functional>
#include <memory>

#include "rnicdv/hw/device.h"
#include "rnicdv/sim/sim.h"
#include "rnicdv/status.h"

namespace rnicdv::uverbs {

struct SimDevice {
  uint32_t index = 0;
  std::shared_ptr<sim::Device> dev;
};

Result<SimDevice*> device_for(uint32_t index);

// Delivers one async event of device `index`; installed by the context layer.
using AsyncSink = void (*)(uint32_t index, const hw::AsyncEvent& ev);
void set_async_sink(AsyncSink sink);

}  // namespace rnicdv::uverbs
