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

Result<uint32_t> MrTable::add(uint32_t pdn, uint8_t* addr, uint64_t length, uint32_t access) {
  if (live_ >= max_entries_)
    return Status::error(Errc::no_resources, "reg_mr: the device's %u memory regions are in use",
                         max_entries_);
  uint32_t index;
  if (!free_.empty()) {
    index = free_.back();
    free_.pop_back();
  } else {
    // Slot 0 is never used, so key 0 is never valid; slot 1 with tag 0 would be
    // MLX5_INVALID_LKEY (0x100), the receive-list terminator, so tags skip 0 below.
    if (entries_.empty()) entries_.resize(1);
    index = static_cast<uint32_t>(entries_.size());
    if (index > 0xffffff) return Status::error(Errc::no_resources, "reg_mr: key space exhausted");
    entries_.emplace_back();
  }
  MrEntry& e = entries_[index];
  // A new tag on every registration: a key of the previous occupant no longer matches.
  next_tag_ = static_cast<uint8_t>(next_tag_ * 5 + 0x3b);
  if (next_tag_ == 0) next_tag_ = 1;
  e.tag = next_tag_;
  e.valid = true;
  e.pdn = pdn;
  e.addr = addr;
  e.length = length;
  e.access = access;
  ++live_;
  const uint32_t key = key_of(index);
  static_assert(MLX5_INVALID_LKEY == 0x100);
  return key;
}

void MrTable::remove(uint32_t key) {
  const uint32_t index = key >> 8;
  if (index == 0 || index >= entries_.size()) return;
  MrEntry& e = entries_[index];
  if (!e.valid || e.tag != (key & 0xff)) return;
  e = MrEntry{};
  e.tag = static_cast<uint8_t>(key & 0xff);
  free_.push_back(index);
  --live_;
}

const MrEntry* MrTable::find(uint32_t key) const noexcept {
  const uint32_t index = key >> 8;
  if (index == 0 || index >= entries_.size()) return nullptr;
  const MrEntry& e = entries_[index];
  if (!e.valid || e.tag != (key & 0xff)) return nullptr;
  return &e;
}

AccessResult MrTable::check(uint32_t key, uint32_t pdn, uint64_t addr, uint64_t len,
                            uint32_t required, uint8_t** host) const noexcept {
  if (len == 0) {
    *host = nullptr;
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
  return AccessResult::ok;
}

}  // namespace rnicdv::sim
