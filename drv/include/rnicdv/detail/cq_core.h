// SPDX-License-Identifier: BSD-3-Clause
// The state behind a CompletionQueue. Public only so that poll() (cq_inl.h) can be inlined;
// nothing here is API.
//
// One thread polls a CQ at a time. The QPs it serves are found by QPN: a cached pointer when
// the CQ serves a single QP (read once per poll), else the device's QP table. A destroyed QP's core is not freed at
// once: it is parked in the graveyard of each CQ it used and freed at the start of that CQ's
// next poll(), when the poller can no longer hold a pointer to it. Its CQEs still in the ring
// are then found with no QP and counted as orphaned.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "rnicdv/detail/qp_core.h"
#include "rnicdv/detail/qp_table.h"
#include "rnicdv/detail/spinlock.h"
#include "rnicdv/doorbell/device_wake.h"
#include "rnicdv/hw/device.h"
#include "rnicdv/wqe/cqe.h"
#include "rnicdv/wqe/work_request.h"

namespace rnicdv::detail {

struct DeviceCore;
struct ChannelCore;

struct CqCore {
  CqCore() = default;
  CqCore(const CqCore&) = delete;
  CqCore& operator=(const CqCore&) = delete;
  ~CqCore();

  // ---- Fast path (cq_inl.h) ---------------------------------------------------------------
  int poll(Completion* out, int max) noexcept;
  // The loop both polls share: CQEs in ring order while software owns them, each one's QP
  // found by QPN (one compare when the CQ serves one QP), one doorbell-record store per call,
  // then the driver's own completions. `sink` decodes (FullSink, LeanSink in cq_inl.h).
  template <class Sink>
  int poll_loop(int max, Sink& sink) noexcept;
  // Error CQEs, receives and opcodes a QP never completes with (cq_inl.h): out of line.
  template <class Sink>
  [[gnu::noinline]] Retired retire_unusual(Sink& sink, QpCore& qp, const mlx5_cqe64* cqe,
                                           uint8_t opcode, int n) noexcept;
  template <class Sink>
  Retired good_send(Sink& sink, QpCore& qp, const mlx5_cqe64* cqe, uint32_t sop_drop_qpn,
                    int n) noexcept;
  // The CQE at free-running index `index` (the second half of a 128-byte entry).
  const mlx5_cqe64* cqe_at(uint32_t index) const noexcept {
    return reinterpret_cast<const mlx5_cqe64*>(cqe_base + (size_t{index & cqe_mask} << cqe_shift));
  }
  // Software owns a CQE whose owner bit is the lap's (0 on even laps, rdma-core cq.c
  // get_sw_cqe) and whose opcode is not MLX5_CQE_INVALID (op_own < 0xf0).
  bool sw_owns(uint8_t op_own, uint32_t index) const noexcept {
    const uint32_t lap = (index >> lap_shift) & 1;
    return ((op_own & wqe::kCqeOwnerBit) == lap) & (op_own < (MLX5_CQE_INVALID << 4));
  }
  void count_orphan() noexcept {
    orphaned.store(orphaned.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }

  // ---- Slow paths (cq.cc) -----------------------------------------------------------------
  void reap_graveyard() noexcept;
  int poll_software(Completion* out, int max) noexcept;
  // A receive CQE whose QPN names no QP: an XRC target destroyed with receives still in its
  // SRQs' CQs. The SRQ the CQE names (srqn_uidx, as libmlx5 finds it) still owes the WR, so it
  // is reported; anything else is stale (xrc.cc).
  [[gnu::cold]] Retired retire_xrc_orphan(const mlx5_cqe64* cqe, uint8_t opcode,
                                          Completion* out) noexcept;
  // QPs with software completions (posters and the control path add them).
  void add_software_qp(QpCore* qp) noexcept;
  void remove_software_qp(QpCore* qp) noexcept;
  void attach(QpCore* qp);
  void detach(QpCore* qp) noexcept;
  void bury(std::shared_ptr<QpCore> qp);

  // ---- Fixed at creation -------------------------------------------------------------------
  wqe::CqRing ring;
  const uint8_t* cqe_base = nullptr;  // ring.buf + ring.cqe_size - 64: the 64-byte CQEs
  uint32_t cqe_mask = 0;              // ring.cqe_cnt - 1
  uint8_t cqe_shift = 6;              // log2(ring.cqe_size): no multiply per CQE
  uint8_t lap_shift = 0;              // log2(ring.cqe_cnt): the index bit that flips each lap
  __be32* dbrec = nullptr;  // [MLX5_CQ_SET_CI], [MLX5_CQ_ARM_DB]
  hw::ProgressHook progress;
  const QpTable* qp_table = nullptr;
  uint32_t cqn = 0;

  // ---- Poller ------------------------------------------------------------------------------
  alignas(64) uint32_t ci = 0;  // consumer index, free-running
  std::atomic<QpCore*> sole_qp{nullptr};
  std::atomic<bool> graveyard_pending{false};
  std::atomic<bool> software_pending{false};
  std::atomic<uint64_t> orphaned{0};
  std::atomic<bool> in_error{false};  // the device reported CQ_ERR (overrun)

  // ---- Cold --------------------------------------------------------------------------------
  alignas(64) Spinlock software_lock;
  QpCore* software_head = nullptr;
  std::mutex attach_mutex;
  std::vector<QpCore*> attached;
  std::mutex graveyard_mutex;
  std::vector<std::shared_ptr<QpCore>> graveyard;
  std::shared_ptr<DeviceCore> device;
  std::unique_ptr<hw::Cq> hw_cq;

  // ---- Completion events (cq_events.cc); null channel: none --------------------------------
  // Arms the device (doorbell::arm_cq) and, for software completions the device never sees,
  // this CQ itself (software_armed).
  Errc request_notify(bool solicited_only) noexcept;
  std::shared_ptr<ChannelCore> channel;
  uint64_t event_context = 0;
  void* cq_uar = nullptr;
  doorbell::DeviceWake arm_wake;            // after the arm's register write
  std::atomic<uint32_t> arm_sn{0};          // the CQ's event sequence number (2 bits used)
  std::atomic<bool> software_armed{false};  // an arm waits; software completions fire it
  std::atomic<uint32_t> events_taken{0};
  std::atomic<uint32_t> events_acked{0};
};

}  // namespace rnicdv::detail
