// SPDX-License-Identifier: BSD-3-Clause
// The requester: turns fetched SQ WQEs into request packets (IBA 9.7.1-9.7.4), MTU-segmented,
// within the go-back-N window, honouring max_rd_atomic and fences. Writes the QP's next PSN
// and send position; gathers payload from local buffers into the context's frame.
#pragma once

#include <cstdint>

#include "context.h"

namespace rnicdv::sim::rc {

class Completer;
class Retransmit;
class SqFetcher;

class Requester {
 public:
  Requester(Context& ctx, SqFetcher& fetcher, Completer& completer, Retransmit& retransmit)
      : ctx_(ctx), fetcher_(fetcher), completer_(completer), retransmit_(retransmit) {}

  // Sends up to `budget` request packets of this QP (RTS, or SQD for messages already
  // started), fetching WQEs as needed. True if anything happened.
  bool progress(QpObj& qp, uint32_t budget);

 private:
  bool may_start(QpObj& qp, const SendWqe& w);
  bool send_request_packet(QpObj& qp, SendWqe& w);

  Context& ctx_;
  SqFetcher& fetcher_;
  Completer& completer_;
  Retransmit& retransmit_;
};

}  // namespace rnicdv::sim::rc
