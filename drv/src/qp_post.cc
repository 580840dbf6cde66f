// SPDX-License-Identifier: BSD-3-Clause
// The cold side of posting: every state but RTS. Runs with the QP's post lock held (or on the
// owner thread of a Threading::single QP). docs/driver.md, "Early posting".
#include <cstring>

#include "rnicdv/detail/cq_core.h"
#include "rnicdv/detail/qp_core.h"
#include "rnicdv/qp.h"
#include "rnicdv/wqe/cqe.h"

namespace rnicdv::detail {

Errc QpCore::post_send_slow(const SendWr* wrs, size_t count, size_t* bad_index,
                            bool ring) noexcept {
  if (is_moved_from()) [[unlikely]]
    return moved_from_post(count, bad_index);
  if (threading == Threading::single) return post_gated(wrs, count, bad_index, ring);
  post_lock.lock();
  // Re-read under the lock: the flush may have published RTS since the lock-free read; if it
  // has not, it cannot until this post is done. (A thread_safe QP posts here in RTS too.)
  const Errc err = post_gated(wrs, count, bad_index, ring);
  post_lock.unlock();
  return err;
}

Errc QpCore::post_recv_in_reset(size_t count, size_t* bad_index) noexcept {
  if (is_moved_from()) [[unlikely]]
    return moved_from_post(count, bad_index);
  if (count == 0) return Errc::ok;
  if (bad_index) *bad_index = 0;
  return Errc::bad_state;
}

void QpCore::ring_send_slow() noexcept {
  if (threading == Threading::single) return ring_send_gated();
  post_lock.lock();
  ring_send_gated();
  post_lock.unlock();
}

Errc QpCore::post_ready_any(const SendWr* wrs, size_t count, size_t* bad_index,
                            bool ring) noexcept {
  if (scanning_device) return post_ready_scanning(wrs, count, bad_index, ring);
  return post_ready(wrs, count, bad_index, ring);
}

Errc QpCore::post_gated(const SendWr* wrs, size_t count, size_t* bad_index, bool ring) noexcept {
  if (xrc_target) [[unlikely]] {
    // An XRC target has no send queue.
    if (count == 0) return Errc::ok;
    if (bad_index) *bad_index = 0;
    return Errc::invalid_argument;
  }
  if (unreliable) [[unlikely]] {
    // The WRs before the first one UC cannot carry (a READ or an atomic) are posted, and that
    // one is refused, as ibv_post_send refuses it (bad_wr). In RTS encode_wrs checks the same.
    size_t n = 0;
    while (n < count && !is_read_or_atomic(wrs[n].opcode)) ++n;
    if (n != count) {
      const Errc err = post_in_state(wrs, n, bad_index, ring);
      if (err != Errc::ok) return err;
      if (bad_index) *bad_index = n;
      return Errc::invalid_argument;
    }
  }
  return post_in_state(wrs, count, bad_index, ring);
}

Errc QpCore::post_in_state(const SendWr* wrs, size_t count, size_t* bad_index,
                           bool ring) noexcept {
  switch (state.load(std::memory_order_relaxed)) {
    case hw::QpState::rts:
    case hw::QpState::sqd:  // accepted and rung; the device starts them back in RTS
      return post_ready_any(wrs, count, bad_index, ring);
    case hw::QpState::rtr:
      if (early_post != EarlyPost::strict) return post_withheld(wrs, count, bad_index);
      [[fallthrough]];        // IBA C10-29
    case hw::QpState::reset:  // C10-22
    case hw::QpState::init:   // C10-25
      if (count == 0) return Errc::ok;
      if (bad_index) *bad_index = 0;
      return Errc::bad_state;
    case hw::QpState::sqe:
    case hw::QpState::err:
      return post_flushed(wrs, count, bad_index);
  }
  return Errc::bad_state;
}

// RTR: build the WQEs at their final SQ positions (in the SQ itself, or in the shadow ring of
// the same layout) and touch neither the SQ doorbell record nor the UAR (invariant 1). The
// whole withheld batch must fit in the SQ (invariant 5): a WQE that does not is queue_full.
Errc QpCore::post_withheld(const SendWr* wrs, size_t count, size_t* bad_index) noexcept {
  Errc err;
  const size_t built = encode_wrs<Publish::after_bytes>(build_ring(), wrs, count, &err);
  withheld.store(withheld.load(std::memory_order_relaxed) + static_cast<uint32_t>(built),
                 std::memory_order_relaxed);
  if (err != Errc::ok && bad_index) *bad_index = built;
  return err;
}

// A device that runs valid-looking WQEs past the doorbell record can complete a WQE the
// moment its ctrl segment is in the SQ. So each WQE's sq_entries slot is written and device_pi
// moved past it first, and a release fence orders both before the WQE's bytes: the CQE can
// then never name a WQE the poller does not know (it would drop it as stale, and the WR would
// never complete). The size comes from send_wqe_size, which encodes nothing.
Errc QpCore::post_ready_scanning(const SendWr* wrs, size_t count, size_t* bad_index,
                                 bool ring) noexcept {
  Errc err;
  const size_t built = encode_wrs<Publish::before_bytes>(sq, wrs, count, &err);
  if (ring && unrung != 0)
    ring_unrung();
  else
    device_pi.store(sq_pi, std::memory_order_relaxed);
  if (err != Errc::ok && bad_index) *bad_index = built;
  return err;
}

namespace {

// Room for `bbs` blocks at `pi`. When the cached tail says no, the poller's is read again once.
bool room_for(const QpCore& qp, uint32_t pi, uint32_t* tail, uint32_t bbs) noexcept {
  if (qp.sq.bb_count - (pi - *tail) >= bbs) return true;
  *tail = qp.sq_tail.load(std::memory_order_acquire);
  return qp.sq.bb_count - (pi - *tail) >= bbs;
}

}  // namespace

// ERR/SQE: the WR is accepted and completes with WR_FLUSH_ERR, made by the driver and delivered
// by the send CQ after everything the device was given for this QP (IBA C10-96, as rdmavt and
// siw do). The ring is not written. Malformed WRs are still rejected, as in RTS.
Errc QpCore::post_flushed(const SendWr* wrs, size_t count, size_t* bad_index) noexcept {
  if (count == 0) return Errc::ok;
  if (device_failed) [[unlikely]] {
    if (bad_index) *bad_index = 0;
    return Errc::qp_in_error;
  }
  if (!software_flush) {
    // The QP reached RTS before failing, so the device may own WQEs that will never produce a
    // CQE (unsignaled ones it executed). Hand it everything built so far and a signaled NOP:
    // in ERR the device flushes them all, and the NOP's CQE retires every earlier block, so
    // the software completions that follow are ordered after the device's.
    const uint32_t tail = sq_tail.load(std::memory_order_acquire);
    if (sq_pi != tail) {
      if (sq.bb_count - (sq_pi - tail) == 0) {
        if (bad_index) *bad_index = 0;
        return Errc::queue_full;
      }
      // The marker is one block. Its entry (and, for a scanning device, which flushes
      // valid-looking WQEs in ERR, device_pi) is published before the NOP is written.
      sq_entries[sq_pi & sq_mask] = SqEntry{0, 1, MLX5_OPCODE_NOP, kDrainMarker, {}};
      const uint32_t published = device_pi.load(std::memory_order_relaxed);
      const uint32_t marker = sq_pi;
      if (scanning_device) {
        sq_pi = marker + 1;
        device_pi.store(marker + 1, std::memory_order_relaxed);
        std::atomic_thread_fence(std::memory_order_release);
      }
      wqe::EncodedWqe enc;
      const Errc err = wqe::encode_nop_wqe(sq, marker, sq.bb_count - (marker - tail), qpn, 1,
                                           MLX5_WQE_CTRL_CQ_UPDATE, &enc);
      if (err != Errc::ok) [[unlikely]] {
        sq_pi = marker;
        device_pi.store(published, std::memory_order_relaxed);
        if (bad_index) *bad_index = 0;
        return Errc::queue_full;
      }
      last_wqe_pi = marker;
      last_ds = enc.ds;
      sq_pi = marker + enc.bbs;
      ++unrung;
      ring_unrung();
    }
    sw_begin.store(sq_pi, std::memory_order_relaxed);
    sw_end.store(sq_pi, std::memory_order_release);
    software_flush = true;
  }

  uint32_t pi = sq_pi;
  uint32_t tail = sq_tail.load(std::memory_order_acquire);
  Errc err = Errc::ok;
  size_t i = 0;
  for (; i < count; ++i) {
    const SendWr& wr = wrs[i];
    uint8_t ds;
    err = wqe::send_wqe_size(wr, limits, &ds);
    if (err != Errc::ok) break;
    if (!room_for(*this, pi, &tail, 1)) {  // one block each: the entry only
      err = Errc::queue_full;
      break;
    }
    sq_entries[pi & sq_mask] = SqEntry{wr.wr_id, 1, static_cast<uint8_t>(wr.opcode), kUserWqe, {}};
    ++pi;
  }
  if (i != 0) {
    sq_pi = pi;
    // Release: the entries are written before the poller may read them.
    sw_end.store(pi, std::memory_order_release);
    send_cq->add_software_qp(this);
  }
  if (err != Errc::ok && bad_index) *bad_index = i;
  return err;
}

void QpCore::ring_send_gated() noexcept {
  switch (state.load(std::memory_order_relaxed)) {
    case hw::QpState::rts:
    case hw::QpState::sqd:
      if (unrung) ring_unrung();
      return;
    case hw::QpState::sqe:
    case hw::QpState::err:
      // WQEs staged in RTS and rung in ERR: the device flushes them.
      if (unrung && !software_flush) ring_unrung();
      return;
    case hw::QpState::reset:
    case hw::QpState::init:
    case hw::QpState::rtr:  // withheld until RTS
      return;
  }
}

Result<uint32_t> QpCore::abort_staged() noexcept {
  if (is_moved_from()) [[unlikely]]
    return Status(Errc::invalid_argument, "qp: abort_staged: a moved-from QueuePair has no QP");
  OptionalSpinGuard guard(post_lock, locks_posts());
  const hw::QpState s = state.load(std::memory_order_relaxed);
  // In ERR with software completions, every WR is already on its way to a flush completion.
  if (unrung == 0 || software_flush) return uint32_t{0};
  // Below RTS the WRs are withheld, in the SQ (in place) or the shadow ring; from RTS on they
  // were built into the SQ. A scanning device may run what is in its SQ without a doorbell.
  const bool in_sq = s == hw::QpState::rtr ? shadow.buf == nullptr : true;
  if (scanning_device && in_sq)
    return Status::error(Errc::bad_state,
                         "qp %#x: abort_staged: %u WRs are in the SQ of a device that fetches "
                         "WQEs beyond the doorbell record, and may already run; they stay "
                         "posted",
                         qpn, unrung);
  // Everything from the last doorbell on is the device's to ignore: it reads only up to the
  // doorbell record, and the next WQEs are built over these blocks.
  const uint32_t discarded = unrung;
  sq_pi = device_pi.load(std::memory_order_relaxed);
  unrung = 0;
  if (s == hw::QpState::rtr) withheld.store(0, std::memory_order_relaxed);
  return discarded;
}

int QpCore::poll_software(Completion* out, int max) noexcept {
  uint32_t tail = sq_tail.load(std::memory_order_relaxed);
  const uint32_t begin = sw_begin.load(std::memory_order_acquire);
  const uint32_t end = sw_end.load(std::memory_order_acquire);
  // Gate: until the device has retired everything before sw_begin, its completions (and
  // flushes) for this QP are still to come, and must come first.
  if (tail - begin > end - begin) return 0;
  int n = 0;
  while (tail != end && n < max) {
    const SqEntry entry = sq_entries[tail & sq_mask];
    Completion& c = out[n++];
    std::memset(&c, 0, sizeof c);
    c.wr_id = entry.wr_id;
    c.status = IBV_WC_WR_FLUSH_ERR;
    c.opcode = static_cast<uint8_t>(wqe::send_opcode_to_wc_opcode(entry.opcode));
    c.qp_num = qpn;
    c.wqe_counter = static_cast<uint16_t>(tail);
    tail += entry.bbs;
  }
  sq_tail.store(tail, std::memory_order_release);
  return n;
}

}  // namespace rnicdv::detail
