// SPDX-License-Identifier: BSD-3-Clause
// Helpers shared by the wqe and doorbell test suites: exact-size aligned buffers (so ASan
// catches a byte past either end), canary checks, hex dumps and a seeded generator of valid
// send work requests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "rnicdv/wqe/send_wqe.h"
#include "rnicdv/wqe/work_request.h"

namespace rnicdv::test {

inline constexpr uint8_t kCanary = 0xa5;

// A heap buffer of exactly `size` bytes, 64-byte aligned, filled with `fill`.
class AlignedBuffer {
 public:
  explicit AlignedBuffer(size_t size, uint8_t fill = kCanary)
      : size_(size), data_(static_cast<uint8_t*>(::operator new[](size, std::align_val_t{64}))) {
    std::memset(data_, fill, size_);
  }
  ~AlignedBuffer() { ::operator delete[](data_, std::align_val_t{64}); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  std::vector<uint8_t> bytes() const { return std::vector<uint8_t>(data_, data_ + size_); }

 private:
  size_t size_;
  uint8_t* data_;
};

// A send ring of `bb_count` basic blocks in its own exact-size buffer.
struct TestSq {
  explicit TestSq(uint32_t bb_count, uint8_t fill = kCanary)
      : mem(size_t{bb_count} * wqe::kBbBytes, fill), ring{mem.data(), bb_count} {}
  AlignedBuffer mem;
  wqe::SqRing ring;
};

inline bool all_bytes_are(const uint8_t* p, size_t n, uint8_t value) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != value) return false;
  return true;
}

inline std::string hex_dump(const uint8_t* p, size_t n) {
  std::string out;
  char cell[8];
  for (size_t i = 0; i < n; ++i) {
    std::snprintf(cell, sizeof cell, "%02x%s", p[i], (i % 16 == 15) ? "\n" : " ");
    out += cell;
  }
  return out;
}

// The `n` bytes of the WQE at BB `pi`, following the ring's wrap.
inline std::vector<uint8_t> wqe_bytes(wqe::SqRing ring, uint32_t pi, size_t n) {
  std::vector<uint8_t> out(n);
  const size_t ring_size = size_t{ring.bb_count} * wqe::kBbBytes;
  size_t offset = size_t{pi & (ring.bb_count - 1)} * wqe::kBbBytes;
  for (size_t i = 0; i < n; ++i) out[i] = ring.buf[(offset + i) % ring_size];
  return out;
}

// Generates valid send WRs (for given limits) with their SGE lists and inline payloads kept
// alive inside the generator until the next call.
class RandomSendWrs {
 public:
  explicit RandomSendWrs(uint64_t seed, wqe::SqLimits limits) : rng_(seed), limits_(limits) {
    payload_.resize(4096);
    for (auto& b : payload_) b = static_cast<uint8_t>(rng_());
  }

  const SendWr& next() {
    static constexpr WrOpcode kOpcodes[] = {WrOpcode::send,
                                            WrOpcode::send_imm,
                                            WrOpcode::rdma_write,
                                            WrOpcode::rdma_write_imm,
                                            WrOpcode::rdma_read,
                                            WrOpcode::atomic_cmp_swap,
                                            WrOpcode::atomic_fetch_add,
                                            WrOpcode::nop};
    wr_ = SendWr{};
    wr_.wr_id = rng_();
    wr_.opcode = kOpcodes[rng_() % std::size(kOpcodes)];
    wr_.flags = SendFlags::from_bits(static_cast<uint32_t>(rng_())) &
                (send_flags::signaled | send_flags::solicited | send_flags::fence);
    wr_.imm_data = static_cast<uint32_t>(rng_());
    wr_.remote_addr = rng_();
    wr_.rkey = static_cast<uint32_t>(rng_());
    wr_.compare_add = rng_();
    wr_.swap = rng_();
    sges_.clear();

    switch (wr_.opcode) {
      case WrOpcode::atomic_cmp_swap:
      case WrOpcode::atomic_fetch_add:
        wr_.remote_addr &= ~uint64_t{7};
        sges_.push_back({rng_(), kAtomicBytes, static_cast<uint32_t>(rng_())});
        break;
      case WrOpcode::nop:
        break;
      default: {
        const bool can_inline = wr_.opcode != WrOpcode::rdma_read && limits_.max_inline > 0;
        if (can_inline && rng_() % 3 == 0) {
          wr_.flags |= send_flags::inline_data;
          make_inline_sges();
        } else {
          make_pointer_sges();
        }
      }
    }
    wr_.sg_list = sges_.data();
    wr_.num_sge = static_cast<uint32_t>(sges_.size());
    return wr_;
  }

  std::mt19937_64& rng() { return rng_; }

 private:
  static constexpr uint32_t kAtomicBytes = 8;

  void make_inline_sges() {
    const uint32_t count = 1 + static_cast<uint32_t>(rng_() % limits_.max_sge);
    uint32_t budget = static_cast<uint32_t>(rng_() % (limits_.max_inline + 1));
    for (uint32_t i = 0; i < count; ++i) {
      const uint32_t len = (i + 1 == count) ? budget : static_cast<uint32_t>(rng_() % (budget + 1));
      budget -= len;
      const size_t start = rng_() % (payload_.size() - len + 1);
      sges_.push_back({reinterpret_cast<uintptr_t>(payload_.data() + start), len, 0});
    }
  }

  void make_pointer_sges() {
    const uint32_t count = static_cast<uint32_t>(rng_() % (limits_.max_sge + 1));
    for (uint32_t i = 0; i < count; ++i) {
      const uint32_t len = (rng_() % 8 == 0) ? 0 : static_cast<uint32_t>(rng_() % (1u << 20));
      sges_.push_back({rng_(), len, static_cast<uint32_t>(rng_())});
    }
  }

  std::mt19937_64 rng_;
  wqe::SqLimits limits_;
  std::vector<uint8_t> payload_;
  std::vector<Sge> sges_;
  SendWr wr_;
};

}  // namespace rnicdv::test
