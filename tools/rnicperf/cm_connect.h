// SPDX-License-Identifier: BSD-3-Clause
// -R: the test QP is connected by rnicdv's connection manager (IB CM on the simulated fabric,
// librdmacm on real devices) instead of the explicit INIT/RTR/RTS of the TCP exchange. The
// CM port is the -p number (its port space is not TCP's). The client connects to the HCA
// address found in the server's record (its GID), so it still needs only the server's TCP
// address; the control channel keeps carrying the negotiation, barriers and results.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "endpoint.h"
#include "oob_protocol.h"
#include "rnicdv/connection.h"

namespace rnicperf {

// The attributes the CM sets on this side's QP from the options: -S, --tclass or -T, -L,
// --flow_label (QP 0's), --pkey_index and --retry_count.
void apply_path_options(const Options& o, rnicdv::ConnectionOptions* c);

// -c UD -R: each of the client's QPs finds its peer through the server's datagram service
// (rdma_cm's UDP port space, SIDR, on CM port -p): the server answers the i-th request with
// QP i's number and perftest's Q_Key, and the client's QP i sends to what came back. The QPs
// are already up (their UD bring-up needs no CM).
rnicdv::Status cm_resolve_datagrams(TestEndpoint& ep, OobSession& oob, const Options& o,
                                    bool client);

// How the two ends meet for the CM: `sync` brings both to the point where the server
// listens (rnicperf's barrier, or a perftest handshake, after which a perftest server only
// starts to listen); the client connects to `address` ("": the HCA address of the server's
// record, its GID) and, with `retry_refused`, sends its REQ again every 20 ms until the
// timeout while nobody listens there yet (REJ 8, invalid service ID; any other REJ fails).
struct CmRendezvous {
  std::function<rnicdv::Status()> sync;
  std::string address;
  bool retry_refused = false;
};

// Connects QP 0 of `ep` (in INIT; the peer's records already set). On success the QP is in
// RTS and `*conn` owns the connection (destroy it before the QP).
rnicdv::Status cm_connect(TestEndpoint& ep, const CmRendezvous& meet, const Options& o,
                          bool client, uint32_t mtu_bytes,
                          std::optional<rnicdv::Connection>* conn);
// Between two rnicperf ends: the control channel's barrier, and the server's GID.
rnicdv::Status cm_connect(TestEndpoint& ep, OobSession& oob, const Options& o, bool client,
                          uint32_t mtu_bytes, std::optional<rnicdv::Connection>* conn);

}  // namespace rnicperf
