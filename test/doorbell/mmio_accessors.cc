// SPDX-License-Identifier: BSD-3-Clause
// Doorbell-record and register accessors: byte order, width, and the BlueFlame copy's order
// and wrap.
#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

#include "../wqe/wqe_test_util.h"
#include "rnicdv/doorbell/mmio.h"

using namespace rnicdv;
namespace db = rnicdv::doorbell;

TEST_CASE("store_dbr writes the value big-endian; load_dbr reads it back in host order",
          "[doorbell]") {
  test::AlignedBuffer mem(16);
  auto* words = reinterpret_cast<__be32*>(mem.data());
  db::store_dbr(&words[1], 0x01020304);
  const uint8_t expected[] = {0x01, 0x02, 0x03, 0x04};
  REQUIRE(std::memcmp(mem.data() + 4, expected, 4) == 0);
  REQUIRE(test::all_bytes_are(mem.data(), 4, test::kCanary));
  REQUIRE(test::all_bytes_are(mem.data() + 8, 8, test::kCanary));
  REQUIRE(db::load_dbr(&words[1]) == 0x01020304);
}

TEST_CASE("mmio_write64 stores exactly 8 bytes, as they lie in memory", "[doorbell]") {
  test::AlignedBuffer reg(32);
  const uint8_t bytes[8] = {0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7};
  uint64_t raw;
  std::memcpy(&raw, bytes, 8);
  db::mmio_write64(reg.data() + 8, raw);
  REQUIRE(std::memcmp(reg.data() + 8, bytes, 8) == 0);
  REQUIRE(test::all_bytes_are(reg.data(), 8, test::kCanary));
  REQUIRE(test::all_bytes_are(reg.data() + 16, 16, test::kCanary));
  REQUIRE(db::mmio_read64(reg.data() + 8) == raw);
}

TEST_CASE("bf_copy copies whole 64-byte blocks and follows the ring's wrap", "[doorbell]") {
  test::TestSq sq(4);
  for (size_t i = 0; i < sq.mem.size(); ++i) sq.mem.data()[i] = static_cast<uint8_t>(i ^ 0x5a);
  for (uint32_t first = 0; first < 4; ++first) {
    for (uint32_t blocks = 1; blocks <= 4; ++blocks) {
      test::AlignedBuffer reg(512);
      db::bf_copy(reg.data(), sq.ring.bb(first), blocks * 64, sq.ring);
      INFO("first BB " << first << ", " << blocks << " blocks");
      REQUIRE(std::vector<uint8_t>(reg.data(), reg.data() + blocks * 64) ==
              test::wqe_bytes(sq.ring, first, blocks * 64));
      REQUIRE(test::all_bytes_are(reg.data() + blocks * 64, 512 - blocks * 64, test::kCanary));
    }
  }
}
