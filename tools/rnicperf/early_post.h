// SPDX-License-Identifier: BSD-3-Clause
// --early-post=N: the client posts N writes (sends for SEND tests) on QP 0 while it is in
// RTR. rnicdv withholds them (no doorbell below RTS) and rings once when the QP moves to RTS
// (ESTABLISHED: the explicit modify after the TCP exchange). The client times the batch from
// that move to its first and last completions, then posts the same N after establishment
// and times them from the post, for comparison.
#pragma once

#include "report.h"
#include "rnicdv/status.h"
#include "run_context.h"

namespace rnicperf {

struct EarlyPostResult {
  EarlyPostRow in_rtr;
  EarlyPostRow after_rts;
  const char* operation = "write";
};

// Client side: QP 0 must be in RTR (the other QPs are moved to RTS here as well).
rnicdv::Status run_early_post_client(RunContext& c, uint32_t n, EarlyPostResult* out);
// Server side: waits until the client has finished (consumes the 2N SENDs of SEND tests).
rnicdv::Status run_early_post_server(RunContext& c, uint32_t n);

}  // namespace rnicperf
