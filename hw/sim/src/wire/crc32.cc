// SPDX-License-Identifier: BSD-3-Clause
// Slicing-by-16 CRC-32: sixteen 256-entry tables, where table k maps a byte to its CRC
// contribution k bytes further along the message, let one step fold sixteen bytes with
// sixteen independent lookups (the slicing-by-N method of Kounavis and Berry, "A Systematic
// Approach to Building High Performance Software-Based CRC Generators", 2005). The tables
// (16 KiB) stay in L1 while a datagram is processed.
#include "wire/crc32.h"

#include <array>
#include <bit>
#include <cstring>

namespace rnicdv::sim {
namespace {

constexpr uint32_t kPolynomial = 0xEDB88320u;  // bit-reversed 0x04C11DB7
constexpr int kSlices = 16;

using CrcTables = std::array<std::array<uint32_t, 256>, kSlices>;

constexpr CrcTables make_tables() {
  CrcTables t{};
  for (uint32_t byte = 0; byte < 256; ++byte) {
    uint32_t crc = byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1u) ? kPolynomial : 0u);
    t[0][byte] = crc;
  }
  for (int slice = 1; slice < kSlices; ++slice) {
    for (uint32_t byte = 0; byte < 256; ++byte) {
      const uint32_t prev = t[slice - 1][byte];
      t[slice][byte] = (prev >> 8) ^ t[0][prev & 0xFFu];
    }
  }
  return t;
}

constexpr CrcTables kTables = make_tables();
static_assert(kTables[0][1] == 0x77073096u, "CRC-32 table (first entry of the IEEE table)");

inline uint32_t advance_bytewise(uint32_t state, const uint8_t* p, size_t len) noexcept {
  while (len--) state = (state >> 8) ^ kTables[0][(state ^ *p++) & 0xFFu];
  return state;
}

}  // namespace

uint32_t crc32_advance(uint32_t state, const uint8_t* data, size_t len) noexcept {
  if constexpr (std::endian::native != std::endian::little) {
    return advance_bytewise(state, data, len);
  } else {
    while (len >= 16) {
      uint64_t lo, hi;
      std::memcpy(&lo, data, sizeof(lo));
      std::memcpy(&hi, data + 8, sizeof(hi));
      lo ^= state;
      state = kTables[15][lo & 0xFF] ^ kTables[14][(lo >> 8) & 0xFF] ^
              kTables[13][(lo >> 16) & 0xFF] ^ kTables[12][(lo >> 24) & 0xFF] ^
              kTables[11][(lo >> 32) & 0xFF] ^ kTables[10][(lo >> 40) & 0xFF] ^
              kTables[9][(lo >> 48) & 0xFF] ^ kTables[8][lo >> 56] ^ kTables[7][hi & 0xFF] ^
              kTables[6][(hi >> 8) & 0xFF] ^ kTables[5][(hi >> 16) & 0xFF] ^
              kTables[4][(hi >> 24) & 0xFF] ^ kTables[3][(hi >> 32) & 0xFF] ^
              kTables[2][(hi >> 40) & 0xFF] ^ kTables[1][(hi >> 48) & 0xFF] ^ kTables[0][hi >> 56];
      data += 16;
      len -= 16;
    }
    return advance_bytewise(state, data, len);
  }
}

}  // namespace rnicdv::sim
