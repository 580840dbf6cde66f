// SPDX-License-Identifier: BSD-3-Clause
// Bounded lock-free multi-producer single-consumer ring of fixed-size slots: the ring the
// simulated in-process wire carries frames on. Installed so that benchmarks can measure the
// wire's own transport with nothing of the device model in it (tools/bench/bench_fabric.cc);
// header-only, so a baseline runs the very code the wire runs.
//
// Each slot has a sequence number that says whose turn it is (D. Vyukov's bounded queue):
// slot i is free for the producer that claims position p when seq == p, and holds a
// published element for the consumer at position p when seq == p + 1. Producers claim
// positions with a CAS on the shared tail, fill the slot in place and publish it with a
// release store; the consumer reads in place and frees the slot with a release store of
// p + capacity. A producer never waits: if the slot it would claim is still in use, the
// ring is full. Capacity is a power of two, so positions map to slots with a mask.
//
// The sequence numbers live apart from the slots: slots are allocated but not touched
// until used, so a large, mostly idle ring costs address space rather than memory.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>

namespace rnicdv::sim {

// x86-64 and most AArch64 parts; keeps the producers' tail off the consumer's line.
inline constexpr size_t kWireCacheLine = 64;

template <class Slot>
class MpscRing {
  static_assert(std::is_trivially_default_constructible_v<Slot> &&
                    std::is_trivially_destructible_v<Slot>,
                "slots are raw storage, reused without construction");

 public:
  // A slot claimed by a producer; fill it and pass the claim to publish().
  struct Claim {
    Slot* slot = nullptr;
    uint64_t position = 0;
    explicit operator bool() const noexcept { return slot != nullptr; }
  };

  // `capacity_log2` in [1, 24].
  explicit MpscRing(unsigned capacity_log2)
      : mask_((uint64_t{1} << capacity_log2) - 1),
        sequence_(new std::atomic<uint64_t>[mask_ + 1]),
        slots_(new Slot[mask_ + 1]) {
    for (uint64_t i = 0; i <= mask_; ++i) sequence_[i].store(i, std::memory_order_relaxed);
  }

  MpscRing(const MpscRing&) = delete;
  MpscRing& operator=(const MpscRing&) = delete;

  size_t capacity() const noexcept { return mask_ + 1; }

  // Producer side, any thread. An empty claim means the ring is full.
  Claim claim() noexcept {
    uint64_t pos = tail_.load(std::memory_order_relaxed);
    for (;;) {
      const uint64_t seq = sequence_[pos & mask_].load(std::memory_order_acquire);
      const int64_t lag = static_cast<int64_t>(seq - pos);
      if (lag == 0) {
        if (tail_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          return Claim{&slots_[pos & mask_], pos};
        }
      } else if (lag < 0) {
        return Claim{};  // the consumer has not freed this slot yet
      } else {
        pos = tail_.load(std::memory_order_relaxed);  // another producer took it
      }
    }
  }

  void publish(const Claim& c) noexcept {
    sequence_[c.position & mask_].store(c.position + 1, std::memory_order_release);
  }

  // Consumer side, one thread at a time. The next element in order, or nullptr if there is
  // none yet (or its producer has not published it yet).
  Slot* front() noexcept {
    const uint64_t pos = head_.load(std::memory_order_relaxed);
    const uint64_t seq = sequence_[pos & mask_].load(std::memory_order_acquire);
    return seq == pos + 1 ? &slots_[pos & mask_] : nullptr;
  }

  // Frees the slot front() returned.
  void pop() noexcept {
    const uint64_t pos = head_.load(std::memory_order_relaxed);
    sequence_[pos & mask_].store(pos + mask_ + 1, std::memory_order_release);
    head_.store(pos + 1, std::memory_order_relaxed);
  }

  // Any thread; exact only when producers and consumer are quiet.
  bool probably_empty() const noexcept {
    return tail_.load(std::memory_order_relaxed) == head_.load(std::memory_order_relaxed);
  }

 private:
  const uint64_t mask_;
  std::unique_ptr<std::atomic<uint64_t>[]> sequence_;
  std::unique_ptr<Slot[]> slots_;
  alignas(kWireCacheLine) std::atomic<uint64_t> tail_{0};
  // Written only by the consumer; atomic so that other threads may read it.
  alignas(kWireCacheLine) std::atomic<uint64_t> head_{0};
};

}  // namespace rnicdv::sim
