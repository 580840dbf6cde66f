// SPDX-License-Identifier: BSD-3-Clause
// The agent's per-connection and per-listener state (private to the cm_*.cc files).
#pragma once

#include <memory>
#include <string>
#include <unordered_map>

#include "cm/cm_agent.h"

namespace rnicdv::sim::cm {

struct CmAgent::Record {
  uint32_t local_id = 0;
  uint32_t remote_id = 0;  // 0 until the peer's REQ or REP told it
  bool active = false;     // this side sent the REQ
  bool sidr = false;       // a SIDR request (UDP port space), not a connection
  State state = State::idle;
  uint64_t tid = 0;  // the REQ's TID; REP, RTU, MRA and REJ echo it
  hw::CmAddress local;
  hw::CmAddress remote;
  uint64_t remote_guid = 0;

  // Negotiated QP attributes (what this side's QP uses).
  uint32_t local_qpn = 0;
  uint32_t remote_qpn = 0;
  uint32_t sq_psn = 0;  // this side's starting PSN
  uint32_t rq_psn = 0;  // the peer's starting PSN
  hw::Mtu mtu = hw::Mtu::mtu1024;
  uint8_t responder_resources = 0;  // max_dest_rd_atomic
  uint8_t initiator_depth = 0;      // max_rd_atomic
  uint8_t retry_count = 7;
  uint8_t rnr_retry_count = 7;
  uint8_t local_ack_timeout = 14;
  // The primary path's (the REQ's): what qp_attr(RTR) gives both sides' address vectors.
  uint8_t traffic_class = 0;
  uint8_t hop_limit = 64;
  uint32_t flow_label = 0;
  uint8_t sl = 0;
  hw::CmPeerOffer peer;  // the peer's REQ or REP as received

  // CM timers (IBA 12.7.27-12.7.30).
  uint8_t cm_response_timeout = 0;  // this connection's CM response timeout (REQ field)
  uint8_t max_cm_retries = 0;
  uint64_t retry_interval_ns = 0;
  uint32_t tries_left = 0;
  uint64_t retry_at = 0;     // 0: not armed
  uint64_t deadline_at = 0;  // active: end of the connect budget
  uint64_t timewait_at = 0;
  uint32_t connect_timeout_ms = 0;
  MadBytes pending{};  // the REQ, REP or DREQ being retried
  bool has_rtu = false;
  MadBytes rtu{};  // sent again for a duplicate REP

  void (*established_fn)(void* ctx) = nullptr;  // passive: set_established_notifier
  void* established_ctx = nullptr;
  bool handle_alive = false;  // a CmConnection refers to it
  // Passive: the listener it came through, whether it holds one of that listener's backlog
  // slots (from the REQ until it is accepted, rejected or goes), and whether the application
  // took it from the listener (before that it has no event queue and no handle).
  uint64_t listener_serial = 0;
  bool holds_slot = false;
  bool taken = false;
  bool expired = false;       // withdrawn: not accepted within kRequestWaitMaxNs
  bool indexed_id = false;    // in by_remote_id_
  bool indexed_qpn = false;   // in by_remote_qpn_
  uint64_t established_seq = 0;  // 1-based order of establishment on this agent; 0: never
  bool fault_dreq = false;       // the DREQ was sent by a cm-dreq rule
  std::shared_ptr<CmEventQueue> events;
  std::string name;  // "cm 127.0.0.2:40001->127.0.0.3:7471"
};

struct CmAgent::Listener {
  uint16_t port = 0;
  uint32_t key = 0;         // listen_key: port space and port
  hw::IpAddress bound;     // 0.0.0.0: any IPv4 address of this device; ::, any address
  uint64_t serial = 0;      // tells a listener from a later one on the same port
  int backlog = hw::kDefaultListenBacklog;
  // Requests waiting (REQ_RCVD: neither accepted nor rejected), in all and by source address.
  uint32_t pending = 0;
  std::unordered_map<hw::IpAddress, uint32_t, hw::IpAddressHash> pending_by_source;
  // Connect requests not yet taken, each naming its record; requests taken relay their
  // wake-ups here until they are accepted (event_queue.h).
  std::shared_ptr<CmEventQueue> events;
};

std::string connection_name(const hw::CmAddress& local, const hw::CmAddress& remote);

}  // namespace rnicdv::sim::cm
