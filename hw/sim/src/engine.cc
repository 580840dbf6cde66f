// SPDX-License-Identifier: BSD-3-Clause
// The engine loop: doorbells, doorbell-record observation, inbound datagrams, timers, and
// the per-QP transmit work, in one pass. Completion events are cq_events.cc's.
#include <endian.h>

#include <algorithm>

#include "fabric_shared.h"
#include "hca.h"
#include "host_access.h"
#include "packet/psn.h"
#include "rc/queues.h"
#include "rnicdv/doorbell/mmio.h"

namespace rnicdv::sim {

// A QP whose placed memory faulted goes to ERR with QP_FATAL (IBA 11.6.3.1: a local
// catastrophic error), as a real device's QP does when its queue's pages fail translation.
// Its fetched WQEs and its receive in progress complete with flush errors into CQs that still
// work; its rings and record are not read again.
void Hca::handle_host_faults_locked() {
  for (auto& qp : qps_) {
    if (!qp->host_fault) [[likely]]
      continue;
    qp->host_fault = false;
    if (qp->host_failed) continue;
    qp->host_failed = true;
    ++counters_.host_memory_faults;
    // In RESET nothing runs; in ERR (a path that already failed it) the event was raised.
    if (qp->state == hw::QpState::reset || qp->state == hw::QpState::err) continue;
    raise_event(hw::AsyncEventType::qp_fatal, qp->qpn, 0);
    rc_.flush.to_error(*qp);
  }
}

const Clock& Hca::clock() const {
  return *shared_.clock;
}
uint64_t Hca::now() const {
  return shared_.clock->now_ns();
}

bool Hca::run_once() {
  return run_pass(std::unique_lock<std::mutex>(mu_));
}

bool Hca::try_run_once() {
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) return false;
  return run_pass(std::move(lock));
}

// One engine pass under `lock` (held on entry), then, with the lock released, the completion
// events it raised and the GSI's handlers.
bool Hca::run_pass(std::unique_lock<std::mutex> lock) {
  std::vector<std::pair<uint32_t, uint32_t>> fired;
  transmitted_ = false;
  bool did = engine_pass_locked(now());
  if (transmitted_ && !shared_.deterministic()) shared_.kick_sleepers(this);
  if (!fired_cq_events_.empty()) [[unlikely]]
    fired.swap(fired_cq_events_);
  lock.unlock();
  if (!fired.empty()) [[unlikely]]
    did |= deliver_cq_events(fired);
  did |= gsi_.dispatch();
  return did;
}

bool Hca::engine_pass_locked(uint64_t now_ns) {
  bool did = scan_doorbells_locked();
  for (auto& qp : qps_) did |= observe_dbrs_locked(*qp);
  if (!evented_cqs_.empty()) [[unlikely]]
    did |= scan_cq_arms_locked();
  if (paused_.load(std::memory_order_relaxed)) return did;
  if (!evented_cqs_.empty()) [[unlikely]]
    did |= check_new_arms_locked();

  for (auto& qp : qps_) {
    if (!qp->db_pending) continue;
    qp->db_pending = false;
    on_doorbell_locked(*qp);
    did = true;
  }
  if (attached_) did |= shared_.wire->poll(endpoint_, kRxBudget) > 0;
  for (auto& qp : qps_) {
    if (qp->type == hw::QpType::ud) [[unlikely]] {
      did |= ud_.progress(*qp, kTxBudgetPerQp);
      continue;
    }
    did |= rc_.retransmit.run_timers(*qp, now_ns);
    did |= rc_.requester.progress(*qp, kTxBudgetPerQp);
    did |= rc_.responder.transmit(*qp, kTxBudgetPerQp);
  }
  if (any_external_) [[unlikely]]
    handle_host_faults_locked();
  handle_cq_overflows_locked();
  return did;
}

// Doorbell registers, as a ConnectX treats them: a write is a hint that names a QP; the DBR is
// the truth. Every QP bound to a register that saw a write is checked, because two QPs
// sharing a register can overwrite each other's write before the device reads it.
bool Hca::scan_doorbells_locked() {
  bool did = false;
  for (auto& reg : registers_) {
    DoorbellWrite writes[2];
    int n = 0;
    if (reg->owned) [[likely]] {
      n = consume_register(*reg, writes);
    } else if (!reg->failed) {
      BfRegister& r = *reg;
      if (!host_guarded([&] { n = consume_register(r, writes); })) {
        // The application's mapping of the UAR page is gone: every QP ringing it fails.
        r.failed = true;
        for (QpObj* qp : r.qps) qp->host_fault = true;
        continue;
      }
    }
    if (n == 0) continue;
    did = true;
    counters_.last_doorbell_ns = now();
    QpObj* named[2] = {nullptr, nullptr};
    for (int k = 0; k < n; ++k) {
      ++counters_.uar_doorbells;
      if (writes[k].blueflame) ++counters_.bf_writes;
      QpObj* qp = find_qp(writes[k].qpn);
      if (qp && qp->reg == reg.get()) {
        ++qp->counters.uar_doorbells;
        named[k] = qp;
      }
    }
    for (QpObj* qp : reg->qps) {
      const bool rang = qp == named[0] || qp == named[1];
      const uint16_t ahead = static_cast<uint16_t>(rc::load_sq_dbr(*qp) - qp->sq_limit);
      if (rang || (ahead != 0 && ahead <= qp->sq.bb_count)) qp->db_pending = true;
    }
  }
  return did;
}

void Hca::on_doorbell_locked(QpObj& qp) {
  switch (qp.state) {
    case hw::QpState::reset:
      ++counters_.rtr_doorbells_dropped;
      break;
    case hw::QpState::init:
    case hw::QpState::rtr:
      // mlx5 remembers an SQ doorbell rung before RTS and runs it after the move to RTS
      // (rdma-core commit 988f90bc: such WQEs "were even executed later").
      if (config_.profile.keeps_rtr_doorbell) {
        ++counters_.rtr_doorbells_kept;
        qp.rtr_db_kept = true;
      } else {
        ++counters_.rtr_doorbells_dropped;
      }
      break;
    case hw::QpState::rts:
    case hw::QpState::sqd: {
      const uint16_t dbr = rc::load_sq_dbr(qp);
      const uint16_t ahead = static_cast<uint16_t>(dbr - qp.sq_consumed);
      if (ahead != 0 && ahead <= qp.sq.bb_count) qp.sq_limit = qp.sq_consumed + ahead;
      break;
    }
    case hw::QpState::sqe:
    case hw::QpState::err:
      rc_.flush.flush_sq(qp);
      break;
  }
}

// Counts doorbell-record moves (the counters that prove no doorbell was rung below RTS) and
// flushes work posted to a QP in error as soon as it is seen.
bool Hca::observe_dbrs_locked(QpObj& qp) {
  bool did = false;
  const uint16_t sq = rc::load_sq_dbr(qp);
  if (sq != qp.seen_sq_dbr) {
    const uint16_t moved = static_cast<uint16_t>(sq - qp.seen_sq_dbr);
    if (moved < 0x8000) {
      ++counters_.sq_dbr_advances;
      ++qp.counters.sq_dbr_advances;
    }
    qp.seen_sq_dbr = sq;
    if (!paused_.load(std::memory_order_relaxed) &&
        (qp.state == hw::QpState::err || qp.state == hw::QpState::sqe)) {
      rc_.flush.flush_sq(qp);
      did = true;
    }
  }
  const uint16_t rq = rc::load_rq_dbr(qp);
  if (rq != qp.seen_rq_dbr) {
    const uint16_t moved = static_cast<uint16_t>(rq - qp.seen_rq_dbr);
    if (moved < 0x8000) {
      ++counters_.rq_dbr_advances;
      ++qp.counters.rq_dbr_advances;
    }
    qp.seen_rq_dbr = rq;
    if (!paused_.load(std::memory_order_relaxed) && qp.state == hw::QpState::err) {
      rc_.flush.flush_rq(qp);
      did = true;
    }
  }
  return did;
}

uint64_t Hca::next_deadline_ns() const {
  uint64_t next = UINT64_MAX;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& qp : qps_) {
      if (qp->retx_deadline) next = std::min(next, qp->retx_deadline);
      if (qp->rnr_deadline) next = std::min(next, qp->rnr_deadline);
    }
    if (attached_) next = std::min(next, shared_.wire->next_delivery_ns(endpoint_));
  }
  return std::min(next, gsi_.next_timer_ns());
}

QpObj* Hca::find_qp(uint32_t qpn) {
  auto it = qp_by_num_.find(qpn);
  return it == qp_by_num_.end() ? nullptr : it->second;
}

void Hca::on_datagram(const Endpoint& src, const Endpoint& dst, const uint8_t* data, size_t len) {
  (void)dst;
  // The wire calls this from inside poll(), which this device's engine runs under mu_.
  deliver_locked(src.ipv4, data, len);
}

// A UD SEND: to a UD QP in RTR or later, from anyone (IBA 9.8.3).
bool Hca::deliver_datagram_locked(uint32_t src_ipv4, const pkt::Packet& p, size_t len) {
  QpObj* qp = find_qp(p.bth.dest_qp);
  if (!qp || qp->type != hw::QpType::ud) return false;
  ++qp->counters.packets_rx;
  if (qp->state == hw::QpState::reset || qp->state == hw::QpState::init ||
      qp->state == hw::QpState::err) {
    ++qp->counters.rx_dropped;
    return false;
  }
  ud_.on_packet(*qp, src_ipv4, endpoint_.ipv4, p, len);
  return true;
}

void Hca::deliver_locked(uint32_t src_ipv4, const uint8_t* data, size_t len) {
  ++counters_.packets_rx;
  counters_.bytes_rx += len;
  pkt::Packet p;
  if (pkt::parse_packet(data, len, &p) != pkt::ParseError::none) [[unlikely]] {
    ++counters_.rx_dropped;
    return;
  }
  if (p.bth.dest_qp == kGsiQpn) {
    if (!gsi_.accept(src_ipv4, p)) ++counters_.rx_dropped;
    return;
  }
  if ((p.bth.opcode == pkt::opcode::ud_send_only || p.bth.opcode == pkt::opcode::ud_send_only_imm) &&
      p.bth.pkey == pkt::kDefaultPkey) [[unlikely]] {
    if (!deliver_datagram_locked(src_ipv4, p, len)) ++counters_.rx_dropped;
    return;
  }
  QpObj* qp = find_qp(p.bth.dest_qp);
  const pkt::OpcodeInfo& info = pkt::opcode_info(p.bth.opcode);
  // RC to RC QPs, default partition, and only from the peer this QP is connected to (IBA
  // 9.6: a packet that fails the transport checks is silently dropped).
  if (!qp || p.bth.opcode >= 0x20 || p.bth.pkey != pkt::kDefaultPkey ||
      qp->type != hw::QpType::rc) [[unlikely]] {
    ++counters_.rx_dropped;
    return;
  }
  ++qp->counters.packets_rx;
  if (qp->state == hw::QpState::reset || qp->state == hw::QpState::init ||
      qp->state == hw::QpState::err || src_ipv4 != qp->remote_ipv4) [[unlikely]] {
    ++counters_.rx_dropped;
    ++qp->counters.rx_dropped;
    return;
  }
  if (info.request)
    rc_.responder.on_request(*qp, p);
  else
    rc_.completer.on_response(*qp, p);
}

void Hca::transmit(QpObj& qp, uint32_t dst_ipv4, const uint8_t* frame, size_t len) {
  ++counters_.packets_tx;
  counters_.bytes_tx += len;
  ++qp.counters.packets_tx;
  transmitted_ = true;
  if (tx_tap_) [[unlikely]]
    tx_tap_(dst_ipv4, frame, len);
  if (!attached_) return;
  shared_.wire->transmit(endpoint_, Endpoint{dst_ipv4, shared_.config.udp_port}, frame, len);
}

void Hca::transmit_raw(uint32_t dst_ipv4, const uint8_t* data, size_t len) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++counters_.packets_tx;
    counters_.bytes_tx += len;
    if (tx_tap_) tx_tap_(dst_ipv4, data, len);
  }
  if (!attached_) return;
  shared_.wire->transmit(endpoint_, Endpoint{dst_ipv4, shared_.config.udp_port}, data, len);
  if (!shared_.deterministic()) shared_.kick_sleepers(this);
}

void Hca::set_tx_tap(TxTap tap) {
  std::lock_guard<std::mutex> lock(mu_);
  tx_tap_ = std::move(tap);
}

void Hca::raise_event(hw::AsyncEventType type, uint32_t qpn, uint32_t cqn, uint32_t srqn) {
  hw::AsyncEvent ev{type, qpn, cqn, srqn};
  events_.push(ev);
}

}  // namespace rnicdv::sim
