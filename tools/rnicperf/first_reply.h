// SPDX-License-Identifier: BSD-3-Clause
// --first-reply=N (send_lat --loopback, simulated HCAs): what early posting buys on a fresh
// connection.
//
// A client connects through rnicdv's CM and sends a request as soon as its QP can send; the
// server, whose QP is still in RTR when the request can already arrive, replies the moment the
// request's RECV completes. The figure is the time from the client's Connection::connect() to
// the reply's arrival at the client, over N fresh connections for each way the server can
// reply:
//   early:  it posts the reply at once; the driver withholds it and rings when the QP reaches
//           RTS (at the RTU, or at a forwarded COMM_EST);
//   queue:  a strict QP; the reply waits in the server's own queue until it reads the
//           ESTABLISHED event, then is posted (what a libmlx5 consumer must write);
// each with the client's RTU delivered, and lost (dropped at the client's CM by fault
// injection, so that the server is established by COMM_EST). The ways are interleaved
// connection by connection so that noise falls on all of them alike.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "options.h"
#include "rnicdv/status.h"

namespace rnicperf {

struct FirstReplyRow {
  const char* reply = "";  // "early post" or "own queue"
  const char* rtu = "";    // "delivered" or "lost"
  std::vector<double> us;  // per connection: connect() to the reply's arrival
  uint64_t released_before_event = 0;  // early: replies that left before the server read ESTABLISHED
};

struct FirstReplyResult {
  std::vector<FirstReplyRow> rows;
  std::string transport;  // the fabric's wire and addresses
};

// Runs the whole measurement on two simulated HCAs (sim0 serves, sim1 connects) on the
// fabric `o.wire` selects (default: in-process), server on a thread.
rnicdv::Result<FirstReplyResult> run_first_reply(const Options& o);

// The table (stdout) and, with --out_json, the JSON report.
rnicdv::Status report_first_reply(const Options& o, const FirstReplyResult& r);

}  // namespace rnicperf
