// SPDX-License-Identifier: BSD-3-Clause
// Completion events: CQ arm requests (the UAR's CQ doorbell and each CQ's doorbell record),
// the events they raise, and their delivery to handlers outside the device lock (cq.h,
// handles.h set_cq_event_handler).
#include <endian.h>

#include <algorithm>

#include "hca.h"
#include "host_access.h"

namespace rnicdv::sim {

// Completion-event arming (cq.h), for CQs with a handler only. Two sources, because the CQ
// doorbell at page + 0x20 is one register for every CQ of the page (in libmlx5's static-UAR
// mode, every CQ of the context): a second CQ's arm may overwrite the first one's before the
// device reads it (perftest arms its send and receive CQs back to back). The register names
// the CQ; the arm word in each handled CQ's doorbell record is compared with what the device
// saw last, so an overwritten arm is still found. A new request always changes the word: its
// sn moves after every event, its ci or command otherwise, and the very first one (the word
// 0) differs from the mark the device leaves in the record (cq.h kCqArmWatchMark).
// Residual: a CQ armed before its handler was set and re-armed with the same word afterwards
// is seen through the register only, so it is lost if another CQ's arm overwrites that.
// The records of CQs in the device's own memory are compared on every pass (a load each);
// those the application placed (libmlx5's, read with system calls, host_access.h) only when a
// CQ doorbell register was written or a store into its page woke the device (uar_watch.h),
// which every arm of libmlx5's does after its record store.
bool Hca::scan_cq_arms_locked() {
  bool did = false;
  bool registers_written = !rung_pages_.empty();
  const auto from_register = [&](uint8_t* page) {
    CqArmWrite w;
    if (!consume_cq_doorbell(page, &w)) return;
    did = registers_written = true;
    for (CqObj* cq : evented_cqs_) {
      if (cq->cqn == w.cqn) {
        if (cq_apply_arm(*cq, w.arm_word)) ++counters_.cq_arms;
        break;
      }
    }
  };
  for (uint8_t* page : owned_pages_) from_register(page);
  for (const ExternalUarPage& page : external_pages_) from_register(page.device);
  for (CqObj* cq : evented_cqs_) {
    uint32_t raw = 0;
    if (cq->external) [[unlikely]] {
      if (cq->host_failed || !registers_written) continue;
      if (!host_load32(&cq->dbrec[kCqDbrArm], &raw)) {
        fail_cq_memory_locked(*cq);
        continue;
      }
    } else {
      raw = __atomic_load_n(&cq->dbrec[kCqDbrArm], __ATOMIC_ACQUIRE);
    }
    if (raw == cq->seen_arm_word) continue;
    cq->seen_arm_word = raw;
    if (cq_apply_arm(*cq, be32toh(raw))) ++counters_.cq_arms;
    did = true;
  }
  return did;
}

// An arm that finds CQEs already at or beyond its consumer index fires at once.
bool Hca::check_new_arms_locked() {
  bool did = false;
  for (CqObj* cq : evented_cqs_) {
    if (!cq->arm_check_pending) continue;
    cq->arm_check_pending = false;
    if (cq_arm_met_by_ring(*cq)) {
      raise_cq_event_locked(*cq);
      did = true;
    } else if (cq->host_fault) [[unlikely]] {
      fail_cq_memory_locked(*cq);
      did = true;
    }
  }
  return did;
}

void Hca::raise_cq_event_locked(CqObj& cq) {
  cq_disarm_fired(cq);
  ++counters_.cq_events;
  fired_cq_events_.emplace_back(cq.cqn, cq.handler_gen);
}

// Without the device lock. event_mu_ is held while handlers run: set_cq_event_handler and
// release_cq take it, so once they return, a removed handler is never called again.
bool Hca::deliver_cq_events(std::vector<std::pair<uint32_t, uint32_t>>& fired) {
  std::lock_guard<std::mutex> lock(event_mu_);
  for (const auto& [cqn, gen] : fired) {
    auto it = cq_event_handlers_.find(cqn);
    if (it != cq_event_handlers_.end() && it->second.gen == gen) it->second.fn();
  }
  fired.clear();
  return true;
}

Status Hca::set_cq_event_handler(CqObj* cq, std::function<void()> fn) {
  RNICDV_TRY(check_owner("set_cq_event_handler"));
  std::lock_guard<std::mutex> events(event_mu_);
  std::lock_guard<std::mutex> lock(mu_);
  if (!cq->handle_alive)
    return Status::error(Errc::invalid_argument, "%s: cq %#x: set_cq_event_handler: destroyed",
                         info_.name.c_str(), cq->cqn);
  if (!fn) {
    cq_event_handlers_.erase(cq->cqn);
    if (cq->events_on) {
      cq->events_on = false;
      cq_reset_arming(*cq);
      slot_erase(evented_cqs_, cq, &CqObj::evented_slot);
    }
    return Status::ok();
  }
  if (!cq->events_on) {
    // A new handler never sees events raised for an earlier one.
    ++cq->handler_gen;
    cq->events_on = true;
    cq_watch_arms(*cq);
    slot_push(evented_cqs_, cq, &CqObj::evented_slot);
  }
  cq_event_handlers_[cq->cqn] = CqEventHandler{cq->handler_gen, std::move(fn)};
  return Status::ok();
}

}  // namespace rnicdv::sim
