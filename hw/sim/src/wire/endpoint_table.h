// SPDX-License-Identifier: BSD-3-Clause
// The wire's map from endpoint address to its per-endpoint state, looked up on every
// transmit and poll without a lock.
//
// Open addressing over a fixed array of slots. Writers (attach, detach) are serialized by the
// wire's control mutex. Readers pin a slot by counting themselves in `users` and then
// re-checking its key; detach unpublishes the key first and then waits for `users` to drain
// before it frees the state. With sequentially consistent operations on both sides, either
// the reader sees the key gone or detach sees the reader, so state is never used after free.
//
// The key is a 64-bit digest of the endpoint (an address of either family and a port do not
// fit in one atomic word); the slot also holds the endpoint itself, written before the key is
// published and compared once a reader has pinned the slot, so two endpoints with one digest
// are still told apart. A reader reads it only after seeing the key that published it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <thread>

#include "wire/wire.h"

namespace rnicdv::sim {

template <class State>
class EndpointTable {
  static constexpr uint64_t kEmpty = 0;
  static constexpr uint64_t kTombstone = ~uint64_t{0};

  struct Slot {
    std::atomic<uint64_t> key{kEmpty};
    std::atomic<uint32_t> users{0};
    std::atomic<State*> state{nullptr};
    Endpoint endpoint;  // valid while `key` is live
  };

 public:
  static constexpr unsigned kSlotsLog2 = 10;
  static constexpr size_t kSlots = size_t{1} << kSlotsLog2;
  static constexpr size_t kMaxEntries = kSlots / 2;  // keeps probe chains short

  // A pinned entry; unpins on destruction.
  class Ref {
   public:
    Ref() = default;
    Ref(const Ref&) = delete;
    Ref& operator=(const Ref&) = delete;
    ~Ref() {
      if (slot_) slot_->users.fetch_sub(1, std::memory_order_release);
    }
    explicit operator bool() const noexcept { return state_ != nullptr; }
    State* get() const noexcept { return state_; }
    State* operator->() const noexcept { return state_; }
    State& operator*() const noexcept { return *state_; }

   private:
    friend class EndpointTable;
    Slot* slot_ = nullptr;
    State* state_ = nullptr;
  };

  EndpointTable() = default;
  EndpointTable(const EndpointTable&) = delete;
  EndpointTable& operator=(const EndpointTable&) = delete;

  // Any thread. An empty Ref when `ep` is not attached.
  void find(const Endpoint& ep, Ref* ref) const noexcept {
    const uint64_t key = key_of(ep);
    for (size_t i = 0, idx = hash(key); i < kSlots; ++i, idx = (idx + 1) & (kSlots - 1)) {
      Slot& s = slots_[idx];
      const uint64_t k = s.key.load(std::memory_order_acquire);
      if (k == kEmpty) return;
      if (k != key) continue;
      s.users.fetch_add(1, std::memory_order_seq_cst);
      if (s.key.load(std::memory_order_seq_cst) != key) {
        s.users.fetch_sub(1, std::memory_order_release);
        continue;  // detached while we looked (another endpoint of its digest may follow)
      }
      if (!(s.endpoint == ep)) [[unlikely]] {
        s.users.fetch_sub(1, std::memory_order_release);
        continue;  // another endpoint with the same digest
      }
      ref->slot_ = &s;
      ref->state_ = s.state.load(std::memory_order_acquire);
      return;
    }
  }

  // Control path (under the wire's mutex). False when present or full.
  bool insert(const Endpoint& ep, State* state) noexcept {
    if (live_ >= kMaxEntries || contains(ep)) return false;
    const uint64_t key = key_of(ep);
    for (size_t i = 0, idx = hash(key); i < kSlots; ++i, idx = (idx + 1) & (kSlots - 1)) {
      Slot& s = slots_[idx];
      const uint64_t k = s.key.load(std::memory_order_relaxed);
      if (k != kEmpty && k != kTombstone) continue;
      s.state.store(state, std::memory_order_relaxed);
      s.endpoint = ep;
      s.key.store(key, std::memory_order_seq_cst);  // publishes `state` and `endpoint`
      ++live_;
      return true;
    }
    return false;
  }

  // Control path (under the wire's mutex). Unpublishes `ep` and waits until no reader holds
  // it; returns its state for the caller to free, or nullptr if absent. Must not be called
  // by a thread that holds a Ref to the same entry.
  State* remove(const Endpoint& ep) noexcept {
    Slot* s = locate(ep);
    if (s == nullptr) return nullptr;
    s->key.store(kTombstone, std::memory_order_seq_cst);
    while (s->users.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
    State* state = s->state.load(std::memory_order_relaxed);
    s->state.store(nullptr, std::memory_order_relaxed);
    --live_;
    return state;
  }

  bool contains(const Endpoint& ep) const noexcept { return locate(ep) != nullptr; }
  size_t size() const noexcept { return live_; }

  // Control path: calls fn(State&) for every entry.
  template <class Fn>
  void for_each(Fn&& fn) const {
    for (const Slot& s : slots_) {
      const uint64_t k = s.key.load(std::memory_order_relaxed);
      if (k != kEmpty && k != kTombstone) fn(*s.state.load(std::memory_order_relaxed));
    }
  }

 private:
  static uint64_t key_of(const Endpoint& ep) noexcept {
    const uint64_t k = (hash_of(ep.ip) ^ ep.port) * 0x9E3779B97F4A7C15ull;
    return k == kEmpty || k == kTombstone ? 1 : k;
  }
  static size_t hash(uint64_t key) noexcept {
    return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> (64 - kSlotsLog2));
  }

  Slot* locate(const Endpoint& ep) const noexcept {
    const uint64_t key = key_of(ep);
    for (size_t i = 0, idx = hash(key); i < kSlots; ++i, idx = (idx + 1) & (kSlots - 1)) {
      Slot& s = slots_[idx];
      const uint64_t k = s.key.load(std::memory_order_relaxed);
      if (k == kEmpty) return nullptr;
      if (k == key && s.endpoint == ep) return &s;
    }
    return nullptr;
  }

  mutable Slot slots_[kSlots];
  size_t live_ = 0;
};

}  // namespace rnicdv::sim
