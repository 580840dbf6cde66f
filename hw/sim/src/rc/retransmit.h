// SPDX-License-Identifier: BSD-3-Clause
// Retransmission: the local ACK timer, go-back-N from a PSN, and RNR waits (IBA 9.7.5.1,
// 9.7.6.1). Writes the QP's send position, retry counters and deadlines; asks the completer
// to retire what an RNR NAK acknowledges and to complete a WQE whose retries ran out.
#pragma once

#include <cstdint>

#include "../packet/packet.h"
#include "context.h"

namespace rnicdv::sim::rc {

class Completer;

class Retransmit {
 public:
  Retransmit(Context& ctx, Completer& completer) : ctx_(ctx), completer_(completer) {}

  // Starts the local ACK timer if the QP has one and it is not running.
  void arm(QpObj& qp);
  // Resends everything from `psn` on.
  void rewind(QpObj& qp, uint32_t psn);
  void on_rnr_nak(QpObj& qp, const pkt::Packet& p);
  // The QP's expired timers at `now_ns`; true if one fired.
  bool run_timers(QpObj& qp, uint64_t now_ns);

 private:
  void on_timeout(QpObj& qp);

  Context& ctx_;
  Completer& completer_;
};

}  // namespace rnicdv::sim::rc
