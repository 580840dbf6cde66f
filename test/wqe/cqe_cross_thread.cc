// SPDX-License-Identifier: BSD-3-Clause
// A device thread writes CQEs while the consumer polls: the consumer never sees a CQE before
// all of its fields (write_cqe stores op_own last with release, cqe_for_sw loads it with
// acquire). Run under ThreadSanitizer this also proves the protocol race-free.
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdint>
#include <thread>

#include "rnicdv/wqe/cqe.h"
#include "wqe_test_util.h"

using namespace rnicdv;

TEST_CASE("CQEs written by another thread are seen whole and in order", "[wqe]") {
  for (uint32_t cqe_size : {64u, 128u}) {
    constexpr uint32_t kCqeCnt = 16;
    constexpr uint32_t kCount = 20000;
    test::AlignedBuffer mem(kCqeCnt * cqe_size);
    const wqe::CqRing ring{mem.data(), kCqeCnt, cqe_size};
    wqe::init_cq_ring(ring);
    std::atomic<uint32_t> consumer_index{0};  // what the CQ doorbell record carries

    std::thread device([&] {
      for (uint32_t pi = 0; pi < kCount; ++pi) {
        // Never overwrite an entry the consumer has not taken (a CQ overrun).
        while (pi - consumer_index.load(std::memory_order_acquire) >= kCqeCnt)
          std::this_thread::yield();
        wqe::CqeInit init;
        init.cqe_opcode = MLX5_CQE_RESP_SEND_IMM;
        init.qpn = pi & 0xffffff;
        init.src_qpn = (pi * 7) & 0xffffff;
        init.byte_cnt = pi * 3;
        init.imm = ~pi;
        init.wqe_counter = static_cast<uint16_t>(pi);
        wqe::write_cqe(ring, pi, init);
      }
    });

    for (uint32_t ci = 0; ci < kCount; ++ci) {
      const mlx5_cqe64* cqe;
      while ((cqe = wqe::cqe_for_sw(ring, ci)) == nullptr) std::this_thread::yield();
      Completion wc;
      wqe::cqe_to_completion(cqe, &wc);
      REQUIRE(wc.opcode == IBV_WC_RECV);
      REQUIRE(wc.qp_num == (ci & 0xffffff));
      REQUIRE(wc.src_qp == ((ci * 7) & 0xffffff));
      REQUIRE(wc.byte_len == ci * 3);
      REQUIRE(wc.imm_data == ~ci);
      REQUIRE(wc.wqe_counter == static_cast<uint16_t>(ci));
      consumer_index.store(ci + 1, std::memory_order_release);
    }
    device.join();
  }
}
