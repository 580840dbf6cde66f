// SPDX-License-Identifier: BSD-3-Clause
// Seeded, per-frame fault decisions for the wires.
//
// Each frame's faults are a pure function of (seed, frame index), where the wire numbers
// frames in the order transmit() is called. A single-threaded (deterministic) run therefore
// sees exactly the same faults on the same frames every time, and concurrent transmitters
// need no lock: they only take a frame index.
#pragma once

#include <cstddef>
#include <cstdint>

#include "rnicdv/sim/sim.h"
#include "rnicdv/status.h"

namespace rnicdv::sim {

struct FaultPlan {
  bool drop = false;
  uint8_t copies = 1;  // 2 when duplicated
  bool corrupt = false;
  uint32_t corrupt_offset = 0;  // byte of datagram+ICRC to change
  uint8_t corrupt_mask = 0;     // non-zero XOR mask for that byte
  bool reordered = false;
  bool delayed = false;
  uint64_t hold_ns = 0;  // time held back before the frame goes on the link
};

class FaultInjector {
 public:
  // A reordered frame is held for a time uniform in [kReorderHoldNs / 2, kReorderHoldNs]:
  // long enough that frames sent right after it overtake it, short next to a usual local
  // ACK timeout (4.096 us * 2^timeout; 14 gives 67 ms).
  static constexpr uint64_t kReorderHoldNs = 20'000;

  FaultInjector(const FaultConfig& config, uint64_t seed) noexcept;

  // Probabilities must be in [0, 1] (NaN rejected).
  static Status validate(const FaultConfig& config);

  bool active() const noexcept { return active_; }

  // Faults for frame number `frame_index` whose datagram+ICRC is `wire_len` bytes
  // (at least kMinWireDatagramLen). Order of effects: a dropped frame has no other fault;
  // corruption happens before duplication (both copies carry it); the hold is the sum of
  // the reorder and delay holds.
  FaultPlan plan(uint64_t frame_index, size_t wire_len) const noexcept;

  // Picks the byte of a `wire_len`-byte datagram+ICRC to change and the change, from `rng`,
  // into `plan` (never the BTH byte the ICRC masks out). Frames too short are left alone.
  template <typename Rng>
  static void pick_corruption(Rng& rng, size_t wire_len, FaultPlan* plan) noexcept {
    const uint64_t pick = rng.below(wire_len > 1 ? wire_len - 1 : 1);
    const auto mask = static_cast<uint8_t>(1 + rng.below(255));
    place_corruption(pick, mask, wire_len, plan);
  }

 private:
  static void place_corruption(uint64_t pick, uint8_t mask, size_t wire_len,
                               FaultPlan* plan) noexcept;
  FaultConfig config_;
  uint64_t seed_;
  bool active_;
};

}  // namespace rnicdv::sim
