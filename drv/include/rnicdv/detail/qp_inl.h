// SPDX-License-Identifier: BSD-3-Clause
// Hot paths of QueuePair: post, stage, ring, post_recv, and the retirement a CQE triggers.
// Included by rnicdv/qp.h. Per WQE: no lock (Threading::single, or RTS in single_poster), no
// allocation, syscall, exception, virtual call, division or modulo.
#pragma once

#include <endian.h>
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "rnicdv/detail/qp_core.h"
#include "rnicdv/detail/spinlock.h"
#include "rnicdv/doorbell/rq_doorbell.h"
#include "rnicdv/doorbell/send_doorbell.h"
#include "rnicdv/qp.h"
#include "rnicdv/wqe/cqe.h"
#include "rnicdv/wqe/recv_wqe.h"
#include "rnicdv/wqe/send_wqe.h"

namespace rnicdv {
namespace detail {

// The answer to a post on a moved-from QueuePair: nothing is posted.
inline Errc moved_from_post(size_t count, size_t* bad_index) noexcept {
  if (count == 0) return Errc::ok;
  if (bad_index) *bad_index = 0;
  return Errc::invalid_argument;
}

inline Errc QpCore::post_send(const SendWr* wrs, size_t count, size_t* bad_index,
                              bool ring) noexcept {
  // One call site for post_ready (post_ready_outlined), so that it and the WQE encoder inline
  // into a single copy, apart from the one-WR path.
  // Acquire pairs with publish_state's release of the gate: an open gate means the withheld
  // batch has been rung, so this WQE lands after it in the SQ and on the wire.
  if (gate.load(std::memory_order_acquire) == kGateOpen) [[likely]] {
    if (count == 1 && post_one_fixed(*wrs, ring)) [[likely]]
      return Errc::ok;
    return post_ready_outlined(wrs, count, bad_index, ring);
  }
  return post_send_slow(wrs, count, bad_index, ring);
}

[[gnu::noinline]] inline Errc QpCore::post_ready_outlined(const SendWr* wrs, size_t count,
                                                          size_t* bad_index,
                                                          bool ring) noexcept {
  return post_ready(wrs, count, bad_index, ring);
}

inline void QpCore::commit_one(uint8_t* wqe, uint64_t head, uint8_t ds, uint32_t next,
                               bool ring) noexcept {
  const uint32_t pi = sq_pi;
  sq_pi = next;
  if (ring) {
    // As ring_unrung: doorbell_pi and device_pi before the doorbell record.
    doorbell_pi.store(next, std::memory_order_relaxed);
    device_pi.store(next, std::memory_order_relaxed);
    doorbell.ring_with_head(dbrec, next, head, wqe, ds, unrung, sq);  // clears unrung
  } else {
    // Staged. device_pi stays: only a scanning device could run the WQE before its doorbell,
    // and the typed calls and post_ready are never used for one (post_ready_scanning is).
    ++unrung;
    last_wqe_pi = pi;
    last_ds = ds;
  }
}

template <bool Xrc>
[[gnu::always_inline]] inline Errc QpCore::encode_one(const wqe::SqRing& ring, uint32_t pi,
                                                      uint32_t free_bbs, const SendWr& wr,
                                                      wqe::EncodedWqe* enc) noexcept {
  if constexpr (Xrc)
    return wqe::encode_xrc_send_wqe(ring, pi, free_bbs, qpn, wr, limits, sig_all_bits, enc);
  else
    return wqe::encode_send_wqe(ring, pi, free_bbs, qpn, wr, limits, sig_all_bits, enc);
}

template <QpCore::Publish P, bool Xrc>
inline size_t QpCore::encode_wrs(const wqe::SqRing& ring, const SendWr* wrs, size_t count,
                                 Errc* err_out) noexcept {
  if constexpr (!Xrc) {
    // An XRC initiator never has an open gate: this test is on the locked and slow paths'
    // way only (post_ready is theirs too), once per call.
    if (xrc) [[unlikely]]
      return encode_wrs<P, true>(ring, wrs, count, err_out);
  }
  uint32_t pi = sq_pi;
  Errc err = Errc::ok;
  size_t i = 0;
  wqe::EncodedWqe enc;
  for (; i < count; ++i) {
    const SendWr& wr = wrs[i];
    // A datagram on a UD QP, and only there: an RC QP's device would misread one, and a UD
    // send without an address has nowhere to go. A UC QP carries no READ or atomic.
    if ((wr.av != nullptr) != datagram || (unreliable && is_read_or_atomic(wr.opcode)))
        [[unlikely]] {
      err = Errc::invalid_argument;
      break;
    }
    if constexpr (P == Publish::before_bytes) {
      // The size comes from send_wqe_size, which writes nothing.
      uint8_t ds = 0;
      err = wqe::send_wqe_size(wr, limits, &ds);
      if (err != Errc::ok) break;
      if constexpr (Xrc) ds = static_cast<uint8_t>(ds + wqe::kXrcSegDs);
      const uint32_t bbs = (ds + 3u) / 4u;
      if (!has_room(bbs)) {
        err = Errc::queue_full;
        break;
      }
      sq_entries[pi & sq_mask].set(wr.wr_id, static_cast<uint8_t>(bbs),
                                   static_cast<uint8_t>(wr.opcode));
      // sq_pi too: the poller may retire this WQE as soon as it is written, and sq_tail must
      // never pass sq_pi.
      sq_pi = pi + bbs;
      device_pi.store(pi + bbs, std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_release);
    }
    err = encode_one<Xrc>(ring, pi, room_end - pi, wr, &enc);
    if (err != Errc::ok) [[unlikely]] {
      if constexpr (P == Publish::before_bytes) {
        sq_pi = pi;  // nothing was written
        device_pi.store(pi, std::memory_order_relaxed);
        break;
      } else {
        if (err != Errc::queue_full) break;
        // Acquire pairs with the poller's release of sq_tail: the blocks it retired are no
        // longer read by the device, and their sq_entries have been consumed.
        room_end = sq_tail.load(std::memory_order_acquire) + sq.bb_count;
        err = encode_one<Xrc>(ring, pi, room_end - pi, wr, &enc);
        if (err != Errc::ok) break;
      }
    }
    if constexpr (P == Publish::after_bytes)
      sq_entries[pi & sq_mask].set(wr.wr_id, enc.bbs, static_cast<uint8_t>(wr.opcode));
    last_wqe_pi = pi;
    last_ds = enc.ds;
    pi += enc.bbs;
  }
  sq_pi = pi;
  unrung += static_cast<uint32_t>(i);
  *err_out = err;
  return i;
}

inline Errc QpCore::post_ready(const SendWr* wrs, size_t count, size_t* bad_index,
                               bool ring) noexcept {
  Errc err;
  const size_t built = encode_wrs<Publish::after_bytes>(sq, wrs, count, &err);
  // Staged WQEs leave device_pi where it is (commit_one).
  if (ring && unrung != 0) ring_unrung();
  if (err != Errc::ok && bad_index) [[unlikely]]
    *bad_index = built;
  return err;
}

inline void QpCore::ring_unrung() noexcept {
  // doorbell_pi first: a poller that sees a CQE for these WQEs (ordered after the DBR store by the
  // device) must also see doorbell_pi cover them.
  doorbell_pi.store(sq_pi, std::memory_order_relaxed);
  device_pi.store(sq_pi, std::memory_order_relaxed);
  doorbell.ring(dbrec, sq_pi, reinterpret_cast<const uint8_t*>(sq.bb(last_wqe_pi)), last_ds, unrung,
                sq);
  unrung = 0;
}

inline void QpCore::ring_send() noexcept {
  if (gate.load(std::memory_order_acquire) == kGateOpen) [[likely]] {
    if (unrung) ring_unrung();
    return;
  }
  ring_send_slow();
}

inline Errc QpCore::post_recv(const RecvWr* wrs, size_t count, size_t* bad_index) noexcept {
  if (rq_max_sge == 0) [[unlikely]] {
    // Its receives go to a shared receive queue (an XRC target's to the SRQs its requests
    // name), or it has no receive queue (an XRC initiator).
    if (bad_index) *bad_index = 0;
    return Errc::invalid_argument;
  }
  OptionalSpinGuard guard(rq_lock, threading == Threading::thread_safe);
  // IBA C10-22: a receive in RESET is an immediate error. From INIT on it is accepted; in ERR
  // the device flushes it.
  if (state.load(std::memory_order_relaxed) == hw::QpState::reset) [[unlikely]]
    return post_recv_in_reset(count, bad_index);
  uint32_t head = rq_head;
  uint32_t tail = rq_tail.load(std::memory_order_acquire);
  Errc err = Errc::ok;
  size_t i = 0;
  for (; i < count; ++i) {
    if (head - tail >= rq.wqe_cnt) [[unlikely]] {
      tail = rq_tail.load(std::memory_order_acquire);
      if (head - tail >= rq.wqe_cnt) {
        err = Errc::queue_full;
        break;
      }
    }
    err = wqe::encode_recv_wqe(rq, head, rq_max_sge, wrs[i]);
    if (err != Errc::ok) [[unlikely]]
      break;
    rq_wr_ids[head & rq_mask] = wrs[i].wr_id;
    ++head;
  }
  if (head != rq_head) {
    rq_head = head;
    rq_posted.store(head, std::memory_order_relaxed);
    doorbell::ring_rq_doorbell(dbrec, head);
  }
  if (err != Errc::ok && bad_index) [[unlikely]]
    *bad_index = i;
  return err;
}

inline Retired QpCore::retire_send_id(const mlx5_cqe64* cqe, uint64_t* wr_id) noexcept {
  const uint32_t tail = sq_tail.load(std::memory_order_relaxed);  // written only here
  const uint16_t counter = be16toh(cqe->wqe_counter);
  const uint32_t pos = tail + static_cast<uint16_t>(counter - static_cast<uint16_t>(tail));
  // A CQE can only name a WQE the device was given; anything else belongs to an earlier
  // incarnation of this QPN (before RESET), or is a device fault, and is dropped.
  if (pos - tail >= device_pi.load(std::memory_order_relaxed) - tail) [[unlikely]]
    return Retired::stale;
  const SqEntry entry = poll_sq_entries[pos & poll_sq_mask];
  // Release: posters may reuse these blocks and their entries once they see the new tail.
  sq_tail.store(pos + entry.bbs, std::memory_order_release);
  if (entry.kind != kUserWqe) [[unlikely]]
    return Retired::silent;
  *wr_id = entry.wr_id;
  return Retired::report;
}


inline Retired QpCore::retire_send(const mlx5_cqe64* cqe, Completion* out) noexcept {
  uint64_t wr_id;
  const Retired r = retire_send_id(cqe, &wr_id);
  if (r == Retired::report) [[likely]] {
    wqe::cqe_to_completion(cqe, out);
    out->wr_id = wr_id;
  }
  return r;
}

inline Retired QpCore::retire_recv(const mlx5_cqe64* cqe, Completion* out) noexcept {
  if (poll_srq) [[unlikely]] {
    uint64_t wr_id = 0;
    if (!poll_srq->retire(cqe, &wr_id)) return Retired::stale;
    wqe::cqe_to_completion(cqe, out);
    out->wr_id = wr_id;
    return Retired::report;
  }
  if (xrc_target) [[unlikely]]
    return retire_xrc_recv(cqe, out);
  const uint32_t tail = rq_tail.load(std::memory_order_relaxed);
  const uint16_t counter = be16toh(cqe->wqe_counter);
  const uint32_t pos = tail + static_cast<uint16_t>(counter - static_cast<uint16_t>(tail));
  if (pos - tail >= rq_posted.load(std::memory_order_relaxed) - tail) [[unlikely]]
    return Retired::stale;
  const uint64_t wr_id = poll_rq_wr_ids[pos & poll_rq_mask];
  rq_tail.store(pos + 1, std::memory_order_release);
  wqe::cqe_to_completion(cqe, out);
  out->wr_id = wr_id;
  return Retired::report;
}

}  // namespace detail

// A moved-from QueuePair points at QpCore::moved_from(), whose gate never opens: its posts
// fail with invalid_argument on the slow path (and write nothing), its ring_send does nothing.
inline Errc QueuePair::post_send(std::span<const SendWr> wrs, size_t* bad_index) noexcept {
  return core_->post_send(wrs.data(), wrs.size(), bad_index, true);
}

inline Errc QueuePair::stage_send(const SendWr& wr) noexcept {
  return core_->post_send(&wr, 1, nullptr, false);
}

inline void QueuePair::ring_send() noexcept {
  core_->ring_send();
}

inline Errc QueuePair::post_recv(std::span<const RecvWr> wrs, size_t* bad_index) noexcept {
  return core_->post_recv(wrs.data(), wrs.size(), bad_index);
}

}  // namespace rnicdv
