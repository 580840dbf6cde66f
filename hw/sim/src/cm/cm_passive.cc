// SPDX-License-Identifier: BSD-3-Clause
// The passive side: the REQ (matching, duplicates, stale connections), the REP and its retries,
// the RTU, and COMM_EST standing in for a lost RTU (IBA 12.9.5-12.9.6; Linux cm.c
// cm_req_handler, cm_match_req, ib_send_cm_rep, cm_rtu_handler, cm_establish).
#include <algorithm>
#include <cstring>

#include "cm/cm_agent.h"
#include "cm/cm_record.h"

namespace rnicdv::sim::cm {

void CmAgent::reject_req(Outbox& out, const hw::IpAddress& src, const MadHeader& hdr, const ReqMsg& m,
                         uint16_t reason) {
  // A REJ answering a REQ that has no connection of ours: Local Comm ID 0, Remote Comm ID =
  // the requester's, Message REJected = REQ, the REQ's TID (Linux cm_issue_rej).
  RejMsg rej;
  rej.local_comm_id = 0;
  rej.remote_comm_id = m.local_comm_id;
  rej.message_rejected = 0;
  rej.reason = reason;
  send(out, src, hdr.tid, rej);
}

CmAgent::ListenerMatch CmAgent::match_listener(hw::CmPortSpace space, uint64_t service_id,
                                               std::span<const uint8_t> private_data) {
  ListenerMatch match;
  const bool in_space = space == hw::CmPortSpace::tcp ? is_rdma_tcp_service(service_id)
                                                      : is_rdma_udp_service(service_id);
  auto it = listeners_.end();
  if (in_space)
    it = listeners_.find(listen_key(space, static_cast<uint16_t>(service_id & 0xffff)));
  if (it == listeners_.end()) {
    match.miss = ListenerMatch::Miss::no_service;
    return match;
  }
  Result<CmaHeader> cma = decode_cma_header(private_data.first(kCmaHeaderSize));
  if (!cma) {
    match.miss = ListenerMatch::Miss::bad_header;
    return match;
  }
  // A listener bound to one address hears requests for it; 0.0.0.0 those for IPv4 addresses
  // (as Linux's AF_INET wildcard, cma_match_private_data); :: any.
  const hw::IpAddress& bound = it->second->bound;
  if (bound.is_unspecified() ? bound.is_v4() && !cma->dst.is_v4() : cma->dst != bound) {
    match.miss = ListenerMatch::Miss::no_service;
    return match;
  }
  match.listener = it->second.get();
  match.cma = cma.value();
  return match;
}

bool CmAgent::admit(const Listener& listener, const hw::IpAddress& src) {
  const auto backlog = static_cast<uint32_t>(listener.backlog);
  const auto share = static_cast<uint32_t>(source_share(listener.backlog));
  if (listener.pending >= backlog) {
    ++counters_.req_dropped_backlog;
    return false;
  }
  if (auto it = listener.pending_by_source.find(src);
      it != listener.pending_by_source.end() && it->second >= share) {
    ++counters_.req_dropped_source_share;
    return false;
  }
  return true;
}

void CmAgent::on_req(Outbox& out, const hw::IpAddress& src, const MadHeader& hdr, const ReqMsg& m,
                     uint64_t now_ns) {
  // A duplicate: the same (remote CA GUID, remote Comm ID) is known. Whatever its state, the
  // answer is already under way (REP retries) or was given; drop it (Linux cm_dup_req_handler).
  if (find_by_remote(m.local_ca_guid, m.local_comm_id)) {
    ++counters_.duplicate_req_dropped;
    return;
  }
  // A retransmission of a REQ a cm-reject rule answered: the same REJ again (cm_faults.cc).
  if (fault_reject_again(out, src, hdr, m)) return;
  if (m.transport_type != 0 || m.extended_transport_type != 0) {
    reject_req(out, src, hdr, m, hw::reject_reason::invalid_transport_type);
    return;
  }
  const ListenerMatch match = match_listener(hw::CmPortSpace::tcp, m.service_id, m.private_data);
  if (match.miss != ListenerMatch::Miss::none) {
    reject_req(out, src, hdr, m,
               match.miss == ListenerMatch::Miss::bad_header ? hw::reject_reason::unsupported
                                                             : hw::reject_reason::invalid_service_id);
    return;
  }
  Listener& listener = *match.listener;
  const CmaHeader& cma = match.cma;
  const auto port = listener.port;
  if (m.path_mtu < 1 || m.path_mtu > static_cast<uint8_t>(config_.max_mtu)) {
    reject_req(out, src, hdr, m, hw::reject_reason::invalid_mtu);
    return;
  }
  if (m.local_qpn == 0) {
    reject_req(out, src, hdr, m, hw::reject_reason::no_qp);
    return;
  }
  // A stale connection: the peer's (CA GUID, QPN) is still bound to a live connection of
  // ours, so the peer lost it. Reject the new REQ and tear the old one down (Linux
  // cm_match_req: REJ 10, then a DREQ on the old connection).
  if (auto it = by_remote_qpn_.find({m.local_ca_guid, m.local_qpn}); it != by_remote_qpn_.end()) {
    reject_req(out, src, hdr, m, hw::reject_reason::stale_connection);
    if (Record* old = find(it->second); old && old->state == State::established) {
      send_dreq(out, *old, now_ns);
      hw::CmEvent ev;
      ev.type = hw::CmEventType::disconnected;
      ev.detail = "the peer reused its QPN for a new connection (stale connection)";
      post(*old, std::move(ev));
    }
    return;
  }
  // Admission. A request waits (holds a backlog slot) from here until it is accepted,
  // rejected or goes; past the backlog, or past its source's share of it, the REQ is dropped
  // without a REJ. That is what Linux does when rdma_cm's backlog is used up:
  // ucma_connect_event_handler returns -ENOMEM, cma_ib_req_handler returns that error to the
  // IB CM (destroying the new rdma_cm ID), and cm_process_work's cm_destroy_id(id, -ENOMEM)
  // resets the ID in REQ_RCVD to idle without sending a REJ ("Do not reject to allow future
  // retries"), where any other error would send REJ 28. The requester's REQ retries find room
  // once requests are answered or expire, a flood from forged addresses draws no REJ toward
  // them, and nothing is held for a dropped REQ (its retry is a new REQ).
  if (!admit(listener, src)) return;
  // A cm-reject rule may answer it with a REJ instead of offering it (cm_faults.cc).
  if (fault_reject(out, src, hdr, m)) return;

  auto rec = std::make_unique<Record>();
  Record& r = *rec;
  r.local_id = allocate_comm_id();
  r.remote_id = m.local_comm_id;
  r.active = false;
  r.tid = hdr.tid;
  r.local = {config_.address, port};
  r.remote = {src, cma.src_port};
  r.remote_guid = m.local_ca_guid;
  r.name = connection_name(r.local, r.remote);
  r.remote_qpn = m.local_qpn;
  r.rq_psn = m.starting_psn;
  // Chosen now, not at accept: rdma_cm moves the passive QP to RTS before it sends the REP.
  r.sq_psn = static_cast<uint32_t>(rng_()) & 0xffffff;
  r.mtu = static_cast<hw::Mtu>(m.path_mtu);
  r.responder_resources = m.initiator_depth;  // swapped, bounded again at accept
  r.initiator_depth = m.responder_resources;
  // The passive QP uses the requester's retry counts and ACK timeout (Linux
  // cm_init_qp_rts_attr with the values cm_req_handler stored).
  r.retry_count = m.retry_count;
  r.rnr_retry_count = m.rnr_retry_count;
  r.local_ack_timeout = m.primary_local_ack_timeout;
  // And the path's traffic class, hop limit, flow label and SL (cm_format_paths_from_req).
  r.traffic_class = m.primary_traffic_class;
  r.hop_limit = m.primary_hop_limit ? m.primary_hop_limit : 64;
  r.flow_label = m.primary_flow_label;
  r.sl = m.primary_sl;
  r.cm_response_timeout = m.local_cm_response_timeout;
  r.max_cm_retries = m.max_cm_retries;
  // Each REP try waits the requester's Local CM Response Timeout (IBA 12.7.28), within
  // kRepTryMaxNs.
  r.retry_interval_ns = std::min(cm_time_ns(m.local_cm_response_timeout), kRepTryMaxNs);
  r.peer = hw::CmPeerOffer{m.local_qpn,           m.starting_psn,    r.mtu,
                           m.responder_resources, m.initiator_depth, m.retry_count,
                           m.rnr_retry_count,     m.local_ca_guid,   m.srq};
  // No event queue (and no descriptor) until the application takes the request.
  r.state = State::req_rcvd;
  r.listener_serial = listener.serial;
  r.holds_slot = true;
  ++listener.pending;
  ++listener.pending_by_source[src];
  const uint32_t id = r.local_id;
  records_.emplace(id, std::move(rec));
  Record& stored = *find(id);
  index_remote(stored);
  arm(stored, TimerKind::deadline, now_ns + kRequestWaitMaxNs);

  hw::CmEvent ev;
  ev.type = hw::CmEventType::connect_request;
  ev.remote = stored.remote;
  ev.peer = stored.peer;
  ev.private_data.assign(m.private_data.begin() + kCmaHeaderSize, m.private_data.end());
  ev.detail = "REQ received";
  listener.events->push(std::move(ev), id);
}

void CmAgent::passive_deadline_expired(Outbox& out, Record& r) {
  hw::CmEvent ev;
  ev.type = hw::CmEventType::timeout;
  if (r.state == State::req_rcvd) {
    // Withdrawn as an unanswered request is destroyed: REJ 28 from REQ_RCVD (cm_destroy_id).
    // Unless the application took it, nobody hears of it.
    ++counters_.requests_expired;
    send_rej(out, r, hw::reject_reason::consumer_defined, 0, {});
    r.expired = true;
    ev.detail = "the request from " + hw::cm_address_string(r.remote) +
                " was not accepted within " + std::to_string(kRequestWaitMaxNs / 1'000'000) + " ms";
  } else {
    // REP_ERROR, however long the requester's timeouts claimed the REP retries may run.
    ++counters_.rep_waits_expired;
    send_rej_timeout(out, r);
    ev.detail = "no RTU from " + hw::cm_address_string(r.remote) + " within " +
                std::to_string(kRepWaitMaxNs / 1'000'000) + " ms of the REP";
  }
  post(r, std::move(ev));
  finish(r);
}

Status CmAgent::accept(uint32_t id, const hw::CmAcceptParams& p) {
  const uint64_t t = now();
  Outbox out;
  {
    std::lock_guard lock(mu_);
    Record* r = find(id);
    if (!r) return Status::error(Errc::not_found, "cm connection 0x%08x is gone", id);
    Status st = r->sidr ? accept_sidr(out, *r, p) : accept_req(out, *r, p, t);
    if (!st) return st;
    out.schedule = std::exchange(wake_request_, UINT64_MAX);
  }
  flush(out);
  return Status::ok();
}

Status CmAgent::accept_req(Outbox& out, Record& r, const hw::CmAcceptParams& p, uint64_t t) {
  if (r.active || r.state != State::req_rcvd) {
    const bool withdrawn = !r.active && r.state == State::idle;
    const std::string why =
        r.expired ? "the request expired (not accepted within " +
                         std::to_string(kRequestWaitMaxNs / 1'000'000) + " ms)"
        : withdrawn ? std::string("the peer withdrew its request")
                    : std::string("no request to answer (state ") + state_name(r.state) + ")";
    return Status::error(withdrawn ? Errc::rejected : Errc::bad_state, "%s: accept: %s",
                         r.name.c_str(), why.c_str());
  }
  if (p.private_data.size() > hw::kRepPrivateDataMax)
    return Status::error(Errc::invalid_argument,
                         "%s: accept: %zu bytes of private data, a REP carries at most %zu",
                         r.name.c_str(), p.private_data.size(), hw::kRepPrivateDataMax);
  if (p.qp.qpn == 0 || p.qp.qpn > 0xffffff)
    return Status::error(Errc::invalid_argument, "%s: accept: QPN 0x%x is not a valid RC QPN",
                         r.name.c_str(), p.qp.qpn);
  if (!port_attached())
    return Status::error(Errc::disconnected, "%s: accept: device %s is closed", r.name.c_str(),
                         config_.device_name.c_str());
  // The connection's events get a descriptor of their own now (event_queue.h).
  if (Status st = r.events->attach_fd(); !st) return st.prepend(r.name + ": accept");
  release_slot(r);
  r.local_qpn = p.qp.qpn;
  // Never answer more READ/atomics than offered, nor issue more than the peer answers.
  r.responder_resources = std::min(r.responder_resources, p.qp.responder_resources);
  r.initiator_depth = std::min(r.initiator_depth, p.qp.initiator_depth);

  RepMsg rep;
  rep.local_comm_id = r.local_id;
  rep.remote_comm_id = r.remote_id;
  rep.local_qkey = 0;
  rep.local_qpn = r.local_qpn;
  rep.starting_psn = r.sq_psn;
  rep.responder_resources = r.responder_resources;
  rep.initiator_depth = r.initiator_depth;
  rep.target_ack_delay = 0;
  rep.rnr_retry_count = std::min<uint8_t>(p.qp.rnr_retry_count, 7);
  rep.local_ca_guid = config_.ca_guid;
  rep.srq = p.qp.srq;
  std::copy(p.private_data.begin(), p.private_data.end(), rep.private_data.begin());
  r.pending = send(out, r.remote.ip, r.tid, rep);
  r.tries_left = r.max_cm_retries;
  r.state = State::rep_sent;
  arm(r, TimerKind::retry, t + r.retry_interval_ns);
  arm(r, TimerKind::deadline, t + kRepWaitMaxNs);
  return Status::ok();
}

void CmAgent::on_rtu(Outbox& out, const hw::IpAddress& src, const RtuMsg& m, uint64_t now_ns) {
  Record* r = find(m.remote_comm_id);
  if (!r || r->active || r->remote_id != m.local_comm_id || src != r->remote.ip ||
      (r->state != State::rep_sent && r->state != State::mra_rep_rcvd)) {
    ++counters_.rx_unmatched;  // late or duplicate (COMM_EST got there first): drop
    return;
  }
  r->retry_at = r->deadline_at = 0;
  r->state = State::established;
  hw::CmEvent ev;
  ev.type = hw::CmEventType::established;
  ev.detail = "RTU received";
  post(*r, std::move(ev));
  note_established(out, *r, now_ns);
}

Status CmAgent::notify_comm_est(uint32_t id) {
  Outbox out;
  Status st = apply_comm_est(id, out);
  flush(out);
  call_due_notifiers();
  return st;
}

Status CmAgent::apply_comm_est(uint32_t id, Outbox& out) {
  const uint64_t t = now();
  std::lock_guard lock(mu_);
  Record* r = find(id);
  if (!r) return Status::error(Errc::not_found, "cm connection 0x%08x is gone", id);
  switch (r->state) {
    case State::rep_sent:
    case State::mra_rep_rcvd: {
      // COMM_EST stands in for the RTU: established once, REP retries stop (ib_cm_notify,
      // IBA 12.9.6 "ESTABLISHED on any receive in RTR").
      r->retry_at = r->deadline_at = 0;
      r->state = State::established;
      ++counters_.comm_est_established;
      hw::CmEvent ev;
      ev.type = hw::CmEventType::established;
      ev.detail = "COMM_EST (first request received in RTR)";
      post(*r, std::move(ev));
      note_established(out, *r, t);
      out.schedule = std::exchange(wake_request_, UINT64_MAX);
      return Status::ok();
    }
    case State::established:
    case State::dreq_sent:
    case State::timewait:
      return Status::ok();  // the RTU got there first (EISCONN), or it is already closing
    default:
      return Status::error(Errc::bad_state, "%s: COMM_EST in state %s", r->name.c_str(),
                           state_name(r->state));
  }
}

}  // namespace rnicdv::sim::cm
