// SPDX-License-Identifier: BSD-3-Clause
// A QP's send rate limit (hw::RateLimit; mlx5's packet pacing), kept as a generic cell rate
// algorithm: the theoretical time at which the link would have carried every frame sent so
// far at the limit. A frame may leave while that time is no further ahead of now than the
// burst allowance; each frame then moves it on by its length at the rate. An idle QP gains no
// more credit than the burst.
//
// A frame the pacer held back is due at ready_at(), but leaves when a pass of the engine next
// runs, which in real time is late by the device thread's wake-up and scheduling delay. From
// then until the QP has caught up (its theoretical time is ahead of now again), its frames are
// due ones: each is charged from where the last left the theoretical time, not from when it
// left, for up to kLateAllowanceNs of lateness. So the device's own delays do not lower the
// rate (the way Linux's sch_fq makes up its timer drift). A QP whose send queue ran empty was
// idle, not held (the requester says so with drop_hold()), and gets no such allowance. Over any
// window the QP sends at most the rate's worth of that window plus kLateAllowanceNs, the burst
// and one frame; a pass that runs on time (the deterministic fabric's clock always does) makes
// up nothing, and the bound there is the window's worth plus the burst and one frame.
#pragma once

#include <algorithm>
#include <cstdint>

namespace rnicdv::sim {

class Pacer {
 public:
  // Ethernet, IPv4 and UDP headers and the ICRC around a datagram: what a frame costs beyond
  // the BTH onward (the bytes a ConnectX paces are the frame's).
  static constexpr uint32_t kFrameOverhead = 14 + 20 + 8 + 4;
  // The most lateness of a held frame that is made up (see above): a few scheduler time
  // slices of a loaded machine.
  static constexpr uint64_t kLateAllowanceNs = 10'000'000;

  bool active() const noexcept { return kbps_ != 0; }
  uint32_t kbps() const noexcept { return kbps_; }
  uint32_t burst_bytes() const noexcept { return burst_bytes_; }

  // kbps 0 turns pacing off. `burst_bytes` is the credit an idle QP may gather.
  void set(uint32_t kbps, uint32_t burst_bytes, uint64_t now_ns) noexcept {
    kbps_ = kbps;
    burst_bytes_ = burst_bytes;
    tat_ns_ = now_ns;
    remainder_ = 0;
    held_ = false;
    tolerance_ns_ = kbps == 0 ? 0 : uint64_t{burst_bytes} * 8'000'000 / kbps;
  }

  // When a frame may leave: now_ns or earlier means at once.
  uint64_t ready_at() const noexcept { return tat_ns_ > tolerance_ns_ ? tat_ns_ - tolerance_ns_ : 0; }

  // The QP's next frame waits for ready_at(): it is due then.
  void hold() noexcept { held_ = true; }
  // The QP has no frame due: its send queue ran empty, or it was flushed or reset.
  void drop_hold() noexcept { held_ = false; }

  // Accounts for a frame of `datagram_len` bytes (BTH onward) that left at now_ns.
  void sent(uint32_t datagram_len, uint64_t now_ns) noexcept {
    if (kbps_ == 0) return;
    // 8e6 / kbps nanoseconds per byte; the remainder carries over, so rounding never drifts.
    const uint64_t scaled = uint64_t{datagram_len + kFrameOverhead} * 8'000'000 + remainder_;
    // A frame that was due: the link time it missed through the device's lateness is its own,
    // up to the allowance. Any other frame starts from now if the link was idle.
    const uint64_t from =
        held_ ? (now_ns > kLateAllowanceNs ? now_ns - kLateAllowanceNs : 0) : now_ns;
    tat_ns_ = std::max(tat_ns_, from) + scaled / kbps_;
    remainder_ = scaled % kbps_;
    if (tat_ns_ >= now_ns) held_ = false;  // caught up: the next frame is due on time
  }

 private:
  uint32_t kbps_ = 0;
  uint32_t burst_bytes_ = 0;
  uint64_t tat_ns_ = 0;
  uint64_t tolerance_ns_ = 0;
  uint64_t remainder_ = 0;
  bool held_ = false;
};

}  // namespace rnicdv::sim
