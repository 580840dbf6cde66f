// SPDX-License-Identifier: BSD-3-Clause
// Flush: errors, flushes and resets of one QP. Reads the QP's rings and doorbell record
// (only the control segments of WQEs never fetched); writes error CQEs through the context.
#pragma once

#include <cstdint>

#include "context.h"

namespace rnicdv::sim::rc {

class Flush {
 public:
  explicit Flush(Context& ctx) : ctx_(ctx) {}

  // Moves the QP to ERR: its transport stops, and both queues are flushed.
  void to_error(QpObj& qp);
  // Completes every outstanding SQ WQE (fetched, announced by the record, or found by a
  // scanning device) with WR_FLUSH_ERR.
  void flush_sq(QpObj& qp);
  // Completes the receive in progress and every posted receive WQE with WR_FLUSH_ERR.
  void flush_rq(QpObj& qp);
  // RESET: everything discarded without completions, the device's indices rewound.
  void reset(QpObj& qp);
  // The error CQE of one send WQE (flush errors are not counted as error CQEs).
  void send_error_cqe(QpObj& qp, const SendWqe& w, uint8_t syndrome);
  // The error CQE of the receive in progress (qp.resp.recv, which must be active); it ends.
  void recv_error_cqe(QpObj& qp, uint8_t syndrome);

 private:
  Context& ctx_;
};

}  // namespace rnicdv::sim::rc
