// SPDX-License-Identifier: BSD-3-Clause
// Ending connections: REJ, MRA, DREQ/DREP, TIMEWAIT and the destruction of a connection
// (IBA 12.9.6-12.9.8; Linux cm.c ib_send_cm_rej, cm_rej_handler, cm_mra_handler,
// ib_send_cm_dreq, cm_dreq_handler, cm_issue_drep, cm_drep_handler, cm_destroy_id).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "cm/cm_agent.h"
#include "cm/cm_record.h"

namespace rnicdv::sim::cm {
namespace {

uint64_t load_guid(const std::array<uint8_t, kRejAriMax>& ari) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | ari[i];
  return v;
}

}  // namespace

void CmAgent::send_rej(Outbox& out, const Record& r, uint16_t reason, uint8_t message_rejected,
                       std::span<const uint8_t> private_data) {
  RejMsg rej;
  // From REQ_RCVD Linux sends Local Comm ID 0 (cm_format_rej); the requester then matches on
  // its own ID.
  rej.local_comm_id = r.state == State::req_rcvd ? 0 : r.local_id;
  rej.remote_comm_id = r.remote_id;
  rej.message_rejected = message_rejected;
  rej.reason = reason;
  std::copy_n(private_data.begin(), std::min(private_data.size(), rej.private_data.size()),
              rej.private_data.begin());
  send(out, r.remote.ip, r.tid, rej);
}

void CmAgent::send_rej_timeout(Outbox& out, const Record& r) {
  // REJ "timeout" carries the rejecter's CA GUID as ARI (IBA 12.6.7.2), by which the peer
  // finds the connection even before it knows our communication ID.
  RejMsg rej;
  rej.local_comm_id = r.local_id;
  rej.remote_comm_id = r.remote_id;
  rej.message_rejected = 2;  // other
  rej.reason = hw::reject_reason::timeout;
  rej.reject_info_length = 8;
  for (int i = 0; i < 8; ++i) rej.ari[i] = static_cast<uint8_t>(config_.ca_guid >> (56 - 8 * i));
  send(out, r.remote.ip, r.tid, rej);
}

void CmAgent::enter_timewait(Record& r, uint64_t now) {
  release_slot(r);
  // The QPN may be bound again by the peer once we are in TIMEWAIT, so it leaves the stale
  // index; the communication ID stays so that late duplicates are still recognised.
  unindex_live(r);
  r.state = State::timewait;
  r.retry_at = r.deadline_at = 0;
  // TIMEWAIT lasts about one local ACK timeout (Linux cm_enter_timewait uses av.timeout).
  arm(r, TimerKind::timewait, now + cm_time_ns(r.local_ack_timeout));
}

Status CmAgent::reject(uint32_t id, uint16_t reason, std::span<const uint8_t> private_data) {
  const uint64_t t = now();
  Outbox out;
  {
    std::lock_guard lock(mu_);
    Record* r = find(id);
    if (!r) return Status::error(Errc::not_found, "cm connection 0x%08x is gone", id);
    Status st = r->sidr ? reject_sidr(out, *r, private_data)
                        : reject_conn(out, *r, reason, private_data, t);
    if (!st) return st;
    out.schedule = std::exchange(wake_request_, UINT64_MAX);
  }
  flush(out);
  return Status::ok();
}

Status CmAgent::reject_conn(Outbox& out, Record& r, uint16_t reason,
                            std::span<const uint8_t> private_data, uint64_t t) {
  if (private_data.size() > hw::kRejPrivateDataMax)
    return Status::error(Errc::invalid_argument,
                         "%s: reject: %zu bytes of private data, a REJ carries at most %zu",
                         r.name.c_str(), private_data.size(), hw::kRejPrivateDataMax);
  switch (r.state) {
    case State::req_rcvd:
      send_rej(out, r, reason, 0, private_data);
      enter_timewait(r, t);
      break;
    case State::rep_rcvd:
      send_rej(out, r, reason, 1, private_data);
      finish(r);
      break;
    case State::rep_sent:
    case State::mra_rep_rcvd:
      send_rej(out, r, reason, 2, private_data);
      enter_timewait(r, t);
      break;
    case State::req_sent:
    case State::mra_req_rcvd:
      send_rej(out, r, reason, 2, private_data);
      finish(r);
      break;
    default:
      return Status::error(Errc::bad_state, "%s: reject: nothing to reject in state %s",
                           r.name.c_str(), state_name(r.state));
  }
  return Status::ok();
}

void CmAgent::on_rej(const hw::IpAddress& src, const RejMsg& m, uint64_t now) {
  Record* r = nullptr;
  if (m.reason == hw::reject_reason::timeout && m.reject_info_length >= 8)
    r = find_by_remote(load_guid(m.ari), m.local_comm_id);
  if (!r) {
    r = find(m.remote_comm_id);
    // Once the peer's ID is known, a REJ must carry it (or 0, sent from REQ_RCVD).
    if (r && r->remote_id != 0 && m.local_comm_id != 0 && m.local_comm_id != r->remote_id)
      r = nullptr;
  }
  // Only the peer may reject: a REJ from any other address is not for this connection, as
  // a DREQ from another address is not (on_dreq).
  if (r && src != r->remote.ip) r = nullptr;
  if (!r) {
    ++counters_.rx_unmatched;
    return;
  }
  hw::CmEvent ev;
  ev.type = hw::CmEventType::rejected;
  ev.reject_reason = m.reason;
  ev.private_data.assign(m.private_data.begin(), m.private_data.end());
  ev.detail = "rejected by " + hw::cm_address_string(r->remote) + ": " +
              hw::reject_reason_name(m.reason) + " (" + std::to_string(m.reason) + ")";
  switch (r->state) {
    case State::req_sent:
    case State::mra_req_rcvd:
      post(*r, std::move(ev));
      if (m.reason == hw::reject_reason::stale_connection)
        enter_timewait(*r, now);
      else
        finish(*r);
      return;
    case State::req_rcvd:
      ev.detail = "the peer withdrew its request: " + ev.detail;
      post(*r, std::move(ev));
      finish(*r);
      return;
    case State::rep_rcvd:
      post(*r, std::move(ev));
      finish(*r);
      return;
    case State::rep_sent:
    case State::mra_rep_rcvd:
      post(*r, std::move(ev));
      enter_timewait(*r, now);
      return;
    case State::established:
      ev.type = hw::CmEventType::disconnected;
      ev.detail = "REJ received while established: " + ev.detail;
      post(*r, std::move(ev));
      enter_timewait(*r, now);
      return;
    default:
      ++counters_.rx_unmatched;
      return;
  }
}

void CmAgent::on_mra(const hw::IpAddress& src, const MraMsg& m, uint64_t now) {
  Record* r = find(m.remote_comm_id);
  // From the peer only, naming the peer's ID once it is known (a forged MRA would otherwise
  // stretch a pending REQ's or REP's timer).
  if (r && (src != r->remote.ip || (r->remote_id != 0 && m.local_comm_id != r->remote_id)))
    r = nullptr;
  if (!r) {
    ++counters_.rx_unmatched;
    return;
  }
  // The peer needs longer: the pending timer becomes ServiceTimeout + the path's lifetime
  // (Linux cm_mra_handler, ib_modify_mad). The connect deadline still applies.
  const uint64_t wait = cm_time_ns(m.service_timeout) + 2 * cm_time_ns(kPacketLifeTime);
  if (m.message_mraed == 0 && r->state == State::req_sent) {
    r->state = State::mra_req_rcvd;
    arm(*r, TimerKind::retry, now + wait);
  } else if (m.message_mraed == 1 && r->state == State::rep_sent) {
    r->state = State::mra_rep_rcvd;
    arm(*r, TimerKind::retry, now + wait);
  } else {
    ++counters_.rx_unmatched;
  }
}

void CmAgent::send_dreq(Outbox& out, Record& r, uint64_t now) {
  DreqMsg dreq;
  dreq.local_comm_id = r.local_id;
  dreq.remote_comm_id = r.remote_id;
  dreq.remote_qpn = r.remote_qpn;
  // A DREQ forms its own TID from the local ID (cm_form_tid), so the active side's equals its
  // REQ's.
  r.pending = send(out, r.remote.ip, tid_for(r.local_id), dreq);
  r.tries_left = r.max_cm_retries;
  if (r.retry_interval_ns == 0) r.retry_interval_ns = cm_time_ns(r.cm_response_timeout);
  r.state = State::dreq_sent;
  r.deadline_at = 0;
  arm(r, TimerKind::retry, now + r.retry_interval_ns);
}

Status CmAgent::disconnect(uint32_t id) {
  const uint64_t t = now();
  Outbox out;
  {
    std::lock_guard lock(mu_);
    Record* r = find(id);
    if (!r) return Status::error(Errc::not_found, "cm connection 0x%08x is gone", id);
    hw::CmEvent ev;
    ev.type = hw::CmEventType::disconnected;
    ev.detail = "disconnected locally before the connection was established";
    switch (r->state) {
      case State::established:
        send_dreq(out, *r, t);
        break;
      case State::dreq_sent:
      case State::timewait:
      case State::idle:
        break;  // already closing or closed
      case State::req_sent:
      case State::mra_req_rcvd:
        send_rej_timeout(out, *r);
        post(*r, std::move(ev));
        finish(*r);
        break;
      case State::req_rcvd:
        send_rej(out, *r, hw::reject_reason::consumer_defined, 0, {});
        post(*r, std::move(ev));
        enter_timewait(*r, t);
        break;
      case State::rep_rcvd:
        send_rej(out, *r, hw::reject_reason::consumer_defined, 1, {});
        post(*r, std::move(ev));
        finish(*r);
        break;
      case State::rep_sent:
      case State::mra_rep_rcvd:
        send_rej(out, *r, hw::reject_reason::consumer_defined, 2, {});
        post(*r, std::move(ev));
        enter_timewait(*r, t);
        break;
      case State::sidr_req_sent:
        // No answer is awaited any more; the peer holds nothing for it.
        post(*r, std::move(ev));
        finish(*r);
        break;
      case State::sidr_req_rcvd:
        answer_sidr(out, *r, hw::sidr_status::reject, 0, 0, {});
        post(*r, std::move(ev));
        break;
    }
    out.schedule = std::exchange(wake_request_, UINT64_MAX);
  }
  flush(out);
  return Status::ok();
}

void CmAgent::on_dreq(Outbox& out, const hw::IpAddress& src, const MadHeader& hdr, const DreqMsg& m,
                      uint64_t now) {
  Record* r = find(m.remote_comm_id);
  if (r && (r->remote_id != m.local_comm_id || src != r->remote.ip)) r = nullptr;
  auto send_drep = [&](uint32_t local_id, uint32_t remote_id) {
    DrepMsg drep;
    drep.local_comm_id = local_id;
    drep.remote_comm_id = remote_id;
    send(out, src, hdr.tid, drep);  // the DREP echoes the DREQ's TID
  };
  if (!r) {
    // A DREQ that matches nothing still gets a DREP, so that the peer can leave DREQ_SENT
    // (Linux cm_issue_drep).
    ++counters_.unmatched_dreq_answered;
    send_drep(m.remote_comm_id, m.local_comm_id);
    return;
  }
  if (m.remote_qpn != r->local_qpn) {
    ++counters_.rx_unmatched;  // not for this QP: ignored (cm_dreq_handler)
    return;
  }
  hw::CmEvent ev;
  ev.type = hw::CmEventType::disconnected;
  ev.detail = "DREQ received from " + hw::cm_address_string(r->remote);
  switch (r->state) {
    case State::established:
    case State::rep_sent:
    case State::mra_rep_rcvd:
    case State::dreq_sent:  // both sides disconnected at once
      send_drep(r->local_id, r->remote_id);
      post(*r, std::move(ev));
      enter_timewait(*r, now);
      return;
    case State::timewait:
      send_drep(r->local_id, r->remote_id);  // our DREP was lost: send it again
      return;
    default:
      ++counters_.rx_unmatched;
      return;
  }
}

void CmAgent::on_drep(const hw::IpAddress& src, const DrepMsg& m, uint64_t now) {
  Record* r = find(m.remote_comm_id);
  if (!r || r->remote_id != m.local_comm_id || src != r->remote.ip ||
      r->state != State::dreq_sent) {
    ++counters_.rx_unmatched;
    return;
  }
  hw::CmEvent ev;
  ev.type = hw::CmEventType::disconnected;
  ev.detail = "DREP received from " + hw::cm_address_string(r->remote);
  if (r->fault_dreq) ev.detail += " (the DREQ was sent by a cm-dreq fault rule)";
  post(*r, std::move(ev));
  enter_timewait(*r, now);
}

void CmAgent::on_peer_unreachable(const hw::IpAddress& peer) {
  const uint64_t t = now();
  Outbox out;
  {
    std::lock_guard lock(mu_);
    std::vector<uint32_t> ids;
    for (const auto& [id, r] : records_)
      if (r->remote.ip == peer) ids.push_back(id);
    for (uint32_t id : ids) {
      Record* r = find(id);
      if (!r) continue;
      hw::CmEvent ev;
      ev.type = hw::CmEventType::disconnected;
      switch (r->state) {
        case State::established:
          ev.detail = hw::cm_address_string(r->remote) +
                      " is unreachable (its port is closed): the peer is gone";
          break;
        case State::dreq_sent:
          ev.detail = "no DREP from " + hw::cm_address_string(r->remote) +
                      ": it is unreachable (its port is closed)";
          break;
        case State::req_sent:
        case State::mra_req_rcvd:
        case State::rep_sent:
        case State::mra_rep_rcvd:
        case State::sidr_req_sent:
          // As when the last retry finds no answer (cm_active.cc retry_expired).
          ++counters_.peers_gone;
          r->tries_left = 0;
          retry_expired(out, *r, t);
          continue;
        default:
          continue;
      }
      ++counters_.peers_gone;
      post(*r, std::move(ev));
      enter_timewait(*r, t);
    }
    out.schedule = std::exchange(wake_request_, UINT64_MAX);
  }
  flush(out);
  call_due_notifiers();
}

void CmAgent::tell_peer_locked(Outbox& out, Record& r, uint64_t t) {
  // As cm_destroy_id: tell the peer, so that it does not wait for its timers.
  switch (r.state) {
    case State::req_sent:
    case State::mra_req_rcvd:
      send_rej_timeout(out, r);
      finish(r);
      break;
    case State::req_rcvd:
      send_rej(out, r, hw::reject_reason::consumer_defined, 0, {});
      enter_timewait(r, t);
      break;
    case State::rep_rcvd:
      send_rej(out, r, hw::reject_reason::consumer_defined, 1, {});
      finish(r);
      break;
    case State::rep_sent:
    case State::mra_rep_rcvd:
      send_rej(out, r, hw::reject_reason::consumer_defined, 2, {});
      enter_timewait(r, t);
      break;
    case State::established:
      send_dreq(out, r, t);
      break;
    case State::sidr_req_sent:
      finish(r);  // as cm_destroy_id in SIDR_REQ_SENT: the request is dropped, nothing sent
      break;
    case State::sidr_req_rcvd:
      answer_sidr(out, r, hw::sidr_status::reject, 0, 0, {});
      break;
    case State::dreq_sent:
    case State::timewait:
    case State::idle:
      break;  // closing or closed already
  }
}

void CmAgent::destroy(uint32_t id) {
  const uint64_t t = now();
  Outbox out;
  {
    std::lock_guard lock(mu_);
    Record* r = find(id);
    if (!r) return;
    r->handle_alive = false;
    r->events.reset();
    if (r->state == State::idle)
      erase(id);
    else
      tell_peer_locked(out, *r, t);  // the record lives on until TIMEWAIT ends
    out.schedule = std::exchange(wake_request_, UINT64_MAX);
  }
  flush(out);
}

bool CmAgent::farewell(uint64_t wait_ns) {
  const uint64_t t = now();
  std::unique_lock lock(mu_, std::defer_lock);
  const auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(wait_ns);
  while (!lock.try_lock()) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  Outbox out;
  std::vector<uint32_t> ids;
  for (const auto& [id, r] : records_)
    if (r->handle_alive) ids.push_back(id);
  for (uint32_t id : ids)
    if (Record* r = find(id)) tell_peer_locked(out, *r, t);
  out.schedule = std::exchange(wake_request_, UINT64_MAX);
  lock.unlock();
  flush(out);
  return true;
}

}  // namespace rnicdv::sim::cm
