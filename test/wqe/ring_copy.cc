// SPDX-License-Identifier: BSD-3-Clause
// Copies between send rings follow the wrap (the shadow-queue flush).
#include <catch2/catch.hpp>
#include <cstdint>
#include <vector>

#include "rnicdv/wqe/send_wqe.h"
#include "wqe_test_util.h"

using namespace rnicdv;

namespace {

void fill_pattern(test::TestSq& sq) {
  for (size_t i = 0; i < sq.mem.size(); ++i) sq.mem.data()[i] = static_cast<uint8_t>(i * 13 + 1);
}

// BBs [first, first + bbs) of `sq` (mod 8) hold the shadow's bytes; the others are untouched.
void require_copied_only(const test::TestSq& shadow, const test::TestSq& sq, uint32_t first,
                         uint32_t bbs) {
  for (uint32_t bb = 0; bb < 8; ++bb) {
    const bool copied = ((bb - first) & 7) < bbs;
    const uint8_t* got = sq.mem.data() + bb * 64;
    INFO("first " << first << " bbs " << bbs << " bb " << bb);
    if (copied)
      REQUIRE(std::equal(got, got + 64, shadow.mem.data() + bb * 64));
    else
      REQUIRE(test::all_bytes_are(got, 64, test::kCanary));
  }
}

}  // namespace

TEST_CASE("copy_between_rings moves a batch to the same offsets and touches nothing else",
          "[wqe]") {
  for (uint32_t first = 0; first < 8; ++first) {
    for (uint32_t bbs = 1; bbs <= 8; ++bbs) {
      test::TestSq shadow(8);
      fill_pattern(shadow);
      test::TestSq sq(8);
      wqe::copy_between_rings(shadow.ring, sq.ring, first + 8 * 5, bbs * 64);
      require_copied_only(shadow, sq, first, bbs);
    }
  }
}

TEST_CASE("copy_between_rings of unequal rings stays inside both", "[wqe]") {
  test::TestSq big(8);
  fill_pattern(big);
  test::TestSq small(2);
  // Four BBs from BB 1 of the big ring land in BBs 1, 0, 1, 0 of the small one; ASan checks
  // that neither ring is left.
  wqe::copy_between_rings(big.ring, small.ring, 1, 256);
  REQUIRE(std::equal(small.mem.data(), small.mem.data() + 64, big.mem.data() + 4 * 64));
  REQUIRE(std::equal(small.mem.data() + 64, small.mem.data() + 128, big.mem.data() + 3 * 64));
}

TEST_CASE("copy_wqe_ctrl_last copies a whole WQE, wrapped or not, and nothing else", "[wqe]") {
  for (uint32_t first = 0; first < 8; ++first) {
    for (uint32_t bbs = 1; bbs <= 4; ++bbs) {
      test::TestSq shadow(8);
      fill_pattern(shadow);
      test::TestSq sq(8);
      wqe::copy_wqe_ctrl_last(shadow.ring, sq.ring, first + 8 * 3, bbs);
      require_copied_only(shadow, sq, first, bbs);
    }
  }
}
