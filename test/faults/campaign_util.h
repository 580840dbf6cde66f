// SPDX-License-Identifier: BSD-3-Clause
// Helpers shared by the campaign's spec generation and its runner.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <cstring>

#include "campaign.h"

namespace rnicdv::faults::detail {

inline int opcode_index(WrOpcode op) {
  for (int i = 0; i < kOpcodes; ++i)
    if (kAllOpcodes[i] == op) return i;
  return 0;
}

inline bool is_atomic(WrOpcode op) {
  return op == WrOpcode::atomic_cmp_swap || op == WrOpcode::atomic_fetch_add;
}
inline bool consumes_recv(WrOpcode op) {
  return op == WrOpcode::send || op == WrOpcode::send_imm || op == WrOpcode::rdma_write_imm;
}
inline bool carries_imm(WrOpcode op) {
  return op == WrOpcode::send_imm || op == WrOpcode::rdma_write_imm;
}
inline int expected_send_wc_opcode(WrOpcode op) {
  switch (op) {
    case WrOpcode::send:
    case WrOpcode::send_imm:
      return IBV_WC_SEND;
    case WrOpcode::rdma_write:
    case WrOpcode::rdma_write_imm:
      return IBV_WC_RDMA_WRITE;
    case WrOpcode::rdma_read:
      return IBV_WC_RDMA_READ;
    case WrOpcode::atomic_cmp_swap:
      return IBV_WC_COMP_SWAP;
    case WrOpcode::atomic_fetch_add:
      return IBV_WC_FETCH_ADD;
    case WrOpcode::nop:
      break;
  }
  return -1;
}

// SplitMix64: the campaign's own random numbers (the wire has its own stream).
struct Rng {
  uint64_t state;
  explicit Rng(uint64_t seed) : state(seed) {}
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint64_t below(uint64_t n) { return n ? next() % n : 0; }
  double unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
};

inline void fill_pattern(uint8_t* p, size_t n, uint64_t seed) {
  Rng r(seed);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t v = r.next();
    std::memcpy(p + i, &v, 8);
  }
  if (i < n) {
    const uint64_t v = r.next();
    std::memcpy(p + i, &v, n - i);
  }
}

inline constexpr uint8_t kCanary = 0xc5;
inline constexpr size_t kGap = 64;  // canary bytes before and after every slot
inline constexpr uint16_t kCmPort = 7471;
inline constexpr uint32_t kMiB = 1u << 20;

}  // namespace rnicdv::faults::detail
