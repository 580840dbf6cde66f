// SPDX-License-Identifier: BSD-3-Clause
// SendFlags: the flags of a send WR as a set. Combining, testing and removing flags gives sets;
// each flag maps onto its fm_ce_se bit; no plain integer stands in for a set (only a literal 0,
// the empty set, converts, and a non-zero one does not compile: the constructor is consteval).
#include <catch2/catch.hpp>

#include <sstream>
#include <type_traits>

#include "rnicdv/wqe/send_wqe.h"

using namespace rnicdv;

static_assert(!std::is_convertible_v<SendFlags, uint32_t>, "a set is not an integer");
static_assert(!std::is_constructible_v<uint32_t, SendFlags>, "a set is not an integer");
static_assert(sizeof(SendFlags) == sizeof(uint32_t));

TEST_CASE("send flags combine, test and remove as a set", "[wqe][send_flags]") {
  constexpr SendFlags both = send_flags::signaled | send_flags::fence;
  STATIC_REQUIRE(both.has(send_flags::signaled));
  STATIC_REQUIRE(both.has(send_flags::fence));
  STATIC_REQUIRE_FALSE(both.has(send_flags::solicited));
  STATIC_REQUIRE_FALSE(both.has(send_flags::signaled | send_flags::solicited));
  STATIC_REQUIRE((both & ~send_flags::fence) == send_flags::signaled);
  STATIC_REQUIRE((~send_flags::none & send_flags::inline_data) == send_flags::inline_data);
  STATIC_REQUIRE(send_flags::none.empty());
  STATIC_REQUIRE(SendFlags{} == send_flags::none);
  STATIC_REQUIRE(SendFlags(0) == send_flags::none);  // the literal 0 is the empty set
  SendFlags f;
  CHECK_FALSE(static_cast<bool>(f));
  f |= send_flags::inline_data;
  f |= send_flags::solicited;
  CHECK(static_cast<bool>(f & send_flags::inline_data));
  f &= ~send_flags::inline_data;
  CHECK(f == send_flags::solicited);
  // ~ stays within the defined flags: a set never carries bits no flag names.
  CHECK((~send_flags::none).bits() ==
        (send_flags::signaled | send_flags::solicited | send_flags::fence |
         send_flags::inline_data).bits());
  std::ostringstream os;
  os << (send_flags::signaled | send_flags::fence);
  CHECK(os.str() == "SendFlags(5)");
}

TEST_CASE("each send flag maps onto its fm_ce_se bit", "[wqe][send_flags]") {
  STATIC_REQUIRE(wqe::fm_ce_se_for(send_flags::none) == 0);
  STATIC_REQUIRE(wqe::fm_ce_se_for(send_flags::signaled) == MLX5_WQE_CTRL_CQ_UPDATE);
  STATIC_REQUIRE(wqe::fm_ce_se_for(send_flags::solicited) == MLX5_WQE_CTRL_SOLICITED);
  STATIC_REQUIRE(wqe::fm_ce_se_for(send_flags::fence) == MLX5_WQE_CTRL_FENCE);
  STATIC_REQUIRE(wqe::fm_ce_se_for(send_flags::inline_data) == 0);  // not a ctrl bit
  STATIC_REQUIRE(wqe::fm_ce_se_for(send_flags::signaled | send_flags::solicited |
                                   send_flags::fence) ==
                 (MLX5_WQE_CTRL_CQ_UPDATE | MLX5_WQE_CTRL_SOLICITED | MLX5_WQE_CTRL_FENCE));
}
