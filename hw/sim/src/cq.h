// SPDX-License-Identifier: BSD-3-Clause
// A completion queue as the device sees it: the CQE ring, the doorbell record the driver
// publishes its consumer index in, the device's producer index, and completion-event arming.
//
// Completion events (rdma-core mlx5_arm_cq; IBA 11.4.2.2 Request Completion Notification).
// The consumer arms a CQ with a word (sn << 28 | cmd | ci): sn is its event sequence number
// (it adds one each time it takes an event), cmd is 0 for the next completion or 1 << 24 for
// the next solicited one, ci its consumer index. The word goes to dbrec[kCqDbrArm], then with
// the CQN to the UAR page's CQ doorbell. An armed CQ raises one event as soon as it holds a
// CQE at or beyond ci (at once if there already is one) and is then disarmed. In solicited
// mode only a receive CQE with the solicited bit or an error CQE counts. An arm that repeats
// the sequence number of the arm that last raised an event is a repeat, not a new request,
// and is ignored: the consumer re-arms with the next number once it has taken the event.
// An overrun CQ (CQ_ERR) raises no completion event any more and ignores later arms.
// Only CQs with an event handler (set_cq_event_handler, handles.h) are watched at all.
#pragma once

#include <cstdint>

#include "rnicdv/hw/device.h"
#include "rnicdv/wqe/cqe.h"

namespace rnicdv::sim {

// Words of a CQ's doorbell record. mlx5dv.h does not export their names; libmlx5 calls them
// MLX5_CQ_SET_CI and MLX5_CQ_ARM_DB (rdma-core providers/mlx5/mlx5.h).
inline constexpr unsigned kCqDbrConsumerIndex = 0;
inline constexpr unsigned kCqDbrArm = 1;

enum class CqArm : uint8_t { off, next, solicited };

struct CqObj {
  uint32_t cqn = 0;
  size_t slot = 0;          // index in Hca::cqs_ (slots.h)
  size_t evented_slot = 0;  // index in Hca::evented_cqs_ while events_on
  wqe::CqRing ring;
  uint32_t* dbrec = nullptr;  // big-endian: [kCqDbrConsumerIndex], [kCqDbrArm]
  uint32_t pi = 0;            // free-running producer index
  bool overflowed = false;    // CQ_ERR raised; nothing more is written (IBA 11.4.2.1)
  bool handle_alive = true;   // the consumer still holds it
  uint32_t qp_refs = 0;       // QPs that complete into it
  uint8_t* owned_buf = nullptr;
  uint32_t* owned_dbrec = nullptr;
  // Ring and record placed by someone else (external.h) are accessed through host_access.h.
  // A fault sets host_fault; the device then treats the CQ as overrun (CQ_ERR, its QPs to
  // ERR) and sets host_failed: nothing of its memory is touched again. The device writes each
  // CQE into a mirror of its own (`ring` is then the mirror, in `mirror_buf`) and copies it
  // into the application's ring (`ring_host`), its owner byte last. It reads the consumer
  // index only when the ring may be full (`known_ci`).
  bool external = false;
  wqe::CqRing ring_host;
  uint8_t* mirror_buf = nullptr;
  uint32_t known_ci = 0;
  mutable bool host_fault = false;
  bool host_failed = false;
  hw::CqView view;
  uint64_t cqes_written = 0;

  // Completion events: only while events_on (a handler is set) is any of this used.
  bool events_on = false;
  CqArm arm = CqArm::off;
  bool arm_check_pending = false;  // look for CQEs already beyond arm_ci in the next pass
  uint8_t arm_sn = 0;
  int8_t fired_sn = -1;        // sn of the arm that last raised an event; -1: none yet
  uint32_t arm_ci = 0;         // 24 bits
  uint32_t seen_arm_word = 0;  // dbrec[kCqDbrArm] as the device last read it (big-endian)
  uint32_t handler_gen = 0;    // changes whenever a handler is set where there was none
  uint64_t events_raised = 0;
};

enum class CqPush : uint8_t { written, overflow, dead, host_fault };

// Writes one CQE at the producer index unless that would pass the consumer index the driver
// published (24 bits, rdma-core mlx5_cq set_ci): then nothing is written, the CQ is marked
// overflowed and `overflow` is returned once; later pushes return `dead`. An external CQ
// whose memory faults is marked the same way and `host_fault` is returned once.
CqPush cq_push(CqObj& cq, const wqe::CqeInit& init) noexcept;

// The consumer index the driver last published.
uint32_t cq_consumer_index(const CqObj& cq) noexcept;

// ---- Completion-event arming ----
inline constexpr uint32_t kCqArmSolicited = 1u << 24;  // MLX5_CQ_DB_REQ_NOT_SOL
inline constexpr uint32_t kCqArmCmdMask = 7u << 24;

// Applies an arm word (host order). Returns true when the CQ is now armed by it (a new
// request, or a repeat that widens a solicited arm to any completion); false when it was
// ignored: a reserved command, an overflowed CQ, or the sequence number of the arm that last
// raised an event.
bool cq_apply_arm(CqObj& cq, uint32_t arm_word) noexcept;

// Whether an armed CQ already holds a CQE at or beyond its armed consumer index that
// satisfies the arm (for solicited arms the CQEs there are read).
bool cq_arm_met_by_ring(const CqObj& cq) noexcept;

// Whether the CQE just written at `index` with `init` satisfies the CQ's arm.
bool cq_arm_met_by_cqe(const CqObj& cq, uint32_t index, const wqe::CqeInit& init) noexcept;

// Disarms after an event and remembers its sequence number.
void cq_disarm_fired(CqObj& cq) noexcept;

// Forgets every arm (a handler is set where there was none, or removed).
void cq_reset_arming(CqObj& cq) noexcept;

// The arm word the device leaves in a record that still holds its initial 0 when it starts
// watching a CQ: a reserved command, which no consumer writes and cq_apply_arm ignores. The
// first arm of a CQ (sn 0, next completion, ci 0) is the word 0 itself; against this mark it
// is a change the device sees in the record, even when another CQ's arm has overwritten it
// in the shared register. libmlx5 only ever stores to this word.
inline constexpr uint32_t kCqArmWatchMark = 7u << 24;

// Starts watching the CQ's arm requests: forgets earlier arms, marks the record (above) and
// takes its current word as seen.
void cq_watch_arms(CqObj& cq) noexcept;

}  // namespace rnicdv::sim
