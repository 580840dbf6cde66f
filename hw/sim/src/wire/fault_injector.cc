// SPDX-License-Identifier: BSD-3-Clause
#include "wire/fault_injector.h"

#include <cmath>

#include "wire/icrc.h"
#include "wire/prng.h"

namespace rnicdv::sim {
namespace {

// Byte 4 of the BTH (FECN, BECN, reserved) is masked out of the ICRC, so a change there
// would go undetected; corruption never picks it.
constexpr uint32_t kIcrcMaskedBthByte = 4;

bool valid_probability(double p) {
  return std::isfinite(p) && p >= 0.0 && p <= 1.0;
}

}  // namespace

FaultInjector::FaultInjector(const FaultConfig& config, uint64_t seed) noexcept
    : config_(config), seed_(seed), active_(config.any()) {}

Status FaultInjector::validate(const FaultConfig& config) {
  const struct {
    const char* name;
    double value;
  } fields[] = {{"drop", config.drop},
                {"duplicate", config.duplicate},
                {"reorder", config.reorder},
                {"corrupt", config.corrupt},
                {"delay", config.delay}};
  for (const auto& f : fields) {
    if (!valid_probability(f.value))
      return Status::error(Errc::invalid_argument,
                           "wire faults: %s probability %g is not in [0, 1]", f.name, f.value);
  }
  return Status::ok();
}

void FaultInjector::place_corruption(uint64_t pick, uint8_t mask, size_t wire_len,
                                     FaultPlan* plan) noexcept {
  if (wire_len <= kIcrcMaskedBthByte + 1) return;
  plan->corrupt = true;
  plan->corrupt_offset = static_cast<uint32_t>(pick < kIcrcMaskedBthByte ? pick : pick + 1);
  plan->corrupt_mask = mask;
}

FaultPlan FaultInjector::plan(uint64_t frame_index, size_t wire_len) const noexcept {
  FaultPlan plan;
  if (!active_) return plan;
  // An independent stream per frame: the frame index hashed into the seed.
  Xoshiro256StarStar rng(seed_ ^ SplitMix64::mix(frame_index + 0x5EEDull));
  // Every draw is made whether or not it is used, so that one fault's probability does not
  // shift the others' random numbers.
  const bool drop = rng.chance(config_.drop);
  const bool corrupt = rng.chance(config_.corrupt);
  const bool duplicate = rng.chance(config_.duplicate);
  const bool reorder = rng.chance(config_.reorder);
  const bool delay = rng.chance(config_.delay);
  const uint64_t corrupt_pick = rng.below(wire_len > 1 ? wire_len - 1 : 1);
  const uint8_t corrupt_mask = static_cast<uint8_t>(1 + rng.below(255));
  const uint64_t reorder_ns =
      kReorderHoldNs / 2 + rng.below(kReorderHoldNs - kReorderHoldNs / 2 + 1);
  const uint64_t delay_ns = config_.max_delay_ns ? 1 + rng.below(config_.max_delay_ns) : 0;

  if (drop) {
    plan.drop = true;
    return plan;
  }
  if (corrupt) place_corruption(corrupt_pick, corrupt_mask, wire_len, &plan);
  if (duplicate) plan.copies = 2;
  if (reorder) {
    plan.reordered = true;
    plan.hold_ns += reorder_ns;
  }
  if (delay && delay_ns > 0) {
    plan.delayed = true;
    plan.hold_ns += delay_ns;
  }
  return plan;
}

}  // namespace rnicdv::sim
