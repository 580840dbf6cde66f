// SPDX-License-Identifier: BSD-3-Clause
// The active side: REQ, its retries and deadline, the REP, and the RTU (IBA 12.9.5-12.9.6;
// Linux cm.c ib_send_cm_req, cm_rep_handler, ib_send_cm_rtu, cm_dup_rep_handler).
#include <algorithm>
#include <bit>
#include <cstring>

#include "cm/cm_agent.h"
#include "cm/cm_record.h"

namespace rnicdv::sim::cm {
namespace {

// The largest 5-bit CM response timeout t with 4.096 us * 2^t <= ns.
uint8_t timeout_code_at_most(uint64_t ns) {
  const uint64_t units = ns / 4096;
  if (units <= 1) return 0;
  return static_cast<uint8_t>(std::min<uint64_t>(31, std::bit_width(units) - 1));
}

bool valid_mtu_code(uint8_t code) {
  return code >= 1 && code <= 5;
}

}  // namespace

Result<std::shared_ptr<CmEventQueue>> CmAgent::request_queue(const hw::CmConnectParams& p,
                                                             const std::string& what) const {
  if (p.timeout_ms == 0)
    return Status::error(Errc::invalid_argument, "%s: timeout must be non-zero", what.c_str());
  if (!port_attached())
    return Status::error(Errc::disconnected, "%s: device %s is closed", what.c_str(),
                         config_.device_name.c_str());
  auto queue = CmEventQueue::create();
  if (!queue) return queue.status().prepend(what);
  return queue;
}

std::unique_ptr<CmAgent::Record> CmAgent::new_active_record(const hw::CmConnectParams& p) {
  auto r = std::make_unique<Record>();
  r->local_id = allocate_comm_id();
  r->active = true;
  r->sidr = p.space == hw::CmPortSpace::udp;
  r->tid = tid_for(r->local_id);
  // rdma_cm binds an ephemeral source port; it travels in the cma_hdr.
  r->local = {config_.address, p.local_port ? p.local_port
                                         : static_cast<uint16_t>(32768 + rng_() % 28232)};
  r->remote = p.remote;
  r->name = connection_name(r->local, r->remote);
  r->max_cm_retries = std::min<uint8_t>(p.max_cm_retries, 15);
  r->connect_timeout_ms = p.timeout_ms;
  return r;
}

Status CmAgent::check_remote(const hw::CmAddress& remote, const std::string& what) const {
  if (remote.ip.is_unspecified() || remote.port == 0)
    return Status::error(Errc::invalid_argument, "%s: address and port must be non-zero",
                         what.c_str());
  // The device speaks one IP version (its address's); its MADs could not reach the other.
  if (remote.ip.is_v4() != config_.address.is_v4())
    return Status::error(Errc::invalid_argument, "%s: %s is %s and %s's address %s is %s",
                         what.c_str(), remote.ip.to_string().c_str(),
                         remote.ip.is_v4() ? "IPv4" : "IPv6", config_.device_name.c_str(),
                         config_.address.to_string().c_str(),
                         config_.address.is_v4() ? "IPv4" : "IPv6");
  return Status::ok();
}

void CmAgent::put_request_private_data(const Record& r, std::span<const uint8_t> data,
                                       uint8_t* out) const {
  CmaHeader cma;
  cma.src_port = r.local.port;
  cma.src = config_.address;
  cma.dst = r.remote.ip;
  encode_cma_header(cma, out);
  if (!data.empty()) std::memcpy(out + kCmaHeaderSize, data.data(), data.size());
}

Result<std::unique_ptr<hw::CmConnection>> CmAgent::connect(const hw::CmConnectParams& p) {
  if (p.space == hw::CmPortSpace::udp) return connect_sidr(p);
  const std::string what = "connect to " + hw::cm_address_string(p.remote);
  if (Status st = check_remote(p.remote, what); !st) return st;
  if (p.private_data.size() > hw::kReqPrivateDataMax)
    return Status::error(Errc::invalid_argument,
                         "%s: %zu bytes of private data, a REQ carries at most %zu", what.c_str(),
                         p.private_data.size(), hw::kReqPrivateDataMax);
  if (p.qp.qpn == 0 || p.qp.qpn > 0xffffff)
    return Status::error(Errc::invalid_argument, "%s: QPN 0x%x is not a valid RC QPN", what.c_str(),
                         p.qp.qpn);
  if (!valid_mtu_code(static_cast<uint8_t>(p.qp.path_mtu)))
    return Status::error(Errc::invalid_argument, "%s: path MTU code %u is not an IB MTU",
                         what.c_str(), static_cast<unsigned>(p.qp.path_mtu));
  auto queue = request_queue(p, what);
  if (!queue) return queue.status();

  const uint64_t t = now();
  Outbox out;
  std::unique_ptr<hw::CmConnection> handle;
  {
    std::lock_guard lock(mu_);
    std::unique_ptr<Record> rec = new_active_record(p);
    Record& r = *rec;
    r.local_qpn = p.qp.qpn;
    r.sq_psn = static_cast<uint32_t>(rng_()) & 0xffffff;
    r.mtu = std::min(p.qp.path_mtu, config_.active_mtu);
    r.responder_resources = p.qp.responder_resources;
    r.initiator_depth = p.qp.initiator_depth;
    r.retry_count = std::min<uint8_t>(p.qp.retry_count, 7);
    r.rnr_retry_count = std::min<uint8_t>(p.qp.rnr_retry_count, 7);
    r.local_ack_timeout = std::min<uint8_t>(p.qp.local_ack_timeout, 31);
    r.traffic_class = p.qp.traffic_class;
    r.hop_limit = p.qp.hop_limit ? p.qp.hop_limit : 64;
    r.flow_label = p.qp.flow_label & 0xfffff;
    r.sl = p.qp.sl & 0xf;
    // Each REQ try waits 2 * PacketLifeTime + RemoteCMResponseTimeout (IBA 12.7.27); pick the
    // response timeout so that every try fits in the caller's budget.
    const uint64_t budget_ns = uint64_t{p.timeout_ms} * 1'000'000;
    const uint64_t per_try = budget_ns / (r.max_cm_retries + 1u);
    const uint64_t life = 2 * cm_time_ns(kPacketLifeTime);
    r.cm_response_timeout = timeout_code_at_most(per_try > life ? per_try - life : 0);
    r.retry_interval_ns = life + cm_time_ns(r.cm_response_timeout);
    r.tries_left = r.max_cm_retries;
    r.events = std::move(queue.value());

    ReqMsg q;
    q.local_comm_id = r.local_id;
    q.service_id = service_id_for_port(p.remote.port);
    q.local_ca_guid = config_.ca_guid;
    q.local_qkey = 0;
    q.local_qpn = r.local_qpn;
    q.responder_resources = r.responder_resources;
    q.initiator_depth = r.initiator_depth;
    q.remote_cm_response_timeout = r.cm_response_timeout;
    q.transport_type = 0;  // RC
    q.starting_psn = r.sq_psn;
    q.local_cm_response_timeout = r.cm_response_timeout;
    q.retry_count = r.retry_count;
    q.pkey = 0xffff;
    q.path_mtu = static_cast<uint8_t>(r.mtu);
    q.rnr_retry_count = r.rnr_retry_count;
    q.max_cm_retries = r.max_cm_retries;
    q.srq = p.qp.srq;
    // RoCE v2 with a routed hop limit: permissive LIDs, the two addresses' GIDs, not
    // subnet-local (Linux cm.c, cm_format_req, with a hop limit above 1).
    q.primary_local_lid = 0xffff;
    q.primary_remote_lid = 0xffff;
    q.primary_local_gid = ip_gid(config_.address);
    q.primary_remote_gid = ip_gid(p.remote.ip);
    q.primary_flow_label = r.flow_label;
    q.primary_traffic_class = r.traffic_class;
    q.primary_hop_limit = r.hop_limit;
    q.primary_sl = r.sl;
    q.primary_local_ack_timeout = r.local_ack_timeout;
    put_request_private_data(r, p.private_data, q.private_data.data());

    r.pending = send(out, r.remote.ip, r.tid, q);
    r.state = State::req_sent;
    const uint32_t id = r.local_id;
    records_.emplace(id, std::move(rec));
    Record& stored = *find(id);
    arm(stored, TimerKind::retry, t + stored.retry_interval_ns);
    arm(stored, TimerKind::deadline, t + budget_ns);
    handle = make_connection_handle(id);
    out.schedule = std::exchange(wake_request_, UINT64_MAX);
  }
  flush(out);
  return handle;
}

void CmAgent::on_rep(Outbox& out, const hw::IpAddress& src, const MadHeader&, const RepMsg& m) {
  Record* r = find(m.remote_comm_id);
  if (!r || !r->active || src != r->remote.ip) {
    ++counters_.rx_unmatched;
    return;
  }
  switch (r->state) {
    case State::req_sent:
    case State::mra_req_rcvd:
      break;
    case State::established:
      // A duplicate REP: our RTU was lost and the passive side's REP timer fired. Answer with
      // the RTU again (Linux cm_dup_rep_handler).
      if (m.local_comm_id == r->remote_id && r->has_rtu) {
        ++counters_.rtu_resent;
        emit(out, r->remote.ip, r->rtu);
      }
      return;
    default:
      ++counters_.rx_unmatched;  // REP_RCVD: the driver is still moving the QP; drop
      return;
  }
  if (m.local_qpn == 0) {
    ++counters_.rx_unmatched;
    return;
  }
  r->remote_id = m.local_comm_id;
  r->remote_guid = m.local_ca_guid;
  r->remote_qpn = m.local_qpn;
  r->rq_psn = m.starting_psn;
  // What this side may issue is what the peer answers, and the other way round
  // (Linux cm_rep_handler swaps them; never above what was offered).
  r->initiator_depth = std::min(r->initiator_depth, m.responder_resources);
  r->responder_resources = std::min(r->responder_resources, m.initiator_depth);
  r->rnr_retry_count = m.rnr_retry_count;
  r->peer = hw::CmPeerOffer{m.local_qpn,           m.starting_psn,    r->mtu,
                            m.responder_resources, m.initiator_depth, 0,
                            m.rnr_retry_count,     m.local_ca_guid,   m.srq};
  r->retry_at = r->deadline_at = 0;
  r->state = State::rep_rcvd;
  index_remote(*r);
  hw::CmEvent ev;
  ev.type = hw::CmEventType::connect_response;
  ev.peer = r->peer;
  ev.private_data.assign(m.private_data.begin(), m.private_data.end());
  ev.detail = "REP received";
  post(*r, std::move(ev));
}

Status CmAgent::establish(uint32_t id) {
  const uint64_t t = now();
  Outbox out;
  {
    std::lock_guard lock(mu_);
    Record* r = find(id);
    if (!r) return Status::error(Errc::not_found, "cm connection 0x%08x is gone", id);
    if (r->state != State::rep_rcvd)
      return Status::error(Errc::bad_state, "%s: establish: no REP to answer (state %s)",
                           r->name.c_str(), state_name(r->state));
    RtuMsg rtu;
    rtu.local_comm_id = r->local_id;
    rtu.remote_comm_id = r->remote_id;
    r->rtu = send(out, r->remote.ip, r->tid, rtu);
    r->has_rtu = true;
    r->state = State::established;
    note_established(out, *r, t);
    out.schedule = std::exchange(wake_request_, UINT64_MAX);
  }
  flush(out);
  return Status::ok();
}

void CmAgent::connect_deadline_expired(Outbox& out, Record& r) {
  // The peer may have seen the REQ; tell it we gave up (REJ timeout with our CA GUID as ARI,
  // as cm_destroy_id does in REQ_SENT).
  send_rej_timeout(out, r);
  const bool heard = r.state == State::mra_req_rcvd;
  hw::CmEvent ev;
  ev.type = heard ? hw::CmEventType::timeout : hw::CmEventType::unreachable;
  ev.detail = "no REP from " + hw::cm_address_string(r.remote) + " within " +
              std::to_string(r.connect_timeout_ms) + " ms";
  post(r, std::move(ev));
  finish(r);
}

void CmAgent::retry_expired(Outbox& out, Record& r, uint64_t now) {
  if (r.tries_left > 0) {
    retransmit(out, r, now);
    return;
  }
  const unsigned attempts = r.max_cm_retries + 1u;
  hw::CmEvent ev;
  switch (r.state) {
    case State::req_sent:
    case State::mra_req_rcvd:
      // REQ_ERROR: rdma_cm reports it as UNREACHABLE (Linux cma.c, cma_ib_handler).
      send_rej_timeout(out, r);
      ev.type =
          r.state == State::req_sent ? hw::CmEventType::unreachable : hw::CmEventType::timeout;
      ev.detail = "no REP from " + hw::cm_address_string(r.remote) + " after " +
                  std::to_string(attempts) + " REQ attempts";
      post(r, std::move(ev));
      finish(r);
      return;
    case State::rep_sent:
    case State::mra_rep_rcvd:
      // REP_ERROR: the active side never answered our REP.
      send_rej_timeout(out, r);
      ev.type = hw::CmEventType::timeout;
      ev.detail = "no RTU from " + hw::cm_address_string(r.remote) + " after " +
                  std::to_string(attempts) + " REP attempts";
      post(r, std::move(ev));
      finish(r);
      return;
    case State::sidr_req_sent:
      // SIDR_REQ_ERROR: rdma_cm reports UNREACHABLE, ETIMEDOUT (cma_sidr_rep_handler).
      ev.type = hw::CmEventType::unreachable;
      ev.sidr = true;
      ev.detail = "no SIDR_REP from " + hw::cm_address_string(r.remote) + " after " +
                  std::to_string(attempts) + " SIDR_REQ attempts";
      post(r, std::move(ev));
      finish(r);
      return;
    case State::dreq_sent:
      // DREQ_ERROR leads to TIMEWAIT and DISCONNECTED (Linux cm.c, IB_CM_DREQ_ERROR).
      ev.type = hw::CmEventType::disconnected;
      ev.detail = "no DREP from " + hw::cm_address_string(r.remote) + " after " +
                  std::to_string(attempts) + " DREQ attempts";
      if (r.fault_dreq) ev.detail += " (the DREQ was sent by a cm-dreq fault rule)";
      post(r, std::move(ev));
      enter_timewait(r, now);
      return;
    default:
      return;
  }
}

}  // namespace rnicdv::sim::cm
