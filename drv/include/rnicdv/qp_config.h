// SPDX-License-Identifier: BSD-3-Clause
// What a QP is created with: queue sizes, the early-posting policy, the doorbell mode and the
// threading model. Included by rnicdv/qp.h.
#pragma once

#include <cstdint>

#include "rnicdv/doorbell/send_doorbell.h"
#include "rnicdv/hw/device.h"

namespace rnicdv {

// How work posted in RTR is withheld (docs/driver.md, "Early posting", the EarlyPost values).
enum class EarlyPost : uint8_t {
  strict,     // IB semantics: post_send below RTS fails with Errc::bad_state
  automatic,  // from the device profile: shadow if it fetches beyond the DBR, else in place
  in_place,   // WQEs written into the SQ; DBR and UAR untouched until RTS
  shadow,     // WQEs built in a driver-owned ring of the same layout, copied at the flush
};
const char* early_post_name(EarlyPost e) noexcept;  // "strict", "auto", "in_place", "shadow"

// Which threads may use the QP (chosen once, at creation).
enum class Threading : uint8_t {
  // One thread posts, polls and delivers CM/async events: no lock anywhere.
  single,
  // One posting thread; CM/async events (and so the RTS flush) on another thread. Posting in
  // RTS takes no lock (the state is read with acquire); below RTS it takes the QP lock and
  // re-reads the state; the flush holds the lock and publishes RTS last.
  single_poster,
  // Any number of posting threads: each post call holds the QP's post lock (as libmlx5's
  // sq.lock does), and the early-post gate is checked under it.
  thread_safe,
};
const char* threading_name(Threading t) noexcept;

class SharedReceiveQueue;

struct QpConfig {
  // RC, or UD: a UD QP sends datagrams (SEND and SEND_IMM, each with an AddressHandle, the
  // destination QP and its Q_Key: SendWr::av, remote_qpn, remote_qkey) and its receives start
  // with the packet's 40-byte GRH (wc_flags::grh). Its posts always take the gated path (the
  // typed calls are RC's and are refused). No SRQ. Or UC: connected to one peer like RC
  // (modify_qp with its address; the connection manager connects RC only), SEND and RDMA
  // WRITE with or without immediate, nothing acknowledged or retried; any other opcode is
  // refused at post (invalid_argument). An error completion ends the QP as on RC: the driver's
  // view is ERR (as for UD, whose device holds a send error in SQE). Or xrc_send, an XRC
  // initiator (rnicdv/xrc.h): RC's operations, each WR naming the remote XRC SRQ
  // (SendWr::remote_srqn), through post_send and stage_send only; no receive queue and no SRQ
  // (caps.max_recv_* ignored). Targets come from Device::create_xrc_target.
  hw::QpType type = hw::QpType::rc;
  hw::QpCaps caps;          // queue sizes; the device may round up
  // Receives come from this shared receive queue (of the same device); the QP's own receive
  // queue is then empty (caps.max_recv_* ignored) and QueuePair::post_recv is refused.
  SharedReceiveQueue* srq = nullptr;
  bool sq_sig_all = false;  // every send WQE requests a CQE
  EarlyPost early_post = EarlyPost::automatic;
  doorbell::DoorbellMode doorbell = doorbell::DoorbellMode::automatic;
  Threading threading = Threading::thread_safe;
};

// The local end's addressing that a peer needs to reach this QP (exchanged out of band or by
// the connection manager).
struct QpEndpoint {
  uint32_t qpn = 0;
  uint32_t psn = 0;  // first PSN this side will send
  hw::Gid gid;
};

}  // namespace rnicdv
