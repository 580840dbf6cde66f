// SPDX-License-Identifier: BSD-3-Clause
// The QP state machine (IBA 10.3.1): which transitions are legal, which attributes each one
// requires and accepts, and what each does to the transport (a move to ERR flushes, RESET
// rewinds, SQD drains, RTS runs a doorbell kept from RTR).
#pragma once

#include <cstdint>

#include "context.h"
#include "rnicdv/status.h"

namespace rnicdv::sim::rc {

class Completer;
class Flush;

class QpStateMachine {
 public:
  QpStateMachine(Context& ctx, Flush& flush, Completer& completer)
      : ctx_(ctx), flush_(flush), completer_(completer) {}

  // The error names the QP, the transition and the reason; nothing is changed.
  Status check(const QpObj& qp, const hw::QpAttr& attr, uint32_t mask) const;
  // Applies a transition `check` accepted.
  void apply(QpObj& qp, const hw::QpAttr& attr, uint32_t mask);

 private:
  Context& ctx_;
  Flush& flush_;
  Completer& completer_;
};

}  // namespace rnicdv::sim::rc
