// SPDX-License-Identifier: BSD-3-Clause
// Fixed-layout WQE builders for the typed post calls: the opcode, the SGE count and the
// segment layout are template arguments or constants, so nothing about them is decided at run
// time. The caller has validated the request and checked the room; these only store.
//
// A ctrl segment is two 8-byte words in memory order (little-endian hosts: x86-64 and
// AArch64 Linux):
//   head  bytes 0-3 opmod_idx_opcode = BE32((pi & 0xffff) << 8 | opcode),
//         bytes 4-7 qpn_ds = BE32(qpn << 8 | ds)
//   rest  byte 8 signature = 0, bytes 9-10 dci_stream_channel_id = 0, byte 11 fm_ce_se,
//         bytes 12-15 imm (already big-endian)
// Everything but the WQE index is known when the QP is created (the QPN) or when the call is
// compiled (opcode, DS), so the head is a prebuilt template with the index patched in
// (CtrlTemplate). Segment order and sizes are those of encode_send_wqe (send_wqe_inl.h), and
// tests compare the bytes of both.
#pragma once

#include <endian.h>
#include <infiniband/mlx5dv.h>

#include <cstdint>
#include <cstring>

#include "rnicdv/wqe/segments.h"
#include "rnicdv/wqe/send_wqe.h"
#include "rnicdv/wqe/work_request.h"

static_assert(__BYTE_ORDER == __LITTLE_ENDIAN, "the typed builders pack words for little-endian hosts");

namespace rnicdv::wqe::typed {

// WQE sizes of the fixed layouts, in 16-byte units (one 64-byte block each: none wraps).
inline constexpr uint8_t kSendDs = 2;    // ctrl + data
inline constexpr uint8_t kRdmaDs = 3;    // ctrl + raddr + data
inline constexpr uint8_t kAtomicDs = 4;  // ctrl + raddr + atomic + data

// The QPN's bytes of a ctrl head (bytes 4-6), fixed when the QP is created.
constexpr uint64_t ctrl_qpn_bits(uint32_t qpn) noexcept {
  return (uint64_t{(qpn >> 16) & 0xff} << 32) | (uint64_t{(qpn >> 8) & 0xff} << 40) |
         (uint64_t{qpn & 0xff} << 48);
}

// The opcode's and DS's bytes of a ctrl head (bytes 3 and 7): compile-time constants.
constexpr uint64_t ctrl_op_bits(uint8_t opcode, uint8_t ds) noexcept {
  return (uint64_t{opcode} << 24) | (uint64_t{ds} << 56);
}

// The WQE index's bytes (1-2: pi & 0xffff, big-endian).
[[gnu::always_inline]] inline uint64_t ctrl_index_bits(uint32_t pi) noexcept {
  return uint64_t{static_cast<uint16_t>(__builtin_bswap16(static_cast<uint16_t>(pi)))} << 8;
}

// The second half of a ctrl segment: fm_ce_se and the immediate (big-endian already).
[[gnu::always_inline]] inline uint64_t ctrl_rest(uint8_t fm_ce_se, uint32_t imm_be = 0) noexcept {
  return (uint64_t{fm_ce_se} << 24) | (uint64_t{imm_be} << 32);
}

[[gnu::always_inline]] inline void store64(uint8_t* at, uint64_t v) noexcept {
  std::memcpy(at, &v, sizeof v);
}

// Data pointer segment (mlx5_wqe_data_seg): byte_count, lkey, addr.
[[gnu::always_inline]] inline void put_data(uint8_t* at, uint64_t addr, uint32_t length,
                                            uint32_t lkey) noexcept {
  store64(at, uint64_t{htobe32(length)} | (uint64_t{htobe32(lkey)} << 32));
  store64(at + 8, htobe64(addr));
}

// Remote address segment (mlx5_wqe_raddr_seg): raddr, rkey, reserved = 0.
[[gnu::always_inline]] inline void put_raddr(uint8_t* at, uint64_t remote_addr,
                                             uint32_t rkey) noexcept {
  store64(at, htobe64(remote_addr));
  store64(at + 8, uint64_t{htobe32(rkey)});
}

// Atomic segment (mlx5_wqe_atomic_seg): swap_add, compare.
[[gnu::always_inline]] inline void put_atomic(uint8_t* at, uint64_t swap_add,
                                              uint64_t compare) noexcept {
  store64(at, htobe64(swap_add));
  store64(at + 8, htobe64(compare));
}

// The inline DS of `len` payload bytes: a 4-byte header and the bytes, in 16-byte units.
constexpr uint32_t inline_ds(uint32_t len) noexcept {
  return (len + sizeof(mlx5_wqe_inl_data_seg) + kDsBytes - 1) / kDsBytes;
}

// `len` bytes from `src` to `dst` in 16-byte pieces, then 8, 4, 2 and 1: straight-line
// moves for the short lengths inline data has, where a memcpy of a length known only at run
// time becomes a call or a loop of 8-byte moves.
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

// One inline segment at `at` (16-byte aligned, inside `ring`): header, `len` bytes from
// `data` (split at the ring's end), zero padding to the next 16-byte unit.
[[gnu::always_inline]] inline void put_inline(uint8_t* at, const void* data, uint32_t len,
                                              SqRing ring) noexcept {
  store_be32(at, len | MLX5_INLINE_SEG);
  uint8_t* const begin = ring.buf;
  uint8_t* const end = ring.end();
  uint8_t* p = at + sizeof(mlx5_wqe_inl_data_seg);
  const auto* src = static_cast<const uint8_t*>(data);
  if (len < static_cast<size_t>(end - p)) [[likely]] {
    copy_short(p, src, len);
    p += len;
  } else {
    p = detail::copy_into_ring(p, src, len, begin, end);
  }
  const uint32_t used = static_cast<uint32_t>(sizeof(mlx5_wqe_inl_data_seg)) + len;
  std::memset(p, 0, (kDsBytes - (used & (kDsBytes - 1))) & (kDsBytes - 1));
}

}  // namespace rnicdv::wqe::typed
