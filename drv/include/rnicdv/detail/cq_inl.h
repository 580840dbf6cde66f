// SPDX-License-Identifier: BSD-3-Clause
// Hot path of CompletionQueue::poll. Included by rnicdv/cq.h.
//
// Per call: the backend's progress hook (null on hardware), then CQEs in ring order while the
// software owner bit matches (rdma-core cq.c get_sw_cqe), each mapped to its QP by QPN and to
// its wr_id by wqe_counter, then one store of the consumer index into the CQ doorbell record
// (dbrec[MLX5_CQ_SET_CI] = ci & 0xffffff). Software completions (flush errors the driver
// produces) follow on the cold path. A good requester CQE (MLX5_CQE_REQ) is decoded inline
// from the words the loop has read; error CQEs and receives go through retire_unusual.
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

  // The sole QP, read once per call: a QP attached meanwhile has another QPN, and one
  // detached meanwhile stays in the graveyard until the next call, so the pointer holds.
  QpCore* const sole = sole_qp.load(std::memory_order_acquire);
  const uint32_t sole_qpn = sole ? sole->qpn : ~0u;  // no 24-bit QPN matches ~0
  uint32_t index = ci;
  int n = 0;
  while (n < max) {
    const mlx5_cqe64* cqe = cqe_at(index);
    // Acquire: the device writes op_own last, so the fields read after it are the CQE's
    // (rdma-core's get_sw_cqe + udma_from_device_barrier, as one load-acquire).
    const uint8_t op_own = __atomic_load_n(&cqe->op_own, __ATOMIC_ACQUIRE);
    if (!sw_owns(op_own, index)) break;
    ++index;
    const uint32_t sop_drop_qpn = be32toh(cqe->sop_drop_qpn);
    const uint32_t qpn = sop_drop_qpn & wqe::kCqeQpnMask;
    QpCore* qp = sole;
    if (qpn != sole_qpn) {
      qp = qp_table->find(qpn);
      if (!qp) [[unlikely]] {
        if (sink.orphan(*this, cqe, op_own >> 4, n) == Retired::report)
          ++n;
        else
          count_orphan();
        continue;
      }
    }
    const uint8_t opcode = op_own >> 4;
    // The straight path: a good requester completion. Everything else out of line.
    const Retired retired = opcode == MLX5_CQE_REQ
                                ? good_send(sink, *qp, cqe, sop_drop_qpn, n)
                                : retire_unusual(sink, *qp, cqe, opcode, n);
    if (retired == Retired::report) [[likely]]
      ++n;
    else if (retired == Retired::stale)
      count_orphan();
  }
  if (index != ci) {
    ci = index;
    doorbell::update_cq_ci(dbrec, index);
  }
  if (software_pending.load(std::memory_order_acquire) && n < max) [[unlikely]]
    n += sink.software(*this, n, max - n);
  return n;
}

template <class Sink>
[[gnu::always_inline]] inline Retired CqCore::good_send(Sink& sink, QpCore& qp,
                                                        const mlx5_cqe64* cqe,
                                                        uint32_t sop_drop_qpn, int n) noexcept {
  uint64_t wr_id;
  const Retired r = qp.retire_send_id(cqe, &wr_id);
  if (r == Retired::report) [[likely]]
    sink.good_send(cqe, sop_drop_qpn, wr_id, n);
  return r;
}

template <class Sink>
Retired CqCore::retire_unusual(Sink& sink, QpCore& qp, const mlx5_cqe64* cqe, uint8_t opcode,
                               int n) noexcept {
  Retired retired;
  if (opcode == MLX5_CQE_REQ_ERR)
    retired = sink.send(qp, cqe, n);
  else if (opcode <= MLX5_CQE_RESP_SEND_INV || opcode == MLX5_CQE_RESP_ERR)
    retired = sink.recv(qp, cqe, n);
  else
    return Retired::silent;  // RESIZE_CQ, NO_PACKET, SIG_ERR: nothing an RC consumer is owed
  // The device moved the QP to ERR with this CQE: the driver's state follows.
  if (retired == Retired::report && (opcode == MLX5_CQE_REQ_ERR || opcode == MLX5_CQE_RESP_ERR))
    qp.on_error_completion();
  return retired;
}

// poll(): every field of Completion.
struct FullSink {
  Completion* out;
  void good_send(const mlx5_cqe64* cqe, uint32_t sop_drop_qpn, uint64_t wr_id, int n) noexcept {
    Completion& c = out[n];
    wqe::good_send_to_completion(cqe, sop_drop_qpn, &c);
    c.wr_id = wr_id;
  }
  Retired send(QpCore& qp, const mlx5_cqe64* cqe, int n) noexcept {
    return qp.retire_send(cqe, &out[n]);
  }
  Retired recv(QpCore& qp, const mlx5_cqe64* cqe, int n) noexcept {
    return qp.retire_recv(cqe, &out[n]);
  }
  Retired orphan(CqCore& cq, const mlx5_cqe64* cqe, uint8_t opcode, int n) noexcept {
    return cq.retire_xrc_orphan(cqe, opcode, &out[n]);
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
  void good_send(const mlx5_cqe64* cqe, uint32_t sop_drop_qpn, uint64_t wr_id, int n) noexcept {
    LeanCompletion lc;
    lc.wr_id = wr_id;
    lc.status = IBV_WC_SUCCESS;
    wqe::decode_good_send(cqe, sop_drop_qpn, &lc.opcode, &lc.byte_len);
    lc.reserved[0] = lc.reserved[1] = 0;
    emit(lc, n);
  }
  Retired send(QpCore& qp, const mlx5_cqe64* cqe, int n) noexcept { return full(qp, cqe, true, n); }
  Retired recv(QpCore& qp, const mlx5_cqe64* cqe, int n) noexcept { return full(qp, cqe, false, n); }
  // Errors and receives: through a Completion.
  [[gnu::noinline]] Retired full(QpCore& qp, const mlx5_cqe64* cqe, bool send, int n) noexcept {
    Completion c;
    const Retired r = send ? qp.retire_send(cqe, &c) : qp.retire_recv(cqe, &c);
    if (r == Retired::report) emit(lean_of(c), n);
    return r;
  }
  [[gnu::noinline]] Retired orphan(CqCore& cq, const mlx5_cqe64* cqe, uint8_t opcode,
                                   int n) noexcept {
    Completion c;
    const Retired r = cq.retire_xrc_orphan(cqe, opcode, &c);
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
