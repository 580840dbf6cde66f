// SPDX-License-Identifier: BSD-3-Clause
// The RC transport of one device: the context and the roles, wired together. The engine
// (engine.cc) calls in at four points: the requester and the responder's answer queue each
// engine pass, inbound packets to the responder or the completer, and the timers; the control
// path uses the state machine and Flush.
#pragma once

#include "completer.h"
#include "context.h"
#include "flush.h"
#include "qp_state.h"
#include "requester.h"
#include "responder.h"
#include "retransmit.h"
#include "sq_fetch.h"

namespace rnicdv::sim::rc {

struct Transport {
  Transport(Hca& device, DeviceCounters& counters, const MrTable& mrs, const hw::DeviceInfo& info,
            const DeviceConfig& config)
      : ctx(device, counters, mrs, info, config),
        flush(ctx),
        fetcher(ctx),
        retransmit(ctx, completer),
        completer(ctx, flush, retransmit),
        requester(ctx, fetcher, completer, retransmit),
        responder(ctx, flush),
        states(ctx, flush, completer) {}

  Context ctx;
  Flush flush;
  SqFetcher fetcher;
  Retransmit retransmit;  // bound to the completer below: neither uses the other while built
  Completer completer;
  Requester requester;
  Responder responder;
  QpStateMachine states;
};

}  // namespace rnicdv::sim::rc
