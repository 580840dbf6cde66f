// SPDX-License-Identifier: BSD-3-Clause
// Memory regions of one device: the keys the WQEs and the wire name, and the checks every
// access goes through (IBA 10.6.3: key, PD, bounds, access rights).
//
// A key is `index << 8 | tag` (as rxe and mlx5 form them): the index selects the table slot
// and the 8-bit tag changes each time the slot is reused, so a stale key of a deregistered
// region never matches the region registered after it. lkey and rkey are the same value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "rnicdv/status.h"

namespace rnicdv::sim {

struct MrEntry {
  bool valid = false;
  uint8_t tag = 0;
  uint32_t pdn = 0;
  uint8_t* addr = nullptr;  // the region's virtual address (IOVA == VA)
  uint64_t length = 0;
  uint32_t access = 0;  // hw::access::*
};

enum class AccessResult : uint8_t {
  ok,
  bad_key,       // no region with this key (never registered, deregistered, stale tag)
  wrong_pd,      // the region belongs to another protection domain
  out_of_range,  // [addr, addr+len) is not inside the region
  no_access,     // the region was registered without the right
};
const char* access_result_name(AccessResult r) noexcept;

class MrTable {
 public:
  explicit MrTable(uint32_t max_entries) : max_entries_(max_entries) {}

  // Registers a region and returns its key.
  Result<uint32_t> add(uint32_t pdn, uint8_t* addr, uint64_t length, uint32_t access);
  void remove(uint32_t key);
  const MrEntry* find(uint32_t key) const noexcept;
  size_t size() const noexcept { return live_; }

  // Checks an access of `len` bytes at `addr` under `key` by a QP of PD `pdn` that needs
  // `required` rights (0 = local read only). On success `*host` is the pointer to use.
  // A zero-length access needs no valid key (IBA 9.4.4: a zero-length RDMA carries none).
  AccessResult check(uint32_t key, uint32_t pdn, uint64_t addr, uint64_t len, uint32_t required,
                     uint8_t** host) const noexcept;

  template <class Fn>
  void for_each(Fn&& fn) const {
    for (size_t i = 0; i < entries_.size(); ++i)
      if (entries_[i].valid) fn(key_of(static_cast<uint32_t>(i)), entries_[i]);
  }

 private:
  uint32_t key_of(uint32_t index) const noexcept { return (index << 8) | entries_[index].tag; }

  uint32_t max_entries_;
  std::vector<MrEntry> entries_;
  std::vector<uint32_t> free_;
  size_t live_ = 0;
  uint8_t next_tag_ = 0x5a;
};

}  // namespace rnicdv::sim
