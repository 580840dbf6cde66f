// SPDX-License-Identifier: BSD-3-Clause
// QP state transitions as the driver sees them: the flush of withheld work on reaching RTS,
// software flush errors on ERR, and the discard on RESET (docs/driver.md, "Early posting":
// release, failure, RESET).
#include <cstring>
#include <mutex>

#include "rnicdv/detail/cq_core.h"
#include "rnicdv/detail/qp_core.h"
#include "rnicdv/doorbell/mmio.h"
#include "rnicdv/qp.h"

namespace rnicdv::detail {

namespace {

using hw::QpState;
namespace attr_bit = hw::qp_attr;

// IBA 10.3.1, figure 124 (and ibv_modify_qp's table of legal transitions).
bool transition_allowed(QpState from, QpState to) {
  if (to == QpState::reset || to == QpState::err) return true;
  switch (from) {
    case QpState::reset:
      return to == QpState::init;
    case QpState::init:
      return to == QpState::init || to == QpState::rtr;
    case QpState::rtr:
      return to == QpState::rts;
    case QpState::rts:
      return to == QpState::rts || to == QpState::sqd;
    case QpState::sqd:
      return to == QpState::sqd || to == QpState::rts;
    case QpState::sqe:
      return to == QpState::rts;
    case QpState::err:
      return false;
  }
  return false;
}

struct RequiredAttr {
  uint32_t bit;
  const char* name;
};

// The attributes IB requires for each transition of an RC QP (ibv_modify_qp(3)).
constexpr RequiredAttr kToInit[] = {{attr_bit::access_flags, "access_flags"},
                                    {attr_bit::port, "port"}};
constexpr RequiredAttr kToRtr[] = {{attr_bit::av, "remote address (av)"},
                                   {attr_bit::path_mtu, "path_mtu"},
                                   {attr_bit::dest_qpn, "remote QPN"},
                                   {attr_bit::rq_psn, "rq_psn"},
                                   {attr_bit::max_dest_rd_atomic, "max_dest_rd_atomic"},
                                   {attr_bit::min_rnr_timer, "min_rnr_timer"}};
constexpr RequiredAttr kToRts[] = {{attr_bit::sq_psn, "sq_psn"},
                                   {attr_bit::timeout, "timeout"},
                                   {attr_bit::retry_cnt, "retry_cnt"},
                                   {attr_bit::rnr_retry, "rnr_retry"},
                                   {attr_bit::max_rd_atomic, "max_rd_atomic"}};

// A UD QP's (IBA 10.3.1): the Q_Key where RC takes its remote access, nothing for RTR (each
// send carries its address), the send PSN for RTS.
constexpr RequiredAttr kUdToInit[] = {{attr_bit::port, "port"}, {attr_bit::qkey, "qkey"}};
constexpr RequiredAttr kUdToRts[] = {{attr_bit::sq_psn, "sq_psn"}};

// A UC QP's: RC's path and peer without what reliability needs (no ACK timeout, retry counts,
// RNR timer or READ/atomic depths).
constexpr RequiredAttr kUcToRtr[] = {{attr_bit::av, "remote address (av)"},
                                     {attr_bit::path_mtu, "path_mtu"},
                                     {attr_bit::dest_qpn, "remote QPN"},
                                     {attr_bit::rq_psn, "rq_psn"}};

// XRC's: an initiator is RC without a responder's depths at RTR; a target RC with only the
// ACK timeout and the send PSN at RTS (ib_modify_qp_is_ok's table).
constexpr RequiredAttr kXrcTargetToRts[] = {{attr_bit::sq_psn, "sq_psn"},
                                            {attr_bit::timeout, "timeout"}};

template <size_t N>
const char* first_missing(const RequiredAttr (&required)[N], uint32_t mask) {
  for (const auto& r : required)
    if (!(mask & r.bit)) return r.name;
  return nullptr;
}

const char* missing_attribute(QpState from, QpState to, uint32_t mask, bool datagram,
                              bool unreliable, bool xrc_initiator, bool xrc_target) {
  if (xrc_initiator && from == QpState::init && to == QpState::rtr)
    return first_missing(kUcToRtr, mask);
  if (xrc_target && from == QpState::rtr && to == QpState::rts)
    return first_missing(kXrcTargetToRts, mask);
  if (datagram) {
    if (from == QpState::reset && to == QpState::init) return first_missing(kUdToInit, mask);
    if (from == QpState::rtr && to == QpState::rts) return first_missing(kUdToRts, mask);
    return nullptr;
  }
  if (unreliable) {
    if (from == QpState::reset && to == QpState::init) return first_missing(kToInit, mask);
    if (from == QpState::init && to == QpState::rtr) return first_missing(kUcToRtr, mask);
    if (from == QpState::rtr && to == QpState::rts) return first_missing(kUdToRts, mask);
    return nullptr;
  }
  if (from == QpState::reset && to == QpState::init) return first_missing(kToInit, mask);
  if (from == QpState::init && to == QpState::rtr) return first_missing(kToRtr, mask);
  if (from == QpState::rtr && to == QpState::rts) return first_missing(kToRts, mask);
  return nullptr;
}

}  // namespace

Status QpCore::modify(const hw::QpAttr& attr, uint32_t mask) {
  std::lock_guard control(control_mutex);
  const QpState from = state.load(std::memory_order_relaxed);
  if (!(mask & attr_bit::state)) {  // attributes only
    RNICDV_TRY(hw_qp->modify(attr, mask));
    if (mask & attr_bit::port) port.store(attr.port_num, std::memory_order_relaxed);
    return Status::ok();
  }

  const QpState to = attr.state;
  if (!transition_allowed(from, to))
    return Status::error(Errc::bad_state, "qp %#x: modify %s->%s: not a valid transition", qpn,
                         hw::qp_state_name(from), hw::qp_state_name(to));
  if (to == QpState::sqe)
    return Status::error(Errc::unsupported,
                         "qp %#x: modify %s->SQE: only the device moves a queue pair to SQE "
                         "(IBA 10.3.1; an RC one enters ERR instead)",
                         qpn, hw::qp_state_name(from));
  if (const char* missing = missing_attribute(from, to, mask, datagram, unreliable, xrc,
                                              xrc_target))
    return Status::error(Errc::invalid_argument, "qp %#x: modify %s->%s: %s not set", qpn,
                         hw::qp_state_name(from), hw::qp_state_name(to), missing);

  // The device moves first. If it refuses, nothing is released and the state is unchanged.
  RNICDV_TRY(hw_qp->modify(attr, mask));
  // The port it now sends through (local_endpoint's GID); RESET forgets it, as the device does.
  if (to == QpState::reset) port.store(1, std::memory_order_relaxed);
  if (mask & attr_bit::port) port.store(attr.port_num, std::memory_order_relaxed);

  switch (to) {
    case QpState::reset: {
      OptionalSpinGuard post(post_lock, locks_posts());
      OptionalSpinGuard recv(rq_lock, locks_posts());
      reset_locked();
      break;
    }
    case QpState::rts: {
      OptionalSpinGuard post(post_lock, locks_posts());
      if (from == QpState::rtr)
        release_withheld_locked();
      else
        publish_state(QpState::rts);
      break;
    }
    case QpState::err: {
      OptionalSpinGuard post(post_lock, locks_posts());
      enter_error_locked(to);
      break;
    }
    case QpState::init:
    case QpState::rtr:
    case QpState::sqd:
    case QpState::sqe: {
      OptionalSpinGuard post(post_lock, locks_posts());
      publish_state(to);
      break;
    }
  }
  return Status::ok();
}

// The release (docs/driver.md, "Early posting"), with the post lock held and the device in RTS:
// 1. copy the shadow batch into the SQ; 2. store the DBR; 3. one doorbell, BlueFlame only for
// a single WQE on the QP's own register (SendDoorbell decides); 4. publish RTS with release
// ordering, last, so that a poster who sees RTS posts after the batch.
void QpCore::release_withheld_locked() noexcept {
  if (unrung != 0) {
    const uint32_t begin = doorbell_pi.load(std::memory_order_relaxed);
    if (scanning_device) {
      // The device is in RTS and may run each copied WQE as soon as it is in the SQ.
      device_pi.store(sq_pi, std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_release);
    }
    if (shadow.buf && scanning_device) {
      // One WQE at a time, each ctrl segment last: the device may fetch each as soon as it
      // looks valid. The sizes are in the entries post_withheld wrote.
      for (uint32_t pos = begin; pos != sq_pi;) {
        const uint32_t bbs = sq_entries[pos & sq_mask].bbs;
        if (bbs == 0 || bbs > sq_pi - pos) [[unlikely]] {  // cannot happen: copy the rest whole
          wqe::copy_between_rings(shadow, sq, pos, (sq_pi - pos) * wqe::kBbBytes);
          break;
        }
        wqe::copy_wqe_ctrl_last(shadow, sq, pos, bbs);
        pos += bbs;
      }
    } else if (shadow.buf) {
      wqe::copy_between_rings(shadow, sq, begin, (sq_pi - begin) * wqe::kBbBytes);
    }
    ring_unrung();
  }
  withheld.store(0, std::memory_order_relaxed);
  ever_rts = true;
  publish_state(QpState::rts);
}

void QpCore::enter_error_locked(QpState to) noexcept {
  if (!ever_rts && !software_flush) {
    // Nothing of this incarnation was ever given to the device: every WR built so far
    // (withheld in RTR) completes in software, in posting order.
    const uint32_t begin = doorbell_pi.load(std::memory_order_relaxed);
    sw_begin.store(begin, std::memory_order_relaxed);
    sw_end.store(sq_pi, std::memory_order_release);
    software_flush = true;
    unrung = 0;
    withheld.store(0, std::memory_order_relaxed);
    if (sq_pi != begin) send_cq->add_software_qp(this);
  }
  publish_state(to);
}

// RESET discards everything with no completions (IBA 10.3.1) and, as libmlx5 does
// (verbs.c mlx5_modify_qp), zeroes both doorbell records and restarts the indices. The SQ is
// cleared too: a scanning device must not find the old incarnation's WQEs valid at the new
// indices.
void QpCore::reset_locked() noexcept {
  if (send_cq) send_cq->remove_software_qp(this);
  sq_pi = 0;
  room_end = sq.bb_count;
  unrung = 0;
  last_wqe_pi = 0;
  last_ds = 0;
  ever_rts = false;
  software_flush = false;
  doorbell_pi.store(0, std::memory_order_relaxed);
  device_pi.store(0, std::memory_order_relaxed);
  sw_begin.store(0, std::memory_order_relaxed);
  sw_end.store(0, std::memory_order_relaxed);
  withheld.store(0, std::memory_order_relaxed);
  sq_tail.store(0, std::memory_order_relaxed);
  rq_head = 0;
  rq_posted.store(0, std::memory_order_relaxed);
  rq_tail.store(0, std::memory_order_relaxed);
  std::memset(sq.buf, 0, size_t{sq.bb_count} * wqe::kBbBytes);
  if (shadow.buf) std::memset(shadow.buf, 0, size_t{shadow.bb_count} * wqe::kBbBytes);
  doorbell::store_dbr(&dbrec[MLX5_RCV_DBR], 0);
  doorbell::store_dbr(&dbrec[MLX5_SND_DBR], 0);
  publish_state(QpState::reset);
}

PostGate QpCore::gate_in_rts() const noexcept {
  // The lock-free path builds with the plain encoder: not for a scanning device, which needs
  // each WQE's bookkeeping published before its bytes (post_ready_scanning). A QP that cannot
  // take one SGE goes the slow way, where post_send's checks report it. A UD QP's WRs go that
  // way too, where encode_wrs checks their datagram; its typed datagram calls do not. A UC QP
  // takes the lock-free path as RC does: encode_wrs refuses its READs and atomics, and the
  // typed ones leave the fixed path.
  // An XRC initiator's WQEs carry a segment the lock-free layouts have not: the slow path
  // (encode_wrs builds them). A target posts nothing.
  if (scanning_device || limits.max_sge == 0 || xrc || xrc_target) return kGateSlow;
  if (datagram) return threading == Threading::thread_safe ? kGateSlow : kGateOpenDatagram;
  return threading == Threading::thread_safe ? kGateOpenUnderLock : kGateOpen;
}

void QpCore::on_async_error(hw::AsyncEventType type) {
  std::lock_guard control(control_mutex);
  OptionalSpinGuard post(post_lock, locks_posts());
  if (type == hw::AsyncEventType::device_fatal) device_failed = true;
  follow_device_to_error_locked();
}

// An error CQE (a bad lkey, a remote access error, retries exhausted, ...) means the device
// has moved the QP to ERR (IBA 10.3.1: a completion error takes an RC QP to the error
// state). The driver's view follows, as ibv_query_qp would report: posts from now on complete
// with WR_FLUSH_ERR after what the device flushes.
void QpCore::on_error_completion() noexcept {
  std::lock_guard control(control_mutex);
  OptionalSpinGuard post(post_lock, locks_posts());
  follow_device_to_error_locked();
}

void QpCore::follow_device_to_error_locked() noexcept {
  const QpState s = state.load(std::memory_order_relaxed);
  if (s == QpState::reset || s == QpState::err) return;
  enter_error_locked(QpState::err);
}

}  // namespace rnicdv::detail
