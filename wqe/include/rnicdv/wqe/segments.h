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

// ---- Segment builders -----------------------------------------------------------------------

// Control segment, as mlx5dv_set_ctrl_seg() with opmod 0 and no signature, plus the bytes that
// helper leaves alone (dci_stream_channel_id) zeroed as libmlx5's post_send does. `imm_be` is
// already big-endian (the IB immediate is carried as is).
inline mlx5_wqe_ctrl_seg ctrl_segment(uint32_t pi, uint8_t opcode, uint32_t qpn, uint8_t ds,
                                      uint8_t fm_ce_se, __be32 imm_be) noexcept {
  mlx5_wqe_ctrl_seg seg;
  seg.opmod_idx_opcode = htobe32(((pi & 0xffffu) << 8) | opcode);
  seg.qpn_ds = htobe32((qpn << 8) | ds);
  seg.signature = 0;
  seg.dci_stream_channel_id = 0;
  seg.fm_ce_se = fm_ce_se;
  seg.imm = imm_be;
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

// Gather/scatter pointer: byte_count, lkey, addr (mlx5dv_set_data_seg).
inline mlx5_wqe_data_seg data_segment(uint32_t length, uint32_t lkey, uint64_t addr) noexcept {
  mlx5_wqe_data_seg seg;
  seg.byte_count = htobe32(length);
  seg.lkey = htobe32(lkey);
  seg.addr = htobe64(addr);
  return seg;
}

// End of a scatter list shorter than the WQE's capacity (libmlx5 set_data_ptr_seg_end).
inline mlx5_wqe_data_seg terminator_segment() noexcept {
  return data_segment(0, MLX5_INVALID_LKEY, 0);
}

// Remote address segment of RDMA and atomic WQEs; the reserved word is written as zero.
inline mlx5_wqe_raddr_seg raddr_segment(uint64_t remote_addr, uint32_t rkey) noexcept {
  mlx5_wqe_raddr_seg seg;
  seg.raddr = htobe64(remote_addr);
  seg.rkey = htobe32(rkey);
  seg.reserved = 0;
  return seg;
}

// Atomic operand segment. Compare-and-swap: swap_add = swap, compare = compare. Fetch-and-add:
// swap_add = the addend; compare is unused and written as zero.
inline mlx5_wqe_atomic_seg atomic_segment(uint64_t swap_add, uint64_t compare) noexcept {
  mlx5_wqe_atomic_seg seg;
  seg.swap_add = htobe64(swap_add);
  seg.compare = htobe64(compare);
  return seg;
}

}  // namespace rnicdv::wqe
