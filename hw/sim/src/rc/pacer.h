// SPDX-License-Identifier: BSD-3-Clause
// A QP's send rate limit (hw::RateLimit; mlx5's packet pacing), kept as a generic cell rate
// algorithm: the theoretical time at which the link would have carried every frame sent so
// far at the limit. A frame may leave while that time is no further ahead of now than the
// burst allowance; each frame then moves it on by its length at the rate. So over any window
// the QP sends at most the rate's worth plus the burst and one frame, and an idle QP gains no
// more credit than the burst.
#pragma once

#include <algorithm>
#include <cstdint>

namespace rnicdv::sim {

class Pacer {
 public:
  // Ethernet, IPv4 and UDP headers and the ICRC around a datagram: what a frame costs beyond
  // the BTH onward (the bytes a ConnectX paces are the frame's).
  static constexpr uint32_t kFrameOverhead = 14 + 20 + 8 + 4;

  bool active() const noexcept { return kbps_ != 0; }
  uint32_t kbps() const noexcept { return kbps_; }
  uint32_t burst_bytes() const noexcept { return burst_bytes_; }

  // kbps 0 turns pacing off. `burst_bytes` is the credit an idle QP may gather.
  void set(uint32_t kbps, uint32_t burst_bytes, uint64_t now_ns) noexcept {
    kbps_ = kbps;
    burst_bytes_ = burst_bytes;
    tat_ns_ = now_ns;
    remainder_ = 0;
    tolerance_ns_ = kbps == 0 ? 0 : uint64_t{burst_bytes} * 8'000'000 / kbps;
  }

  // When a frame may leave: now_ns or earlier means at once.
  uint64_t ready_at() const noexcept { return tat_ns_ > tolerance_ns_ ? tat_ns_ - tolerance_ns_ : 0; }

  // Accounts for a frame of `datagram_len` bytes (BTH onward) that left at now_ns.
  void sent(uint32_t datagram_len, uint64_t now_ns) noexcept {
    if (kbps_ == 0) return;
    // 8e6 / kbps nanoseconds per byte; the remainder carries over, so rounding never drifts.
    const uint64_t scaled = uint64_t{datagram_len + kFrameOverhead} * 8'000'000 + remainder_;
    tat_ns_ = std::max(tat_ns_, now_ns) + scaled / kbps_;
    remainder_ = scaled % kbps_;
  }

 private:
  uint32_t kbps_ = 0;
  uint32_t burst_bytes_ = 0;
  uint64_t tat_ns_ = 0;
  uint64_t tolerance_ns_ = 0;
  uint64_t remainder_ = 0;
};

}  // namespace rnicdv::sim
