// SPDX-License-Identifier: BSD-3-Clause
// Builders for the 16-byte WQE segments of rdma-core's mlx5dv.h, and the byte-order accessors
// the rest of wqe/ reads ring memory with.
//
// Each builder returns the segment by value; callers copy it into the ring with memcpy. That
// keeps ring accesses free of aliasing assumptions, lets the compiler emit one or two wide
// stores, and makes every big-endian conversion an explicit htobe32/htobe64.
#pragma once

#include <endian.h>
#include <infiniband/mlx5dv.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "rnicdv/byte_order.h"

namespace rnicdv::wqe {

// The layouts this library depends on (mlx5dv.h of rdma-core 44).
static_assert(sizeof(mlx5_wqe_ctrl_seg) == 16);
static_assert(offsetof(mlx5_wqe_ctrl_seg, opmod_idx_opcode) == 0);
static_assert(offsetof(mlx5_wqe_ctrl_seg, qpn_ds) == 4);
static_assert(offsetof(mlx5_wqe_ctrl_seg, signature) == 8);
static_assert(offsetof(mlx5_wqe_ctrl_seg, dci_stream_channel_id) == 9);
static_assert(offsetof(mlx5_wqe_ctrl_seg, fm_ce_se) == 11);
static_assert(offsetof(mlx5_wqe_ctrl_seg, imm) == 12);
static_assert(sizeof(mlx5_wqe_raddr_seg) == 16);
static_assert(offsetof(mlx5_wqe_raddr_seg, rkey) == 8);
static_assert(sizeof(mlx5_wqe_atomic_seg) == 16);
static_assert(offsetof(mlx5_wqe_atomic_seg, compare) == 8);
static_assert(sizeof(mlx5_wqe_data_seg) == 16);
static_assert(offsetof(mlx5_wqe_data_seg, lkey) == 4);
static_assert(offsetof(mlx5_wqe_data_seg, addr) == 8);
static_assert(sizeof(mlx5_wqe_inl_data_seg) == 4);
static_assert(MLX5_SEND_WQE_BB == 64 && (1u << MLX5_SEND_WQE_SHIFT) == MLX5_SEND_WQE_BB);

// ---- The bytes of each segment, written once -----------------------------------------------
//
// Every segment of a send or receive WQE is stored by one of the functions below, each in two
// 8-byte stores; the struct-returning builders are the same stores into a local segment. A
// ctrl segment is two 8-byte words in memory order (little-endian hosts: x86-64, AArch64):
//   head  bytes 0-3 opmod_idx_opcode = BE32((pi & 0xffff) << 8 | opcode),
//         bytes 4-7 qpn_ds = BE32(qpn << 8 | ds)
//   rest  byte 8 signature = 0, bytes 9-10 dci_stream_channel_id = 0, byte 11 fm_ce_se,
//         bytes 12-15 imm (already big-endian)
// Its head is published last (below, "Publishing a WQE"); so it is built as words, and the
// parts of the head known early (the QPN when the QP is created, the opcode and DS when a
// call is compiled) can be prebuilt and the WQE index patched in.

static_assert(__BYTE_ORDER == __LITTLE_ENDIAN, "segment words are packed for little-endian hosts");

// The QPN's bytes of a ctrl head (bytes 4-6).
constexpr uint64_t ctrl_qpn_bits(uint32_t qpn) noexcept {
  return (uint64_t{(qpn >> 16) & 0xff} << 32) | (uint64_t{(qpn >> 8) & 0xff} << 40) |
         (uint64_t{qpn & 0xff} << 48);
}

// The opcode's and DS's bytes of a ctrl head (bytes 3 and 7).
constexpr uint64_t ctrl_op_bits(uint8_t opcode, uint8_t ds) noexcept {
  return (uint64_t{opcode} << 24) | (uint64_t{ds} << 56);
}

// The WQE index's bytes of a ctrl head (1-2: pi & 0xffff, big-endian).
[[gnu::always_inline]] inline uint64_t ctrl_index_bits(uint32_t pi) noexcept {
  return uint64_t{static_cast<uint16_t>(__builtin_bswap16(static_cast<uint16_t>(pi)))} << 8;
}

// A whole ctrl head from values known only at run time: the same bytes as ctrl_qpn_bits |
// ctrl_op_bits | ctrl_index_bits, in two byte swaps.
[[gnu::always_inline]] inline uint64_t ctrl_head(uint32_t pi, uint8_t opcode, uint32_t qpn,
                                                 uint8_t ds) noexcept {
  return uint64_t{htobe32(((pi & 0xffffu) << 8) | opcode)} |
         (uint64_t{htobe32((qpn << 8) | ds)} << 32);
}

// The second half of a ctrl segment: fm_ce_se and the immediate (big-endian already).
[[gnu::always_inline]] inline uint64_t ctrl_rest(uint8_t fm_ce_se, uint32_t imm_be = 0) noexcept {
  return (uint64_t{fm_ce_se} << 24) | (uint64_t{imm_be} << 32);
}

[[gnu::always_inline]] inline void store64(uint8_t* at, uint64_t v) noexcept {
  std::memcpy(at, &v, sizeof v);
}

// Data pointer segment (mlx5_wqe_data_seg, mlx5dv_set_data_seg): byte_count, lkey, addr.
[[gnu::always_inline]] inline void put_data(uint8_t* at, uint64_t addr, uint32_t length,
                                            uint32_t lkey) noexcept {
  store64(at, uint64_t{htobe32(length)} | (uint64_t{htobe32(lkey)} << 32));
  store64(at + 8, htobe64(addr));
}

// Remote address segment (mlx5_wqe_raddr_seg) of RDMA and atomic WQEs: raddr, rkey, and the
// reserved word as zero.
[[gnu::always_inline]] inline void put_raddr(uint8_t* at, uint64_t remote_addr,
                                             uint32_t rkey) noexcept {
  store64(at, htobe64(remote_addr));
  store64(at + 8, uint64_t{htobe32(rkey)});
}

// Datagram segment (mlx5_wqe_datagram_seg) of a UD send WQE: the address handle's address
// vector with the destination QP (and the extended-AV bit, as libmlx5 sets it) and its Q_Key
// in place. 48 bytes right after the ctrl segment: it ends the WQE's first block, so it never
// wraps.
inline constexpr uint8_t kDatagramDs = sizeof(mlx5_wqe_datagram_seg) / 16;
static_assert(sizeof(mlx5_wqe_datagram_seg) == 48);
[[gnu::always_inline]] inline void put_datagram(uint8_t* at, const mlx5_wqe_av& av,
                                                uint32_t remote_qpn, uint32_t qkey) noexcept {
  mlx5_wqe_av seg = av;
  seg.key.qkey.qkey = htobe32(qkey);
  seg.dqp_dct = htobe32((remote_qpn & 0xffffff) | MLX5_EXTENDED_UD_AV);
  std::memcpy(at, &seg, sizeof seg);
}

// Atomic operand segment (mlx5_wqe_atomic_seg). Compare-and-swap: swap_add = swap, compare =
// compare. Fetch-and-add: swap_add = the addend, compare unused and written as zero.
[[gnu::always_inline]] inline void put_atomic(uint8_t* at, uint64_t swap_add,
                                              uint64_t compare) noexcept {
  store64(at, htobe64(swap_add));
  store64(at + 8, htobe64(compare));
}

// The same stores into a segment value, for code that copies whole segments.
inline mlx5_wqe_ctrl_seg ctrl_segment(uint32_t pi, uint8_t opcode, uint32_t qpn, uint8_t ds,
                                      uint8_t fm_ce_se, __be32 imm_be) noexcept {
  mlx5_wqe_ctrl_seg seg;
  auto* p = reinterpret_cast<uint8_t*>(&seg);
  store64(p, ctrl_head(pi, opcode, qpn, ds));
  store64(p + 8, ctrl_rest(fm_ce_se, imm_be));
  return seg;
}

inline mlx5_wqe_data_seg data_segment(uint32_t length, uint32_t lkey, uint64_t addr) noexcept {
  mlx5_wqe_data_seg seg;
  put_data(reinterpret_cast<uint8_t*>(&seg), addr, length, lkey);
  return seg;
}

// End of a scatter list shorter than the WQE's capacity (libmlx5 set_data_ptr_seg_end).
inline mlx5_wqe_data_seg terminator_segment() noexcept {
  return data_segment(0, MLX5_INVALID_LKEY, 0);
}

inline mlx5_wqe_raddr_seg raddr_segment(uint64_t remote_addr, uint32_t rkey) noexcept {
  mlx5_wqe_raddr_seg seg;
  put_raddr(reinterpret_cast<uint8_t*>(&seg), remote_addr, rkey);
  return seg;
}

inline mlx5_wqe_atomic_seg atomic_segment(uint64_t swap_add, uint64_t compare) noexcept {
  mlx5_wqe_atomic_seg seg;
  put_atomic(reinterpret_cast<uint8_t*>(&seg), swap_add, compare);
  return seg;
}

// ---- Publishing a WQE: its ctrl segment's first 8 bytes last -------------------------------
//
// A device that fetches valid-looking WQEs beyond the doorbell record (a scanning device)
// decides that a WQE is there from the first 8 bytes of its ctrl segment: the opcode and the
// WQE index (opmod_idx_opcode) and the QPN and DS (qpn_ds). Everything else the WQE holds,
// the ctrl segment's other 8 bytes included (fm_ce_se: whether a CQE is wanted, the
// immediate), must be in memory before those 8 bytes are, or the device runs a torn WQE: for
// one, an unsignaled copy of a signaled WRITE, whose completion is then never written. So the
// head is one aligned 8-byte store with release ordering, after every other byte, and the
// device reads it with one acquire load before it reads anything else of the WQE. On x86
// both are plain moves; the ordering costs no instruction.

inline constexpr size_t kCtrlHeadBytes = 8;  // opmod_idx_opcode, qpn_ds

// Writes a ctrl segment given as its two 8-byte halves, in memory order (`head`: bytes 0-7,
// `rest`: bytes 8-15), to the WQE at `wqe` (64-byte aligned): the rest, then the head.
[[gnu::always_inline]] inline void publish_ctrl_words(uint8_t* wqe, uint64_t head,
                                                      uint64_t rest) noexcept {
  std::memcpy(wqe + kCtrlHeadBytes, &rest, sizeof rest);
  __atomic_store_n(reinterpret_cast<uint64_t*>(wqe), head, __ATOMIC_RELEASE);
}

// Writes `ctrl` to the WQE at `wqe` (64-byte aligned): bytes 8-15, then the head.
[[gnu::always_inline]] inline void publish_ctrl_segment(uint8_t* wqe,
                                                        const mlx5_wqe_ctrl_seg& ctrl) noexcept {
  uint64_t words[2];
  static_assert(sizeof words == sizeof ctrl);
  std::memcpy(words, &ctrl, sizeof ctrl);
  publish_ctrl_words(wqe, words[0], words[1]);
}

// The device's side: the head of the WQE at `wqe`, as the bytes are in memory. Every other
// byte the WQE's writer stored before it is visible once this returns a valid head.
inline uint64_t load_ctrl_head(const uint8_t* wqe) noexcept {
  return __atomic_load_n(reinterpret_cast<const uint64_t*>(wqe), __ATOMIC_ACQUIRE);
}

}  // namespace rnicdv::wqe
