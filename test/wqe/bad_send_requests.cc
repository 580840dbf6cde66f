// SPDX-License-Identifier: BSD-3-Clause
// Bad requests get their own error code and leave the ring exactly as it was: every case runs
// against a canary-filled ring and checks every byte afterwards.
#include <catch2/catch.hpp>
#include <cstdint>
#include <vector>

#include "rnicdv/wqe/recv_wqe.h"
#include "rnicdv/wqe/send_wqe.h"
#include "wqe_test_util.h"

using namespace rnicdv;

namespace {

constexpr uint32_t kQpn = 0x77;
constexpr uint32_t kRingBbs = 32;
const wqe::SqLimits kLimits{/*max_sge=*/4, /*max_inline=*/64};

Errc try_encode(const SendWr& wr, const wqe::SqLimits& limits = kLimits,
                uint32_t free_bbs = kRingBbs, uint32_t pi = 31) {
  test::TestSq sq(kRingBbs);
  wqe::EncodedWqe enc{};
  uint8_t ds = 0xee;
  const Errc sized = wqe::send_wqe_size(wr, limits, &ds);
  const Errc err = wqe::encode_send_wqe(sq.ring, pi, free_bbs, kQpn, wr, limits, 0, &enc);
  if (err != Errc::ok) {
    INFO("ring after a rejected " << errc_name(err) << " request\n"
                                  << test::hex_dump(sq.mem.data(), sq.mem.size()));
    REQUIRE(test::all_bytes_are(sq.mem.data(), sq.mem.size(), test::kCanary));
    REQUIRE(enc.ctrl == nullptr);
    // Sizing alone agrees, except on room, which only the encoder knows about.
    if (err != Errc::queue_full) {
      REQUIRE(sized == err);
      REQUIRE(ds == 0xee);
    }
  }
  return err;
}

SendWr send_of(const std::vector<Sge>& sges, SendFlags flags = {}) {
  SendWr wr;
  wr.opcode = WrOpcode::send;
  wr.flags = flags;
  wr.sg_list = sges.data();
  wr.num_sge = static_cast<uint32_t>(sges.size());
  return wr;
}

}  // namespace

TEST_CASE("more SGEs than max_send_sge is too_many_sge", "[wqe]") {
  const std::vector<Sge> five(5, Sge{0x1000, 8, 1});
  REQUIRE(try_encode(send_of(five)) == Errc::too_many_sge);
  // Counted before empty SGEs are dropped, as libmlx5 does.
  const std::vector<Sge> five_with_empties = {
      {1, 8, 1}, {2, 0, 1}, {3, 0, 1}, {4, 0, 1}, {5, 0, 1}};
  REQUIRE(try_encode(send_of(five_with_empties)) == Errc::too_many_sge);
  const std::vector<Sge> four(4, Sge{0x1000, 8, 1});
  REQUIRE(try_encode(send_of(four)) == Errc::ok);
}

TEST_CASE("a WQE that would exceed 63 units is too_many_sge even under a generous limit", "[wqe]") {
  const std::vector<Sge> sixty_two(62, Sge{0x1000, 8, 1});
  SendWr write = send_of(sixty_two);
  write.opcode = WrOpcode::rdma_write;  // 2 + 62 = 64 units
  REQUIRE(try_encode(write, {/*max_sge=*/100, 0}) == Errc::too_many_sge);
  write.num_sge = 61;  // 63 units: the largest WQE
  REQUIRE(try_encode(write, {100, 0}) == Errc::ok);
}

TEST_CASE("inline payload over max_inline_data is inline_too_large", "[wqe]") {
  std::vector<uint8_t> payload(200, 0x11);
  const auto at = reinterpret_cast<uintptr_t>(payload.data());
  REQUIRE(try_encode(send_of({{at, 40, 0}, {at + 40, 25, 0}}, send_flags::inline_data)) ==
          Errc::inline_too_large);
  REQUIRE(try_encode(send_of({{at, 40, 0}, {at + 40, 24, 0}}, send_flags::inline_data)) ==
          Errc::ok);
}

TEST_CASE("inline payload that would not fit in 63 units is inline_too_large", "[wqe]") {
  std::vector<uint8_t> payload(1000, 0x22);
  const auto at = reinterpret_cast<uintptr_t>(payload.data());
  const wqe::SqLimits huge{4, 4096};
  // SEND: 1 + ceil((988 + 4) / 16) = 63 units fits; 989 bytes need 64.
  REQUIRE(try_encode(send_of({{at, 989, 0}}, send_flags::inline_data), huge) ==
          Errc::inline_too_large);
  REQUIRE(try_encode(send_of({{at, 988, 0}}, send_flags::inline_data), huge) == Errc::ok);
}

TEST_CASE("a WQE larger than the free space is queue_full", "[wqe]") {
  const std::vector<Sge> four(4, Sge{0x1000, 8, 1});  // DS 5: two BBs
  REQUIRE(try_encode(send_of(four), kLimits, /*free_bbs=*/1) == Errc::queue_full);
  REQUIRE(try_encode(send_of(four), kLimits, /*free_bbs=*/0) == Errc::queue_full);
  REQUIRE(try_encode(send_of(four), kLimits, /*free_bbs=*/2) == Errc::ok);
  SendWr nop;
  nop.opcode = WrOpcode::nop;
  REQUIRE(try_encode(nop, kLimits, 0) == Errc::queue_full);
}

TEST_CASE("an opcode this encoder does not build is invalid_argument", "[wqe]") {
  const std::vector<Sge> one(1, Sge{0x1000, 8, 1});
  for (uint8_t raw : {uint8_t{MLX5_OPCODE_SEND_INVAL}, uint8_t{MLX5_OPCODE_TSO},
                      uint8_t{MLX5_OPCODE_UMR}, uint8_t{0xff}}) {
    SendWr wr = send_of(one);
    wr.opcode = static_cast<WrOpcode>(raw);
    INFO("opcode " << int(raw));
    REQUIRE(try_encode(wr) == Errc::invalid_argument);
  }
}

TEST_CASE("atomics need an 8-byte-aligned remote address and one 8-byte SGE", "[wqe]") {
  std::vector<Sge> result(1, Sge{0x3000, 8, 9});
  SendWr wr = send_of(result);
  wr.opcode = WrOpcode::atomic_fetch_add;
  wr.remote_addr = 0x2000;
  REQUIRE(try_encode(wr) == Errc::ok);
  for (uint64_t misaligned : {0x2001ull, 0x2004ull, 0x2007ull}) {
    wr.remote_addr = misaligned;
    REQUIRE(try_encode(wr) == Errc::invalid_argument);
  }
  wr.remote_addr = 0x2000;
  wr.opcode = WrOpcode::atomic_cmp_swap;
  result[0].length = 4;
  REQUIRE(try_encode(wr) == Errc::invalid_argument);
  result[0].length = 8;
  wr.num_sge = 0;
  REQUIRE(try_encode(wr) == Errc::invalid_argument);
  const std::vector<Sge> two(2, Sge{0x3000, 8, 9});
  wr.sg_list = two.data();
  wr.num_sge = 2;
  REQUIRE(try_encode(wr) == Errc::invalid_argument);
  wr.num_sge = 1;
  wr.flags = send_flags::inline_data;
  REQUIRE(try_encode(wr) == Errc::invalid_argument);
}

TEST_CASE("inline data on an opcode without a local payload is invalid_argument", "[wqe]") {
  std::vector<uint8_t> payload(16);
  const std::vector<Sge> one(1, Sge{reinterpret_cast<uintptr_t>(payload.data()), 16, 0});
  SendWr read = send_of(one, send_flags::inline_data);
  read.opcode = WrOpcode::rdma_read;
  REQUIRE(try_encode(read) == Errc::invalid_argument);
  SendWr nop = send_of({}, send_flags::inline_data);
  nop.opcode = WrOpcode::nop;
  REQUIRE(try_encode(nop) == Errc::invalid_argument);
}

TEST_CASE("an SGE count without an SGE list is invalid_argument", "[wqe]") {
  SendWr wr;
  wr.opcode = WrOpcode::rdma_write;
  wr.num_sge = 1;
  REQUIRE(try_encode(wr) == Errc::invalid_argument);
}

TEST_CASE("a padding NOP needs 1..63 units and room", "[wqe]") {
  test::TestSq sq(4);
  wqe::EncodedWqe enc{};
  REQUIRE(wqe::encode_nop_wqe(sq.ring, 0, 4, kQpn, 0, 0, &enc) == Errc::invalid_argument);
  REQUIRE(wqe::encode_nop_wqe(sq.ring, 0, 4, kQpn, 64, 0, &enc) == Errc::invalid_argument);
  REQUIRE(wqe::encode_nop_wqe(sq.ring, 0, 1, kQpn, 5, 0, &enc) == Errc::queue_full);
  REQUIRE(test::all_bytes_are(sq.mem.data(), sq.mem.size(), test::kCanary));
}

TEST_CASE("a receive WQE with too many SGEs is too_many_sge and writes nothing", "[wqe]") {
  test::AlignedBuffer mem(4 * 64);
  const wqe::RqRing ring{mem.data(), 4, 64};  // 4 segments per WQE
  const std::vector<Sge> five(5, Sge{0x1000, 8, 1});
  RecvWr wr{1, five.data(), 5};
  REQUIRE(wqe::encode_recv_wqe(ring, 1, 4, wr) == Errc::too_many_sge);
  wr.num_sge = 3;
  REQUIRE(wqe::encode_recv_wqe(ring, 1, 2, wr) == Errc::too_many_sge);  // QP limit below stride
  REQUIRE(wqe::encode_recv_wqe(ring, 1, 8, {1, five.data(), 5}) == Errc::too_many_sge);
  REQUIRE(wqe::encode_recv_wqe(ring, 1, 4, {1, nullptr, 2}) == Errc::invalid_argument);
  REQUIRE(test::all_bytes_are(mem.data(), mem.size(), test::kCanary));
}
