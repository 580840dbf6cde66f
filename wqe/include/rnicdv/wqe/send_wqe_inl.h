// SPDX-License-Identifier: BSD-3-Clause
// Hot-path bodies of send_wqe.h: size computation and encoding of one send WQE.
//
// The WQE is validated and sized first, and written only once it is known to fit, so a failed
// encode leaves the ring untouched. Segment order and sizes follow libmlx5's _mlx5_post_send
// for RC (rdma-core providers/mlx5/qp.c; rdma-core-mlx5.md §2):
//   SEND, SEND_IMM             ctrl + (data segments | one inline segment)
//   RDMA_WRITE(_IMM), READ     ctrl + raddr + (data segments | one inline segment)
//   ATOMIC_CS, ATOMIC_FA       ctrl + raddr + atomic + one 8-byte data segment   (DS 4)
//   NOP                        ctrl                                                (DS 1)
#pragma once

#include <endian.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "rnicdv/status.h"
#include "rnicdv/wqe/segments.h"
#include "rnicdv/wqe/send_wqe.h"
#include "rnicdv/wqe/work_request.h"

namespace rnicdv::wqe {

namespace detail {

// Rounds an inline payload up to whole 16-byte units, counting its 4-byte header
// (libmlx5 set_data_inl_seg: align(len + 4, 16) / 16). An empty payload has no segment.
constexpr uint32_t inline_ds(uint64_t payload) noexcept {
  return payload == 0 ? 0
                      : static_cast<uint32_t>(
                            (payload + sizeof(mlx5_wqe_inl_data_seg) + kDsBytes - 1) / kDsBytes);
}

[[gnu::cold]] Errc atomic_wqe_size(const SendWr& wr, const SqLimits& limits,
                                   uint8_t* ds_out) noexcept;

// Copies one 16-byte segment to `at` and returns the next segment's address, continuing at the
// ring's start when the ring's end is reached (segments never straddle the end: a WQE starts
// on a 64-byte boundary and the ring is a whole number of 64-byte blocks).
template <class Segment>
[[gnu::always_inline]] inline uint8_t* put_segment(uint8_t* at, const Segment& seg,
                                                   uint8_t* ring_begin,
                                                   uint8_t* ring_end) noexcept {
  static_assert(sizeof(Segment) == kDsBytes);
  std::memcpy(at, &seg, sizeof seg);
  at += kDsBytes;
  return at == ring_end ? ring_begin : at;
}

// Copies `len` payload bytes to `at`, splitting the copy at the ring's end (libmlx5
// memcpy_to_wqe). Returns the address after the last byte, never equal to ring_end.
[[gnu::always_inline]] inline uint8_t* copy_into_ring(uint8_t* at, const uint8_t* src, uint32_t len,
                                                      uint8_t* ring_begin,
                                                      uint8_t* ring_end) noexcept {
  const size_t room = static_cast<size_t>(ring_end - at);
  if (len >= room) [[unlikely]] {
    std::memcpy(at, src, room);
    src += room;
    len -= static_cast<uint32_t>(room);
    at = ring_begin;
  }
  std::memcpy(at, src, len);
  return at + len;
}

// One inline segment holding the bytes of every SGE back to back; its header says
// MLX5_INLINE_SEG | total. The tail of the last 16-byte unit is zeroed so the WQE's bytes do
// not depend on what the ring held before.
inline void put_inline_segment(uint8_t* at, const SendWr& wr, uint8_t* ring_begin,
                               uint8_t* ring_end) noexcept {
  uint8_t* const header = at;
  uint8_t* data = at + sizeof(mlx5_wqe_inl_data_seg);  // never past the end: `at` is 16-aligned
  uint32_t total = 0;
  for (uint32_t i = 0; i < wr.num_sge; ++i) {
    const Sge& sge = wr.sg_list[i];
    data = copy_into_ring(data, reinterpret_cast<const uint8_t*>(static_cast<uintptr_t>(sge.addr)),
                          sge.length, ring_begin, ring_end);
    total += sge.length;
  }
  const uint32_t used = static_cast<uint32_t>(sizeof(mlx5_wqe_inl_data_seg)) + total;
  std::memset(data, 0, (kDsBytes - (used & (kDsBytes - 1))) & (kDsBytes - 1));
  store_be32(header, total | MLX5_INLINE_SEG);
}

// One data segment per SGE with a non-zero length (libmlx5 skips empty SGEs).
inline void put_data_segments(uint8_t* at, const SendWr& wr, uint8_t* ring_begin,
                              uint8_t* ring_end) noexcept {
  for (uint32_t i = 0; i < wr.num_sge; ++i) {
    const Sge& sge = wr.sg_list[i];
    if (sge.length == 0) [[unlikely]]
      continue;
    at = put_segment(at, data_segment(sge.length, sge.lkey, sge.addr), ring_begin, ring_end);
  }
}

}  // namespace detail

inline Errc send_wqe_size(const SendWr& wr, const SqLimits& limits, uint8_t* ds_out) noexcept {
  const bool is_inline = (wr.flags & send_flags::inline_data) != 0;
  uint32_t header_ds;  // ctrl, plus raddr for RDMA
  switch (wr.opcode) {
    case WrOpcode::send:
    case WrOpcode::send_imm:
      header_ds = 1;
      break;
    case WrOpcode::rdma_write:
    case WrOpcode::rdma_write_imm:
      header_ds = 2;
      break;
    case WrOpcode::rdma_read:
      // READ scatters into local memory: there is nothing to send inline.
      if (is_inline) [[unlikely]]
        return Errc::invalid_argument;
      header_ds = 2;
      break;
    case WrOpcode::atomic_cmp_swap:
    case WrOpcode::atomic_fetch_add:
      return detail::atomic_wqe_size(wr, limits, ds_out);
    case WrOpcode::nop:
      if (is_inline) [[unlikely]]
        return Errc::invalid_argument;
      *ds_out = 1;
      return Errc::ok;
    default:
      return Errc::invalid_argument;
  }
  if (wr.num_sge > limits.max_sge) [[unlikely]]
    return Errc::too_many_sge;
  if (wr.num_sge != 0 && wr.sg_list == nullptr) [[unlikely]]
    return Errc::invalid_argument;

  uint32_t ds;
  if (is_inline) {
    uint64_t payload = 0;
    for (uint32_t i = 0; i < wr.num_sge; ++i) payload += wr.sg_list[i].length;
    if (payload > limits.max_inline) [[unlikely]]
      return Errc::inline_too_large;
    ds = header_ds + detail::inline_ds(payload);
    if (ds > kMaxWqeDs) [[unlikely]]
      return Errc::inline_too_large;
  } else {
    uint32_t segments = 0;
    for (uint32_t i = 0; i < wr.num_sge; ++i) segments += wr.sg_list[i].length != 0;
    ds = header_ds + segments;
    if (ds > kMaxWqeDs) [[unlikely]]
      return Errc::too_many_sge;
  }
  *ds_out = static_cast<uint8_t>(ds);
  return Errc::ok;
}

inline Errc encode_send_wqe(SqRing ring, uint32_t pi, uint32_t free_bbs, uint32_t qpn,
                            const SendWr& wr, const SqLimits& limits, uint8_t force_fm_ce_se,
                            EncodedWqe* out) noexcept {
  uint8_t ds;
  if (const Errc err = send_wqe_size(wr, limits, &ds); err != Errc::ok) [[unlikely]]
    return err;
  const uint32_t bbs = (ds + 3u) >> 2;  // DIV_ROUND_UP(ds * 16, MLX5_SEND_WQE_BB)
  if (bbs > free_bbs || bbs > ring.bb_count) [[unlikely]]
    return Errc::queue_full;

  uint8_t* const begin = ring.buf;
  uint8_t* const end = ring.end();
  uint8_t* const wqe = ring.bb(pi);
  const bool has_imm = wr.opcode == WrOpcode::send_imm || wr.opcode == WrOpcode::rdma_write_imm;
  const uint8_t fm_ce_se = static_cast<uint8_t>(fm_ce_se_for(wr.flags) | force_fm_ce_se);
  uint8_t* seg = detail::put_segment(wqe,
                                     ctrl_segment(pi, static_cast<uint8_t>(wr.opcode), qpn, ds,
                                                  fm_ce_se, has_imm ? htobe32(wr.imm_data) : 0),
                                     begin, end);

  uint32_t header_ds = 1;
  switch (wr.opcode) {
    case WrOpcode::rdma_write:
    case WrOpcode::rdma_write_imm:
    case WrOpcode::rdma_read:
      seg = detail::put_segment(seg, raddr_segment(wr.remote_addr, wr.rkey), begin, end);
      header_ds = 2;
      break;
    case WrOpcode::atomic_cmp_swap:
    case WrOpcode::atomic_fetch_add: {
      const bool cas = wr.opcode == WrOpcode::atomic_cmp_swap;
      seg = detail::put_segment(seg, raddr_segment(wr.remote_addr, wr.rkey), begin, end);
      seg = detail::put_segment(
          seg, cas ? atomic_segment(wr.swap, wr.compare_add) : atomic_segment(wr.compare_add, 0),
          begin, end);
      // The local buffer receives the original remote value (MLX5_ATOMIC_SIZE bytes).
      detail::put_segment(seg,
                          data_segment(kAtomicOperandBytes, wr.sg_list[0].lkey, wr.sg_list[0].addr),
                          begin, end);
      header_ds = ds;
      break;
    }
    default:  // SEND, SEND_IMM, NOP
      break;
  }
  if (ds > header_ds) {
    if (wr.flags & send_flags::inline_data)
      detail::put_inline_segment(seg, wr, begin, end);
    else
      detail::put_data_segments(seg, wr, begin, end);
  }

  out->ctrl = reinterpret_cast<mlx5_wqe_ctrl_seg*>(wqe);
  out->ds = ds;
  out->bbs = static_cast<uint8_t>(bbs);
  return Errc::ok;
}

}  // namespace rnicdv::wqe
