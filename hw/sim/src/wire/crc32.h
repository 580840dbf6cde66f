// SPDX-License-Identifier: BSD-3-Clause
// CRC-32 (IEEE 802.3: reflected, polynomial 0xEDB88320), the CRC that RoCEv2's ICRC uses
// (IBA Annex A17.3.3; Linux rxe_icrc.c). Table-driven, sixteen bytes per step.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rnicdv::sim {

// Advances a raw CRC register over `len` bytes: no initial or final inversion. Start from
// 0xFFFFFFFF and invert the result to get the standard CRC-32.
uint32_t crc32_advance(uint32_t state, const uint8_t* data, size_t len) noexcept;

// The standard CRC-32, chainable like zlib's crc32(): crc32_ieee(crc32_ieee(0, a), b) is the
// CRC of a followed by b.
inline uint32_t crc32_ieee(uint32_t previous, const uint8_t* data, size_t len) noexcept {
  return ~crc32_advance(~previous, data, len);
}

}  // namespace rnicdv::sim
