// SPDX-License-Identifier: BSD-3-Clause
// The receive doorbell record, the CQ consumer index record and the CQ arm doorbell
// (libmlx5 mlx5_post_recv, update_cons_index, mlx5_arm_cq).
#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

#include "../wqe/wqe_test_util.h"
#include "rnicdv/doorbell/cq_doorbell.h"
#include "rnicdv/doorbell/rq_doorbell.h"

using namespace rnicdv;
namespace db = rnicdv::doorbell;

TEST_CASE("the RQ doorbell stores head & 0xffff big-endian in the receive word only",
          "[doorbell]") {
  test::AlignedBuffer dbrec(8);
  db::ring_rq_doorbell(reinterpret_cast<__be32*>(dbrec.data()), 0x7abcd);
  REQUIRE(std::vector<uint8_t>(dbrec.data(), dbrec.data() + 4) ==
          std::vector<uint8_t>{0x00, 0x00, 0xab, 0xcd});
  REQUIRE(test::all_bytes_are(dbrec.data() + 4, 4, test::kCanary));  // the SQ word
}

TEST_CASE("the CQ consumer index record keeps 24 bits, big-endian, in word 0", "[doorbell]") {
  test::AlignedBuffer dbrec(8);
  db::update_cq_ci(reinterpret_cast<__be32*>(dbrec.data()), 0xff123456);
  REQUIRE(std::vector<uint8_t>(dbrec.data(), dbrec.data() + 4) ==
          std::vector<uint8_t>{0x00, 0x12, 0x34, 0x56});
  REQUIRE(test::all_bytes_are(dbrec.data() + 4, 4, test::kCanary));
}

TEST_CASE("arming a CQ writes the arm word to the record, then word and CQN to the UAR",
          "[doorbell]") {
  test::AlignedBuffer dbrec(8);
  test::AlignedBuffer uar(64);
  // sn 5 & 3 = 1, solicited only (1 << 24), ci 0x123456: arm = 0x11123456.
  db::arm_cq(reinterpret_cast<__be32*>(dbrec.data()), uar.data(), 0x89, 0x77123456, 5, true);
  REQUIRE(test::all_bytes_are(dbrec.data(), 4, test::kCanary));
  REQUIRE(std::vector<uint8_t>(dbrec.data() + 4, dbrec.data() + 8) ==
          std::vector<uint8_t>{0x11, 0x12, 0x34, 0x56});
  REQUIRE(std::vector<uint8_t>(uar.data() + MLX5_CQ_DOORBELL, uar.data() + MLX5_CQ_DOORBELL + 8) ==
          std::vector<uint8_t>{0x11, 0x12, 0x34, 0x56, 0x00, 0x00, 0x00, 0x89});
  REQUIRE(test::all_bytes_are(uar.data(), MLX5_CQ_DOORBELL, test::kCanary));
  REQUIRE(test::all_bytes_are(uar.data() + MLX5_CQ_DOORBELL + 8, 64 - MLX5_CQ_DOORBELL - 8,
                              test::kCanary));

  db::arm_cq(reinterpret_cast<__be32*>(dbrec.data()), uar.data(), 0x89, 0, 2, false);
  REQUIRE(std::vector<uint8_t>(dbrec.data() + 4, dbrec.data() + 8) ==
          std::vector<uint8_t>{0x20, 0x00, 0x00, 0x00});
}
