// SPDX-License-Identifier: BSD-3-Clause
// The bandwidth loop (perftest's run_iter_bw and run_iter_bw_server): keep up to tx-depth
// WRs in flight per QP, post lists of -l WRs with one doorbell, request a completion every
// -Q WRs (and on the last), and stamp posts and completions for the peak.
#pragma once

#include "rnicdv/status.h"
#include "run_context.h"

namespace rnicperf {

struct BandwidthRun {
  uint64_t sent = 0;      // WRs completed (credited by the signaled completions)
  uint64_t received = 0;  // receive completions (SEND)
  uint64_t t_first_post = 0, t_last_completion = 0;
  uint64_t t_first_recv = 0, t_last_recv = 0;
  WindowCount tx_window, rx_window;  // duration mode
  uint64_t post_send_calls = 0;      // SendWr lists (Options::post_send_lists): post_send calls
};

// `sender`: this side posts the test's operations. `receiver`: this side consumes SENDs
// (send_bw server, or either side of a bidirectional send_bw). In duration mode a sender
// whose peer receives tells it the count (DONE) as soon as it stops posting.
// --run_infinitely with RunContext::peer_stop: once either flag is set, this side sends the
// peer its posted count (DONE), drains its completions and reads the peer's DONE; a receiver
// receives up to the peer's count before it ends.
rnicdv::Status run_bandwidth(RunContext& c, bool sender, bool receiver, BandwidthRun* out);

}  // namespace rnicperf
