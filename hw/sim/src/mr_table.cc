// SPDX-License-Identifier: BSD-3-Clause
#include "mr_table.h"

#include <infiniband/mlx5dv.h>

namespace rnicdv::sim {

const char* access_result_name(AccessResult r) noexcept {
  switch (r) {
    case AccessResult::ok:
      return "ok";
    case AccessResult::bad_key:
      return "bad key";
    case AccessResult::wrong_pd:
      return "key of another PD";
    case AccessResult::out_of_range:
      return "outside the region";
    case AccessResult::no_access:
      return "access right missing";
  }
  return "?";
}

namespace {

uint64_t mix64(uint64_t z) noexcept {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint16_t feistel_round(uint16_t half, uint16_t key) noexcept {
  const uint32_t x = (uint32_t{half} ^ key) * 0x9e3779b1u;
  return static_cast<uint16_t>((x >> 16) ^ (x & 0xffff) * 0x2b);
}

}  // namespace

MrTable::MrTable(uint32_t max_entries, uint64_t secret) noexcept : max_entries_(max_entries) {
  const uint64_t k = mix64(secret + 0x6a09e667f3bcc909ull);
  for (int i = 0; i < 4; ++i) round_keys_[i] = static_cast<uint16_t>(k >> (16 * i));
  // The tag sequence starts somewhere the secret chooses as well.
  next_tag_ = static_cast<uint8_t>(mix64(k) >> 56);
}

uint32_t MrTable::scramble(uint32_t structured) const noexcept {
  uint16_t left = static_cast<uint16_t>(structured >> 16);
  uint16_t right = static_cast<uint16_t>(structured);
  for (uint16_t k : round_keys_) {
    const uint16_t next = static_cast<uint16_t>(left ^ feistel_round(right, k));
    left = right;
    right = next;
  }
  return (uint32_t{left} << 16) | right;
}

uint32_t MrTable::unscramble(uint32_t key) const noexcept {
  uint16_t left = static_cast<uint16_t>(key >> 16);
  uint16_t right = static_cast<uint16_t>(key);
  for (int i = 3; i >= 0; --i) {
    const uint16_t prev = static_cast<uint16_t>(right ^ feistel_round(left, round_keys_[i]));
    right = left;
    left = prev;
  }
  return (uint32_t{left} << 16) | right;
}

Result<uint32_t> MrTable::add(uint32_t pdn, uint8_t* addr, uint64_t length, uint32_t access,
                              PinRef pin) {
  if (live_ >= max_entries_)
    return Status::error(Errc::no_resources, "reg_mr: the device's %u memory regions are in use",
                         max_entries_);
  uint32_t index;
  if (!free_.empty()) {
    index = free_.back();
    free_.pop_back();
  } else {
    // Slot 0 is never used: a key that unscrambles to it is never valid.
    if (entries_.empty()) entries_.resize(1);
    index = static_cast<uint32_t>(entries_.size());
    if (index > 0xffffff) return Status::error(Errc::no_resources, "reg_mr: key space exhausted");
    entries_.emplace_back();
  }
  MrEntry& e = entries_[index];
  // A new tag on every registration: a key of the previous occupant no longer matches. A
  // published key of 0 or MLX5_INVALID_LKEY (the receive-list terminator) is never handed
  // out: at most two of the slot's 255 tags are skipped.
  const uint8_t previous = e.tag;
  do {
    next_tag_ = static_cast<uint8_t>(next_tag_ * 5 + 0x3b);
    if (next_tag_ == 0) next_tag_ = 1;
    e.tag = next_tag_;
  } while (e.tag == previous || key_of(index) == 0 || key_of(index) == MLX5_INVALID_LKEY);
  e.valid = true;
  e.pdn = pdn;
  e.addr = addr;
  e.length = length;
  e.access = access;
  e.pin = pin;
  ++live_;
  const uint32_t key = key_of(index);
  static_assert(MLX5_INVALID_LKEY == 0x100);
  return key;
}

void MrTable::remove(uint32_t key) {
  const uint32_t structured = unscramble(key);
  const uint32_t index = structured >> 8;
  if (index == 0 || index >= entries_.size()) return;
  MrEntry& e = entries_[index];
  if (!e.valid || e.tag != (structured & 0xff)) return;
  e = MrEntry{};
  e.tag = static_cast<uint8_t>(structured & 0xff);
  free_.push_back(index);
  --live_;
}

bool MrTable::update(uint32_t key, uint32_t pdn, uint8_t* addr, uint64_t length, uint32_t access,
                     PinRef pin) {
  const uint32_t structured = unscramble(key);
  const uint32_t index = structured >> 8;
  if (index == 0 || index >= entries_.size()) return false;
  MrEntry& e = entries_[index];
  if (!e.valid || e.tag != (structured & 0xff)) return false;
  e.pdn = pdn;
  e.addr = addr;
  e.length = length;
  e.access = access;
  e.pin = pin;
  return true;
}

const MrEntry* MrTable::find(uint32_t key) const noexcept {
  const uint32_t structured = unscramble(key);
  const uint32_t index = structured >> 8;
  if (index == 0 || index >= entries_.size()) return nullptr;
  const MrEntry& e = entries_[index];
  if (!e.valid || e.tag != (structured & 0xff)) return nullptr;
  return &e;
}

AccessResult MrTable::check(uint32_t key, uint32_t pdn, uint64_t addr, uint64_t len,
                            uint32_t required, uint8_t** host, PinRef* pin) const noexcept {
  if (len == 0) {
    *host = nullptr;
    *pin = PinRef{};
    return AccessResult::ok;
  }
  const MrEntry* e = find(key);
  if (!e) return AccessResult::bad_key;
  if (e->pdn != pdn) return AccessResult::wrong_pd;
  const uint64_t base = reinterpret_cast<uintptr_t>(e->addr);
  // Written to avoid overflow on hostile addr/len: addr >= base and len <= the rest.
  if (addr < base || addr - base > e->length || len > e->length - (addr - base))
    return AccessResult::out_of_range;
  if ((e->access & required) != required) return AccessResult::no_access;
  *host = e->addr + (addr - base);
  *pin = e->pin;
  return AccessResult::ok;
}

}  // namespace rnicdv::sim
