// SPDX-License-Identifier: BSD-3-Clause
// The typed post calls of QueuePair (post_write, post_read, post_fetch_add, ...): one call per
// operation, arguments in registers, no SendWr. Included by rnicdv/qp.h.
//
// Each operation is a small struct (an "op") that knows its layout at compile time (opcode,
// DS, blocks) and builds its WQE from the layouts of wqe/layouts.h, the ones every send WQE is
// built from, into a ctrl head prebuilt from the QPN (QpCore::ctrl_heads). post_send's
// one-SGE requests use the same ops (QpCore::post_one_fixed). The fast path runs when the post gate is
// open (RTS, a device that fetches only up to the doorbell record, Threading::single or
// single_poster) and the request is one the fixed layout covers; it then costs what the
// stores cost plus the bookkeeping that poll() needs. Everything else takes post_typed_slow:
// a thread_safe QP builds the same way under its post lock, and any other case (below RTS,
// ERR, SQD, a scanning device, a zero-length SGE, a misaligned atomic, a full queue...) posts
// the equivalent SendWr through post_send, so that every state, error code and completion is
// exactly post_send's.
#pragma once

#include <endian.h>
#include <infiniband/mlx5dv.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "rnicdv/detail/qp_core.h"
#include "rnicdv/pd.h"
#include "rnicdv/qp.h"
#include "rnicdv/wqe/segments.h"
#include "rnicdv/wqe/send_wqe.h"
#include "rnicdv/wqe/layouts.h"

namespace rnicdv {
namespace detail {

// The second half of a typed WQE's ctrl segment: fm_ce_se from the caller's flags and the
// QP's sq_sig_all (prebuilt in place), and the immediate.
[[gnu::always_inline]] inline uint64_t typed_rest(const QpCore& qp, SendFlags flags,
                                                  uint32_t imm_be = 0) noexcept {
  return wqe::ctrl_rest(wqe::fm_ce_se_for(flags), imm_be) | qp.ctrl_rest_sig_all;
}

// A ctrl head from the QP's prebuilt one for the operation: the WQE index patched in (and,
// for the inline operations, whose size varies, the DS).
[[gnu::always_inline]] inline uint64_t typed_head(const QpCore& qp, TypedHead slot, uint32_t pi,
                                                  uint8_t ds = 0) noexcept {
  return qp.ctrl_heads[slot] | wqe::ctrl_index_bits(pi) | wqe::ctrl_op_bits(0, ds);
}

// The SendWr that post_send is given for a typed call that leaves the fast path: one SGE
// (`list`), the operation's opcode and flags; each op adds its operands.
inline SendWr one_sge_wr(uint64_t wr_id, uint8_t opcode, SendFlags flags, const Sge* list,
                         uint64_t remote_addr = 0, uint32_t rkey = 0) noexcept {
  SendWr wr;
  wr.wr_id = wr_id;
  wr.opcode = static_cast<WrOpcode>(opcode);
  wr.flags = flags;
  wr.sg_list = list;
  wr.num_sge = 1;
  wr.remote_addr = remote_addr;
  wr.rkey = rkey;
  return wr;
}

// WRITE, WRITE with immediate and READ with one SGE: ctrl + raddr + data, DS 3.
template <uint8_t Opcode>
struct RdmaOp {
  static constexpr uint8_t kOpcode = Opcode;
  static constexpr TypedHead kHead = Opcode == MLX5_OPCODE_RDMA_WRITE       ? kHeadWrite
                                     : Opcode == MLX5_OPCODE_RDMA_WRITE_IMM ? kHeadWriteImm
                                                                            : kHeadRead;
  static constexpr wqe::OpcodeLayout kLayout = wqe::layout_of(Opcode);
  static constexpr bool kImm = kLayout.has_imm();
  static_assert(kLayout.has_raddr());
  uint64_t wr_id;
  const Sge* sge;
  uint64_t remote_addr;
  uint32_t rkey;
  uint32_t imm;
  SendFlags flags;

  // The fixed layout covers it: a data segment of length 0 would mean 2 GiB to the device
  // (post_send leaves it out), and inline data has its own calls. A READ on a UC QP is left
  // to post_send, which refuses it.
  bool fits_layout(const QpCore& qp) const noexcept {
    if constexpr (Opcode == MLX5_OPCODE_RDMA_READ) {
      if (qp.unreliable) return false;
    }
    return sge->length != 0 && (flags & send_flags::inline_data) == 0;
  }
  uint8_t ds(const QpCore&) const noexcept { return wqe::kRdmaDs; }
  uint64_t build(const QpCore& qp, uint8_t* w, uint32_t pi, uint8_t) const noexcept {
    wqe::put_data(wqe::put_header(w, kLayout, remote_addr, rkey), sge->addr, sge->length,
                  sge->lkey);
    const uint64_t head = typed_head(qp, kHead, pi);
    wqe::publish_ctrl_words(w, head, typed_rest(qp, flags, kImm ? htobe32(imm) : 0));
    return head;
  }
  SendWr to_send_wr(const Sge* list) const noexcept {
    SendWr wr = one_sge_wr(wr_id, Opcode, flags, list, remote_addr, rkey);
    wr.imm_data = imm;
    return wr;
  }
  static RdmaOp from_wr(const SendWr& wr) noexcept {
    return {wr.wr_id, wr.sg_list, wr.remote_addr, wr.rkey, wr.imm_data, wr.flags};
  }
};

// SEND and SEND with immediate with one SGE: ctrl + data, DS 2.
template <uint8_t Opcode>
struct SendOp {
  static constexpr uint8_t kOpcode = Opcode;
  static constexpr TypedHead kHead = Opcode == MLX5_OPCODE_SEND ? kHeadSend : kHeadSendImm;
  static constexpr wqe::OpcodeLayout kLayout = wqe::layout_of(Opcode);
  static constexpr bool kImm = kLayout.has_imm();
  static_assert(!kLayout.has_raddr());
  uint64_t wr_id;
  const Sge* sge;
  uint32_t imm;
  SendFlags flags;

  bool fits_layout(const QpCore&) const noexcept {
    return sge->length != 0 && (flags & send_flags::inline_data) == 0;
  }
  uint8_t ds(const QpCore&) const noexcept { return wqe::kSendDs; }
  uint64_t build(const QpCore& qp, uint8_t* w, uint32_t pi, uint8_t) const noexcept {
    wqe::put_data(wqe::put_header(w, kLayout, 0, 0), sge->addr, sge->length, sge->lkey);
    const uint64_t head = typed_head(qp, kHead, pi);
    wqe::publish_ctrl_words(w, head, typed_rest(qp, flags, kImm ? htobe32(imm) : 0));
    return head;
  }
  SendWr to_send_wr(const Sge* list) const noexcept {
    SendWr wr = one_sge_wr(wr_id, Opcode, flags, list);
    wr.imm_data = imm;
    return wr;
  }
  static SendOp from_wr(const SendWr& wr) noexcept {
    return {wr.wr_id, wr.sg_list, wr.imm_data, wr.flags};
  }
};

// Fetch-and-add and compare-and-swap: ctrl + raddr + atomic + an 8-byte data segment for the
// original value, DS 4.
template <uint8_t Opcode>
struct AtomicOp {
  static constexpr uint8_t kOpcode = Opcode;
  static constexpr TypedHead kHead = Opcode == MLX5_OPCODE_ATOMIC_FA ? kHeadFetchAdd
                                                                      : kHeadCompareSwap;
  uint64_t wr_id;
  const Sge* sge;  // the local 8 bytes that receive the original value
  uint64_t remote_addr;
  uint32_t rkey;
  SendFlags flags;
  uint64_t compare_add;  // ATOMIC_CS: compare; ATOMIC_FA: the addend
  uint64_t swap;         // ATOMIC_CS

  // The remote address is naturally aligned and the result buffer is 8 bytes (IBA 9.4.5);
  // post_send reports anything else as invalid_argument, and an atomic on a UC QP.
  bool fits_layout(const QpCore& qp) const noexcept {
    return !qp.unreliable && sge->length == wqe::kAtomicOperandBytes &&
           (remote_addr & (wqe::kAtomicOperandBytes - 1)) == 0 &&
           (flags & send_flags::inline_data) == 0;
  }
  uint8_t ds(const QpCore&) const noexcept { return wqe::kAtomicDs; }
  uint64_t build(const QpCore& qp, uint8_t* w, uint32_t pi, uint8_t) const noexcept {
    wqe::put_atomic_body(w, Opcode == MLX5_OPCODE_ATOMIC_CS, remote_addr, rkey, compare_add, swap,
                         sge->addr, sge->lkey);
    const uint64_t head = typed_head(qp, kHead, pi);
    wqe::publish_ctrl_words(w, head, typed_rest(qp, flags));
    return head;
  }
  SendWr to_send_wr(const Sge* list) const noexcept {
    SendWr wr = one_sge_wr(wr_id, Opcode, flags, list, remote_addr, rkey);
    wr.compare_add = compare_add;
    wr.swap = swap;
    return wr;
  }
  static AtomicOp from_wr(const SendWr& wr) noexcept {
    return {wr.wr_id, wr.sg_list, wr.remote_addr, wr.rkey, wr.flags, wr.compare_add, wr.swap};
  }
};

// WRITE and SEND with the payload inline: ctrl [+ raddr] + one inline segment. The WQE spans
// one or more blocks and may wrap at the ring's end.
template <uint8_t Opcode>
struct InlineOp {
  static constexpr uint8_t kOpcode = Opcode;
  static constexpr TypedHead kHead =
      Opcode == MLX5_OPCODE_RDMA_WRITE ? kHeadWriteInline : kHeadSendInline;
  static constexpr wqe::OpcodeLayout kLayout = wqe::layout_of(Opcode);
  uint64_t wr_id;
  const void* data;
  uint32_t length;
  uint64_t remote_addr;
  uint32_t rkey;
  SendFlags flags;

  bool fits_layout(const QpCore& qp) const noexcept {
    return length != 0 && length <= qp.limits.max_inline;
  }
  uint8_t ds(const QpCore&) const noexcept {
    return static_cast<uint8_t>(kLayout.header_ds() + wqe::inline_ds(length));
  }
  uint64_t build(const QpCore& qp, uint8_t* w, uint32_t pi, uint8_t ds) const noexcept {
    wqe::put_inline_buffer(wqe::put_header(w, kLayout, remote_addr, rkey), data, length, qp.sq);
    const uint64_t head = typed_head(qp, kHead, pi, ds);
    wqe::publish_ctrl_words(w, head, typed_rest(qp, flags));
    return head;
  }
  SendWr to_send_wr(const Sge* list) const noexcept {
    return one_sge_wr(wr_id, Opcode, flags | send_flags::inline_data, list, remote_addr, rkey);
  }
  Sge as_sge() const noexcept {
    return Sge{reinterpret_cast<uintptr_t>(data), length, 0};
  }
};

// A datagram on a UD QP, SEND or SEND with immediate with one SGE: ctrl + the datagram
// segment (the address handle's vector, the destination QPN and Q_Key) + data, DS 5 in two
// blocks. The data segment opens the second block, which is the ring's first when the WQE
// starts in its last.
template <uint8_t Opcode>
struct DatagramOp {
  static constexpr PostGate kGate = kGateOpenDatagram;
  static constexpr uint8_t kOpcode = Opcode;
  static constexpr TypedHead kHead = Opcode == MLX5_OPCODE_SEND ? kHeadDatagram : kHeadDatagramImm;
  static constexpr bool kImm = Opcode == MLX5_OPCODE_SEND_IMM;
  uint64_t wr_id;
  const Sge* sge;
  const mlx5_wqe_av* av;
  uint32_t remote_qpn;
  uint32_t qkey;
  uint32_t imm;
  SendFlags flags;

  bool fits_layout(const QpCore& qp) const noexcept {
    return qp.datagram && sge->length != 0 && (flags & send_flags::inline_data) == 0;
  }
  uint8_t ds(const QpCore&) const noexcept { return kDatagramSendDs; }
  uint64_t build(const QpCore& qp, uint8_t* w, uint32_t pi, uint8_t) const noexcept {
    wqe::put_datagram(w + sizeof(mlx5_wqe_ctrl_seg), *av, remote_qpn, qkey);
    wqe::put_data(qp.sq.buf + (size_t{(pi + 1) & qp.sq_mask} << MLX5_SEND_WQE_SHIFT), sge->addr,
                  sge->length, sge->lkey);
    const uint64_t head = typed_head(qp, kHead, pi);
    wqe::publish_ctrl_words(w, head, typed_rest(qp, flags, kImm ? htobe32(imm) : 0));
    return head;
  }
  SendWr to_send_wr(const Sge* list) const noexcept {
    SendWr wr = one_sge_wr(wr_id, Opcode, flags, list);
    wr.imm_data = imm;
    wr.av = av;
    wr.remote_qpn = remote_qpn;
    wr.remote_qkey = qkey;
    return wr;
  }
};

// A datagram with its payload inline: ctrl + datagram segment, then the inline segment from
// the second block on (wrapping at the ring's end).
struct DatagramInlineOp {
  static constexpr PostGate kGate = kGateOpenDatagram;
  static constexpr uint8_t kOpcode = MLX5_OPCODE_SEND;
  uint64_t wr_id;
  const void* data;
  uint32_t length;
  const mlx5_wqe_av* av;
  uint32_t remote_qpn;
  uint32_t qkey;
  SendFlags flags;

  bool fits_layout(const QpCore& qp) const noexcept {
    return qp.datagram && length != 0 && length <= qp.limits.max_inline;
  }
  uint8_t ds(const QpCore&) const noexcept {
    return static_cast<uint8_t>(kDatagramHeaderDs + wqe::inline_ds(length));
  }
  uint64_t build(const QpCore& qp, uint8_t* w, uint32_t pi, uint8_t ds) const noexcept {
    wqe::put_datagram(w + sizeof(mlx5_wqe_ctrl_seg), *av, remote_qpn, qkey);
    wqe::put_inline_buffer(
        qp.sq.buf + (size_t{(pi + 1) & qp.sq_mask} << MLX5_SEND_WQE_SHIFT), data, length,
        qp.sq);
    const uint64_t head = typed_head(qp, kHeadDatagramInline, pi, ds);
    wqe::publish_ctrl_words(w, head, typed_rest(qp, flags));
    return head;
  }
  SendWr to_send_wr(const Sge* list) const noexcept {
    SendWr wr = one_sge_wr(wr_id, kOpcode, flags | send_flags::inline_data, list);
    wr.av = av;
    wr.remote_qpn = remote_qpn;
    wr.remote_qkey = qkey;
    return wr;
  }
  Sge as_sge() const noexcept { return Sge{reinterpret_cast<uintptr_t>(data), length, 0}; }
};

template <class Op>
Sge sge_of(const Op& op) noexcept {
  if constexpr (requires { op.as_sge(); })
    return op.as_sge();
  else
    return *op.sge;
}

template <class Op>
[[gnu::always_inline]] inline void QpCore::post_typed_ready(const Op& op, bool ring) noexcept {
  const uint32_t pi = sq_pi;
  const uint32_t slot = pi & sq_mask;
  uint8_t* const w = sq.buf + (size_t{slot} << MLX5_SEND_WQE_SHIFT);
  const uint8_t ds = op.ds(*this);
  const uint8_t bbs = static_cast<uint8_t>((ds + 3u) >> 2);
  const uint64_t head = op.build(*this, w, pi, ds);
  sq_entries[slot].set(op.wr_id, bbs, Op::kOpcode);
  commit_one(w, head, ds, pi + bbs, ring);
}

// Posts `op` when the gate is open (the caller checked) and the fixed layout covers it and
// fits; false leaves everything as it was, for the general path to decide.
template <class Op>
[[gnu::always_inline]] inline bool post_if_fixed(QpCore& qp, const Op& op, bool ring) noexcept {
  if (!op.fits_layout(qp) || !qp.has_room((op.ds(qp) + 3u) >> 2)) [[unlikely]]
    return false;
  qp.post_typed_ready(op, ring);
  return true;
}

// post_send's one-WR fast path for the op of one opcode: the op built from the SendWr, then
// exactly the typed call's path. Out of line and flattened, one copy per op: inlined into one
// switch, seven copies would make the compiler outline the build and the commit instead.
template <class Op>
[[gnu::noinline, gnu::flatten]] bool post_fixed_wr(QpCore& qp, const SendWr& wr,
                                                   bool ring) noexcept {
  return post_if_fixed(qp, Op::from_wr(wr), ring);
}

// post_send's one-WR fast path: a request with one SGE goes through the op of the typed call
// for its opcode, so its WQE is built from the same layout, byte for byte.
inline bool QpCore::post_one_fixed(const SendWr& wr, bool ring) noexcept {
  // A datagram has no fixed layout here (and on an RC QP it is an error post_ready reports).
  if (wr.av != nullptr) [[unlikely]]
    return false;
  if (wr.flags & send_flags::inline_data) return post_one_inline(wr, ring);
  if (wr.num_sge != 1 || wr.sg_list == nullptr) [[unlikely]]
    return false;
  switch (wr.opcode) {
    case WrOpcode::rdma_write:
      return post_fixed_wr<RdmaOp<MLX5_OPCODE_RDMA_WRITE>>(*this, wr, ring);
    case WrOpcode::rdma_write_imm:
      return post_fixed_wr<RdmaOp<MLX5_OPCODE_RDMA_WRITE_IMM>>(*this, wr, ring);
    case WrOpcode::rdma_read:
      return post_fixed_wr<RdmaOp<MLX5_OPCODE_RDMA_READ>>(*this, wr, ring);
    case WrOpcode::send:
      return post_fixed_wr<SendOp<MLX5_OPCODE_SEND>>(*this, wr, ring);
    case WrOpcode::send_imm:
      return post_fixed_wr<SendOp<MLX5_OPCODE_SEND_IMM>>(*this, wr, ring);
    case WrOpcode::atomic_fetch_add:
      return post_fixed_wr<AtomicOp<MLX5_OPCODE_ATOMIC_FA>>(*this, wr, ring);
    case WrOpcode::atomic_cmp_swap:
      return post_fixed_wr<AtomicOp<MLX5_OPCODE_ATOMIC_CS>>(*this, wr, ring);
    default:
      return false;  // a NOP, or not an opcode: post_ready builds or reports it
  }
}

// Out of line: inlined, it would cost the non-inline WRs of post_send registers.
[[gnu::noinline]] inline bool QpCore::post_one_inline(const SendWr& wr, bool ring) noexcept {
  if (wr.num_sge != 1 || wr.sg_list == nullptr) [[unlikely]]
    return false;
  const Sge& sge = *wr.sg_list;
  const void* data = reinterpret_cast<const void*>(static_cast<uintptr_t>(sge.addr));
  const SendFlags flags = wr.flags & ~send_flags::inline_data;
  switch (wr.opcode) {
    case WrOpcode::send:
      return post_if_fixed(*this, InlineOp<MLX5_OPCODE_SEND>{wr.wr_id, data, sge.length, 0, 0,
                                                             flags}, ring);
    case WrOpcode::rdma_write:
      return post_if_fixed(*this, InlineOp<MLX5_OPCODE_RDMA_WRITE>{wr.wr_id, data, sge.length,
                                                                   wr.remote_addr, wr.rkey,
                                                                   flags}, ring);
    default:
      return false;  // with an immediate, or not an inline opcode: post_ready
  }
}

// Everything but the open gate: see the top of this file. Out of line, once per operation.
// The operation's arguments come one by one, by value, so that the fast path's copy of them
// stays in registers (an Op whose address reached this call would be built in memory).
template <class Op, class... Args>
[[gnu::noinline, gnu::cold]] Errc post_typed_slow(QpCore* qp, bool ring, Args... args) noexcept {
  const Op op{args...};
  // A typed call names no SRQ: an XRC initiator's sends need one (post_send with
  // SendWr::remote_srqn), and a target sends nothing.
  if (qp->is_moved_from() || qp->xrc || qp->xrc_target) [[unlikely]]
    return Errc::invalid_argument;
  if (qp->gate.load(std::memory_order_relaxed) == kGateOpenUnderLock && op.fits_layout(*qp)) {
    qp->post_lock.lock();
    // Under the lock the gate cannot change: every state change takes it.
    if (qp->gate.load(std::memory_order_relaxed) == kGateOpenUnderLock &&
        qp->has_room((op.ds(*qp) + 3u) >> 2)) {
      qp->post_typed_ready(op, ring);
      qp->post_lock.unlock();
      return Errc::ok;
    }
    qp->post_lock.unlock();
  }
  const Sge sge = sge_of(op);
  const SendWr wr = op.to_send_wr(&sge);
  return qp->post_send(&wr, 1, nullptr, ring);
}

// The gate under which `Op` builds in place: a datagram op's own (a UD QP's), kGateOpen for
// the others.
template <class Op>
constexpr PostGate open_gate() noexcept {
  if constexpr (requires { Op::kGate; })
    return Op::kGate;
  else
    return kGateOpen;
}

template <class Op, class... Args>
[[gnu::always_inline]] inline Errc post_typed(QpCore* qp, bool ring, Args... args) noexcept {
  const Op op{args...};
  if (qp->gate.load(std::memory_order_acquire) == open_gate<Op>() && op.fits_layout(*qp) &&
      qp->has_room((op.ds(*qp) + 3u) >> 2)) [[likely]] {
    qp->post_typed_ready(op, ring);
    return Errc::ok;
  }
  return post_typed_slow<Op>(qp, ring, args...);
}

}  // namespace detail

// ---- The typed calls (qp.h) ---------------------------------------------------------------

#define RNICDV_TYPED_PAIR(name, params, op, ...)                            \
  inline Errc QueuePair::post_##name params noexcept {                      \
    return detail::post_typed<op>(core_, true, __VA_ARGS__);                \
  }                                                                         \
  inline Errc QueuePair::stage_##name params noexcept {                     \
    return detail::post_typed<op>(core_, false, __VA_ARGS__);               \
  }

RNICDV_TYPED_PAIR(write,
                  (uint64_t wr_id, const Sge& sge, uint64_t remote_addr, uint32_t rkey,
                   SendFlags flags),
                  detail::RdmaOp<MLX5_OPCODE_RDMA_WRITE>, wr_id, &sge, remote_addr, rkey, 0u,
                  flags)
RNICDV_TYPED_PAIR(write_imm,
                  (uint64_t wr_id, const Sge& sge, uint64_t remote_addr, uint32_t rkey,
                   uint32_t imm, SendFlags flags),
                  detail::RdmaOp<MLX5_OPCODE_RDMA_WRITE_IMM>, wr_id, &sge, remote_addr, rkey, imm,
                  flags)
RNICDV_TYPED_PAIR(read,
                  (uint64_t wr_id, const Sge& sge, uint64_t remote_addr, uint32_t rkey,
                   SendFlags flags),
                  detail::RdmaOp<MLX5_OPCODE_RDMA_READ>, wr_id, &sge, remote_addr, rkey, 0u, flags)
RNICDV_TYPED_PAIR(message, (uint64_t wr_id, const Sge& sge, SendFlags flags),
                  detail::SendOp<MLX5_OPCODE_SEND>, wr_id, &sge, 0u, flags)
RNICDV_TYPED_PAIR(message_imm, (uint64_t wr_id, const Sge& sge, uint32_t imm, SendFlags flags),
                  detail::SendOp<MLX5_OPCODE_SEND_IMM>, wr_id, &sge, imm, flags)
RNICDV_TYPED_PAIR(fetch_add,
                  (uint64_t wr_id, const Sge& result, uint64_t remote_addr, uint32_t rkey,
                   uint64_t add, SendFlags flags),
                  detail::AtomicOp<MLX5_OPCODE_ATOMIC_FA>, wr_id, &result, remote_addr, rkey,
                  flags, add, uint64_t{0})
RNICDV_TYPED_PAIR(compare_swap,
                  (uint64_t wr_id, const Sge& result, uint64_t remote_addr, uint32_t rkey,
                   uint64_t compare, uint64_t swap, SendFlags flags),
                  detail::AtomicOp<MLX5_OPCODE_ATOMIC_CS>, wr_id, &result, remote_addr, rkey,
                  flags, compare, swap)
RNICDV_TYPED_PAIR(write_inline,
                  (uint64_t wr_id, const void* data, uint32_t length, uint64_t remote_addr,
                   uint32_t rkey, SendFlags flags),
                  detail::InlineOp<MLX5_OPCODE_RDMA_WRITE>, wr_id, data, length, remote_addr,
                  rkey, flags)
RNICDV_TYPED_PAIR(message_inline,
                  (uint64_t wr_id, const void* data, uint32_t length, SendFlags flags),
                  detail::InlineOp<MLX5_OPCODE_SEND>, wr_id, data, length, uint64_t{0}, 0u, flags)

RNICDV_TYPED_PAIR(datagram,
                  (uint64_t wr_id, const Sge& sge, const AddressHandle& ah,
                   uint32_t remote_qpn, uint32_t qkey, SendFlags flags),
                  detail::DatagramOp<MLX5_OPCODE_SEND>, wr_id, &sge, ah.av(),
                  remote_qpn, qkey, 0u, flags)
RNICDV_TYPED_PAIR(datagram_imm,
                  (uint64_t wr_id, const Sge& sge, const AddressHandle& ah,
                   uint32_t remote_qpn, uint32_t qkey, uint32_t imm, SendFlags flags),
                  detail::DatagramOp<MLX5_OPCODE_SEND_IMM>, wr_id, &sge, ah.av(),
                  remote_qpn, qkey, imm, flags)
RNICDV_TYPED_PAIR(datagram_inline,
                  (uint64_t wr_id, const void* data, uint32_t length,
                   const AddressHandle& ah, uint32_t remote_qpn, uint32_t qkey,
                   SendFlags flags),
                  detail::DatagramInlineOp, wr_id, data, length, ah.av(), remote_qpn,
                  qkey, flags)

#undef RNICDV_TYPED_PAIR

}  // namespace rnicdv
