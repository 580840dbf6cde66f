// SPDX-License-Identifier: BSD-3-Clause
// Big-endian loads and stores on unaligned memory: the one set of byte-order helpers of the
// project. Every mlx5 WQE and CQE field is big-endian (mlx5dv.h marks them __be16/__be32/
// __be64), and so is every IBA header and MAD field (IBA 5.2, "bit and byte ordering"); the
// RoCEv2 ICRC is the one field stored the other way, and the wire owns it. Correct on hosts
// of either order (glibc's <endian.h>); header-only: the inline post path uses them.
#pragma once

#include <endian.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace rnicdv {

inline uint16_t load_be16(const void* p) noexcept {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return be16toh(v);
}
inline uint32_t load_be24(const void* p) noexcept {
  const auto* b = static_cast<const uint8_t*>(p);
  return (uint32_t{b[0]} << 16) | (uint32_t{b[1]} << 8) | b[2];
}
inline uint32_t load_be32(const void* p) noexcept {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return be32toh(v);
}
inline uint64_t load_be64(const void* p) noexcept {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return be64toh(v);
}

inline void store_be16(void* p, uint16_t v) noexcept {
  v = htobe16(v);
  std::memcpy(p, &v, sizeof v);
}
inline void store_be24(void* p, uint32_t v) noexcept {
  auto* b = static_cast<uint8_t*>(p);
  b[0] = static_cast<uint8_t>(v >> 16);
  b[1] = static_cast<uint8_t>(v >> 8);
  b[2] = static_cast<uint8_t>(v);
}
inline void store_be32(void* p, uint32_t v) noexcept {
  v = htobe32(v);
  std::memcpy(p, &v, sizeof v);
}
inline void store_be64(void* p, uint64_t v) noexcept {
  v = htobe64(v);
  std::memcpy(p, &v, sizeof v);
}

// A field of `bytes` (1 to 8) bytes, as IBA's tables give widths.
inline uint64_t load_be(const void* p, size_t bytes) noexcept {
  const auto* b = static_cast<const uint8_t*>(p);
  uint64_t v = 0;
  for (size_t i = 0; i < bytes; ++i) v = (v << 8) | b[i];
  return v;
}
inline void store_be(void* p, size_t bytes, uint64_t v) noexcept {
  auto* b = static_cast<uint8_t*>(p);
  for (size_t i = bytes; i-- > 0;) {
    b[i] = static_cast<uint8_t>(v);
    v >>= 8;
  }
}

}  // namespace rnicdv
