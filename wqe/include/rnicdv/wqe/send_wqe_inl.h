// SPDX-License-Identifier: BSD-3-Clause
// Hot-path bodies of send_wqe.h: size computation and encoding of one send WQE.
//
// A WQE is validated and sized before anything is written, so a failed encode leaves the ring
// untouched. Segment order and sizes follow libmlx5's _mlx5_post_send for RC (rdma-core
// providers/mlx5/qp.c):
//   SEND, SEND_IMM             ctrl + (data segments | one inline segment)
//   RDMA_WRITE(_IMM), READ     ctrl + raddr + (data segments | one inline segment)
//   ATOMIC_CS, ATOMIC_FA       ctrl + raddr + atomic + one 8-byte data segment   (DS 4)
//   NOP                        ctrl                                                (DS 1)
// SEND, WRITE and READ are built inline here; atomics and NOPs, which have a fixed layout and
// are rarer, out of line.
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

// What the encoder needs to know about an opcode, looked up once per WQE.
enum class OpcodeKind : uint8_t {
  invalid,  // not an opcode this encoder builds
  gather,   // SEND, SEND_IMM, RDMA_WRITE(_IMM): pointer or inline payload
  scatter,  // RDMA_READ: pointer segments only
  fixed,    // ATOMIC_CS, ATOMIC_FA, NOP: fixed layout, built out of line
};

// Packed into one byte so the lookup is a single load: kind in bits 0-1, header DS in bits
// 2-3, has_imm in bit 4.
class OpcodeTraits {
 public:
  constexpr OpcodeTraits() = default;
  constexpr OpcodeTraits(OpcodeKind kind, uint8_t header_ds, bool has_imm)
      : bits_(static_cast<uint8_t>(static_cast<uint8_t>(kind) | (header_ds << 2) |
                                   (has_imm ? 1u << 4 : 0))) {}

  constexpr OpcodeKind kind() const { return static_cast<OpcodeKind>(bits_ & 3); }
  constexpr uint32_t header_ds() const { return (bits_ >> 2) & 3; }  // ctrl, plus raddr
  constexpr bool has_imm() const { return (bits_ >> 4) & 1; }
  // Built inline here: SEND, WRITE and READ.
  constexpr bool is_pointer_or_inline() const {
    return kind() == OpcodeKind::gather || kind() == OpcodeKind::scatter;
  }

 private:
  uint8_t bits_ = 0;  // OpcodeKind::invalid
};
static_assert(sizeof(OpcodeTraits) == 1);

inline constexpr uint32_t kOpcodeTableSize = 32;  // every MLX5_OPCODE_* this file builds is < 32

constexpr OpcodeTraits opcode_traits_slow(uint8_t opcode) {
  switch (opcode) {
    case MLX5_OPCODE_SEND:
      return {OpcodeKind::gather, 1, false};
    case MLX5_OPCODE_SEND_IMM:
      return {OpcodeKind::gather, 1, true};
    case MLX5_OPCODE_RDMA_WRITE:
      return {OpcodeKind::gather, 2, false};
    case MLX5_OPCODE_RDMA_WRITE_IMM:
      return {OpcodeKind::gather, 2, true};
    case MLX5_OPCODE_RDMA_READ:
      return {OpcodeKind::scatter, 2, false};
    case MLX5_OPCODE_ATOMIC_CS:
    case MLX5_OPCODE_ATOMIC_FA:
    case MLX5_OPCODE_NOP:
      return {OpcodeKind::fixed, 0, false};
    default:
      return {};
  }
}

struct OpcodeTable {
  OpcodeTraits entries[kOpcodeTableSize];
};

constexpr OpcodeTable make_opcode_table() {
  OpcodeTable table{};
  for (uint32_t op = 0; op < kOpcodeTableSize; ++op)
    table.entries[op] = opcode_traits_slow(static_cast<uint8_t>(op));
  return table;
}

inline constexpr OpcodeTable kOpcodeTable = make_opcode_table();

[[gnu::always_inline]] inline OpcodeTraits opcode_traits(WrOpcode opcode) noexcept {
  const auto op = static_cast<uint8_t>(opcode);
  return op < kOpcodeTableSize ? kOpcodeTable.entries[op] : OpcodeTraits{};
}

// Rounds an inline payload up to whole 16-byte units, counting its 4-byte header
// (libmlx5 set_data_inl_seg: align(len + 4, 16) / 16). An empty payload has no segment.
constexpr uint32_t inline_ds(uint64_t payload) noexcept {
  return payload == 0 ? 0
                      : static_cast<uint32_t>(
                            (payload + sizeof(mlx5_wqe_inl_data_seg) + kDsBytes - 1) / kDsBytes);
}

constexpr uint32_t bbs_for(uint32_t ds) noexcept {
  return (ds + 3u) >> 2;  // DIV_ROUND_UP(ds * 16, MLX5_SEND_WQE_BB)
}

// Sizing and encoding of ATOMIC_CS, ATOMIC_FA and NOP work requests, and the error for any
// other opcode; send_wqe.cc.
[[gnu::cold]] Errc fixed_wqe_size(const SendWr& wr, const SqLimits& limits,
                                  uint8_t* ds_out) noexcept;
Errc encode_fixed_wqe(SqRing ring, uint32_t pi, uint32_t free_bbs, uint32_t qpn, const SendWr& wr,
                      const SqLimits& limits, uint8_t force_fm_ce_se, EncodedWqe* out) noexcept;

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
inline void put_inline_segment(uint8_t* at, const SendWr& wr, uint32_t total, uint8_t* ring_begin,
                               uint8_t* ring_end) noexcept {
  store_be32(at, total | MLX5_INLINE_SEG);
  uint8_t* data = at + sizeof(mlx5_wqe_inl_data_seg);  // never past the end: `at` is 16-aligned
  for (uint32_t i = 0; i < wr.num_sge; ++i) {
    const Sge& sge = wr.sg_list[i];
    data = copy_into_ring(data, reinterpret_cast<const uint8_t*>(static_cast<uintptr_t>(sge.addr)),
                          sge.length, ring_begin, ring_end);
  }
  const uint32_t used = static_cast<uint32_t>(sizeof(mlx5_wqe_inl_data_seg)) + total;
  std::memset(data, 0, (kDsBytes - (used & (kDsBytes - 1))) & (kDsBytes - 1));
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
    at = put_segment(at, data_segment(sge.length, sge.lkey, sge.addr), ring_begin, ring_end);
    ++written;
  }
  return written;
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

}  // namespace detail

inline Errc send_wqe_size(const SendWr& wr, const SqLimits& limits, uint8_t* ds_out) noexcept {
  const detail::OpcodeTraits traits = detail::opcode_traits(wr.opcode);
  if (!traits.is_pointer_or_inline()) [[unlikely]]
    return detail::fixed_wqe_size(wr, limits, ds_out);
  const bool is_inline = (wr.flags & send_flags::inline_data) != 0;
  // READ scatters into local memory: there is nothing to send inline.
  if (is_inline && traits.kind() == detail::OpcodeKind::scatter) [[unlikely]]
    return Errc::invalid_argument;
  if (wr.num_sge > limits.max_sge) [[unlikely]]
    return Errc::too_many_sge;
  if (wr.num_sge != 0 && wr.sg_list == nullptr) [[unlikely]]
    return Errc::invalid_argument;

  uint32_t ds;
  if (is_inline) {
    const uint64_t payload = detail::inline_payload(wr);
    if (payload > limits.max_inline) [[unlikely]]
      return Errc::inline_too_large;
    ds = traits.header_ds() + detail::inline_ds(payload);
    if (ds > kMaxWqeDs) [[unlikely]]
      return Errc::inline_too_large;
  } else {
    ds = traits.header_ds() + detail::non_empty_sges(wr);
    if (ds > kMaxWqeDs) [[unlikely]]
      return Errc::too_many_sge;
  }
  *ds_out = static_cast<uint8_t>(ds);
  return Errc::ok;
}

[[gnu::always_inline]] inline Errc encode_send_wqe(SqRing ring, uint32_t pi, uint32_t free_bbs,
                                                  uint32_t qpn,
                            const SendWr& wr, const SqLimits& limits, uint8_t force_fm_ce_se,
                            EncodedWqe* out) noexcept {
  const detail::OpcodeTraits traits = detail::opcode_traits(wr.opcode);
  if (!traits.is_pointer_or_inline()) [[unlikely]]
    return detail::encode_fixed_wqe(ring, pi, free_bbs, qpn, wr, limits, force_fm_ce_se, out);
  const bool is_inline = (wr.flags & send_flags::inline_data) != 0;
  if (is_inline && traits.kind() == detail::OpcodeKind::scatter) [[unlikely]]
    return Errc::invalid_argument;
  if (wr.num_sge > limits.max_sge) [[unlikely]]
    return Errc::too_many_sge;
  if (wr.num_sge != 0 && wr.sg_list == nullptr) [[unlikely]]
    return Errc::invalid_argument;
  const uint32_t room = free_bbs < ring.bb_count ? free_bbs : ring.bb_count;

  // Size first: nothing is written unless the whole WQE is valid and fits.
  uint32_t inline_total = 0;
  if (is_inline) {
    const uint64_t payload = detail::inline_payload(wr);
    if (payload > limits.max_inline) [[unlikely]]
      return Errc::inline_too_large;
    const uint32_t ds = traits.header_ds() + detail::inline_ds(payload);
    if (ds > kMaxWqeDs) [[unlikely]]
      return Errc::inline_too_large;
    if (detail::bbs_for(ds) > room) [[unlikely]]
      return Errc::queue_full;
    inline_total = static_cast<uint32_t>(payload);
  } else if (const uint32_t bound = traits.header_ds() + wr.num_sge;
             bound > kMaxWqeDs || detail::bbs_for(bound) > room) [[unlikely]] {
    // One segment per SGE may not fit; empty SGEs take no segment, so count exactly.
    const uint32_t ds = traits.header_ds() + detail::non_empty_sges(wr);
    if (ds > kMaxWqeDs) return Errc::too_many_sge;
    if (detail::bbs_for(ds) > room) return Errc::queue_full;
  }

  uint8_t* const begin = ring.buf;
  uint8_t* const end = ring.end();
  uint8_t* const wqe = ring.bb(pi);
  uint8_t* seg = wqe + kDsBytes;  // the ctrl segment is written last, once DS is known
  if (traits.header_ds() == 2)
    seg = detail::put_segment(seg, raddr_segment(wr.remote_addr, wr.rkey), begin, end);
  uint32_t ds = traits.header_ds();
  if (is_inline) {
    if (inline_total != 0) {
      detail::put_inline_segment(seg, wr, inline_total, begin, end);
      ds += detail::inline_ds(inline_total);
    }
  } else {
    ds += detail::put_data_segments(seg, wr, begin, end);
  }

  const uint8_t fm_ce_se = static_cast<uint8_t>(fm_ce_se_for(wr.flags) | force_fm_ce_se);
  const mlx5_wqe_ctrl_seg ctrl =
      ctrl_segment(pi, static_cast<uint8_t>(wr.opcode), qpn, static_cast<uint8_t>(ds), fm_ce_se,
                   traits.has_imm() ? htobe32(wr.imm_data) : 0);
  publish_ctrl_segment(wqe, ctrl);
  out->ctrl = reinterpret_cast<mlx5_wqe_ctrl_seg*>(wqe);
  out->ds = static_cast<uint8_t>(ds);
  out->bbs = static_cast<uint8_t>(detail::bbs_for(ds));
  return Errc::ok;
}

}  // namespace rnicdv::wqe
