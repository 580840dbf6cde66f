// SPDX-License-Identifier: BSD-3-Clause
// Shared receive queue WQEs: the free list in mlx5_wqe_srq_next_seg's next_wqe_index
// (big-endian at byte 2, as mlx5dv.h lays it out), data segments after it as
// mlx5dv_set_data_seg writes them, and decode_srq_wqe reading them back.
#include <endian.h>
#include <infiniband/mlx5dv.h>

#include <catch2/catch.hpp>
#include <cstddef>
#include <cstring>

#include "rnicdv/wqe/decode.h"
#include "rnicdv/wqe/srq_wqe.h"
#include "wqe_test_util.h"

using namespace rnicdv;

TEST_CASE("a new SRQ ring links every WQE to the next, the last to the first", "[wqe][srq]") {
  constexpr uint32_t kCnt = 8, kStride = 64;
  test::AlignedBuffer mem(kCnt * kStride);
  const wqe::SrqRing ring{mem.data(), kCnt, kStride};
  wqe::init_srq_ring(ring);
  for (uint32_t i = 0; i < kCnt; ++i) {
    const auto* next = reinterpret_cast<const mlx5_wqe_srq_next_seg*>(ring.slot(i));
    INFO("wqe " << i);
    CHECK(be16toh(next->next_wqe_index) == ((i + 1) % kCnt));
    CHECK(ring.next(i) == (i + 1) % kCnt);
  }
  CHECK(offsetof(mlx5_wqe_srq_next_seg, next_wqe_index) == 2);
  ring.set_next(7, 3);
  CHECK(be16toh(reinterpret_cast<const mlx5_wqe_srq_next_seg*>(ring.slot(7))->next_wqe_index) ==
        3);
  CHECK(ring.max_sge() == 3);
}

TEST_CASE("SRQ data segments follow the next segment, as rdma-core writes them", "[wqe][srq]") {
  constexpr uint32_t kCnt = 4, kStride = 64;
  test::AlignedBuffer mem(kCnt * kStride);
  const wqe::SrqRing ring{mem.data(), kCnt, kStride};
  wqe::init_srq_ring(ring);
  const Sge sges[] = {{0x1000, 100, 7}, {0x2000, 50, 8}};
  REQUIRE(wqe::encode_recv_wqe(ring.data(2), 0, ring.max_sge(), {9, sges, 2}) == Errc::ok);

  unsigned char expected[kStride - 16];
  auto* seg = reinterpret_cast<mlx5_wqe_data_seg*>(expected);
  mlx5dv_set_data_seg(seg + 0, 100, 7, 0x1000);
  mlx5dv_set_data_seg(seg + 1, 50, 8, 0x2000);
  mlx5dv_set_data_seg(seg + 2, 0, MLX5_INVALID_LKEY, 0);
  CHECK(std::memcmp(ring.slot(2) + 16, expected, sizeof expected) == 0);
  CHECK(ring.next(2) == 3);  // the next segment is left alone

  wqe::DecodedRecvWqe d;
  REQUIRE(wqe::decode_srq_wqe(ring, 2, &d) == wqe::WqeDefect::none);
  REQUIRE(d.num_sge == 2);
  CHECK(d.sges[0].addr == 0x1000);
  CHECK(d.sges[1].length == 50);
  CHECK(d.total_length == 150);
  // A ring whose stride has no room for a data segment is refused, not read past.
  const wqe::SrqRing tiny{mem.data(), kCnt, 16};
  CHECK(wqe::decode_srq_wqe(tiny, 0, &d) == wqe::WqeDefect::bad_ds);
}
