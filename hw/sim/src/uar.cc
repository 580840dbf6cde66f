// SPDX-License-Identifier: BSD-3-Clause
#include "uar.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>

#include "rnicdv/byte_order.h"
#include "rnicdv/doorbell/mmio.h"

namespace rnicdv::sim {

int consume_register(BfRegister& reg, DoorbellWrite out[2]) noexcept {
  int n = 0;
  for (uint32_t half = 0; half < 2; ++half) {
    uint8_t* word0 = reg.base + half * kBfHalfBytes;
    if (doorbell::mmio_read64(word0) == 0) continue;
    // Acquire: the doorbell record and the WQE were written before this store.
    const uint64_t value = doorbell::mmio_take64(word0);
    if (value == 0) continue;
    uint8_t* word1 = word0 + 8;
    bool blueflame = false;
    if (doorbell::mmio_read64(word1) != 0) {
      doorbell::mmio_take64(word1);
      blueflame = true;
    }
    uint8_t bytes[8];
    std::memcpy(bytes, &value, sizeof bytes);
    const uint32_t opmod_idx_opcode = load_be32(bytes);
    const uint32_t qpn_ds = load_be32(bytes + 4);
    out[n++] = DoorbellWrite{qpn_ds >> 8, static_cast<uint16_t>(opmod_idx_opcode >> 8),
                             static_cast<uint8_t>(opmod_idx_opcode & 0xff), blueflame};
  }
  return n;
}

bool consume_cq_doorbell(uint8_t* page, CqArmWrite* out) noexcept {
  uint8_t* reg = page + kCqDoorbellOffset;
  if (doorbell::mmio_read64(reg) == 0) return false;
  // Acquire: the arm word was stored in the doorbell record before this register.
  const uint64_t value = doorbell::mmio_take64(reg);
  if (value == 0) return false;
  uint8_t bytes[8];
  std::memcpy(bytes, &value, sizeof bytes);
  out->arm_word = load_be32(bytes);
  out->cqn = load_be32(bytes + 4) & 0xffffff;
  return true;
}

// A page of its own (not heap memory), as a ConnectX's UAR pages are device memory of their
// own.
uint8_t* alloc_uar_page() {
  void* p = ::mmap(nullptr, kUarPageBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
  return p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
}

void free_uar_page(uint8_t* page) noexcept {
  if (page) ::munmap(page, kUarPageBytes);
}

}  // namespace rnicdv::sim
