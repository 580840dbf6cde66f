// SPDX-License-Identifier: BSD-3-Clause
// Hot-path bodies of send_wqe.h: size computation and encoding of one send WQE of any shape.
//
// A WQE is validated and sized before anything is written, so a failed encode leaves the ring
// untouched. The layouts, and the bytes of every segment, are layouts.h's and segments.h's;
// this file adds what a general SendWr needs: several SGEs, empty SGEs left out, a WQE that
// wraps at the ring's end, an inline payload gathered from several SGEs. SEND, WRITE and READ
// are built inline here; atomics and NOPs, which have a fixed layout and are rarer, out of
// line (send_wqe.cc).
#pragma once

#include <endian.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "rnicdv/status.h"
#include "rnicdv/wqe/layouts.h"
#include "rnicdv/wqe/segments.h"
#include "rnicdv/wqe/send_wqe.h"
#include "rnicdv/wqe/work_request.h"

namespace rnicdv::wqe {

namespace detail {

// Sizing and encoding of ATOMIC_CS, ATOMIC_FA and NOP work requests, and the error for any
// other opcode; send_wqe.cc.
[[gnu::cold]] Errc fixed_wqe_size(const SendWr& wr, const SqLimits& limits,
                                  uint8_t* ds_out) noexcept;
Errc encode_fixed_wqe(SqRing ring, uint32_t pi, uint32_t free_bbs, uint32_t qpn, const SendWr& wr,
                      const SqLimits& limits, uint8_t force_fm_ce_se, EncodedWqe* out) noexcept;

// Advances past one 16-byte segment, continuing at the ring's start when the ring's end is
// reached (segments never straddle the end: a WQE starts on a 64-byte boundary and the ring is
// a whole number of 64-byte blocks).
[[gnu::always_inline]] inline uint8_t* next_segment(uint8_t* at, uint8_t* ring_begin,
                                                    uint8_t* ring_end) noexcept {
  at += kDsBytes;
  return at == ring_end ? ring_begin : at;
}

// One data segment per SGE with a non-zero length (libmlx5 skips empty SGEs). Returns how many
// were written.
inline uint32_t put_data_segments(uint8_t* at, const SendWr& wr, uint8_t* ring_begin,
                                  uint8_t* ring_end) noexcept {
  uint32_t written = 0;
  for (uint32_t i = 0; i < wr.num_sge; ++i) {
    const Sge& sge = wr.sg_list[i];
    if (sge.length == 0) [[unlikely]]
      continue;
    put_data(at, sge.addr, sge.length, sge.lkey);
    at = next_segment(at, ring_begin, ring_end);
    ++written;
  }
  return written;
}

// The inline segment of a SendWr: the bytes of every SGE back to back.
inline void put_inline_sges(uint8_t* at, const SendWr& wr, uint32_t total, uint8_t* ring_begin,
                            uint8_t* ring_end) noexcept {
  put_inline_segment(at, total, [&](uint8_t* p) {
    for (uint32_t i = 0; i < wr.num_sge; ++i) {
      const Sge& sge = wr.sg_list[i];
      p = copy_into_ring(p, reinterpret_cast<const uint8_t*>(static_cast<uintptr_t>(sge.addr)),
                         sge.length, ring_begin, ring_end);
    }
    return p;
  });
}

inline uint64_t inline_payload(const SendWr& wr) noexcept {
  uint64_t payload = 0;
  for (uint32_t i = 0; i < wr.num_sge; ++i) payload += wr.sg_list[i].length;
  return payload;
}

inline uint32_t non_empty_sges(const SendWr& wr) noexcept {
  uint32_t segments = 0;
  for (uint32_t i = 0; i < wr.num_sge; ++i) segments += wr.sg_list[i].length != 0;
  return segments;
}

// What sizing a SEND, WRITE or READ found.
struct PointerOrInlineSize {
  uint32_t ds;            // exact when the caller asked for Exact; else at least the WQE's DS
  uint32_t inline_total;  // payload bytes, inline WQEs only
};

// Validates `wr` (an opcode of `layout`, which is_pointer_or_inline) against `limits` and
// `room` blocks, and sizes it: the one set of checks of send_wqe_size and encode_send_wqe.
// Without Exact, a pointer WQE is sized by one segment per SGE when that fits (empty SGEs,
// which take no segment, are counted only when it does not): the encoder writes the exact DS.
// A datagram (wr.av set) is a SEND or SEND_IMM whose header adds the datagram segment.
[[gnu::always_inline]] inline uint32_t header_ds_of(OpcodeLayout layout, const SendWr& wr) noexcept {
  return layout.header_ds() + (wr.av != nullptr ? kDatagramDs : 0u);
}

template <bool Exact>
[[gnu::always_inline]] inline Errc size_pointer_or_inline(OpcodeLayout layout, const SendWr& wr,
                                                          const SqLimits& limits, uint32_t room,
                                                          PointerOrInlineSize* out) noexcept {
  const bool is_inline = (wr.flags & send_flags::inline_data) != 0;
  // Only a SEND carries a datagram: WRITE and READ name remote memory, which UD has not.
  if (wr.av != nullptr && layout.has_raddr()) [[unlikely]]
    return Errc::invalid_argument;
  const uint32_t header_ds = header_ds_of(layout, wr);
  // READ scatters into local memory: there is nothing to send inline.
  if (is_inline && layout.kind() == OpcodeKind::scatter) [[unlikely]]
    return Errc::invalid_argument;
  if (wr.num_sge > limits.max_sge) [[unlikely]]
    return Errc::too_many_sge;
  if (wr.num_sge != 0 && wr.sg_list == nullptr) [[unlikely]]
    return Errc::invalid_argument;
  if (is_inline) {
    const uint64_t payload = inline_payload(wr);
    if (payload > limits.max_inline) [[unlikely]]
      return Errc::inline_too_large;
    const uint32_t ds = header_ds + inline_ds(payload);
    if (ds > kMaxWqeDs) [[unlikely]]
      return Errc::inline_too_large;
    if (bbs_for(ds) > room) [[unlikely]]
      return Errc::queue_full;
    *out = {ds, static_cast<uint32_t>(payload)};
    return Errc::ok;
  }
  uint32_t ds = header_ds + wr.num_sge;
  if (Exact || ds > kMaxWqeDs || bbs_for(ds) > room) [[unlikely]] {
    ds = header_ds + non_empty_sges(wr);
    if (ds > kMaxWqeDs) return Errc::too_many_sge;
    if (bbs_for(ds) > room) return Errc::queue_full;
  }
  *out = {ds, 0};
  return Errc::ok;
}

}  // namespace detail

inline Errc send_wqe_size(const SendWr& wr, const SqLimits& limits, uint8_t* ds_out) noexcept {
  const OpcodeLayout layout = layout_of(wr.opcode);
  if (!layout.is_pointer_or_inline()) [[unlikely]]
    return wr.av != nullptr ? Errc::invalid_argument : detail::fixed_wqe_size(wr, limits, ds_out);
  detail::PointerOrInlineSize size;
  const Errc err = detail::size_pointer_or_inline<true>(layout, wr, limits, ~0u, &size);
  if (err == Errc::ok) *ds_out = static_cast<uint8_t>(size.ds);
  return err;
}

[[gnu::always_inline]] inline Errc encode_send_wqe(SqRing ring, uint32_t pi, uint32_t free_bbs,
                                                  uint32_t qpn, const SendWr& wr,
                                                  const SqLimits& limits, uint8_t force_fm_ce_se,
                                                  EncodedWqe* out) noexcept {
  const OpcodeLayout layout = layout_of(wr.opcode);
  if (!layout.is_pointer_or_inline()) [[unlikely]] {
    if (wr.av != nullptr) return Errc::invalid_argument;  // atomics and NOPs are not datagrams
    return detail::encode_fixed_wqe(ring, pi, free_bbs, qpn, wr, limits, force_fm_ce_se, out);
  }
  // Size first: nothing is written unless the whole WQE is valid and fits.
  detail::PointerOrInlineSize size;
  const uint32_t room = free_bbs < ring.bb_count ? free_bbs : ring.bb_count;
  if (const Errc err = detail::size_pointer_or_inline<false>(layout, wr, limits, room, &size);
      err != Errc::ok) [[unlikely]]
    return err;

  uint8_t* const begin = ring.buf;
  uint8_t* const end = ring.end();
  uint8_t* const wqe = ring.bb(pi);
  // The ctrl segment is written last, once DS is known.
  uint8_t* seg = put_header(wqe, layout, wr.remote_addr, wr.rkey);
  uint32_t ds = layout.header_ds();
  if (wr.av != nullptr) [[unlikely]] {
    // SEND's header is the ctrl segment alone: the datagram fills the rest of the first
    // block, and the payload starts at the next one (the ring's start if this was its last).
    put_datagram(seg, *wr.av, wr.remote_qpn, wr.remote_qkey);
    seg = wqe + kBbBytes == end ? begin : wqe + kBbBytes;
    ds += kDatagramDs;
  }
  if (wr.flags & send_flags::inline_data) {
    if (size.inline_total != 0) {
      detail::put_inline_sges(seg, wr, size.inline_total, begin, end);
      ds += inline_ds(size.inline_total);
    }
  } else {
    ds += detail::put_data_segments(seg, wr, begin, end);
  }

  const uint8_t fm_ce_se = static_cast<uint8_t>(fm_ce_se_for(wr.flags) | force_fm_ce_se);
  publish_ctrl_words(wqe, ctrl_head(pi, static_cast<uint8_t>(wr.opcode), qpn, static_cast<uint8_t>(ds)),
                     ctrl_rest(fm_ce_se, layout.has_imm() ? htobe32(wr.imm_data) : 0));
  out->ctrl = reinterpret_cast<mlx5_wqe_ctrl_seg*>(wqe);
  out->ds = static_cast<uint8_t>(ds);
  out->bbs = static_cast<uint8_t>(bbs_for(ds));
  return Errc::ok;
}

}  // namespace rnicdv::wqe
