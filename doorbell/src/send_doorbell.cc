// SPDX-License-Identifier: BSD-3-Clause
#include "rnicdv/doorbell/send_doorbell.h"

#include <cstdint>

namespace rnicdv::doorbell {

const char* doorbell_mode_name(DoorbellMode m) noexcept {
  switch (m) {
    case DoorbellMode::automatic:
      return "auto";
    case DoorbellMode::db:
      return "db";
    case DoorbellMode::bf:
      return "bf";
    case DoorbellMode::db_lock:
      return "db_lock";
  }
  return "unknown";
}

Errc SendDoorbell::init(void* bf_reg, uint32_t bf_size, bool shared,
                        DoorbellMode requested) noexcept {
  const auto address = reinterpret_cast<uintptr_t>(bf_reg);
  // The 8-byte doorbell must be one aligned store to reach the device whole.
  if (bf_reg == nullptr || (address & 7) != 0) return Errc::invalid_argument;

  DoorbellMode mode = requested;
  if (mode == DoorbellMode::automatic)
    mode = shared ? DoorbellMode::db_lock : (bf_size != 0 ? DoorbellMode::bf : DoorbellMode::db);

  switch (mode) {
    case DoorbellMode::bf:
      // Another QP's BlueFlame copy could interleave with ours on a shared register, and
      // without a BlueFlame buffer there is nothing to copy into.
      if (shared || bf_size == 0) return Errc::invalid_argument;
      // Whole 64-byte blocks with aligned 16-byte stores, in both halves.
      if ((bf_size & 63) != 0 || (address & 63) != 0) return Errc::invalid_argument;
      break;
    case DoorbellMode::db:
    case DoorbellMode::db_lock:
      break;
    default:
      return Errc::invalid_argument;
  }

  reg_ = static_cast<uint8_t*>(bf_reg);
  bf_size_ = bf_size;
  offset_ = 0;
  mode_ = mode;
  plain_db_ = mode == DoorbellMode::db && !wake_.needed();
  lock_ = mode == DoorbellMode::db_lock ? &register_lock_for(bf_reg) : nullptr;
  return Errc::ok;
}

}  // namespace rnicdv::doorbell
