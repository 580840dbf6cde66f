// SPDX-License-Identifier: BSD-3-Clause
// One end of a run, from the control connection to the last table row: open the device,
// connect the control channel, negotiate, create and connect the QPs, run every size, print
// (and keep for JSON) the results.
#pragma once

#include <atomic>
#include <cstdio>
#include <memory>
#include <string>

#include "oob_channel.h"
#include "options.h"
#include "rnicdv/device.h"
#include "rnicdv/status.h"

namespace rnicdv::sim {
class Fabric;
}

namespace rnicperf {

struct SessionSetup {
  Options options;
  bool client = false;
  // Loopback: the channel is given (one end of a socketpair) and the server end is quiet.
  bool quiet = false;
  OobChannel channel;
  std::string device_name;  // resolved
  std::shared_ptr<rnicdv::sim::Fabric> fabric;  // see EndpointConfig::fabric
  FILE* out = stdout;
  // --run_infinitely: set (by the program's SIGINT/SIGTERM handler) to stop the run; when
  // null the session uses a flag of its own, set only by --stop-after.
  std::atomic<bool>* stop = nullptr;
  // Set by the run: -w or -y was given and no result row reached it (perftest's verifier).
  // The run itself succeeded; the program's exit status is 1.
  bool below_limit = false;
};

rnicdv::Status run_session(SessionSetup& setup);

}  // namespace rnicperf
