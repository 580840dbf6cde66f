// SPDX-License-Identifier: BSD-3-Clause
// Service ID Resolution (IBA 12.11): a UD QP learns the QPN and Q_Key of the service at a port
// of rdma_cm's UDP port space. The active side sends a SIDR_REQ and retries it until a
// SIDR_REP comes or its tries run out; the passive side offers the request to the UDP
// listener of that port and answers with the application's word. Neither side keeps anything
// afterwards: there is no connection (Linux cm.c: ib_send_cm_sidr_req, cm_sidr_req_handler,
// ib_send_cm_sidr_rep, cm_sidr_rep_handler).
#include <algorithm>
#include <bit>
#include <cstring>

#include "cm/cm_agent.h"
#include "cm/cm_record.h"

namespace rnicdv::sim::cm {

Result<std::unique_ptr<hw::CmConnection>> CmAgent::connect_sidr(const hw::CmConnectParams& p) {
  const std::string what = "resolve UD service " + hw::cm_address_string(p.remote);
  if (Status st = check_remote(p.remote, what); !st) return st;
  if (p.private_data.size() > hw::kSidrReqPrivateDataMax)
    return Status::error(Errc::invalid_argument,
                         "%s: %zu bytes of private data, a SIDR_REQ carries at most %zu",
                         what.c_str(), p.private_data.size(), hw::kSidrReqPrivateDataMax);
  auto queue = request_queue(p, what);
  if (!queue) return queue.status();

  const uint64_t t = now();
  Outbox out;
  std::unique_ptr<hw::CmConnection> handle;
  {
    std::lock_guard lock(mu_);
    std::unique_ptr<Record> rec = new_active_record(p);
    Record& r = *rec;
    // The MAD layer's retries of the SIDR_REQ share the caller's budget evenly.
    const uint64_t budget_ns = uint64_t{p.timeout_ms} * 1'000'000;
    r.retry_interval_ns = std::max<uint64_t>(budget_ns / (r.max_cm_retries + 1u), 1);
    r.tries_left = r.max_cm_retries;
    r.events = std::move(queue.value());

    SidrReqMsg q;
    q.request_id = r.local_id;
    q.pkey = 0xffff;
    q.service_id = udp_service_id_for_port(p.remote.port);
    put_request_private_data(r, p.private_data, q.private_data.data());
    r.pending = send(out, r.remote.ip, r.tid, q);
    r.state = State::sidr_req_sent;
    const uint32_t id = r.local_id;
    records_.emplace(id, std::move(rec));
    Record& stored = *find(id);
    // No deadline besides the tries: the last one's wait ends the budget (as the MAD layer's
    // retries end a SIDR request, with IB_CM_SIDR_REQ_ERROR).
    arm(stored, TimerKind::retry, t + stored.retry_interval_ns);
    handle = make_connection_handle(id);
    out.schedule = std::exchange(wake_request_, UINT64_MAX);
  }
  flush(out);
  return handle;
}

void CmAgent::refuse_sidr(Outbox& out, const hw::IpAddress& src, const MadHeader& hdr, const SidrReqMsg& m,
                          uint8_t status) {
  SidrRepMsg rep;
  rep.request_id = m.request_id;
  rep.status = status;
  rep.service_id = m.service_id;
  send(out, src, hdr.tid, rep);
}

void CmAgent::on_sidr_req(Outbox& out, const hw::IpAddress& src, const MadHeader& hdr, const SidrReqMsg& m,
                          uint64_t now_ns) {
  // A retransmission of a request still waiting for the application: its answer will come.
  // (One already answered was forgotten; its retry is offered again, as Linux's CM does.)
  if (sidr_by_remote_.contains({src, m.request_id})) {
    ++counters_.duplicate_req_dropped;
    return;
  }
  const ListenerMatch match = match_listener(hw::CmPortSpace::udp, m.service_id, m.private_data);
  if (match.miss != ListenerMatch::Miss::none) {
    refuse_sidr(out, src, hdr, m,
                match.miss == ListenerMatch::Miss::bad_header ? hw::sidr_status::reject
                                                              : hw::sidr_status::unsupported);
    return;
  }
  Listener& listener = *match.listener;
  const CmaHeader& cma = match.cma;
  const auto port = listener.port;
  // The same admission as a REQ's: past the backlog or the source's share, dropped unanswered
  // (the requester's retries find room later).
  if (!admit(listener, src)) return;

  auto rec = std::make_unique<Record>();
  Record& r = *rec;
  r.local_id = allocate_comm_id();
  r.remote_id = m.request_id;
  r.active = false;
  r.sidr = true;
  r.tid = hdr.tid;
  r.local = {config_.address, port};
  r.remote = {src, cma.src_port};
  r.name = connection_name(r.local, r.remote);
  r.state = State::sidr_req_rcvd;
  r.listener_serial = listener.serial;
  r.holds_slot = true;
  ++listener.pending;
  ++listener.pending_by_source[src];
  const uint32_t id = r.local_id;
  records_.emplace(id, std::move(rec));
  sidr_by_remote_[{src, m.request_id}] = id;
  Record& stored = *find(id);
  arm(stored, TimerKind::deadline, now_ns + kRequestWaitMaxNs);

  hw::CmEvent ev;
  ev.type = hw::CmEventType::connect_request;
  ev.sidr = true;
  ev.remote = stored.remote;
  ev.private_data.assign(m.private_data.begin() + kCmaHeaderSize, m.private_data.end());
  ev.detail = "SIDR_REQ received";
  listener.events->push(std::move(ev), id);
}

void CmAgent::answer_sidr(Outbox& out, Record& r, uint8_t status, uint32_t qpn, uint32_t qkey,
                          std::span<const uint8_t> private_data) {
  SidrRepMsg rep;
  rep.request_id = r.remote_id;
  rep.status = status;
  rep.qpn = status == hw::sidr_status::success ? qpn : 0;
  rep.qkey = status == hw::sidr_status::success ? qkey : 0;
  rep.service_id = udp_service_id_for_port(r.local.port);
  std::copy(private_data.begin(), private_data.end(), rep.private_data.begin());
  send(out, r.remote.ip, r.tid, rep);
  finish(r);
}

Status CmAgent::accept_sidr(Outbox& out, Record& r, const hw::CmAcceptParams& p) {
  if (r.active || r.state != State::sidr_req_rcvd) {
    const std::string why =
        r.expired ? "the request expired (not answered within " +
                        std::to_string(kRequestWaitMaxNs / 1'000'000) + " ms)"
                  : std::string("no SIDR request to answer (state ") + state_name(r.state) + ")";
    return Status::error(Errc::bad_state, "%s: accept: %s", r.name.c_str(), why.c_str());
  }
  if (p.private_data.size() > hw::kSidrRepPrivateDataMax)
    return Status::error(Errc::invalid_argument,
                         "%s: accept: %zu bytes of private data, a SIDR_REP carries at most %zu",
                         r.name.c_str(), p.private_data.size(), hw::kSidrRepPrivateDataMax);
  if (p.qp.qpn == 0 || p.qp.qpn > 0xffffff)
    return Status::error(Errc::invalid_argument, "%s: accept: QPN 0x%x is not a valid UD QPN",
                         r.name.c_str(), p.qp.qpn);
  if (!port_attached())
    return Status::error(Errc::disconnected, "%s: accept: device %s is closed", r.name.c_str(),
                         config_.device_name.c_str());
  r.local_qpn = p.qp.qpn;
  answer_sidr(out, r, hw::sidr_status::success, p.qp.qpn, p.qp.qkey, p.private_data);
  return Status::ok();
}

Status CmAgent::reject_sidr(Outbox& out, Record& r, std::span<const uint8_t> private_data) {
  if (r.active || r.state != State::sidr_req_rcvd)
    return Status::error(Errc::bad_state, "%s: reject: no SIDR request to answer (state %s)",
                         r.name.c_str(), state_name(r.state));
  if (private_data.size() > hw::kSidrRepPrivateDataMax)
    return Status::error(Errc::invalid_argument,
                         "%s: reject: %zu bytes of private data, a SIDR_REP carries at most %zu",
                         r.name.c_str(), private_data.size(), hw::kSidrRepPrivateDataMax);
  // The SIDR_REP has a status, not a REJ's reason: rdma_reject's becomes "rejected".
  answer_sidr(out, r, hw::sidr_status::reject, 0, 0, private_data);
  return Status::ok();
}

void CmAgent::on_sidr_rep(const hw::IpAddress& src, const MadHeader& hdr, const SidrRepMsg& m) {
  Record* r = find(m.request_id);
  if (!r || !r->active || !r->sidr || r->state != State::sidr_req_sent ||
      src != r->remote.ip || hdr.tid != r->tid) {
    ++counters_.rx_unmatched;  // late, duplicate or forged: the request is answered or gone
    return;
  }
  hw::CmEvent ev;
  ev.sidr = true;
  ev.private_data.assign(m.private_data.begin(), m.private_data.end());
  if (m.status == hw::sidr_status::success && m.qpn != 0) {
    ev.type = hw::CmEventType::connect_response;
    ev.peer.qpn = m.qpn;
    ev.peer.qkey = m.qkey;
    r->remote_qpn = m.qpn;
    ev.detail = "SIDR_REP received";
  } else {
    ev.type = hw::CmEventType::unreachable;
    ev.sidr_status = m.status == hw::sidr_status::success ? hw::sidr_status::no_qp : m.status;
    ev.detail = "SIDR_REP from " + hw::cm_address_string(r->remote) + ": " +
                hw::sidr_status_name(ev.sidr_status) + " (status " +
                std::to_string(ev.sidr_status) + ")";
  }
  post(*r, std::move(ev));
  finish(*r);
}

void CmAgent::sidr_expired(Outbox& out, Record& r) {
  if (r.state != State::sidr_req_rcvd) return;
  // Not answered in time: refused, as destroying it unanswered is.
  ++counters_.requests_expired;
  r.expired = true;
  hw::CmEvent ev;
  ev.sidr = true;
  ev.type = hw::CmEventType::timeout;
  ev.detail = "the SIDR request from " + hw::cm_address_string(r.remote) +
              " was not answered within " + std::to_string(kRequestWaitMaxNs / 1'000'000) +
              " ms";
  post(r, std::move(ev));
  answer_sidr(out, r, hw::sidr_status::reject, 0, 0, {});
}

}  // namespace rnicdv::sim::cm
