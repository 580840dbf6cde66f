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
  // One call site for post_ready, so that it and the WQE encoder inline into a single copy.
  bool ready;
  switch (threading) {
    case Threading::single:
      ready = state.load(std::memory_order_relaxed) == hw::QpState::rts;
      break;
    case Threading::single_poster:
      // Acquire pairs with the flush's release store of RTS: seeing RTS means the withheld
      // batch has been rung, so this WQE lands after it in the SQ and on the wire.
      ready = state.load(std::memory_order_acquire) == hw::QpState::rts;
      break;
    case Threading::thread_safe:
    default:
      post_lock.lock();
      ready = state.load(std::memory_order_relaxed) == hw::QpState::rts;
      break;
  }
  if (!ready) [[unlikely]]
    return post_send_slow(wrs, count, bad_index, ring);
  const Errc err = post_ready(wrs, count, bad_index, ring);
  if (threading == Threading::thread_safe) post_lock.unlock();
  return err;
}

inline Errc QpCore::post_ready(const SendWr* wrs, size_t count, size_t* bad_index,
                               bool ring) noexcept {
  if (scanning_device) [[unlikely]]
    return post_ready_scanning(wrs, count, bad_index, ring);
  uint32_t pi = sq_pi;
  // Acquire pairs with the poller's release of sq_tail: the blocks it retired are no longer
  // read by the device, and their sq_entries have been consumed.
  uint32_t tail = sq_tail.load(std::memory_order_acquire);
  Errc err = Errc::ok;
  size_t i = 0;
  wqe::EncodedWqe enc;
  for (; i < count; ++i) {
    const SendWr& wr = wrs[i];
    err = wqe::encode_send_wqe(sq, pi, sq.bb_count - (pi - tail), qpn, wr, limits, sig_all_bits,
                               &enc);
    if (err != Errc::ok) [[unlikely]] {
      if (err != Errc::queue_full) break;
      tail = sq_tail.load(std::memory_order_acquire);
      err = wqe::encode_send_wqe(sq, pi, sq.bb_count - (pi - tail), qpn, wr, limits, sig_all_bits,
                                 &enc);
      if (err != Errc::ok) break;
    }
    SqEntry& entry = sq_entries[pi & sq_mask];
    entry.wr_id = wr.wr_id;
    entry.bbs = enc.bbs;
    entry.opcode = static_cast<uint8_t>(wr.opcode);
    entry.kind = kUserWqe;
    last_wqe_pi = pi;
    last_ds = enc.ds;
    pi += enc.bbs;
  }
  sq_pi = pi;
  unrung += static_cast<uint32_t>(i);
  if (ring && unrung != 0)
    ring_unrung();
  else
    ring_pi.store(pi, std::memory_order_relaxed);
  if (err != Errc::ok && bad_index) [[unlikely]]
    *bad_index = i;
  return err;
}

inline void QpCore::ring_unrung() noexcept {
  // hw_pi first: a poller that sees a CQE for these WQEs (ordered after the DBR store by the
  // device) must also see hw_pi cover them.
  hw_pi.store(sq_pi, std::memory_order_relaxed);
  ring_pi.store(sq_pi, std::memory_order_relaxed);
  doorbell.ring(dbrec, sq_pi, reinterpret_cast<const uint8_t*>(sq.bb(last_wqe_pi)), last_ds, unrung,
                sq);
  unrung = 0;
}

inline void QpCore::ring_send() noexcept {
  switch (threading) {
    case Threading::single:
      if (state.load(std::memory_order_relaxed) == hw::QpState::rts) [[likely]] {
        if (unrung) ring_unrung();
        return;
      }
      return ring_send_gated();
    case Threading::single_poster:
      if (state.load(std::memory_order_acquire) == hw::QpState::rts) [[likely]] {
        if (unrung) ring_unrung();
        return;
      }
      break;
    case Threading::thread_safe:
      break;
  }
  post_lock.lock();
  ring_send_gated();
  post_lock.unlock();
}

inline Errc QpCore::post_recv(const RecvWr* wrs, size_t count, size_t* bad_index) noexcept {
  OptionalSpinGuard guard(rq_lock, threading == Threading::thread_safe);
  // IBA C10-22: a receive in RESET is an immediate error. From INIT on it is accepted; in ERR
  // the device flushes it.
  if (state.load(std::memory_order_relaxed) == hw::QpState::reset) [[unlikely]] {
    if (bad_index) *bad_index = 0;
    return count ? Errc::bad_state : Errc::ok;
  }
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

inline Retired QpCore::retire_send(const mlx5_cqe64* cqe, Completion* out) noexcept {
  const uint32_t tail = sq_tail.load(std::memory_order_relaxed);  // written only here
  const uint16_t counter = be16toh(cqe->wqe_counter);
  const uint32_t pos = tail + static_cast<uint16_t>(counter - static_cast<uint16_t>(tail));
  // A CQE can only name a WQE the device was given; anything else belongs to an earlier
  // incarnation of this QPN (before RESET), or is a device fault, and is dropped.
  if (pos - tail >= ring_pi.load(std::memory_order_relaxed) - tail) [[unlikely]]
    return Retired::stale;
  const SqEntry entry = sq_entries[pos & sq_mask];
  // Release: posters may reuse these blocks and their entries once they see the new tail.
  sq_tail.store(pos + entry.bbs, std::memory_order_release);
  if (entry.kind != kUserWqe) [[unlikely]]
    return Retired::silent;
  wqe::cqe_to_completion(cqe, out);
  out->wr_id = entry.wr_id;
  return Retired::report;
}

inline Retired QpCore::retire_recv(const mlx5_cqe64* cqe, Completion* out) noexcept {
  const uint32_t tail = rq_tail.load(std::memory_order_relaxed);
  const uint16_t counter = be16toh(cqe->wqe_counter);
  const uint32_t pos = tail + static_cast<uint16_t>(counter - static_cast<uint16_t>(tail));
  if (pos - tail >= rq_posted.load(std::memory_order_relaxed) - tail) [[unlikely]]
    return Retired::stale;
  const uint64_t wr_id = rq_wr_ids[pos & rq_mask];
  rq_tail.store(pos + 1, std::memory_order_release);
  wqe::cqe_to_completion(cqe, out);
  out->wr_id = wr_id;
  return Retired::report;
}

}  // namespace detail

// A moved-from QueuePair holds no QP: its posts fail with invalid_argument (and write
// nothing), its ring_send does nothing.
inline Errc QueuePair::post_send(std::span<const SendWr> wrs, size_t* bad_index) noexcept {
  if (!core_) [[unlikely]]
    return detail::moved_from_post(wrs.size(), bad_index);
  return core_->post_send(wrs.data(), wrs.size(), bad_index, true);
}

inline Errc QueuePair::stage_send(const SendWr& wr) noexcept {
  if (!core_) [[unlikely]]
    return Errc::invalid_argument;
  return core_->post_send(&wr, 1, nullptr, false);
}

inline void QueuePair::ring_send() noexcept {
  if (core_) [[likely]]
    core_->ring_send();
}

inline Errc QueuePair::post_recv(std::span<const RecvWr> wrs, size_t* bad_index) noexcept {
  if (!core_) [[unlikely]]
    return detail::moved_from_post(wrs.size(), bad_index);
  return core_->post_recv(wrs.data(), wrs.size(), bad_index);
}

}  // namespace rnicdv
