// SPDX-License-Identifier: BSD-3-Clause
// Small, fast, reproducible pseudo-random generators for fault injection (not for anything
// that needs unpredictability): SplitMix64 to expand seeds, xoshiro256** to draw
// (Blackman and Vigna, "Scrambled linear pseudorandom number generators", 2018).
#pragma once

#include <cstdint>

namespace rnicdv::sim {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) noexcept : state_(seed) {}
  uint64_t next() noexcept {
    state_ += 0x9E3779B97F4A7C15ull;
    return mix(state_);
  }
  // The output function on its own: a strong 64-bit hash of `z`.
  static uint64_t mix(uint64_t z) noexcept {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

 private:
  uint64_t state_;
};

class Xoshiro256StarStar {
 public:
  explicit Xoshiro256StarStar(uint64_t seed) noexcept {
    SplitMix64 expand(seed);
    for (uint64_t& word : s_) word = expand.next();  // never all zero
  }

  uint64_t next() noexcept {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, 1) with 53 random bits.
  double uniform() noexcept { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

  // Uniform in [0, bound) by multiply-shift (Lemire 2019); the bias is below 2^-64 * bound,
  // irrelevant here. bound 0 gives 0.
  uint64_t below(uint64_t bound) noexcept {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(next()) * bound) >> 64);
  }

  // True with probability p (p <= 0 never, p >= 1 always).
  bool chance(double p) noexcept { return uniform() < p; }

 private:
  static uint64_t rotl(uint64_t x, int k) noexcept { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace rnicdv::sim
