// SPDX-License-Identifier: BSD-3-Clause
// The send WQE layouts, each written once. Every send WQE the driver builds is built from
// these:
//  * the general encoder (send_wqe_inl.h: any SendWr, several SGEs, a WQE that wraps at the
//    ring's end, full validation);
//  * the fixed layouts of the driver's fast paths (the typed post calls, and post_send's
//    one-SGE requests: drv's detail/qp_typed_inl.h), where the opcode, the DS and the
//    segment order are compile-time constants;
//  * atomics and NOPs out of line (send_wqe.cc).
// The bytes of each segment are segments.h's. The order of the segments per opcode is the
// table below and the body writers after it (libmlx5 _mlx5_post_send for RC, rdma-core
// providers/mlx5/qp.c):
//   SEND, SEND_IMM             ctrl + (data segments | one inline segment)
//   RDMA_WRITE(_IMM), READ     ctrl + raddr + (data segments | one inline segment)
//   ATOMIC_CS, ATOMIC_FA       ctrl + raddr + atomic + one 8-byte data segment   (DS 4)
//   NOP                        ctrl (+ zeroed padding)
// Tests compare the bytes of every path with the others and with rdma-core's own helpers.
#pragma once

#include <infiniband/mlx5dv.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "rnicdv/byte_order.h"
#include "rnicdv/wqe/segments.h"
#include "rnicdv/wqe/sq_ring.h"
#include "rnicdv/wqe/work_request.h"

namespace rnicdv::wqe {

// ---- The layout of each opcode --------------------------------------------------------------

// How a WQE of an opcode is laid out.
enum class OpcodeKind : uint8_t {
  invalid,  // not an opcode these layouts cover
  gather,   // SEND, SEND_IMM, RDMA_WRITE(_IMM): pointer or inline payload
  scatter,  // RDMA_READ: pointer segments only
  fixed,    // ATOMIC_CS, ATOMIC_FA, NOP: one fixed layout each
};

// Packed into one byte so that a run-time lookup is a single load: kind in bits 0-1, header DS
// (ctrl, plus raddr for RDMA) in bits 2-3, has_imm in bit 4.
class OpcodeLayout {
 public:
  constexpr OpcodeLayout() = default;
  constexpr OpcodeLayout(OpcodeKind kind, uint8_t header_ds, bool has_imm)
      : bits_(static_cast<uint8_t>(static_cast<uint8_t>(kind) | (header_ds << 2) |
                                   (has_imm ? 1u << 4 : 0))) {}

  constexpr OpcodeKind kind() const { return static_cast<OpcodeKind>(bits_ & 3); }
  constexpr uint32_t header_ds() const { return (bits_ >> 2) & 3; }
  constexpr bool has_imm() const { return (bits_ >> 4) & 1; }
  constexpr bool has_raddr() const { return header_ds() == 2; }
  // SEND, WRITE and READ: a header, then data pointers or (but READ) one inline segment.
  constexpr bool is_pointer_or_inline() const {
    return kind() == OpcodeKind::gather || kind() == OpcodeKind::scatter;
  }

 private:
  uint8_t bits_ = 0;  // OpcodeKind::invalid
};
static_assert(sizeof(OpcodeLayout) == 1);

// The table itself: the one place that says which segments an opcode's WQE has.
constexpr OpcodeLayout layout_of(uint8_t opcode) noexcept {
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

namespace detail {
inline constexpr uint32_t kOpcodeTableSize = 32;  // every opcode layout_of covers is < 32

struct OpcodeTable {
  OpcodeLayout entries[kOpcodeTableSize];
};

constexpr OpcodeTable make_opcode_table() {
  OpcodeTable table{};
  for (uint32_t op = 0; op < kOpcodeTableSize; ++op)
    table.entries[op] = layout_of(static_cast<uint8_t>(op));
  return table;
}

inline constexpr OpcodeTable kOpcodeTable = make_opcode_table();
}  // namespace detail

// layout_of at run time: one load.
[[gnu::always_inline]] inline OpcodeLayout layout_of(WrOpcode opcode) noexcept {
  const auto op = static_cast<uint8_t>(opcode);
  return op < detail::kOpcodeTableSize ? detail::kOpcodeTable.entries[op] : OpcodeLayout{};
}

// Sizes of the fixed forms, in 16-byte units; each fits one 64-byte block, so none wraps.
inline constexpr uint8_t kSendDs = layout_of(MLX5_OPCODE_SEND).header_ds() + 1;        // + data
inline constexpr uint8_t kRdmaDs = layout_of(MLX5_OPCODE_RDMA_WRITE).header_ds() + 1;  // + data
inline constexpr uint8_t kAtomicDs = 4;  // ctrl + raddr + atomic + data
static_assert(kSendDs == 2 && kRdmaDs == 3 && layout_of(MLX5_OPCODE_RDMA_READ).header_ds() + 1 == kRdmaDs);

constexpr uint32_t bbs_for(uint32_t ds) noexcept {
  return (ds + 3u) >> 2;  // DIV_ROUND_UP(ds * 16, MLX5_SEND_WQE_BB)
}

// ---- Bodies: the segments after the ctrl segment ---------------------------------------------

// The header segments of SEND, WRITE and READ after ctrl: the raddr segment for RDMA, none
// for SEND. They lie in the WQE's first block, so they never reach the ring's end. Returns
// where the payload's first segment goes.
[[gnu::always_inline]] inline uint8_t* put_header(uint8_t* wqe, OpcodeLayout layout,
                                                  uint64_t remote_addr, uint32_t rkey) noexcept {
  if (layout.has_raddr()) put_raddr(wqe + kDsBytes, remote_addr, rkey);
  return wqe + layout.header_ds() * kDsBytes;
}

// The body of ATOMIC_CS and ATOMIC_FA: raddr, the operands, and one data segment for the
// 8-byte original value (IBA 9.4.5; MLX5_ATOMIC_SIZE). One block: never wraps.
[[gnu::always_inline]] inline void put_atomic_body(uint8_t* wqe, bool compare_swap,
                                                   uint64_t remote_addr, uint32_t rkey,
                                                   uint64_t compare_add, uint64_t swap,
                                                   uint64_t result_addr,
                                                   uint32_t result_lkey) noexcept {
  put_raddr(wqe + kDsBytes, remote_addr, rkey);
  if (compare_swap)
    put_atomic(wqe + 2 * kDsBytes, swap, compare_add);
  else
    put_atomic(wqe + 2 * kDsBytes, compare_add, 0);
  put_data(wqe + 3 * kDsBytes, result_addr, kAtomicOperandBytes, result_lkey);
}

// ---- Inline data ----------------------------------------------------------------------------

// The DS of an inline segment of `payload` bytes: its 4-byte header and the bytes, rounded up
// to whole 16-byte units (libmlx5 set_data_inl_seg: align(len + 4, 16) / 16). An empty
// payload has no segment at all.
constexpr uint32_t inline_ds(uint64_t payload) noexcept {
  return payload == 0 ? 0
                      : static_cast<uint32_t>(
                            (payload + sizeof(mlx5_wqe_inl_data_seg) + kDsBytes - 1) / kDsBytes);
}

// The zero bytes that complete the last 16-byte unit of an inline segment of `used` bytes
// (header included), so the WQE's bytes do not depend on what the ring held before.
constexpr uint32_t inline_pad(uint32_t used) noexcept {
  return (kDsBytes - (used & (kDsBytes - 1))) & (kDsBytes - 1);
}

// Copies `len` payload bytes to `at`, splitting the copy at the ring's end (libmlx5
// memcpy_to_wqe). Returns the address after the last byte, never equal to ring_end.
[[gnu::always_inline]] inline uint8_t* copy_into_ring(uint8_t* at, const uint8_t* src,
                                                      uint32_t len, uint8_t* ring_begin,
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

// `len` bytes from `src` to `dst` in 16-byte pieces, then 8, 4, 2 and 1: straight-line moves
// for the short lengths inline data has, where a memcpy of a length known only at run time
// becomes a call or a loop of 8-byte moves.
[[gnu::always_inline]] inline void copy_short(uint8_t* dst, const uint8_t* src,
                                              uint32_t len) noexcept {
  uint32_t i = 0;
  for (; i + 16 <= len; i += 16) std::memcpy(dst + i, src + i, 16);
  if (len & 8) {
    std::memcpy(dst + i, src + i, 8);
    i += 8;
  }
  if (len & 4) {
    std::memcpy(dst + i, src + i, 4);
    i += 4;
  }
  if (len & 2) {
    std::memcpy(dst + i, src + i, 2);
    i += 2;
  }
  if (len & 1) dst[i] = src[i];
}

// One inline segment at `at` (16-byte aligned, inside `ring`) of `total` payload bytes: the
// header (MLX5_INLINE_SEG | total), the bytes, which `copy(first_byte)` writes and returns the
// address after, and the zero padding.
template <class CopyPayload>
[[gnu::always_inline]] inline void put_inline_segment(uint8_t* at, uint32_t total,
                                                      CopyPayload&& copy) noexcept {
  store_be32(at, total | MLX5_INLINE_SEG);
  // Never past the ring's end: `at` is 16-byte aligned.
  uint8_t* const after = copy(at + sizeof(mlx5_wqe_inl_data_seg));
  std::memset(after, 0, inline_pad(static_cast<uint32_t>(sizeof(mlx5_wqe_inl_data_seg)) + total));
}

// The inline segment of one buffer.
[[gnu::always_inline]] inline void put_inline_buffer(uint8_t* at, const void* data, uint32_t len,
                                                     SqRing ring) noexcept {
  put_inline_segment(at, len, [&](uint8_t* p) {
    const auto* src = static_cast<const uint8_t*>(data);
    uint8_t* const end = ring.end();
    if (len < static_cast<size_t>(end - p)) [[likely]] {
      copy_short(p, src, len);
      return p + len;
    }
    return copy_into_ring(p, src, len, ring.buf, end);
  });
}

}  // namespace rnicdv::wqe
