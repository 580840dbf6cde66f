// SPDX-License-Identifier: BSD-3-Clause
// Send-WQE encoding into an mlx5 send queue ring. Pure functions over ring memory.
//
// Layouts come from rdma-core's mlx5dv.h (struct mlx5_wqe_ctrl_seg, _raddr_seg, _atomic_seg,
// _data_seg, _inl_data_seg). Ring rules (libmlx5, providers/mlx5/qp.c):
//  * the ring is `bb_count` 64-byte basic blocks (BBs), a power of two;
//  * `pi` is the free-running producer counter in BBs; slot = pi & (bb_count - 1);
//  * a WQE starts on a BB boundary and may wrap: segments continue at the ring's start, and
//    inline data is split at the ring's end;
//  * ctrl.opmod_idx_opcode carries (pi & 0xffff) << 8 | opcode; ctrl.qpn_ds carries
//    qpn << 8 | DS, DS = WQE size in 16-byte units including the ctrl segment.
// Hot-path bodies are in send_wqe_inl.h.
#pragma once

#include <cstdint>

#include "rnicdv/status.h"
#include "rnicdv/wqe/sq_ring.h"
#include "rnicdv/wqe/work_request.h"

namespace rnicdv::wqe {

// Validates `wr` against `limits` and computes its size. Writes nothing.
// Errors: invalid_argument (unknown opcode, misaligned atomic address, atomic without exactly
// one 8-byte SGE, inline on an opcode that carries no local payload), too_many_sge,
// inline_too_large.
Errc send_wqe_size(const SendWr& wr, const SqLimits& limits, uint8_t* ds_out) noexcept;

// Builds `wr` at producer index `pi`. `free_bbs` is the room the caller has in the ring; when
// the WQE needs more, returns queue_full. On any error nothing is written to the ring.
// `force_fm_ce_se` is OR-ed into ctrl.fm_ce_se (e.g. CQ_UPDATE for sq_sig_all QPs).
Errc encode_send_wqe(SqRing ring, uint32_t pi, uint32_t free_bbs, uint32_t qpn, const SendWr& wr,
                     const SqLimits& limits, uint8_t force_fm_ce_se, EncodedWqe* out) noexcept;

// The same for a QP of the XRC initiator type: the WQE carries `wr.remote_srqn` in an XRC
// segment (16 bytes, xrc_srqn big-endian then 12 reserved: libmlx5's mlx5_wqe_xrc_seg) right
// after the ctrl segment, and is otherwise the RC WQE of `wr` one segment further on. Out of
// line: XRC QPs never take the RC fast path. A datagram (wr.av), a NOP and an SRQ number
// above 24 bits are invalid_argument.
Errc encode_xrc_send_wqe(SqRing ring, uint32_t pi, uint32_t free_bbs, uint32_t qpn,
                         const SendWr& wr, const SqLimits& limits, uint8_t force_fm_ce_se,
                         EncodedWqe* out) noexcept;
inline constexpr uint32_t kXrcSegDs = 1;

// Builds a NOP WQE of `ds` units (1..kMaxWqeDs) at `pi`; used to pad or to request a CQE.
Errc encode_nop_wqe(SqRing ring, uint32_t pi, uint32_t free_bbs, uint32_t qpn, uint8_t ds,
                    uint8_t fm_ce_se, EncodedWqe* out) noexcept;

// "SEND", "RDMA_WRITE_IMM", ... for an MLX5_OPCODE_* value; "unknown" otherwise.
const char* send_opcode_name(uint8_t mlx5_opcode) noexcept;

// fm_ce_se byte for SendWr::flags (CQ_UPDATE, SOLICITED, FENCE). The flag bits were chosen so
// that each maps onto its fm_ce_se bit with a shift: no branches on the post path.
constexpr uint8_t fm_ce_se_for(SendFlags flags) noexcept {
  constexpr uint32_t kSignaled = send_flags::signaled.bits();
  constexpr uint32_t kSolicited = send_flags::solicited.bits();
  constexpr uint32_t kFence = send_flags::fence.bits();
  static_assert(kSignaled << 3 == MLX5_WQE_CTRL_CQ_UPDATE);
  static_assert(kSolicited == MLX5_WQE_CTRL_SOLICITED);
  static_assert(kFence << 5 == MLX5_WQE_CTRL_FENCE);
  const uint32_t f = flags.bits();
  return static_cast<uint8_t>(((f & kSignaled) << 3) | (f & kSolicited) | ((f & kFence) << 5));
}

// Copies `bytes` starting at BB `pi` of `src` into the same offsets of `dst` (two rings of
// equal size), following the wrap. The shadow-queue flush.
void copy_between_rings(SqRing src, SqRing dst, uint32_t pi, uint32_t bytes) noexcept;

// Copies the WQE of `bbs` blocks at BB `pi` of `src` into `dst` as copy_between_rings does,
// but its ctrl segment last, and that segment's head (the 8 bytes that make it look valid)
// last of all, with release ordering (publish_ctrl_segment): a device that fetches WQEs past
// the doorbell record never sees a valid head before the WQE's other bytes.
void copy_wqe_ctrl_last(SqRing src, SqRing dst, uint32_t pi, uint32_t bbs) noexcept;

}  // namespace rnicdv::wqe

#include "rnicdv/wqe/send_wqe_inl.h"
