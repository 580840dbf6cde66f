// SPDX-License-Identifier: BSD-3-Clause
// Hot path of CompletionQueue::poll. Included by rnicdv/cq.h.
//
// Per call: the backend's progress hook (null on hardware), then CQEs in ring order while the
// software owner bit matches (rdma-core cq.c get_sw_cqe), each mapped to its QP by QPN and to
// its wr_id by wqe_counter, then one store of the consumer index into the CQ doorbell record
// (dbrec[MLX5_CQ_SET_CI] = ci & 0xffffff). Software completions (flush errors the driver
// produces) follow on the cold path.
#pragma once

#include <endian.h>
#include <infiniband/mlx5dv.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "rnicdv/cq.h"
#include "rnicdv/detail/cq_core.h"
#include "rnicdv/detail/qp_core.h"
#include "rnicdv/detail/qp_inl.h"
#include "rnicdv/doorbell/cq_doorbell.h"
#include "rnicdv/wqe/cqe.h"

namespace rnicdv {
namespace detail {

template <class Sink>
[[gnu::always_inline]] inline int CqCore::poll_loop(int max, Sink& sink) noexcept {
  progress();
  if (graveyard_pending.load(std::memory_order_acquire)) [[unlikely]]
    reap_graveyard();

  uint32_t index = ci;
  int n = 0;
  while (n < max) {
    const mlx5_cqe64* cqe = ring.cqe(index);
    uint8_t op_own;
    if (!wqe::sw_owns_cqe(cqe, index, ring.cqe_cnt, &op_own)) break;
    ++index;
    const uint32_t sop_drop_qpn = be32toh(cqe->sop_drop_qpn);
    // find_qp's first test is the CQ's sole QP: one load and one compare for most CQs.
    QpCore* const qp = find_qp(sop_drop_qpn & wqe::kCqeQpnMask);
    if (!qp) [[unlikely]] {
      count_orphan();
      continue;
    }
    const uint8_t opcode = op_own >> 4;
    Retired retired;
    if (opcode == MLX5_CQE_REQ || opcode == MLX5_CQE_REQ_ERR) [[likely]]
      retired = sink.send(*qp, cqe, opcode, sop_drop_qpn, n);
    else if (opcode <= MLX5_CQE_RESP_SEND_INV || opcode == MLX5_CQE_RESP_ERR)
      retired = sink.recv(*qp, cqe, n);
    else
      continue;  // RESIZE_CQ, NO_PACKET, SIG_ERR: nothing an RC consumer is owed
    if (retired == Retired::report) [[likely]] {
      ++n;
      // The device moved the QP to ERR with this CQE: the driver's state follows.
      if (opcode == MLX5_CQE_REQ_ERR || opcode == MLX5_CQE_RESP_ERR) [[unlikely]]
        qp->on_error_completion();
    } else if (retired == Retired::stale) {
      count_orphan();
    }
  }
  if (index != ci) {
    ci = index;
    doorbell::update_cq_ci(dbrec, index);
  }
  if (software_pending.load(std::memory_order_acquire) && n < max) [[unlikely]]
    n += sink.software(*this, n, max - n);
  return n;
}

// poll(): every field of Completion.
struct FullSink {
  Completion* out;
  Retired send(QpCore& qp, const mlx5_cqe64* cqe, uint8_t, uint32_t, int n) noexcept {
    return qp.retire_send(cqe, &out[n]);
  }
  Retired recv(QpCore& qp, const mlx5_cqe64* cqe, int n) noexcept {
    return qp.retire_recv(cqe, &out[n]);
  }
  int software(CqCore& cq, int n, int room) noexcept { return cq.poll_software(out + n, room); }
};

inline LeanCompletion lean_of(const Completion& c) noexcept {
  LeanCompletion lc;
  lc.wr_id = c.wr_id;
  lc.byte_len = c.byte_len;
  lc.status = c.status;
  lc.opcode = c.opcode;
  lc.reserved[0] = lc.reserved[1] = 0;
  return lc;
}

// poll_lean() and poll_each(): wr_id, status, opcode and byte count, each handed to `emit` as
// it is decoded. A good send completion is decoded here from the CQE words already loaded;
// anything rarer (errors, receives, the driver's flush errors) through Completion.
template <class Emit>
struct LeanSink {
  Emit& emit;
  Retired send(QpCore& qp, const mlx5_cqe64* cqe, uint8_t opcode, uint32_t sop_drop_qpn,
               int n) noexcept {
    if (opcode != MLX5_CQE_REQ) [[unlikely]]
      return full(qp, cqe, true, n);
    LeanCompletion lc;
    const Retired r = qp.retire_send_id(cqe, &lc.wr_id);
    if (r != Retired::report) [[unlikely]]
      return r;
    const uint8_t send_opcode = static_cast<uint8_t>(sop_drop_qpn >> 24);
    lc.status = IBV_WC_SUCCESS;
    lc.opcode = wqe::detail::wc_opcode_for_send(send_opcode);
    // As cqe_to_completion: READ reports the bytes read, atomics their 8 bytes, others 0.
    lc.byte_len = send_opcode == MLX5_OPCODE_RDMA_READ ? be32toh(cqe->byte_cnt)
                  : (send_opcode == MLX5_OPCODE_ATOMIC_CS || send_opcode == MLX5_OPCODE_ATOMIC_FA)
                      ? wqe::kAtomicOperandBytes
                      : 0;
    lc.reserved[0] = lc.reserved[1] = 0;
    emit(lc, n);
    return r;
  }
  Retired recv(QpCore& qp, const mlx5_cqe64* cqe, int n) noexcept { return full(qp, cqe, false, n); }
  // Errors and receives: through a Completion.
  [[gnu::noinline]] Retired full(QpCore& qp, const mlx5_cqe64* cqe, bool send, int n) noexcept {
    Completion c;
    const Retired r = send ? qp.retire_send(cqe, &c) : qp.retire_recv(cqe, &c);
    if (r == Retired::report) emit(lean_of(c), n);
    return r;
  }
  int software(CqCore& cq, int n, int room) noexcept {
    Completion batch[16];
    int got = 0;
    while (got < room) {
      const int k = cq.poll_software(batch, std::min(room - got, 16));
      for (int i = 0; i < k; ++i) emit(lean_of(batch[i]), n + got + i);
      got += k;
      if (k == 0) break;
    }
    return got;
  }
};

inline int CqCore::poll(Completion* out, int max) noexcept {
  FullSink sink{out};
  return poll_loop(max, sink);
}

}  // namespace detail

// A moved-from CompletionQueue holds no CQ: nothing to poll.
inline int CompletionQueue::poll(Completion* out, int max) noexcept {
  if (!core_) [[unlikely]]
    return 0;
  return core_->poll(out, max);
}

template <class F>
inline int CompletionQueue::poll_each(int max, F&& on_completion) noexcept {
  if (!core_) [[unlikely]]
    return 0;
  auto emit = [&on_completion](const LeanCompletion& c, int) { on_completion(c); };
  detail::LeanSink<decltype(emit)> sink{emit};
  return core_->poll_loop(max, sink);
}

inline int CompletionQueue::poll_lean(LeanCompletion* out, int max) noexcept {
  if (!core_) [[unlikely]]
    return 0;
  auto emit = [out](const LeanCompletion& c, int n) { out[n] = c; };
  detail::LeanSink<decltype(emit)> sink{emit};
  return core_->poll_loop(max, sink);
}

}  // namespace rnicdv
