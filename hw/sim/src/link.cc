// SPDX-License-Identifier: BSD-3-Clause
// Link events of the fault specification (faults/spec.h LinkRule): the port going down and
// coming back up, and the device's fatal error.
//
// Each rule that names this device (or every device) becomes an event due at a time on the
// fabric's clock (at=, from the schedule's start) or once the device has sent a number of
// frames (after=). Timed events are deadlines (next_deadline_ns), so a deterministic fabric
// jumps to them and a sleeping device thread wakes for them; the engine applies what is due
// at the start of each pass, and transmit (transmit_raw, for QP1, unless the engine holds
// the lock) applies an after= event as the frame that makes it due goes out, so that no frame
// leaves past it. after= counts the frames that left: none while the port is down. Events apply earliest first, rules in their
// order at the same time; each writes one line to the fault log.
//
// Port down (IBA 14.3 / 11.6.3.3, as a ConnectX whose link goes down): the unaffiliated event
// PORT_ERR, ibv_query_port reads DOWN, and the device neither sends nor takes in frames
// (DeviceCounters::link_down_drops). QPs are not touched: an RC requester retransmits into the
// void, and completes with RETRY_EXC_ERR once its retries run out, as on hardware; one whose
// outage ended in time recovers by retransmission. Port up: PORT_ACTIVE, and traffic resumes.
// An event that would not change the port's state (up while up) raises nothing.
//
// Fatal (a ConnectX's catastrophic error, mlx5_core's "internal error" state): mlx5_ib raises
// IB_EVENT_DEVICE_FATAL and nothing else (mlx5_ib_handle_sys_error_event); its
// mlx5_ib_handle_internal_error only wakes kernel consumers' CQs, whose polls then produce
// software flush completions: a userspace CQ, which libmlx5 polls in its own memory, gets no
// CQE and no event, and libmlx5 only notes the state (mlx5_async_event sets
// MLX5_CTX_FLAGS_FATAL_STATE). The firmware executes nothing more: mlx5_core answers every
// command itself, success for the destroys and deallocations (mlx5_internal_err_ret_value)
// and EIO for the rest. So here: DEVICE_FATAL, the port reads DOWN (no PORT_ERR, as mlx5
// raises none), every QP not in RESET reads ERR, and the engine stops for good: no frame
// sent or taken in, no doorbell acted on, no CQE or completion event written, outstanding
// WRs never complete. The control path creates and modifies nothing more (Hca::check_alive:
// Errc::io_error), destroys excepted; the uverbs shim answers the same way, with EIO
// (hw/uverbs commands.cc).
#include <algorithm>

#include "hca.h"

namespace rnicdv::sim {

void Hca::init_link_events() {
  faults::FaultSchedule* schedule = fault_schedule();
  if (!schedule) return;
  const std::vector<faults::LinkRule>& rules = schedule->spec().links;
  for (size_t i = 0; i < rules.size(); ++i) {
    const faults::LinkRule& r = rules[i];
    if (!schedule->on_device(r.device, r.addr, index_)) continue;
    LinkEvent ev{};
    ev.rule = static_cast<uint32_t>(i);
    ev.action = r.action;
    ev.for_ns = r.for_ns;
    if (r.after_frames != 0) {
      ev.trigger = "after";
      ev.after_frames = r.after_frames;
    } else {
      ev.trigger = "at";
      ev.due_ns = schedule->start_ns() + r.at_ns;
    }
    link_events_.push_back(ev);
  }
  uint64_t first = UINT64_MAX;
  for (const LinkEvent& ev : link_events_)
    if (ev.after_frames != 0) first = std::min(first, ev.after_frames);
  link_frames_due_.store(first, std::memory_order_relaxed);
}

bool Hca::count_link_frame() {
  if (link_frames_due_.load(std::memory_order_relaxed) == UINT64_MAX) [[likely]]
    return false;
  const uint64_t sent = link_frames_tx_.fetch_add(1, std::memory_order_relaxed) + 1;
  return sent >= link_frames_due_.load(std::memory_order_relaxed);
}

uint64_t Hca::next_link_deadline_locked() const {
  uint64_t next = UINT64_MAX;
  for (const LinkEvent& ev : link_events_)
    if (!ev.done && ev.after_frames == 0) next = std::min(next, ev.due_ns);
  return next;
}

bool Hca::apply_link_events_locked(uint64_t now_ns) {
  bool applied = false;
  for (;;) {
    const uint64_t sent = link_frames_tx_.load(std::memory_order_relaxed);
    size_t best = link_events_.size();
    uint64_t best_t = 0;
    for (size_t k = 0; k < link_events_.size(); ++k) {
      const LinkEvent& ev = link_events_[k];
      if (ev.done) continue;
      uint64_t t;
      if (ev.after_frames != 0) {
        if (sent < ev.after_frames) continue;
        t = now_ns;
      } else {
        if (ev.due_ns > now_ns) continue;
        t = ev.due_ns;
      }
      if (best == link_events_.size() || t < best_t) {
        best = k;
        best_t = t;
      }
    }
    if (best == link_events_.size()) break;
    apply_link_event_locked(best, now_ns);
    applied = true;
  }
  if (applied) {
    uint64_t first = UINT64_MAX;
    for (const LinkEvent& ev : link_events_)
      if (!ev.done && ev.after_frames != 0) first = std::min(first, ev.after_frames);
    link_frames_due_.store(first, std::memory_order_relaxed);
  }
  return applied;
}

void Hca::apply_link_event_locked(size_t k, uint64_t now_ns) {
  link_events_[k].done = true;
  const LinkEvent ev = link_events_[k];  // a copy: a for= below may grow the vector
  const char* raised = "none";
  switch (ev.action) {
    case faults::LinkAction::port_down:
      if (dead_.load(std::memory_order_relaxed)) break;
      if (port_up_.load(std::memory_order_relaxed)) {
        port_up_.store(false, std::memory_order_release);
        raise_event(hw::AsyncEventType::port_err, 0, 0);
        raised = "PORT_ERR";
      }
      if (ev.for_ns != 0) {
        LinkEvent up{};
        up.rule = ev.rule;
        up.action = faults::LinkAction::port_up;
        up.trigger = "for";
        up.due_ns = now_ns + ev.for_ns;
        link_events_.push_back(up);
      }
      break;
    case faults::LinkAction::port_up:
      if (dead_.load(std::memory_order_relaxed)) break;
      if (!port_up_.load(std::memory_order_relaxed)) {
        port_up_.store(true, std::memory_order_release);
        raise_event(hw::AsyncEventType::port_active, 0, 0);
        raised = "PORT_ACTIVE";
      }
      break;
    case faults::LinkAction::fatal:
      if (dead_.load(std::memory_order_relaxed)) break;
      die_locked();
      raised = "DEVICE_FATAL";
      break;
  }
  faults::FaultSchedule* schedule = fault_schedule();
  faults::FaultLog::Line line(schedule->log(), now_ns, "link");
  line.str("action", faults::link_action_name(ev.action))
      .num("rule", ev.rule + 1)
      .num("device", index_)
      .str("trigger", ev.trigger);
  if (ev.after_frames != 0)
    line.num("frames", link_frames_tx_.load(std::memory_order_relaxed));
  else
    line.num("at_ns", now_ns - std::min(now_ns, schedule->start_ns()));
  if (ev.action == faults::LinkAction::port_down && ev.for_ns != 0) line.num("for_ns", ev.for_ns);
  line.str("event", raised);
}

void Hca::die_locked() {
  dead_.store(true, std::memory_order_release);
  port_up_.store(false, std::memory_order_release);
  raise_event(hw::AsyncEventType::device_fatal, 0, 0);
  // Nothing runs any more: the active list and the timers go, and the QPs read ERR without
  // a flush (no CQE is written; see the top of this file).
  for (QpObj* qp : active_) qp->queued = false;
  active_.clear();
  for (const auto& [due, qp] : timers_) qp->timer_at = 0;
  timers_.clear();
  for (auto& qp : qps_)
    if (qp && qp->state != hw::QpState::reset) qp->state = hw::QpState::err;
}

}  // namespace rnicdv::sim
