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
void Hca::handle_host_fault_locked(QpObj& qp) {
  qp.host_fault = false;
  if (qp.host_failed) return;
  qp.host_failed = true;
  ++counters_.host_memory_faults;
  // In RESET nothing runs; in ERR (a path that already failed it) the event was raised.
  if (qp.state == hw::QpState::reset || qp.state == hw::QpState::err) return;
  raise_event(hw::AsyncEventType::qp_fatal, qp.qpn, 0);
  rc_.flush.to_error(qp);
}

const Clock& Hca::clock() const {
  return *shared_.clock;
}
uint64_t Hca::now() const {
  return shared_.clock->now_ns();
}

// An engine pass has two halves: the device's work, under the device lock
// (do_device_work_locked), then, with the lock released, the notifications that work raised
// (run_pass_then_notify). run_engine_pass waits for the lock; try_run_engine_pass gives up at
// once when another thread holds it (that thread is running the engine, or the control path
// is changing the device, and will kick it when done).
//
// In a child of fork() the device is the parent's: nothing runs (its lock may be held by a
// parent thread that does not exist here, and its wire is the parent's).
bool Hca::run_engine_pass() {
  if (forked_away()) [[unlikely]]
    return false;
  return run_pass_then_notify(std::unique_lock<std::mutex>(mu_));
}

bool Hca::try_run_engine_pass() {
  if (forked_away()) [[unlikely]]
    return false;
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) return false;
  return run_pass_then_notify(std::move(lock));
}

// The device's work under `lock` (held on entry), then, with the lock released, the
// completion events it raised, the COMM_EST notifiers and the GSI's handlers, which may call
// back into the device.
bool Hca::run_pass_then_notify(std::unique_lock<std::mutex> lock) {
  std::vector<std::pair<uint32_t, uint32_t>> fired;
  std::vector<std::pair<void (*)(void*), void*>> comm_est;
  transmitted_ = false;
  bool did = do_device_work_locked(now());
  if (transmitted_ && !shared_.deterministic()) shared_.kick_sleepers(this);
  if (!fired_cq_events_.empty()) [[unlikely]]
    fired.swap(fired_cq_events_);
  if (!fired_comm_est_.empty()) [[unlikely]]
    comm_est.swap(fired_comm_est_);
  lock.unlock();
  if (!fired.empty()) [[unlikely]]
    did |= deliver_cq_events(fired);
  if (!comm_est.empty()) [[unlikely]] {
    // Where COMM_EST is learnt, the connection layer releases the passive QP's withheld work
    // (rnicdv/connection.h), as the RTU's arrival does. No lock is held: the notifier may
    // modify the QP and clear itself.
    for (const auto& [fn, ctx] : comm_est) fn(ctx);
    did = true;
  }
  did |= gsi_.dispatch();
  return did;
}

// The device's work in one pass: doorbells, CQ arms, timers, QPs in ERR, the wire, and the
// active QPs' transmit work. Its cost follows what is active, not how many QPs the device
// holds: registers that were written name their QPs, packets name theirs, due timers theirs,
// and only those (and the QPs in ERR, whose records are watched for work to flush) are
// visited.
bool Hca::do_device_work_locked(uint64_t now_ns) {
  bool did = false;
  if (!link_events_.empty()) [[unlikely]]
    did |= apply_link_events_locked(now_ns);
  if (dead_.load(std::memory_order_relaxed)) [[unlikely]] {
    // A fatal error stopped the device (link.cc): doorbells are not acted on, and what the
    // wire brings is taken off it and dropped (deliver_locked).
    rung_pages_.clear();
    if (attached_) did |= poll_wire_locked();
    return did;
  }
  did |= scan_doorbells_locked();
  if (!evented_cqs_.empty()) [[unlikely]]
    did |= scan_cq_arms_locked();
  rung_pages_.clear();
  if (paused_.load(std::memory_order_relaxed)) return did;
  if (!evented_cqs_.empty()) [[unlikely]]
    did |= check_new_arms_locked();
  fire_timers_locked(now_ns);
  if (!errored_.empty()) [[unlikely]]
    did |= look_at_errored_locked(now_ns);
  if (attached_) did |= poll_wire_locked();
  did |= run_active_locked(now_ns);
  handle_cq_overflows_locked();
  return did;
}

bool Hca::poll_wire_locked() {
  bool did = shared_.wire->poll(endpoint_, kRxBudget) > 0;
  if (two_ports_) did |= shared_.wire->poll(endpoint2_, kRxBudget) > 0;
  return did;
}

void Hca::activate_locked(QpObj& qp) {
  if (qp.queued) return;
  qp.queued = true;
  active_.push_back(&qp);
}

bool Hca::run_active_locked(uint64_t now_ns) {
  if (active_.empty()) return false;
  bool did = false;
  working_.swap(active_);
  for (QpObj* qp : working_) {
    qp->queued = false;
    // A fatal error raised by a frame this pass sent (fatal after=N, link.cc) stops the
    // device here: nothing more is done for the QPs still to visit.
    if (dead_.load(std::memory_order_relaxed)) [[unlikely]]
      continue;
    bool progressed = false;
    if (qp->db_pending) {
      qp->db_pending = false;
      on_doorbell_locked(*qp);
      progressed = true;
    }
    if (qp->type == hw::QpType::ud) [[unlikely]] {
      progressed |= ud_.progress(*qp, kTxBudgetPerQp);
    } else {
      progressed |= rc_.retransmit.run_timers(*qp, now_ns);
      progressed |= rc_.requester.progress(*qp, kTxBudgetPerQp);
      progressed |= rc_.responder.transmit(*qp, kTxBudgetPerQp);
    }
    if (qp->host_fault) [[unlikely]]
      handle_host_fault_locked(*qp);
    file_timers_locked(*qp, now_ns);
    // A QP that moved stays for another pass: its budget may have run out, or what it did
    // may let it do more (a window that opened, a WQE that is now fetchable).
    if (progressed) activate_locked(*qp);
    did |= progressed;
  }
  working_.clear();
  return did;
}

void Hca::file_timers_locked(QpObj& qp, uint64_t now_ns) {
  const bool in_error = qp.state == hw::QpState::err || qp.state == hw::QpState::sqe;
  if (in_error != qp.watched_in_error) {
    qp.watched_in_error = in_error;
    if (in_error) {
      errored_.push_back(&qp);
      qp.next_error_look_ns = now_ns + kErroredLookNs;
      if (qp.external) ++errored_external_;
    } else {
      errored_.erase(std::remove(errored_.begin(), errored_.end(), &qp), errored_.end());
      if (qp.external) --errored_external_;
    }
  }
  uint64_t due = 0;
  for (uint64_t t : {qp.comp.retx_deadline, qp.req.rnr_deadline, qp.req.pace_deadline})
    if (t != 0 && (due == 0 || t < due)) due = t;
  if (due == qp.timer_at) return;
  if (qp.timer_at != 0) timers_.erase({qp.timer_at, &qp});
  if (due != 0) timers_.insert({due, &qp});
  qp.timer_at = due;
}

void Hca::fire_timers_locked(uint64_t now_ns) {
  while (!timers_.empty() && timers_.begin()->first <= now_ns) {
    QpObj* qp = timers_.begin()->second;
    timers_.erase(timers_.begin());
    qp->timer_at = 0;
    activate_locked(*qp);
  }
}

// A QP in ERR completes whatever is posted to it with a flush error. rnicdv's driver kicks the
// device after such a post; libmlx5's receive posts store the record only. Records of the
// device's own memory cost a load and are looked at on every pass; those the application
// placed cost system calls (host_access.h) and a threaded device looks at them every
// kErroredLookNs, sleeping no longer than that while there are such QPs (device_thread.cc).
bool Hca::look_at_errored_locked(uint64_t now_ns) {
  bool did = false;
  for (size_t i = 0; i < errored_.size(); ++i) {
    QpObj& qp = *errored_[i];
    // A QP modified out of ERR since (to RESET, on its way back) leaves the list when it is
    // next processed; until then it is not flushed.
    if (qp.host_failed || (qp.state != hw::QpState::err && qp.state != hw::QpState::sqe)) continue;
    if (qp.external && !shared_.deterministic()) {
      if (now_ns < qp.next_error_look_ns) continue;
      qp.next_error_look_ns = now_ns + kErroredLookNs;
    }
    const uint32_t sq_before = qp.sq_consumed, rq_before = qp.rq_consumed;
    rc_.flush.flush_sq(qp);
    if (qp.state == hw::QpState::err) rc_.flush.flush_rq(qp);
    did |= qp.sq_consumed != sq_before || qp.rq_consumed != rq_before;
    if (qp.host_fault) [[unlikely]]
      handle_host_fault_locked(qp);
  }
  return did;
}

void Hca::forget_qp_locked(QpObj& qp) {
  if (qp.queued) {
    active_.erase(std::remove(active_.begin(), active_.end(), &qp), active_.end());
    qp.queued = false;
  }
  if (qp.timer_at != 0) timers_.erase({qp.timer_at, &qp});
  qp.timer_at = 0;
  if (qp.watched_in_error) {
    errored_.erase(std::remove(errored_.begin(), errored_.end(), &qp), errored_.end());
    if (qp.external) --errored_external_;
  }
  qp.watched_in_error = false;
}

// Doorbell registers, as a ConnectX treats them: a write is a hint that names a QP; the DBR is
// the truth. Every QP bound to a register that saw a write is checked, because two QPs
// sharing a register can overwrite each other's write before the device reads it. A store
// caught on an application's UAR mapping while the device slept (uar_watch.h) counts as a
// write to every register of that page: the records were written before it.
bool Hca::scan_doorbells_locked() {
  bool did = false;
  for (auto& reg : registers_) {
    DoorbellWrite writes[2];
    const int n = consume_register(*reg, writes);
    bool caught = false;
    if (!rung_pages_.empty() && !reg->owned) [[unlikely]] {
      const uintptr_t page = reinterpret_cast<uintptr_t>(reg->app_base) & ~(kUarPageBytes - 1);
      caught = std::find(rung_pages_.begin(), rung_pages_.end(),
                         reinterpret_cast<uint8_t*>(page)) != rung_pages_.end();
    }
    if (n == 0 && !caught) continue;
    did = true;
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
      if (!rang && !caught) {
        const uint16_t ahead = static_cast<uint16_t>(rc::load_sq_dbr(*qp) - qp->sq_limit);
        if (qp->host_fault) [[unlikely]] {
          activate_locked(*qp);  // its record is gone: the pass fails it
          continue;
        }
        if (ahead == 0 || ahead > qp->sq.bb_count) continue;
      }
      qp->db_pending = true;
      activate_locked(*qp);
    }
  }
  return did;
}

void Hca::pages_to_watch(std::vector<uint8_t*>* out) {
  out->clear();
  std::lock_guard<std::mutex> lock(mu_);
  const auto add = [out](const void* in_page) {
    auto* page = reinterpret_cast<uint8_t*>(reinterpret_cast<uintptr_t>(in_page) &
                                            ~(kUarPageBytes - 1));
    if (std::find(out->begin(), out->end(), page) == out->end()) out->push_back(page);
  };
  for (const auto& reg : registers_)
    if (!reg->owned && !reg->qps.empty()) add(reg->app_base);
  for (const CqObj* cq : evented_cqs_)
    if (cq->external && cq->view.dv.cq_uar) add(cq->view.dv.cq_uar);
}

void Hca::note_rung_pages(const std::vector<uint8_t*>& pages) {
  std::lock_guard<std::mutex> lock(mu_);
  for (uint8_t* p : pages)
    if (std::find(rung_pages_.begin(), rung_pages_.end(), p) == rung_pages_.end())
      rung_pages_.push_back(p);
}

void Hca::note_sq_dbr_locked(QpObj& qp, uint16_t sq) {
  if (sq == qp.seen_sq_dbr) return;
  const uint16_t moved = static_cast<uint16_t>(sq - qp.seen_sq_dbr);
  if (moved < 0x8000) {
    ++counters_.sq_dbr_advances;
    ++qp.counters.sq_dbr_advances;
  }
  qp.seen_sq_dbr = sq;
}

void Hca::on_doorbell_locked(QpObj& qp) {
  const uint16_t dbr = rc::load_sq_dbr(qp);
  note_sq_dbr_locked(qp, dbr);
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
      const uint16_t ahead = static_cast<uint16_t>(dbr - qp.sq_consumed);
      if (ahead != 0 && ahead <= qp.sq.bb_count && qp.sq_limit != qp.sq_consumed + ahead) {
        qp.sq_limit = qp.sq_consumed + ahead;
        counters_.last_doorbell_ns = now();
      }
      break;
    }
    case hw::QpState::sqe:
    case hw::QpState::err:
      rc_.flush.flush_sq(qp);
      break;
  }
}

// A ConnectX acts on a doorbell within a microsecond, long before a destroy command it gets
// after it completes; a device in software may not have run since. So a UD QP that is
// destroyed while sending first sends what its doorbells announced: a program that posts
// datagrams and tears down at once (mckey's sender) loses none of them. Its completions go to
// the send CQ, which outlives the QP. RC work needs its peer's acknowledgements, and is not
// waited for.
void Hca::send_rung_datagrams_locked(QpObj& qp) {
  if (qp.type != hw::QpType::ud || qp.state != hw::QpState::rts || qp.host_failed ||
      dead_.load(std::memory_order_relaxed) || paused_.load(std::memory_order_relaxed))
    return;
  scan_doorbells_locked();  // other QPs it finds rung run at the next pass, as always
  if (qp.db_pending) {
    qp.db_pending = false;
    on_doorbell_locked(qp);
  }
  // Bounded: the SQ holds at most bb_count WQEs, and each round sends up to the budget.
  for (uint32_t sent = 0; sent <= qp.sq.bb_count && ud_.progress(qp, kTxBudgetPerQp);)
    sent += kTxBudgetPerQp;
  handle_cq_overflows_locked();
}

// Counts doorbell-record moves: the counters that prove no doorbell was rung below RTS
// (DeviceCounters::sq_dbr_advances, rq_dbr_advances). The device looks at a record when a
// doorbell names its QP, on a modify, and when the counters are read; only records of its own
// memory are looked at for the counters alone (the others cost system calls).
void Hca::observe_dbrs_locked(QpObj& qp) {
  if (qp.host_failed) return;
  note_sq_dbr_locked(qp, rc::load_sq_dbr(qp));
  const uint16_t rq = rc::load_rq_dbr(qp);
  if (rq != qp.seen_rq_dbr) {
    const uint16_t moved = static_cast<uint16_t>(rq - qp.seen_rq_dbr);
    if (moved < 0x8000) {
      ++counters_.rq_dbr_advances;
      ++qp.counters.rq_dbr_advances;
    }
    qp.seen_rq_dbr = rq;
  }
}

void Hca::observe_own_dbrs_locked() {
  for (auto& qp : qps_)
    if (!qp->external) observe_dbrs_locked(*qp);
}

uint64_t Hca::next_deadline_ns() const {
  uint64_t next = UINT64_MAX;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // A dead device (link.cc) runs no timer: one the control path filed since must not wake
    // its thread over and over.
    if (!timers_.empty() && !dead_.load(std::memory_order_relaxed)) next = timers_.begin()->first;
    if (attached_) next = std::min(next, shared_.wire->next_delivery_ns(endpoint_));
    if (attached_ && two_ports_) next = std::min(next, shared_.wire->next_delivery_ns(endpoint2_));
    if (!link_events_.empty()) [[unlikely]]
      next = std::min(next, next_link_deadline_locked());
  }
  return std::min(next, gsi_.next_timer_ns());
}

QpObj* Hca::find_qp(uint32_t qpn) {
  auto it = qp_by_num_.find(qpn);
  return it == qp_by_num_.end() ? nullptr : it->second;
}

void Hca::on_datagram(const Endpoint& src, const Endpoint& dst, const uint8_t* data, size_t len) {
  // The wire calls this from inside poll(), which this device's engine runs under mu_.
  deliver_locked(src.ip, dst.ip, data, len);
}

void Hca::on_unreachable(const Endpoint& peer) {
  // Only the RoCE port of an address is a device; the CM learns that its port is gone.
  if (peer.port == shared_.config.udp_port) gsi_.peer_unreachable(peer.ip);
}

// A UD SEND: to a UD QP in RTR or later, from anyone (IBA 9.8.3).
bool Hca::deliver_datagram_locked(QpObj* qp, const IpAddress& src, const IpAddress& dst,
                                  const pkt::Packet& p, size_t len) {
  if (!qp || qp->type != hw::QpType::ud) return false;
  ++qp->counters.packets_rx;
  if (qp->state == hw::QpState::reset || qp->state == hw::QpState::init ||
      qp->state == hw::QpState::err) {
    ++qp->counters.rx_dropped;
    return false;
  }
  ud_.on_packet(*qp, src, dst, p, len);
  activate_locked(*qp);
  return true;
}

void Hca::deliver_locked(const IpAddress& src, const IpAddress& dst, const uint8_t* data,
                         size_t len) {
  if (!port_up_.load(std::memory_order_relaxed)) [[unlikely]] {
    ++counters_.link_down_drops;  // the port is down, or the device dead (link.cc)
    return;
  }
  ++counters_.packets_rx;
  counters_.bytes_rx += len;
  // The port the frame came in through: port 2's address, or port 1 (its address, a group,
  // or bytes injected for tests).
  const uint8_t port = two_ports_ && dst == endpoint2_.ip ? 2 : 1;
  if (port == 2) {
    ++counters_.port2_packets_rx;
    counters_.port2_bytes_rx += len;
  }
  // One IP version end to end: a wire never hands over another, and injected bytes may not.
  if (src.is_v4() != endpoint_.ip.is_v4()) [[unlikely]] {
    ++counters_.rx_dropped;
    return;
  }
  pkt::Packet p;
  if (pkt::parse_packet(data, len, &p) != pkt::ParseError::none) [[unlikely]] {
    ++counters_.rx_dropped;
    return;
  }
  const bool datagram = (p.bth.opcode == pkt::opcode::ud_send_only ||
                         p.bth.opcode == pkt::opcode::ud_send_only_imm) &&
                        p.bth.pkey == pkt::kDefaultPkey;
  if (dst.is_multicast()) [[unlikely]] {
    // Only UD SENDs to the multicast QPN travel to a group (IBA 10.5.2.3).
    if (!datagram || p.bth.dest_qp != ud::kMulticastQpn ||
        !deliver_multicast_locked(src, dst, p, len))
      ++counters_.rx_dropped;
    return;
  }
  if (p.bth.dest_qp == kGsiQpn) {
    // The GSI (and so the CM) is port 1's.
    if (port != 1 || !gsi_.accept(src, p)) ++counters_.rx_dropped;
    return;
  }
  QpObj* qp = find_qp(p.bth.dest_qp);
  // A QP receives through its own port only (its INIT transition's port_num).
  if (qp && qp_port(*qp) != port) [[unlikely]] {
    ++counters_.rx_dropped;
    ++qp->counters.rx_dropped;
    return;
  }
  if (datagram) [[unlikely]] {
    if (!deliver_datagram_locked(qp, src, dst, p, len)) ++counters_.rx_dropped;
    return;
  }
  const pkt::OpcodeInfo& info = pkt::opcode_info(p.bth.opcode);
  // RC to RC QPs, UC to UC QPs, XRC requests to XRC targets and XRC responses to XRC
  // initiators, default partition, and only from the peer this QP is connected to (IBA 9.6:
  // a packet that fails the transport checks is silently dropped).
  const uint8_t transport = p.bth.opcode & pkt::kTransportMask;
  const hw::QpType service = transport == pkt::opcode::uc_base ? hw::QpType::uc
                             : transport != pkt::opcode::xrc_base ? hw::QpType::rc
                             : info.request                       ? hw::QpType::xrc_recv
                                                                  : hw::QpType::xrc_send;
  if (!qp || (service == hw::QpType::rc && transport != 0) ||
      p.bth.pkey != pkt::kDefaultPkey || qp->type != service) [[unlikely]] {
    ++counters_.rx_dropped;
    return;
  }
  // From here on an XRC packet is its RC opcode (the roles know RC's), its XRCETH kept.
  if (transport == pkt::opcode::xrc_base)
    p.bth.opcode = static_cast<uint8_t>(p.bth.opcode - pkt::opcode::xrc_base);
  ++qp->counters.packets_rx;
  if (qp->state == hw::QpState::reset || qp->state == hw::QpState::init ||
      qp->state == hw::QpState::err || src != qp->remote_ip) [[unlikely]] {
    ++counters_.rx_dropped;
    ++qp->counters.rx_dropped;
    return;
  }
  if (info.request)
    rc_.responder.on_request(*qp, p);
  else
    rc_.completer.on_response(*qp, p);
  // What the packet did (an ACK or a response to send, WQEs acknowledged, a window opened,
  // timers moved) is carried on in this pass.
  activate_locked(*qp);
}

void Hca::transmit(QpObj& qp, const IpAddress& dst, const uint8_t* frame, size_t len, IpClass ip) {
  if (!port_up_.load(std::memory_order_relaxed)) [[unlikely]] {
    // The port is down (link.cc): the frame does not leave, and the transport, which cannot
    // tell, recovers it as a loss (retransmission) or gives up (RETRY_EXC_ERR).
    ++counters_.link_down_drops;
    return;
  }
  ++counters_.packets_tx;
  counters_.bytes_tx += len;
  ++qp.counters.packets_tx;
  const uint8_t port = qp_port(qp);
  if (port == 2) {
    ++counters_.port2_packets_tx;
    counters_.port2_bytes_tx += len;
  }
  transmitted_ = true;
  if (tx_tap_) [[unlikely]]
    tx_tap_(dst, frame, len);
  if (attached_)
    shared_.wire->transmit(port_endpoint(port), Endpoint{dst, shared_.config.udp_port}, frame,
                           len, ip);
  // A port-down (or fatal) after=N takes effect as its Nth frame goes out.
  if (count_link_frame()) [[unlikely]]
    apply_link_events_locked(now());
}

void Hca::transmit_raw(const IpAddress& dst, const uint8_t* data, size_t len) {
  if (!port_up_.load(std::memory_order_acquire)) [[unlikely]] {
    raw_link_down_drops_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  raw_packets_tx_.fetch_add(1, std::memory_order_relaxed);
  raw_bytes_tx_.fetch_add(len, std::memory_order_relaxed);
  if (has_tx_tap_.load(std::memory_order_acquire)) [[unlikely]] {
    std::lock_guard<std::mutex> lock(mu_);
    if (tx_tap_) tx_tap_(dst, data, len);
  }
  if (!attached_) return;
  shared_.wire->transmit(endpoint_, Endpoint{dst, shared_.config.udp_port}, data, len);
  if (!shared_.deterministic()) shared_.kick_sleepers(this);
  // An after=N link event this frame made due: applied now unless the engine runs (without
  // waiting for the lock, see above), else by the next pass, which a kick brings.
  if (count_link_frame()) [[unlikely]] {
    std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
    if (lock.owns_lock())
      apply_link_events_locked(now());
    else
      kick_if_sleeping();
  }
}

void Hca::set_tx_tap(TxTap tap) {
  std::lock_guard<std::mutex> lock(mu_);
  has_tx_tap_.store(static_cast<bool>(tap), std::memory_order_release);
  tx_tap_ = std::move(tap);
}

void Hca::raise_event(hw::AsyncEventType type, uint32_t qpn, uint32_t cqn, uint32_t srqn) {
  hw::AsyncEvent ev{type, qpn, cqn, srqn};
  events_.push(ev);
  if (type == hw::AsyncEventType::comm_est) {
    if (QpObj* qp = find_qp(qpn); qp && qp->comm_est_fn)
      fired_comm_est_.emplace_back(qp->comm_est_fn, qp->comm_est_ctx);
  }
}

void Hca::set_comm_est_notifier(QpObj* qp, void (*fn)(void*), void* ctx) {
  std::lock_guard<std::mutex> lock(mu_);
  qp->comm_est_fn = fn;
  qp->comm_est_ctx = ctx;
  if (!fn)
    std::erase_if(fired_comm_est_, [ctx](const auto& f) { return f.second == ctx; });
}

}  // namespace rnicdv::sim
