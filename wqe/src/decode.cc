// SPDX-License-Identifier: BSD-3-Clause
// WQE decoding for the device side. Ring memory is untrusted: every byte is read once into a
// local copy through RingView, which bounds each access to the ring and wraps at its end, and
// every length is checked against the WQE's DS before it is used.
#include <endian.h>

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "rnicdv/wqe/decode.h"
#include "rnicdv/wqe/segments.h"

namespace rnicdv::wqe {

namespace {

bool is_power_of_two(uint32_t v) {
  return v != 0 && (v & (v - 1)) == 0;
}

// Byte-addressed, wrapping, bounds-checked reads of a ring whose size is a power of two.
class RingView {
 public:
  RingView(const uint8_t* buf, size_t size) : buf_(buf), size_(size) {}

  size_t size() const { return size_; }

  // Copies `len` (<= size) bytes starting at `offset` (any value; taken modulo the size).
  void read(size_t offset, void* dst, size_t len) const {
    offset &= size_ - 1;
    const size_t first = std::min(len, size_ - offset);
    std::memcpy(dst, buf_ + offset, first);
    if (len > first) std::memcpy(static_cast<uint8_t*>(dst) + first, buf_, len - first);
  }

 private:
  const uint8_t* buf_;
  size_t size_;
};

bool usable(SqRing ring) {
  return ring.buf != nullptr && is_power_of_two(ring.bb_count);
}

size_t ring_bytes(SqRing ring) {
  return static_cast<size_t>(ring.bb_count) * kBbBytes;
}

size_t wqe_offset(SqRing ring, uint32_t pi) {
  return static_cast<size_t>(pi & (ring.bb_count - 1)) * kBbBytes;
}

bool is_rdma(uint8_t opcode) {
  return opcode == MLX5_OPCODE_RDMA_WRITE || opcode == MLX5_OPCODE_RDMA_WRITE_IMM ||
         opcode == MLX5_OPCODE_RDMA_READ;
}

bool is_atomic(uint8_t opcode) {
  return opcode == MLX5_OPCODE_ATOMIC_CS || opcode == MLX5_OPCODE_ATOMIC_FA;
}

// Smallest DS a WQE of `opcode` can have on a QP of `transport`; 0 for opcodes such a QP does
// not execute.
uint32_t min_ds_for(uint8_t opcode, SqTransport transport) {
  if (transport == SqTransport::ud) {
    switch (opcode) {
      case MLX5_OPCODE_NOP:
        return 1;
      case MLX5_OPCODE_SEND:
      case MLX5_OPCODE_SEND_IMM:
        return 1 + sizeof(mlx5_wqe_datagram_seg) / kDsBytes;  // ctrl + address vector
      default:
        return 0;
    }
  }
  // XRC: the XRC segment after the ctrl segment, on every opcode that sends.
  const uint32_t xrc = transport == SqTransport::xrc && opcode != MLX5_OPCODE_NOP ? 1 : 0;
  switch (opcode) {
    case MLX5_OPCODE_NOP:
      return 1;
    case MLX5_OPCODE_SEND:
    case MLX5_OPCODE_SEND_IMM:
      return 1 + xrc;  // ctrl (a SEND may carry no data: libmlx5 drops empty SGEs)
    case MLX5_OPCODE_RDMA_WRITE:
    case MLX5_OPCODE_RDMA_WRITE_IMM:
    case MLX5_OPCODE_RDMA_READ:
      return 2 + xrc;  // ctrl + raddr
    case MLX5_OPCODE_ATOMIC_CS:
    case MLX5_OPCODE_ATOMIC_FA:
      return 4 + xrc;  // ctrl + raddr + atomic + data
    default:
      return 0;
  }
}

struct Ctrl {
  uint8_t opcode;
  uint8_t opmod;
  uint16_t wqe_index;
  uint32_t qpn;
  uint32_t ds;  // the whole low byte of qpn_ds: bits 7:6 are reserved and must be clear
  uint8_t fm_ce_se;
  uint32_t imm;
};

Ctrl read_ctrl(const RingView& view, size_t offset) {
  uint8_t raw[sizeof(mlx5_wqe_ctrl_seg)];
  view.read(offset, raw, sizeof raw);
  const uint32_t opmod_idx_opcode = load_be32(raw + offsetof(mlx5_wqe_ctrl_seg, opmod_idx_opcode));
  const uint32_t qpn_ds = load_be32(raw + offsetof(mlx5_wqe_ctrl_seg, qpn_ds));
  Ctrl ctrl;
  ctrl.opcode = static_cast<uint8_t>(opmod_idx_opcode & 0xff);
  ctrl.opmod = static_cast<uint8_t>(opmod_idx_opcode >> 24);
  ctrl.wqe_index = static_cast<uint16_t>(opmod_idx_opcode >> 8);
  ctrl.qpn = qpn_ds >> 8;
  ctrl.ds = qpn_ds & 0xff;
  ctrl.fm_ce_se = raw[offsetof(mlx5_wqe_ctrl_seg, fm_ce_se)];
  ctrl.imm = load_be32(raw + offsetof(mlx5_wqe_ctrl_seg, imm));
  return ctrl;
}

bool ds_in_range(uint32_t ds, const RingView& view) {
  return ds != 0 && ds <= kMaxWqeDs && static_cast<size_t>(ds) * kDsBytes <= view.size();
}

// Reads the data and inline segments in units [unit, ds) of the WQE at `base`.
WqeDefect decode_gather_list(const RingView& view, size_t base, uint32_t unit, uint32_t ds,
                             bool inline_allowed, DecodedSendWqe* out, uint8_t* inline_buf,
                             uint32_t inline_cap) {
  while (unit < ds) {
    const size_t seg_offset = base + static_cast<size_t>(unit) * kDsBytes;
    uint8_t seg[sizeof(mlx5_wqe_data_seg)];
    view.read(seg_offset, seg, sizeof seg);
    const uint32_t byte_count = load_be32(seg + offsetof(mlx5_wqe_data_seg, byte_count));

    if (byte_count & MLX5_INLINE_SEG) {
      if (!inline_allowed) return WqeDefect::bad_inline;
      const uint32_t len = byte_count & ~static_cast<uint32_t>(MLX5_INLINE_SEG);
      const uint64_t units =
          (static_cast<uint64_t>(len) + sizeof(mlx5_wqe_inl_data_seg) + kDsBytes - 1) / kDsBytes;
      if (unit + units > ds) return WqeDefect::bad_inline;
      if (len > inline_cap - out->inline_bytes) return WqeDefect::bad_inline;
      if (len != 0) {
        if (out->num_entries == kMaxDecodedSegments) return WqeDefect::too_many_segments;
        view.read(seg_offset + sizeof(mlx5_wqe_inl_data_seg), inline_buf + out->inline_bytes, len);
        out->entries[out->num_entries++] = {out->inline_bytes, len, 0, true};
        out->inline_bytes += len;
        out->total_length += len;
      }
      unit += static_cast<uint32_t>(units);
      continue;
    }

    if (out->num_entries == kMaxDecodedSegments) return WqeDefect::too_many_segments;
    out->entries[out->num_entries++] = {load_be64(seg + offsetof(mlx5_wqe_data_seg, addr)),
                                        byte_count,
                                        load_be32(seg + offsetof(mlx5_wqe_data_seg, lkey)), false};
    out->total_length += byte_count;
    ++unit;
  }
  return WqeDefect::none;
}

}  // namespace

WqeDefect decode_send_wqe(SqRing ring, uint32_t pi, uint32_t expected_qpn, DecodedSendWqe* out,
                          uint8_t* inline_buf, uint32_t inline_cap,
                          SqTransport transport) noexcept {
  out->opcode = 0;
  out->opmod = 0;
  out->wqe_index = 0;
  out->qpn = 0;
  out->ds = 0;
  out->bbs = 0;
  out->fm_ce_se = 0;
  out->imm = 0;
  out->remote_addr = 0;
  out->rkey = 0;
  out->swap_add = 0;
  out->compare = 0;
  out->av = DatagramAv{};
  out->xrc_srqn = 0;
  out->num_entries = 0;
  out->inline_bytes = 0;
  out->total_length = 0;
  if (!usable(ring)) return WqeDefect::bad_ds;
  if (inline_buf == nullptr) inline_cap = 0;

  const RingView view(ring.buf, ring_bytes(ring));
  const size_t base = wqe_offset(ring, pi);
  const Ctrl ctrl = read_ctrl(view, base);
  out->opcode = ctrl.opcode;
  out->opmod = ctrl.opmod;
  out->wqe_index = ctrl.wqe_index;
  out->qpn = ctrl.qpn;
  out->ds = static_cast<uint8_t>(ctrl.ds);
  out->fm_ce_se = ctrl.fm_ce_se;
  out->imm = ctrl.imm;

  if (!ds_in_range(ctrl.ds, view)) return WqeDefect::bad_ds;
  out->bbs = static_cast<uint8_t>((ctrl.ds + 3) / 4);
  const uint32_t min_ds = min_ds_for(ctrl.opcode, transport);
  if (min_ds == 0) return WqeDefect::bad_opcode;
  if (ctrl.qpn != expected_qpn) return WqeDefect::bad_qpn;
  if (ctrl.ds < min_ds) return WqeDefect::bad_ds;
  if (ctrl.opcode == MLX5_OPCODE_NOP) return WqeDefect::none;

  uint32_t unit = 1;
  if (transport == SqTransport::ud) {
    uint8_t av[sizeof(mlx5_wqe_datagram_seg)];
    view.read(base + kDsBytes, av, sizeof av);
    const uint32_t dqp = load_be32(av + offsetof(mlx5_wqe_av, dqp_dct));
    out->av.dest_qpn = dqp & 0xffffff;
    out->av.qkey = load_be32(av + offsetof(mlx5_wqe_av, key));
    std::memcpy(out->av.rgid, av + offsetof(mlx5_wqe_av, rgid), sizeof out->av.rgid);
    std::memcpy(out->av.rmac, av + offsetof(mlx5_wqe_av, rmac), sizeof out->av.rmac);
    out->av.tclass = av[offsetof(mlx5_wqe_av, tclass)];
    out->av.hop_limit = av[offsetof(mlx5_wqe_av, hop_limit)];
    out->av.flow_label = load_be32(av + offsetof(mlx5_wqe_av, grh_gid_fl)) & 0xFFFFF;
    // The compact (16-byte) form has no GID, and RoCE routes by GID. (Bit 30 of grh_gid_fl,
    // "GRH present", is reserved on RoCE, where every packet has one: libmlx5 leaves it 0.)
    if (!(dqp & MLX5_EXTENDED_UD_AV)) return WqeDefect::bad_av;
    unit = min_ds;
  }
  if (transport == SqTransport::xrc) {
    uint8_t xrc_srqn[4];
    view.read(base + kDsBytes, xrc_srqn, sizeof xrc_srqn);
    out->xrc_srqn = load_be32(xrc_srqn) & 0xffffff;
    unit = 2;
  }
  if (is_rdma(ctrl.opcode) || is_atomic(ctrl.opcode)) {
    uint8_t raddr[sizeof(mlx5_wqe_raddr_seg)];
    view.read(base + unit * kDsBytes, raddr, sizeof raddr);
    out->remote_addr = load_be64(raddr + offsetof(mlx5_wqe_raddr_seg, raddr));
    out->rkey = load_be32(raddr + offsetof(mlx5_wqe_raddr_seg, rkey));
    ++unit;
  }
  if (is_atomic(ctrl.opcode)) {
    uint8_t atomic[sizeof(mlx5_wqe_atomic_seg)];
    view.read(base + unit * kDsBytes, atomic, sizeof atomic);
    out->swap_add = load_be64(atomic + offsetof(mlx5_wqe_atomic_seg, swap_add));
    out->compare = load_be64(atomic + offsetof(mlx5_wqe_atomic_seg, compare));
    ++unit;
  }

  // A READ scatters into local memory; inline data has no meaning there.
  const bool inline_allowed = ctrl.opcode != MLX5_OPCODE_RDMA_READ;
  const WqeDefect defect =
      decode_gather_list(view, base, unit, ctrl.ds, inline_allowed, out, inline_buf, inline_cap);
  if (defect != WqeDefect::none) return defect;

  if (is_atomic(ctrl.opcode)) {
    const GatherEntry& result = out->entries[0];
    if (out->num_entries != 1 || result.is_inline || result.length != kAtomicOperandBytes)
      return WqeDefect::bad_atomic;
  }
  return WqeDefect::none;
}

bool looks_valid_send_wqe(SqRing ring, uint32_t pi, uint32_t expected_qpn,
                          SqTransport transport) noexcept {
  if (!usable(ring)) return false;
  // Only the head, in one acquire load: the writer stores it after every other byte of the
  // WQE (segments.h, "Publishing a WQE"), so a valid head means the rest may be read.
  const uint64_t head = load_ctrl_head(ring.bb(pi));
  const auto* raw = reinterpret_cast<const uint8_t*>(&head);
  const uint32_t opmod_idx_opcode = load_be32(raw + offsetof(mlx5_wqe_ctrl_seg, opmod_idx_opcode));
  const uint32_t qpn_ds = load_be32(raw + offsetof(mlx5_wqe_ctrl_seg, qpn_ds));
  const uint8_t opcode = static_cast<uint8_t>(opmod_idx_opcode & 0xff);
  const uint32_t wqe_index = (opmod_idx_opcode >> 8) & 0xffff;
  const uint32_t ds = qpn_ds & 0xff;
  const uint32_t min_ds = min_ds_for(opcode, transport);
  const RingView view(ring.buf, ring_bytes(ring));
  return wqe_index == (pi & 0xffff) && min_ds != 0 && ds_in_range(ds, view) && ds >= min_ds &&
         (qpn_ds >> 8) == expected_qpn;
}

namespace {

// Data segments from `slot` on, at most `capacity`, up to the terminator (lkey 0x100).
WqeDefect decode_scatter(const uint8_t* slot, uint32_t capacity, DecodedRecvWqe* out) noexcept {
  for (uint32_t i = 0; i < capacity; ++i) {
    uint8_t seg[sizeof(mlx5_wqe_data_seg)];
    std::memcpy(seg, slot + static_cast<size_t>(i) * sizeof seg, sizeof seg);
    const uint32_t byte_count = load_be32(seg + offsetof(mlx5_wqe_data_seg, byte_count));
    const uint32_t lkey = load_be32(seg + offsetof(mlx5_wqe_data_seg, lkey));
    if (lkey == MLX5_INVALID_LKEY) break;  // end of the scatter list
    if (byte_count & MLX5_INLINE_SEG) return WqeDefect::bad_inline;
    if (out->num_sge == kMaxDecodedSegments) return WqeDefect::too_many_segments;
    Sge& sge = out->sges[out->num_sge++];
    sge.addr = load_be64(seg + offsetof(mlx5_wqe_data_seg, addr));
    sge.length = byte_count;
    sge.lkey = lkey;
    out->total_length += byte_count;
  }
  return WqeDefect::none;
}

}  // namespace

WqeDefect decode_recv_wqe(RqRing ring, uint32_t index, DecodedRecvWqe* out) noexcept {
  out->num_sge = 0;
  out->total_length = 0;
  if (ring.buf == nullptr || !is_power_of_two(ring.wqe_cnt) || !is_power_of_two(ring.stride) ||
      ring.stride < sizeof(mlx5_wqe_data_seg))
    return WqeDefect::bad_ds;
  return decode_scatter(ring.slot(index), ring.max_sge(), out);
}

WqeDefect decode_srq_wqe(const SrqRing& ring, uint32_t index, DecodedRecvWqe* out) noexcept {
  out->num_sge = 0;
  out->total_length = 0;
  if (ring.buf == nullptr || !is_power_of_two(ring.wqe_cnt) || !is_power_of_two(ring.stride) ||
      ring.stride < 2 * sizeof(mlx5_wqe_data_seg))
    return WqeDefect::bad_ds;
  return decode_scatter(ring.slot(index) + sizeof(mlx5_wqe_srq_next_seg), ring.max_sge(), out);
}

const char* wqe_defect_name(WqeDefect defect) noexcept {
  switch (defect) {
    case WqeDefect::none:
      return "none";
    case WqeDefect::bad_opcode:
      return "bad_opcode";
    case WqeDefect::bad_ds:
      return "bad_ds";
    case WqeDefect::bad_qpn:
      return "bad_qpn";
    case WqeDefect::bad_inline:
      return "bad_inline";
    case WqeDefect::too_many_segments:
      return "too_many_segments";
    case WqeDefect::bad_atomic:
      return "bad_atomic";
    case WqeDefect::bad_av:
      return "bad_av";
  }
  return "unknown";
}

}  // namespace rnicdv::wqe
