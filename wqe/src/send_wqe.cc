// SPDX-License-Identifier: BSD-3-Clause
// Send-WQE paths off the per-post fast path: atomics and NOPs, padding NOPs, names.
#include <cstring>

#include "rnicdv/wqe/send_wqe.h"

namespace rnicdv::wqe {

namespace detail {

Errc fixed_wqe_size(const SendWr& wr, const SqLimits& limits, uint8_t* ds_out) noexcept {
  const bool is_inline = (wr.flags & send_flags::inline_data) != 0;
  switch (wr.opcode) {
    case WrOpcode::nop:
      if (is_inline) return Errc::invalid_argument;  // a NOP carries no payload
      *ds_out = 1;
      return Errc::ok;
    case WrOpcode::atomic_cmp_swap:
    case WrOpcode::atomic_fetch_add:
      break;
    default:
      return Errc::invalid_argument;  // not an opcode this encoder builds
  }
  // ctrl + raddr + atomic + one data segment for the 8-byte result (libmlx5
  // _mlx5_post_send). The operands travel in the atomic segment: nothing to inline.
  if (is_inline) return Errc::invalid_argument;
  if (wr.num_sge > limits.max_sge) return Errc::too_many_sge;
  // The local buffer receives the original 64-bit value: exactly one 8-byte SGE.
  if (wr.num_sge != 1 || wr.sg_list == nullptr || wr.sg_list[0].length != kAtomicOperandBytes)
    return Errc::invalid_argument;
  // IBA 9.4.5: the remote address of an atomic must be naturally aligned (8 bytes).
  if (wr.remote_addr & (kAtomicOperandBytes - 1)) return Errc::invalid_argument;
  *ds_out = kAtomicDs;
  return Errc::ok;
}

Errc encode_fixed_wqe(SqRing ring, uint32_t pi, uint32_t free_bbs, uint32_t qpn, const SendWr& wr,
                      const SqLimits& limits, uint8_t force_fm_ce_se, EncodedWqe* out) noexcept {
  uint8_t ds;
  if (const Errc err = fixed_wqe_size(wr, limits, &ds); err != Errc::ok) return err;
  const uint32_t bbs = bbs_for(ds);
  if (bbs > free_bbs || bbs > ring.bb_count) return Errc::queue_full;

  uint8_t* const wqe = ring.bb(pi);
  const uint8_t fm_ce_se = static_cast<uint8_t>(fm_ce_se_for(wr.flags) | force_fm_ce_se);
  if (wr.opcode != WrOpcode::nop)
    put_atomic_body(wqe, wr.opcode == WrOpcode::atomic_cmp_swap, wr.remote_addr, wr.rkey,
                    wr.compare_add, wr.swap, wr.sg_list[0].addr, wr.sg_list[0].lkey);
  // The ctrl segment last, its head last of all (segments.h, "Publishing a WQE").
  publish_ctrl_words(wqe, ctrl_head(pi, static_cast<uint8_t>(wr.opcode), qpn, ds),
                     ctrl_rest(fm_ce_se));
  out->ctrl = reinterpret_cast<mlx5_wqe_ctrl_seg*>(wqe);
  out->ds = ds;
  out->bbs = static_cast<uint8_t>(bbs);
  return Errc::ok;
}

}  // namespace detail

Errc encode_xrc_send_wqe(SqRing ring, uint32_t pi, uint32_t free_bbs, uint32_t qpn,
                         const SendWr& wr, const SqLimits& limits, uint8_t force_fm_ce_se,
                         EncodedWqe* out) noexcept {
  if (wr.av != nullptr || wr.opcode == WrOpcode::nop || wr.remote_srqn > 0xffffff)
    return Errc::invalid_argument;
  if (ring.buf == nullptr || ring.bb_count == 0) return Errc::queue_full;
  // The RC form first, in a scratch ring of the largest WQE: it validates and sizes the
  // request exactly as for RC, and nothing reaches `ring` unless the whole WQE fits there.
  alignas(kBbBytes) uint8_t scratch[kMaxWqeBbs * kBbBytes];
  const SqRing tmp{scratch, kMaxWqeBbs};
  EncodedWqe rc;
  if (const Errc err = encode_send_wqe(tmp, 0, kMaxWqeBbs, qpn, wr, limits, force_fm_ce_se, &rc);
      err != Errc::ok)
    return err;
  const uint32_t ds = rc.ds + kXrcSegDs;
  if (ds > kMaxWqeDs)
    return (wr.flags & send_flags::inline_data) ? Errc::inline_too_large : Errc::too_many_sge;
  const uint32_t bbs = bbs_for(ds);
  if (bbs > free_bbs || bbs > ring.bb_count) return Errc::queue_full;

  // The segments after the ctrl segment, one unit further on (a WQE may wrap at the ring's
  // end, a segment never does), then the XRC segment, then the ctrl segment with the new DS,
  // its head last (segments.h, "Publishing a WQE").
  uint8_t* const wqe = ring.bb(pi);
  uint8_t* const end = ring.end();
  auto unit_at = [&](uint32_t unit) {
    uint8_t* at = wqe + static_cast<size_t>(unit) * kDsBytes;
    return at >= end ? at - (end - ring.buf) : at;
  };
  for (uint32_t unit = 1; unit < rc.ds; ++unit)
    std::memcpy(unit_at(unit + kXrcSegDs), scratch + static_cast<size_t>(unit) * kDsBytes,
                kDsBytes);
  uint8_t* const xrc = unit_at(1);
  std::memset(xrc, 0, kDsBytes);
  const uint32_t srqn_be = htobe32(wr.remote_srqn);
  std::memcpy(xrc, &srqn_be, sizeof srqn_be);
  uint64_t words[2];
  std::memcpy(words, scratch, sizeof words);
  publish_ctrl_words(wqe, ctrl_head(pi, static_cast<uint8_t>(wr.opcode), qpn, static_cast<uint8_t>(ds)),
                     words[1]);
  out->ctrl = reinterpret_cast<mlx5_wqe_ctrl_seg*>(wqe);
  out->ds = static_cast<uint8_t>(ds);
  out->bbs = static_cast<uint8_t>(bbs);
  return Errc::ok;
}

Errc encode_nop_wqe(SqRing ring, uint32_t pi, uint32_t free_bbs, uint32_t qpn, uint8_t ds,
                    uint8_t fm_ce_se, EncodedWqe* out) noexcept {
  if (ds == 0 || ds > kMaxWqeDs) return Errc::invalid_argument;
  const uint32_t bbs = (ds + 3u) >> 2;
  if (bbs > free_bbs || bbs > ring.bb_count) return Errc::queue_full;

  uint8_t* const wqe = ring.bb(pi);
  // The padding carries nothing; zero it so no stale segment is left inside the WQE. Then the
  // ctrl segment, its head last (segments.h, "Publishing a WQE").
  uint8_t* at = wqe + kDsBytes;
  uint8_t* const end = ring.end();
  for (uint32_t unit = 1; unit < ds; ++unit) {
    if (at == end) at = ring.buf;
    std::memset(at, 0, kDsBytes);
    at += kDsBytes;
  }
  publish_ctrl_words(wqe, ctrl_head(pi, MLX5_OPCODE_NOP, qpn, ds), ctrl_rest(fm_ce_se));
  out->ctrl = reinterpret_cast<mlx5_wqe_ctrl_seg*>(wqe);
  out->ds = ds;
  out->bbs = static_cast<uint8_t>(bbs);
  return Errc::ok;
}

const char* send_opcode_name(uint8_t mlx5_opcode) noexcept {
  switch (mlx5_opcode) {
    case MLX5_OPCODE_NOP:
      return "NOP";
    case MLX5_OPCODE_SEND_INVAL:
      return "SEND_INVAL";
    case MLX5_OPCODE_RDMA_WRITE:
      return "RDMA_WRITE";
    case MLX5_OPCODE_RDMA_WRITE_IMM:
      return "RDMA_WRITE_IMM";
    case MLX5_OPCODE_SEND:
      return "SEND";
    case MLX5_OPCODE_SEND_IMM:
      return "SEND_IMM";
    case MLX5_OPCODE_TSO:
      return "TSO";
    case MLX5_OPCODE_RDMA_READ:
      return "RDMA_READ";
    case MLX5_OPCODE_ATOMIC_CS:
      return "ATOMIC_CS";
    case MLX5_OPCODE_ATOMIC_FA:
      return "ATOMIC_FA";
    case MLX5_OPCODE_ATOMIC_MASKED_CS:
      return "ATOMIC_MASKED_CS";
    case MLX5_OPCODE_ATOMIC_MASKED_FA:
      return "ATOMIC_MASKED_FA";
    case MLX5_OPCODE_FMR:
      return "FMR";
    case MLX5_OPCODE_LOCAL_INVAL:
      return "LOCAL_INVAL";
    case MLX5_OPCODE_CONFIG_CMD:
      return "CONFIG_CMD";
    case MLX5_OPCODE_SET_PSV:
      return "SET_PSV";
    case MLX5_OPCODE_UMR:
      return "UMR";
    case MLX5_OPCODE_TAG_MATCHING:
      return "TAG_MATCHING";
    case MLX5_OPCODE_FLOW_TBL_ACCESS:
      return "FLOW_TBL_ACCESS";
    case MLX5_OPCODE_MMO:
      return "MMO";
    default:
      return "unknown";
  }
}

}  // namespace rnicdv::wqe
