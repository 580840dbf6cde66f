// SPDX-License-Identifier: BSD-3-Clause
#include "cq.h"

#include <endian.h>

#include <algorithm>

#include "host_access.h"

namespace rnicdv::sim {

namespace {

// 24-bit distance from `from` to `to`; indices "behind" come out as values >= 2^23.
inline uint32_t ahead24(uint32_t from, uint32_t to) {
  return (to - from) & 0xffffff;
}
inline constexpr uint32_t kBehind24 = 0x800000;

bool is_error_cqe_opcode(uint8_t opcode) {
  return opcode == MLX5_CQE_REQ_ERR || opcode == MLX5_CQE_RESP_ERR;
}

}  // namespace

// A word of the record, read through host_access.h when the application placed it. A fault
// marks the CQ (cq.h host_fault) and reads as `fallback`.
uint32_t load_record(const CqObj& cq, unsigned word, uint32_t fallback) noexcept {
  if (!cq.external) [[likely]]
    return __atomic_load_n(&cq.dbrec[word], __ATOMIC_ACQUIRE);
  uint32_t raw = 0;
  if (cq.host_failed || !host_load32(&cq.dbrec[word], &raw)) {
    cq.host_fault = !cq.host_failed;
    return fallback;
  }
  return raw;
}

uint32_t cq_consumer_index(const CqObj& cq) noexcept {
  const uint32_t raw = load_record(cq, kCqDbrConsumerIndex, htobe32(cq.pi & 0xffffff));
  return be32toh(raw) & 0xffffff;
}

// Whether the slot at the producer index is free. The consumer index of a CQ the application
// placed costs system calls (host_access.h): the one read last is used while it shows room.
bool cq_has_room(CqObj& cq) noexcept {
  if (cq.external) [[unlikely]] {
    if (((cq.pi - cq.known_ci) & 0xffffff) < cq.ring.cqe_cnt) return true;
    cq.known_ci = cq_consumer_index(cq);
    return ((cq.pi - cq.known_ci) & 0xffffff) < cq.ring.cqe_cnt;
  }
  return ((cq.pi - cq_consumer_index(cq)) & 0xffffff) < cq.ring.cqe_cnt;
}

CqPush cq_push(CqObj& cq, const wqe::CqeInit& init) noexcept {
  if (cq.overflowed) return CqPush::dead;
  const bool room = cq_has_room(cq);
  if (cq.host_fault) [[unlikely]]
    return CqPush::host_fault;
  if (!room) {
    cq.overflowed = true;
    return CqPush::overflow;
  }
  wqe::write_cqe(cq.ring, cq.pi, init);
  if (cq.external) [[unlikely]] {
    // Built in the mirror, then copied whole into the application's ring with the owner byte
    // (the entry's last) in a copy of its own after the rest.
    const size_t at = size_t{cq.pi & (cq.ring.cqe_cnt - 1)} * cq.ring.cqe_size;
    if (cq.host_failed || !host_place(cq.ring_host.buf + at, cq.ring.buf + at, cq.ring.cqe_size, 1)) {
      cq.host_fault = true;
      return CqPush::host_fault;
    }
  }
  ++cq.pi;
  ++cq.cqes_written;
  return CqPush::written;
}

bool cq_apply_arm(CqObj& cq, uint32_t arm_word) noexcept {
  const uint32_t cmd = arm_word & kCqArmCmdMask;
  if ((cmd != 0 && cmd != kCqArmSolicited) || cq.overflowed) return false;
  const auto sn = static_cast<uint8_t>((arm_word >> 28) & 3);
  if (sn == cq.fired_sn) return false;  // the event for this sn was raised already
  const CqArm mode = cmd == kCqArmSolicited ? CqArm::solicited : CqArm::next;
  const uint32_t ci = arm_word & 0xffffff;
  if (cq.arm != CqArm::off && sn == cq.arm_sn) {
    // The same request seen again (through the register and the record, or re-sent). It may
    // widen the pending arm, never narrow it (IBA 11.4.2.2: a request for the next completion
    // is not weakened by a later one for a solicited completion), and its consumer index only
    // moves forward: a stale copy must not bring back CQEs the consumer has polled.
    const bool widens = mode == CqArm::next && cq.arm == CqArm::solicited;
    const bool advances = ahead24(cq.arm_ci, ci) != 0 && ahead24(cq.arm_ci, ci) < kBehind24;
    if (!widens && !advances) return false;
    if (widens) cq.arm = CqArm::next;
    if (advances) cq.arm_ci = ci;
  } else {
    cq.arm = mode;
    cq.arm_sn = sn;
    cq.arm_ci = ci;
  }
  cq.arm_check_pending = true;
  return true;
}

bool cq_arm_met_by_ring(const CqObj& cq) noexcept {
  if (cq.arm == CqArm::off) return false;
  const uint32_t pending = ahead24(cq.arm_ci, cq.pi);
  if (pending == 0 || pending >= kBehind24) return false;
  if (cq.arm == CqArm::next) return true;
  // Solicited: read what the consumer has not polled yet (at most one ring's worth), as the
  // device wrote it (for a CQ the application placed, its mirror).
  const uint32_t n = std::min(pending, cq.ring.cqe_cnt);
  bool met = false;
  for (uint32_t i = 0; i < n && !met; ++i) {
    const uint8_t op_own = __atomic_load_n(&cq.ring.cqe(cq.pi - n + i)->op_own, __ATOMIC_RELAXED);
    met = (op_own & wqe::kCqeSolicitedBit) || is_error_cqe_opcode(op_own >> 4);
  }
  return met;
}

bool cq_arm_met_by_cqe(const CqObj& cq, uint32_t index, const wqe::CqeInit& init) noexcept {
  if (cq.arm == CqArm::off || ahead24(cq.arm_ci, index) >= kBehind24) return false;
  return cq.arm == CqArm::next || init.solicited || is_error_cqe_opcode(init.cqe_opcode);
}

void cq_disarm_fired(CqObj& cq) noexcept {
  cq.arm = CqArm::off;
  cq.arm_check_pending = false;
  cq.fired_sn = static_cast<int8_t>(cq.arm_sn);
  ++cq.events_raised;
}

void cq_reset_arming(CqObj& cq) noexcept {
  cq.arm = CqArm::off;
  cq.arm_check_pending = false;
  cq.fired_sn = -1;
  cq.seen_arm_word = load_record(cq, kCqDbrArm, cq.seen_arm_word);
}

void cq_watch_arms(CqObj& cq) noexcept {
  cq_reset_arming(cq);
  // Only a record still at 0: a word the consumer stored is an arm made before the device
  // watched, and stays as it is. A CQ the application placed is marked with a read and a
  // store (host_access.h has no compare-and-swap): the device starts watching it when it is
  // created, before the consumer has it to arm.
  if (!cq.external) {
    uint32_t initial = 0;
    __atomic_compare_exchange_n(&cq.dbrec[kCqDbrArm], &initial, htobe32(kCqArmWatchMark), false,
                                __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  } else {
    uint32_t word = 0;
    if (cq.host_failed || !host_load32(&cq.dbrec[kCqDbrArm], &word) ||
        (word == 0 && !host_store32(&cq.dbrec[kCqDbrArm], htobe32(kCqArmWatchMark)))) {
      cq.host_fault = !cq.host_failed;
      return;
    }
  }
  cq.seen_arm_word = load_record(cq, kCqDbrArm, cq.seen_arm_word);
}

}  // namespace rnicdv::sim
