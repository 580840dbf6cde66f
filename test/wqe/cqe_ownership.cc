// SPDX-License-Identifier: BSD-3-Clause
// The CQE owner bit against the consumer index, over several laps of the ring, for 64- and
// 128-byte CQEs (rdma-core get_sw_cqe; docs/design.md, "Protocol notes").
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>

#include "rnicdv/wqe/cqe.h"
#include "wqe_test_util.h"

using namespace rnicdv;

namespace {

wqe::CqeInit req_cqe(uint32_t pi) {
  wqe::CqeInit init;
  init.cqe_opcode = MLX5_CQE_REQ;
  init.send_opcode = MLX5_OPCODE_SEND;
  init.qpn = 0x42;
  init.wqe_counter = static_cast<uint16_t>(pi * 3);
  return init;
}

}  // namespace

TEST_CASE("a fresh CQ ring has no software-owned entry in any lap", "[wqe]") {
  for (uint32_t cqe_size : {64u, 128u}) {
    test::AlignedBuffer mem(8 * cqe_size);
    const wqe::CqRing ring{mem.data(), 8, cqe_size};
    wqe::init_cq_ring(ring);
    for (uint32_t ci = 0; ci < 64; ++ci) REQUIRE(wqe::cqe_for_sw(ring, ci) == nullptr);
    // Every entry says INVALID, owner 0 (libmlx5 mlx5_alloc_cq_buf).
    for (uint32_t i = 0; i < 8; ++i) REQUIRE(ring.cqe(i)->op_own == 0xf0);
  }
}

TEST_CASE("CQEs become software-owned exactly when written for the consumer's lap", "[wqe]") {
  for (uint32_t cqe_size : {64u, 128u}) {
    DYNAMIC_SECTION(cqe_size << "-byte CQEs") {
      constexpr uint32_t kCqeCnt = 8;
      test::AlignedBuffer mem(kCqeCnt * cqe_size);
      const wqe::CqRing ring{mem.data(), kCqeCnt, cqe_size};
      wqe::init_cq_ring(ring);

      // Five laps: the producer writes entry pi, the consumer polls ci == pi.
      for (uint32_t pi = 0; pi < 5 * kCqeCnt; ++pi) {
        const uint32_t ci = pi;
        INFO("index " << pi << " lap " << pi / kCqeCnt);
        // Before the write, the slot holds the previous lap's CQE (or the initial INVALID one):
        // its owner bit is the other lap's.
        REQUIRE(wqe::cqe_for_sw(ring, ci) == nullptr);
        wqe::write_cqe(ring, pi, req_cqe(pi));
        const mlx5_cqe64* cqe = wqe::cqe_for_sw(ring, ci);
        REQUIRE(cqe == ring.cqe(ci));
        REQUIRE((cqe->op_own & 1) == ((pi / kCqeCnt) & 1));
        // The same entry is not valid for a consumer one lap ahead or behind.
        REQUIRE(wqe::cqe_for_sw(ring, ci + kCqeCnt) == nullptr);
        REQUIRE(wqe::cqe_for_sw(ring, ci - kCqeCnt) == nullptr);
        Completion wc;
        wqe::cqe_to_completion(cqe, &wc);
        REQUIRE(wc.wqe_counter == static_cast<uint16_t>(pi * 3));
      }
    }
  }
}

TEST_CASE("a 128-byte CQE keeps its 64-byte struct in the second half", "[wqe]") {
  test::AlignedBuffer mem(4 * 128);
  const wqe::CqRing ring{mem.data(), 4, 128};
  wqe::init_cq_ring(ring);
  wqe::write_cqe(ring, 1, req_cqe(1));
  // Entry 1 spans bytes 128..255; op_own is its last byte, the first half is zeroed.
  REQUIRE(mem.data()[255] == ((MLX5_CQE_REQ << 4) | 0));
  REQUIRE(test::all_bytes_are(mem.data() + 128, 64, 0));
  REQUIRE(reinterpret_cast<uint8_t*>(ring.cqe(1)) == mem.data() + 192);
}

TEST_CASE("an entry with opcode INVALID is never software-owned, whatever its owner bit", "[wqe]") {
  test::AlignedBuffer mem(4 * 64);
  const wqe::CqRing ring{mem.data(), 4, 64};
  wqe::init_cq_ring(ring);
  ring.cqe(0)->op_own = (MLX5_CQE_INVALID << 4) | 1;
  REQUIRE(wqe::cqe_for_sw(ring, 0) == nullptr);
  REQUIRE(wqe::cqe_for_sw(ring, 4) == nullptr);
}

TEST_CASE("the consumer index may wrap at 2^32 without losing the owner parity", "[wqe]") {
  test::AlignedBuffer mem(8 * 64);
  const wqe::CqRing ring{mem.data(), 8, 64};
  wqe::init_cq_ring(ring);
  uint32_t index = 0xfffffff8u;  // the last lap before the counter wraps: owner 1
  for (int i = 0; i < 16; ++i, ++index) {
    wqe::write_cqe(ring, index, req_cqe(index));
    REQUIRE(wqe::cqe_for_sw(ring, index) != nullptr);
    REQUIRE(wqe::cqe_for_sw(ring, index + 8) == nullptr);
  }
}
