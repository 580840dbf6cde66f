// SPDX-License-Identifier: BSD-3-Clause
// The latency loops (perftest's run_iter_lat_write, run_iter_lat_send, run_iter_lat).
// A timestamp is taken right before every post into c.tposted; sample i is
// tposted[i + 1] - tposted[i].
#pragma once

#include "rnicdv/status.h"
#include "run_context.h"

namespace rnicperf {

struct LatencyRun {
  uint64_t posts = 0;  // operations this side posted
  WindowCount window;  // duration mode: the measured window
  uint64_t post_send_calls = 0;  // SendWr lists (Options::post_send_lists): post_send calls
};

// write_lat: each side RDMA-writes the message with the exchange number in its last byte and
// spins on the last byte of its own receive buffer for the peer's; the initiator starts.
rnicdv::Status run_write_pingpong(RunContext& c, bool initiator, LatencyRun* out);

// send_lat: each side waits for a receive completion, then sends; the initiator starts.
rnicdv::Status run_send_pingpong(RunContext& c, bool initiator, LatencyRun* out);

// read_lat / atomic_lat: one outstanding READ (or fetch-and-add) at a time; the peer is
// passive.
rnicdv::Status run_one_sided_latency(RunContext& c, LatencyRun* out);

}  // namespace rnicperf
