// SPDX-License-Identifier: BSD-3-Clause
// Receive WQEs: data segments as rdma-core's mlx5dv_set_data_seg writes them, then the
// MLX5_INVALID_LKEY terminator when the stride has room for more (libmlx5 mlx5_post_recv).
#include <infiniband/mlx5dv.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "rnicdv/wqe/decode.h"
#include "rnicdv/wqe/recv_wqe.h"
#include "wqe_test_util.h"

using namespace rnicdv;

TEST_CASE("receive WQEs are data segments plus a terminator when the stride has room", "[wqe]") {
  constexpr uint32_t kStride = 64;  // 4 segments
  test::AlignedBuffer mem(8 * kStride);
  const wqe::RqRing ring{mem.data(), 8, kStride};
  const Sge sges[] = {{0x1000, 100, 7}, {0x2000, 0, 8}, {0x3000, 300, 9}};
  REQUIRE(wqe::encode_recv_wqe(ring, 13, 4, {42, sges, 3}) == Errc::ok);  // slot 13 & 7 = 5

  unsigned char expected[kStride];
  std::memset(expected, test::kCanary, sizeof expected);
  auto* seg = reinterpret_cast<mlx5_wqe_data_seg*>(expected);
  for (int i = 0; i < 3; ++i)
    mlx5dv_set_data_seg(seg + i, sges[i].length, sges[i].lkey, sges[i].addr);
  mlx5dv_set_data_seg(seg + 3, 0, MLX5_INVALID_LKEY, 0);
  REQUIRE(std::memcmp(mem.data() + 5 * kStride, expected, kStride) == 0);
  // Nothing outside slot 5 was written.
  REQUIRE(test::all_bytes_are(mem.data(), 5 * kStride, test::kCanary));
  REQUIRE(test::all_bytes_are(mem.data() + 6 * kStride, 2 * kStride, test::kCanary));
}

TEST_CASE("a full receive WQE has no terminator", "[wqe]") {
  test::AlignedBuffer mem(2 * 32);
  const wqe::RqRing ring{mem.data(), 2, 32};
  const Sge sges[] = {{0x1000, 1, 1}, {0x2000, 2, 2}};
  REQUIRE(wqe::encode_recv_wqe(ring, 0, 2, {1, sges, 2}) == Errc::ok);
  REQUIRE(test::all_bytes_are(mem.data() + 32, 32, test::kCanary));
  auto decoded = std::make_unique<wqe::DecodedRecvWqe>();
  REQUIRE(wqe::decode_recv_wqe(ring, 0, decoded.get()) == wqe::WqeDefect::none);
  REQUIRE(decoded->num_sge == 2);
}

TEST_CASE("a receive WQE without SGEs is a lone terminator", "[wqe]") {
  test::AlignedBuffer mem(16);
  const wqe::RqRing ring{mem.data(), 1, 16};
  REQUIRE(wqe::encode_recv_wqe(ring, 0, 1, {1, nullptr, 0}) == Errc::ok);
  const mlx5_wqe_data_seg end = wqe::terminator_segment();
  REQUIRE(std::memcmp(mem.data(), &end, 16) == 0);
  auto decoded = std::make_unique<wqe::DecodedRecvWqe>();
  REQUIRE(wqe::decode_recv_wqe(ring, 0, decoded.get()) == wqe::WqeDefect::none);
  REQUIRE(decoded->num_sge == 0);
}

TEST_CASE("random receive WQEs decode to their scatter lists", "[wqe]") {
  std::mt19937_64 rng(0x4ecf);
  auto decoded = std::make_unique<wqe::DecodedRecvWqe>();
  for (int i = 0; i < 2000; ++i) {
    const uint32_t stride = 16u << (rng() % 7);  // 16..1024: up to 64 segments
    const uint32_t capacity = stride / 16;
    test::AlignedBuffer mem(4 * stride);
    const wqe::RqRing ring{mem.data(), 4, stride};
    std::vector<Sge> sges(rng() % (capacity + 1));
    uint64_t total = 0;
    for (Sge& sge : sges) {
      // Zero-length entries stay: a zero-length receive is valid.
      sge = {rng(), static_cast<uint32_t>(rng() % 4 == 0 ? 0 : rng() % 100000),
             static_cast<uint32_t>(rng() | 0x1000)};
      total += sge.length;
    }
    const auto index = static_cast<uint32_t>(rng());
    REQUIRE(wqe::encode_recv_wqe(ring, index, capacity,
                                 {1, sges.data(), static_cast<uint32_t>(sges.size())}) == Errc::ok);
    REQUIRE(wqe::decode_recv_wqe(ring, index, decoded.get()) == wqe::WqeDefect::none);
    REQUIRE(decoded->num_sge == sges.size());
    REQUIRE(decoded->total_length == total);
    for (size_t k = 0; k < sges.size(); ++k) {
      REQUIRE(decoded->sges[k].addr == sges[k].addr);
      REQUIRE(decoded->sges[k].length == sges[k].length);
      REQUIRE(decoded->sges[k].lkey == sges[k].lkey);
    }
  }
}
