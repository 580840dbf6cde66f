// SPDX-License-Identifier: BSD-3-Clause
// The device-side decoder on hostile ring contents: each malformation gets its defect, random
// garbage never reads outside the ring (rings and inline buffers are exact-size heap blocks, so
// ASan reports any stray byte), and WQEs laid out the way rdma-core's libmlx5 writes them
// decode like ours.
#include <endian.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "rnicdv/wqe/decode.h"
#include "rnicdv/wqe/segments.h"
#include "wqe_test_util.h"

using namespace rnicdv;
using wqe::WqeDefect;

namespace {

constexpr uint32_t kQpn = 0x3a;

// Writes raw 16-byte units into the ring starting at BB `pi`, wrapping.
void put_units(wqe::SqRing ring, uint32_t pi, const std::vector<std::vector<uint8_t>>& units) {
  const size_t size = size_t{ring.bb_count} * 64;
  size_t offset = size_t{pi & (ring.bb_count - 1)} * 64;
  for (const auto& unit : units) {
    REQUIRE(unit.size() == 16);
    std::memcpy(ring.buf + offset, unit.data(), 16);
    offset = (offset + 16) % size;
  }
}

std::vector<uint8_t> bytes_of(const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  return std::vector<uint8_t>(b, b + n);
}

std::vector<uint8_t> ctrl_unit(uint32_t pi, uint8_t opcode, uint32_t qpn, uint8_t ds) {
  const mlx5_wqe_ctrl_seg ctrl = wqe::ctrl_segment(pi, opcode, qpn, ds, 0, 0);
  return bytes_of(&ctrl, sizeof ctrl);
}

std::vector<uint8_t> data_unit(uint32_t len, uint32_t lkey, uint64_t addr) {
  const mlx5_wqe_data_seg seg = wqe::data_segment(len, lkey, addr);
  return bytes_of(&seg, sizeof seg);
}

std::vector<uint8_t> raddr_unit(uint64_t addr, uint32_t rkey) {
  const mlx5_wqe_raddr_seg seg = wqe::raddr_segment(addr, rkey);
  return bytes_of(&seg, sizeof seg);
}

// An inline header unit: MLX5_INLINE_SEG | len, then 12 bytes of payload (or leftover bytes).
std::vector<uint8_t> inline_head(uint32_t len, uint8_t fill) {
  std::vector<uint8_t> unit(16, fill);
  store_be32(unit.data(), len | MLX5_INLINE_SEG);
  return unit;
}

struct Decoder {
  Decoder() : decoded(std::make_unique<wqe::DecodedSendWqe>()), inline_buf(1008) {}
  WqeDefect operator()(wqe::SqRing ring, uint32_t pi, uint32_t qpn = kQpn) {
    return wqe::decode_send_wqe(ring, pi, qpn, decoded.get(), inline_buf.data(),
                                static_cast<uint32_t>(inline_buf.size()));
  }
  std::unique_ptr<wqe::DecodedSendWqe> decoded;
  std::vector<uint8_t> inline_buf;
};

}  // namespace

TEST_CASE("DS of 0 is bad_ds", "[wqe]") {
  test::TestSq sq(4);
  put_units(sq.ring, 0, {ctrl_unit(0, MLX5_OPCODE_SEND, kQpn, 0)});
  Decoder decode;
  REQUIRE(decode(sq.ring, 0) == WqeDefect::bad_ds);
  REQUIRE_FALSE(wqe::looks_valid_send_wqe(sq.ring, 0, kQpn));
}

TEST_CASE("DS over 63 or over the ring's size is bad_ds", "[wqe]") {
  Decoder decode;
  {
    test::TestSq sq(32);
    put_units(sq.ring, 0, {ctrl_unit(0, MLX5_OPCODE_SEND, kQpn, 64)});
    REQUIRE(decode(sq.ring, 0) == WqeDefect::bad_ds);
    put_units(sq.ring, 0, {ctrl_unit(0, MLX5_OPCODE_SEND, kQpn, 0xff)});  // reserved bits set
    REQUIRE(decode(sq.ring, 0) == WqeDefect::bad_ds);
  }
  {
    test::TestSq sq(2, 0);  // 128 bytes = 8 units, zeroed: empty data segments
    put_units(sq.ring, 1, {ctrl_unit(1, MLX5_OPCODE_SEND, kQpn, 9)});
    REQUIRE(decode(sq.ring, 1) == WqeDefect::bad_ds);
    REQUIRE_FALSE(wqe::looks_valid_send_wqe(sq.ring, 1, kQpn));
    put_units(sq.ring, 1, {ctrl_unit(1, MLX5_OPCODE_SEND, kQpn, 8)});  // exactly the ring
    REQUIRE(decode(sq.ring, 1) == WqeDefect::none);
  }
}

TEST_CASE("DS below the opcode's fixed segments is bad_ds", "[wqe]") {
  test::TestSq sq(4);
  Decoder decode;
  put_units(sq.ring, 0, {ctrl_unit(0, MLX5_OPCODE_RDMA_WRITE, kQpn, 1)});
  REQUIRE(decode(sq.ring, 0) == WqeDefect::bad_ds);
  put_units(sq.ring, 0, {ctrl_unit(0, MLX5_OPCODE_ATOMIC_CS, kQpn, 3)});
  REQUIRE(decode(sq.ring, 0) == WqeDefect::bad_ds);
}

TEST_CASE("an opcode the device does not execute is bad_opcode", "[wqe]") {
  test::TestSq sq(4);
  Decoder decode;
  for (uint8_t opcode : {uint8_t{MLX5_OPCODE_SEND_INVAL}, uint8_t{MLX5_OPCODE_TSO},
                         uint8_t{MLX5_OPCODE_UMR}, uint8_t{0x03}, uint8_t{0xff}}) {
    put_units(sq.ring, 0, {ctrl_unit(0, opcode, kQpn, 2), data_unit(8, 1, 0x1000)});
    REQUIRE(decode(sq.ring, 0) == WqeDefect::bad_opcode);
    REQUIRE_FALSE(wqe::looks_valid_send_wqe(sq.ring, 0, kQpn));
  }
}

TEST_CASE("a ctrl QPN other than the ring owner's is bad_qpn", "[wqe]") {
  test::TestSq sq(4);
  put_units(sq.ring, 0, {ctrl_unit(0, MLX5_OPCODE_SEND, kQpn + 1, 2), data_unit(8, 1, 0x1000)});
  Decoder decode;
  REQUIRE(decode(sq.ring, 0) == WqeDefect::bad_qpn);
  REQUIRE_FALSE(wqe::looks_valid_send_wqe(sq.ring, 0, kQpn));
}

TEST_CASE("inline data running past the WQE is bad_inline", "[wqe]") {
  test::TestSq sq(4);
  Decoder decode;
  // DS 3 leaves two units (32 bytes) for the inline segment: 28 payload bytes at most.
  put_units(sq.ring, 3,
            {ctrl_unit(3, MLX5_OPCODE_SEND, kQpn, 3), inline_head(29, 0x11),
             std::vector<uint8_t>(16, 0x22)});
  REQUIRE(decode(sq.ring, 3) == WqeDefect::bad_inline);
  put_units(sq.ring, 3,
            {ctrl_unit(3, MLX5_OPCODE_SEND, kQpn, 3), inline_head(28, 0x11),
             std::vector<uint8_t>(16, 0x22)});
  REQUIRE(decode(sq.ring, 3) == WqeDefect::none);
  REQUIRE(decode.decoded->total_length == 28);
  // A length with every bit set cannot overflow the unit arithmetic.
  put_units(sq.ring, 3, {ctrl_unit(3, MLX5_OPCODE_SEND, kQpn, 3), inline_head(0x7fffffff, 0)});
  REQUIRE(decode(sq.ring, 3) == WqeDefect::bad_inline);
}

TEST_CASE("inline data larger than the caller's buffer is bad_inline, not an overflow", "[wqe]") {
  test::TestSq sq(4);
  put_units(sq.ring, 0,
            {ctrl_unit(0, MLX5_OPCODE_SEND, kQpn, 3), inline_head(20, 0x11),
             std::vector<uint8_t>(16, 0x22)});
  auto decoded = std::make_unique<wqe::DecodedSendWqe>();
  test::AlignedBuffer small(19);
  REQUIRE(wqe::decode_send_wqe(sq.ring, 0, kQpn, decoded.get(), small.data(), 19) ==
          WqeDefect::bad_inline);
  REQUIRE(wqe::decode_send_wqe(sq.ring, 0, kQpn, decoded.get(), nullptr, 0) ==
          WqeDefect::bad_inline);
  test::AlignedBuffer exact(20);
  REQUIRE(wqe::decode_send_wqe(sq.ring, 0, kQpn, decoded.get(), exact.data(), 20) ==
          WqeDefect::none);
}

TEST_CASE("inline data in an RDMA READ is bad_inline", "[wqe]") {
  test::TestSq sq(4);
  put_units(
      sq.ring, 0,
      {ctrl_unit(0, MLX5_OPCODE_RDMA_READ, kQpn, 3), raddr_unit(0x1000, 5), inline_head(8, 0x11)});
  Decoder decode;
  REQUIRE(decode(sq.ring, 0) == WqeDefect::bad_inline);
}

TEST_CASE("an atomic without exactly one 8-byte pointer segment is bad_atomic", "[wqe]") {
  test::TestSq sq(4);
  Decoder decode;
  const std::vector<uint8_t> operands(16, 0);
  put_units(sq.ring, 0,
            {ctrl_unit(0, MLX5_OPCODE_ATOMIC_FA, kQpn, 4), raddr_unit(0x1000, 5), operands,
             data_unit(4, 1, 0x2000)});
  REQUIRE(decode(sq.ring, 0) == WqeDefect::bad_atomic);
  put_units(sq.ring, 0,
            {ctrl_unit(0, MLX5_OPCODE_ATOMIC_FA, kQpn, 5), raddr_unit(0x1000, 5), operands,
             data_unit(8, 1, 0x2000), data_unit(8, 1, 0x3000)});
  REQUIRE(decode(sq.ring, 0) == WqeDefect::bad_atomic);
  put_units(sq.ring, 0,
            {ctrl_unit(0, MLX5_OPCODE_ATOMIC_FA, kQpn, 4), raddr_unit(0x1000, 5), operands,
             inline_head(8, 0)});
  REQUIRE(decode(sq.ring, 0) == WqeDefect::bad_atomic);
  put_units(sq.ring, 0,
            {ctrl_unit(0, MLX5_OPCODE_ATOMIC_FA, kQpn, 4), raddr_unit(0x1000, 5), operands,
             data_unit(8, 1, 0x2000)});
  REQUIRE(decode(sq.ring, 0) == WqeDefect::none);
}

TEST_CASE("WQEs laid out the way libmlx5 writes them decode", "[wqe]") {
  test::TestSq sq(4);
  Decoder decode;
  SECTION("a zero-length SEND is a lone ctrl segment (empty SGEs dropped)") {
    put_units(sq.ring, 2, {ctrl_unit(2, MLX5_OPCODE_SEND, kQpn, 1)});
    REQUIRE(decode(sq.ring, 2) == WqeDefect::none);
    REQUIRE(decode.decoded->num_entries == 0);
    REQUIRE(decode.decoded->total_length == 0);
  }
  SECTION("a zero-length RDMA WRITE with immediate is ctrl + raddr") {
    put_units(sq.ring, 2,
              {ctrl_unit(2, MLX5_OPCODE_RDMA_WRITE_IMM, kQpn, 2), raddr_unit(0xabc0, 9)});
    REQUIRE(decode(sq.ring, 2) == WqeDefect::none);
    REQUIRE(decode.decoded->num_entries == 0);
    REQUIRE(decode.decoded->remote_addr == 0xabc0);
  }
  SECTION("an inline WRITE with a signature and stale padding, wrapping the ring") {
    // libmlx5 does not zero the tail of the last inline unit, and sets the signature byte
    // when MLX5_QP_SIGNATURE is set.
    std::vector<uint8_t> ctrl = ctrl_unit(3, MLX5_OPCODE_RDMA_WRITE, kQpn, 5);
    ctrl[8] = 0x5c;  // WQE signature
    std::vector<uint8_t> head = inline_head(40, 0x00);
    for (int i = 4; i < 16; ++i) head[i] = static_cast<uint8_t>(i - 4);  // payload 0..11
    std::vector<uint8_t> middle(16);
    for (int i = 0; i < 16; ++i) middle[i] = static_cast<uint8_t>(12 + i);  // 12..27
    std::vector<uint8_t> wrapped(16, 0xde);  // at the ring's start: 28..39, then stale bytes
    for (int i = 0; i < 12; ++i) wrapped[i] = static_cast<uint8_t>(28 + i);
    put_units(sq.ring, 3, {ctrl, raddr_unit(0x9000, 3), head, middle, wrapped});
    REQUIRE(decode(sq.ring, 3) == WqeDefect::none);
    REQUIRE(decode.decoded->num_entries == 1);
    REQUIRE(decode.decoded->entries[0].is_inline);
    REQUIRE(decode.decoded->inline_bytes == 40);
    for (int i = 0; i < 40; ++i) REQUIRE(decode.inline_buf[i] == i);
  }
  SECTION("an empty inline segment contributes no entry") {
    put_units(sq.ring, 0,
              {ctrl_unit(0, MLX5_OPCODE_SEND, kQpn, 3), inline_head(0, 0), data_unit(4, 2, 8)});
    REQUIRE(decode(sq.ring, 0) == WqeDefect::none);
    REQUIRE(decode.decoded->num_entries == 1);
    REQUIRE_FALSE(decode.decoded->entries[0].is_inline);
  }
}

TEST_CASE("random garbage rings decode to a defect or to a self-consistent WQE", "[wqe]") {
  std::mt19937_64 rng(0xbad5eed);
  auto decoded = std::make_unique<wqe::DecodedSendWqe>();
  int defects = 0, decodes = 0;
  for (int iteration = 0; iteration < 3000; ++iteration) {
    const uint32_t bbs = 1u << (rng() % 5);  // 1..16 BBs
    test::TestSq sq(bbs);
    for (size_t i = 0; i < sq.mem.size(); ++i) sq.mem.data()[i] = static_cast<uint8_t>(rng());
    // Bias half of the rings towards plausible WQEs so the segment parser is reached often.
    const uint32_t pi = static_cast<uint32_t>(rng());
    if (rng() & 1) {
      static constexpr uint8_t kOpcodes[] = {MLX5_OPCODE_NOP,       MLX5_OPCODE_SEND,
                                             MLX5_OPCODE_SEND_IMM,  MLX5_OPCODE_RDMA_WRITE,
                                             MLX5_OPCODE_RDMA_READ, MLX5_OPCODE_ATOMIC_CS};
      const auto ds = static_cast<uint8_t>(1 + rng() % (bbs * 4 < 63 ? bbs * 4 : 63));
      put_units(sq.ring, pi, {ctrl_unit(pi, kOpcodes[rng() % 6], kQpn, ds)});
      // Sprinkle inline headers with small or absurd lengths.
      for (uint32_t u = 1; u < ds; ++u)
        if (rng() % 3 == 0) {
          const uint32_t len =
              (rng() & 1) ? static_cast<uint32_t>(rng() % 64) : static_cast<uint32_t>(rng());
          const size_t offset = (size_t{pi & (bbs - 1)} * 64 + size_t{u} * 16) % (size_t{bbs} * 64);
          store_be32(sq.ring.buf + offset, len | MLX5_INLINE_SEG);
        }
    }
    const uint32_t cap = static_cast<uint32_t>(rng() % 1100);
    test::AlignedBuffer inline_buf(cap == 0 ? 1 : cap);
    const WqeDefect defect =
        wqe::decode_send_wqe(sq.ring, pi, kQpn, decoded.get(), inline_buf.data(), cap);
    (void)wqe::looks_valid_send_wqe(sq.ring, pi, kQpn);
    if (defect != WqeDefect::none) {
      ++defects;
      REQUIRE(std::strcmp(wqe::wqe_defect_name(defect), "unknown") != 0);
      continue;
    }
    ++decodes;
    const wqe::DecodedSendWqe& d = *decoded;
    REQUIRE(d.ds >= 1);
    REQUIRE(d.ds <= 63);
    REQUIRE(size_t{d.ds} * 16 <= sq.mem.size());
    REQUIRE(d.bbs == (d.ds + 3) / 4);
    REQUIRE(d.qpn == kQpn);
    REQUIRE(d.num_entries <= wqe::kMaxDecodedSegments);
    REQUIRE(d.inline_bytes <= cap);
    uint64_t total = 0;
    for (uint32_t i = 0; i < d.num_entries; ++i) {
      total += d.entries[i].length;
      if (d.entries[i].is_inline)
        REQUIRE(d.entries[i].addr + d.entries[i].length <= d.inline_bytes);
    }
    REQUIRE(total == d.total_length);
  }
  // Both outcomes were exercised.
  REQUIRE(defects > 100);
  REQUIRE(decodes > 100);
}

TEST_CASE("receive WQEs decode up to the terminator or the stride, never further", "[wqe]") {
  auto decoded = std::make_unique<wqe::DecodedRecvWqe>();
  SECTION("a stride of 128 segments without a terminator is too_many_segments") {
    test::AlignedBuffer mem(2 * 2048);
    const wqe::RqRing ring{mem.data(), 2, 2048};
    for (uint32_t i = 0; i < 128; ++i) {
      const mlx5_wqe_data_seg seg = wqe::data_segment(1, 2, 3);
      std::memcpy(mem.data() + 2048 + i * 16, &seg, 16);
    }
    REQUIRE(wqe::decode_recv_wqe(ring, 1, decoded.get()) == WqeDefect::too_many_segments);
  }
  SECTION("an inline marker in a scatter entry is bad_inline") {
    test::AlignedBuffer mem(64);
    const wqe::RqRing ring{mem.data(), 1, 64};
    const mlx5_wqe_data_seg seg = wqe::data_segment(MLX5_INLINE_SEG | 4, 2, 3);
    std::memcpy(mem.data(), &seg, 16);
    REQUIRE(wqe::decode_recv_wqe(ring, 0, decoded.get()) == WqeDefect::bad_inline);
  }
  SECTION("a ring geometry that is not a power of two is refused") {
    test::AlignedBuffer mem(3 * 64);
    REQUIRE(wqe::decode_recv_wqe({mem.data(), 3, 64}, 0, decoded.get()) == WqeDefect::bad_ds);
    REQUIRE(wqe::decode_recv_wqe({mem.data(), 1, 48}, 0, decoded.get()) == WqeDefect::bad_ds);
    REQUIRE(wqe::decode_recv_wqe({mem.data(), 1, 8}, 0, decoded.get()) == WqeDefect::bad_ds);
  }
  SECTION("random garbage stays inside the slot") {
    std::mt19937_64 rng(0x5ca77e4);
    for (int iteration = 0; iteration < 2000; ++iteration) {
      const uint32_t stride = 16u << (rng() % 8);  // 16..2048
      test::AlignedBuffer mem(stride * 2);
      for (size_t i = 0; i < mem.size(); ++i) mem.data()[i] = static_cast<uint8_t>(rng());
      const WqeDefect defect = wqe::decode_recv_wqe({mem.data(), 2, stride},
                                                    static_cast<uint32_t>(rng()), decoded.get());
      if (defect == WqeDefect::none) REQUIRE(decoded->num_sge <= stride / 16);
    }
  }
}

TEST_CASE("a send ring that is not a power of two is refused, not indexed", "[wqe]") {
  test::AlignedBuffer mem(3 * 64, 0);
  Decoder decode;
  REQUIRE(decode({mem.data(), 3}, 0) == WqeDefect::bad_ds);
  REQUIRE(decode({nullptr, 4}, 0) == WqeDefect::bad_ds);
  REQUIRE_FALSE(wqe::looks_valid_send_wqe({mem.data(), 3}, 0, kQpn));
}

TEST_CASE("looks_valid_send_wqe wants the WQE index of the slot being scanned", "[wqe]") {
  test::TestSq sq(4);
  put_units(sq.ring, 6, {ctrl_unit(6, MLX5_OPCODE_SEND, kQpn, 1)});
  REQUIRE(wqe::looks_valid_send_wqe(sq.ring, 6, kQpn));
  // The same slot one lap earlier or later holds a stale WQE.
  REQUIRE_FALSE(wqe::looks_valid_send_wqe(sq.ring, 2, kQpn));
  REQUIRE_FALSE(wqe::looks_valid_send_wqe(sq.ring, 10, kQpn));
}

namespace {

// A UD WQE's ctrl segment from rdma-core's own mlx5dv_set_ctrl_seg, then the address vector
// libmlx5's mlx5_create_ah and _set_datagram_seg leave in it, field by field.
std::vector<std::vector<uint8_t>> ud_send_units(uint32_t pi, uint8_t opcode, uint8_t ds,
                                                bool extended) {
  mlx5_wqe_ctrl_seg ctrl{};
  mlx5dv_set_ctrl_seg(&ctrl, static_cast<uint16_t>(pi), opcode, 0, kQpn, MLX5_WQE_CTRL_CQ_UPDATE,
                      ds, 0, htobe32(0x1234));
  mlx5_wqe_datagram_seg dg{};
  dg.av.key.qkey.qkey = htobe32(0x11111111);
  dg.av.dqp_dct = htobe32(0x00abcdefu | (extended ? uint32_t{MLX5_EXTENDED_UD_AV} : 0u));
  dg.av.rlid = htobe16(0xc000);  // RoCE v2: libmlx5 puts the UDP source port here
  const uint8_t mac[6] = {0x02, 0, 0, 0, 0, 9};
  std::memcpy(dg.av.rmac, mac, sizeof mac);
  dg.av.tclass = 0x20;
  dg.av.hop_limit = 64;
  dg.av.grh_gid_fl = htobe32(3u << 20);  // sgid_index 3; "GRH" bit 30 clear, as on RoCE
  const uint8_t gid[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 3};
  std::memcpy(dg.av.rgid, gid, sizeof gid);
  std::vector<std::vector<uint8_t>> units = {bytes_of(&ctrl, sizeof ctrl)};
  const auto* av = reinterpret_cast<const uint8_t*>(&dg);
  for (int i = 0; i < 3; ++i) units.push_back(bytes_of(av + 16 * i, 16));
  return units;
}

}  // namespace

TEST_CASE("UD send WQEs decode with their address vector; RC-only opcodes and compact AVs do not",
          "[wqe]") {
  test::TestSq sq(4);
  Decoder decode;
  const auto ud = [&](uint32_t pi) {
    return wqe::decode_send_wqe(sq.ring, pi, kQpn, decode.decoded.get(), decode.inline_buf.data(),
                                static_cast<uint32_t>(decode.inline_buf.size()),
                                wqe::SqTransport::ud);
  };
  SECTION("SEND with immediate: ctrl, 48-byte AV, one data segment (wrapping the ring)") {
    auto units = ud_send_units(3, MLX5_OPCODE_SEND_IMM, 5, true);
    units.push_back(data_unit(100, 7, 0x5000));
    put_units(sq.ring, 3, units);
    REQUIRE(ud(3) == WqeDefect::none);
    const wqe::DecodedSendWqe& d = *decode.decoded;
    CHECK(d.av.dest_qpn == 0xabcdef);
    CHECK(d.av.qkey == 0x11111111);
    CHECK(d.av.hop_limit == 64);
    CHECK(d.av.tclass == 0x20);
    CHECK(d.av.rmac[5] == 9);
    CHECK(d.av.rgid[12] == 127);
    CHECK(d.av.rgid[15] == 3);
    CHECK(d.imm == 0x1234);
    REQUIRE(d.num_entries == 1);
    CHECK(d.entries[0].addr == 0x5000);
    CHECK(d.total_length == 100);
    CHECK(d.bbs == 2);
    CHECK(wqe::looks_valid_send_wqe(sq.ring, 3, kQpn, wqe::SqTransport::ud));
  }
  SECTION("the same bytes on an RC ring are read as data segments, not an AV") {
    auto units = ud_send_units(0, MLX5_OPCODE_SEND, 5, true);
    units.push_back(data_unit(100, 7, 0x5000));
    put_units(sq.ring, 0, units);
    REQUIRE(decode(sq.ring, 0) == WqeDefect::none);
    CHECK(decode.decoded->num_entries == 4);
    CHECK(decode.decoded->av.dest_qpn == 0);
  }
  SECTION("the compact AV (no extended bit) has no GID: bad_av") {
    auto units = ud_send_units(0, MLX5_OPCODE_SEND, 4, false);
    put_units(sq.ring, 0, units);
    CHECK(ud(0) == WqeDefect::bad_av);
  }
  SECTION("a UD SEND shorter than ctrl + AV is bad_ds") {
    auto units = ud_send_units(0, MLX5_OPCODE_SEND, 3, true);
    put_units(sq.ring, 0, units);
    CHECK(ud(0) == WqeDefect::bad_ds);
    CHECK_FALSE(wqe::looks_valid_send_wqe(sq.ring, 0, kQpn, wqe::SqTransport::ud));
  }
  SECTION("RDMA and atomics are not UD opcodes") {
    for (uint8_t op : {MLX5_OPCODE_RDMA_WRITE, MLX5_OPCODE_RDMA_READ, MLX5_OPCODE_ATOMIC_FA}) {
      put_units(sq.ring, 0, ud_send_units(0, op, 4, true));
      CHECK(ud(0) == WqeDefect::bad_opcode);
    }
  }
  CHECK(std::string(wqe::wqe_defect_name(WqeDefect::bad_av)) == "bad_av");
}
