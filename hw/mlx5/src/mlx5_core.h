// SPDX-License-Identifier: BSD-3-Clause
// State of an open device that its objects share: the verbs context, the ports and the caps.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "mlx5_port.h"
#include "mlx5_verbs.h"
#include "rnicdv/hw/device.h"

namespace rnicdv::hw::mlx5 {

class AsyncEvents;  // mlx5_async_events.h
class EventThread;  // mlx5_event_thread.h

struct DeviceCore {
  ContextRef ctx;
  std::string name;                   // "mlx5_0"
  std::vector<PortAddressing> ports;  // index i describes port i + 1
  DeviceCaps caps;
  // The device's event thread (not running until a notifier asks for it), shared with the
  // connection manager, and the async events it may read.
  std::shared_ptr<EventThread> events;
  std::shared_ptr<AsyncEvents> async;
};

}  // namespace rnicdv::hw::mlx5
