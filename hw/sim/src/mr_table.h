// SPDX-License-Identifier: BSD-3-Clause
// Memory regions of one device: the keys the WQEs and the wire name, and the checks every
// access goes through (IBA 10.6.3: key, PD, bounds, access rights).
//
// Inside, a key is `index << 8 | tag` (as rxe and mlx5 form them): the index selects the
// table slot and the 8-bit tag changes each time the slot is reused, so a stale key of a
// deregistered region never matches the region registered after it. lkey and rkey are the
// same value.
//
// On the wire that structure would make keys guessable: slots are handed out from 1 up, so
// 2^16 tries (256 slots x 256 tags) cover the first 256 regions of any device, and the first
// region of every device would have the same key (rkey prediction, as in ReDMArk, USENIX
// Security 2021). So the table publishes the structured value through a bijection of the
// 32-bit key space keyed by a per-device secret: a key a peer has not been given is one of
// 2^32 values, and a guess hits a live region with probability (regions / 2^32).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "pinned_memory.h"
#include "rnicdv/status.h"

namespace rnicdv::sim {

struct MrEntry {
  bool valid = false;
  uint8_t tag = 0;
  uint32_t pdn = 0;
  uint8_t* addr = nullptr;  // the region's virtual address (IOVA == VA)
  uint64_t length = 0;
  uint32_t access = 0;  // hw::access::*
  PinRef pin;           // the pages the region holds; none: accessed by address
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
  // `secret` keys the scrambling of published keys (any value; the device derives it from
  // the fabric seed in deterministic mode and from the kernel's random source otherwise).
  MrTable(uint32_t max_entries, uint64_t secret) noexcept;

  // Registers a region and returns its key.
  Result<uint32_t> add(uint32_t pdn, uint8_t* addr, uint64_t length, uint32_t access,
                       PinRef pin = {});
  void remove(uint32_t key);
  // Gives the region of `key` a new PD, range and rights, keeping the key; false if `key`
  // names no live region.
  bool update(uint32_t key, uint32_t pdn, uint8_t* addr, uint64_t length, uint32_t access,
              PinRef pin);
  const MrEntry* find(uint32_t key) const noexcept;
  size_t size() const noexcept { return live_; }

  // Checks an access of `len` bytes at `addr` under `key` by a QP of PD `pdn` that needs
  // `required` rights (0 = local read only). On success `*host` is the address to access
  // and `*pin` the region's hold on its pages (host_access.h takes both).
  // A zero-length access needs no valid key (IBA 9.4.4: a zero-length RDMA carries none).
  AccessResult check(uint32_t key, uint32_t pdn, uint64_t addr, uint64_t len, uint32_t required,
                     uint8_t** host, PinRef* pin) const noexcept;

  template <class Fn>
  void for_each(Fn&& fn) const {
    for (size_t i = 0; i < entries_.size(); ++i)
      if (entries_[i].valid) fn(key_of(static_cast<uint32_t>(i)), entries_[i]);
  }

 private:
  uint32_t key_of(uint32_t index) const noexcept {
    return scramble((index << 8) | entries_[index].tag);
  }
  // A 4-round Feistel network on the two 16-bit halves, and its inverse.
  uint32_t scramble(uint32_t structured) const noexcept;
  uint32_t unscramble(uint32_t key) const noexcept;

  uint32_t max_entries_;
  std::vector<MrEntry> entries_;
  std::vector<uint32_t> free_;
  size_t live_ = 0;
  uint8_t next_tag_ = 0x5a;
  uint16_t round_keys_[4] = {};
};

}  // namespace rnicdv::sim
