// SPDX-License-Identifier: BSD-3-Clause
// -z (perftest's --com_rdma_cm, "Data ex. method : rdma_cm"): the control channel is an RC QP
// of the test's device that the connection manager connects on CM port -p, as perftest's
// rdma_client_connect and rdma_server_connect do. The client names the server's HCA address
// (not a TCP host). Each send_all is one SEND, as perftest's rdma_write_data and
// rdma_write_keys send each of its messages; perftest reads each into its one posted receive
// (56 bytes at 4.5-0.17, its struct pingpong_dest), so against perftest every message fits
// one SEND. Receives are read back as one stream, so rnicperf's own exchange runs on it
// unchanged.
//
// The channel owns its PD, CQs, QP, buffer and connection; the device must outlive it.
// Any thread may send or receive: sends are serialized among themselves, and so are receives
// (readable included), which alone read the receive CQ and the connection's events; a send
// and a receive may run at once (the reporter's signs of life while the main thread waits).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "oob_channel.h"
#include "rnicdv/rnicdv.h"

namespace rnicperf {

struct RdmaCmChannelSetup {
  uint16_t port = 0;        // CM port (-p)
  uint32_t timeout_ms = 0;  // the whole connection set-up
  // Client: a REQ nobody listens for (REJ 8, invalid service ID) or nobody answers is tried
  // again every 50 ms until the deadline (--retry-connect); without it, the first such
  // refusal fails. Any other REJ fails at once, with its reason.
  bool retry = false;
  // Client: asked before each new try; true stops the tries (a --loopback server that ended).
  std::function<bool()> give_up;
  // --bind_source_ip: this side's CM address, which can only be the device's own. Server:
  // listens there alone ("" : every address of the device's IP version).
  std::string local;
};

// Connects to CM port setup.port of the HCA at `server` (an IPv4 or IPv6 address, or a name
// that resolves to one of the device's IP version). A wait of over a second is announced once
// through `notice`.
rnicdv::Result<OobChannel> rdma_cm_connect_channel(
    rnicdv::Device& device, const std::string& server, const RdmaCmChannelSetup& setup,
    const std::function<void(const std::string&)>& notice = {});

// Listens on CM port setup.port, calls `listening` with the address listened on (printable,
// "127.0.0.3:18515") once requests can come (its failure ends the wait, with its status),
// and accepts the first request.
rnicdv::Result<OobChannel> rdma_cm_accept_channel(
    rnicdv::Device& device, const RdmaCmChannelSetup& setup,
    const std::function<rnicdv::Status(const std::string&)>& listening = {});

}  // namespace rnicperf
