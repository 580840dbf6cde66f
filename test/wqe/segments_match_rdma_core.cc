// SPDX-License-Identifier: BSD-3-Clause
// Our control and data segments are byte-identical to what rdma-core's own inline helpers
// (mlx5dv_set_ctrl_seg, mlx5dv_set_data_seg from <infiniband/mlx5dv.h>) produce.
#include <endian.h>
#include <infiniband/mlx5dv.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <random>
#include <vector>

#include "rnicdv/wqe/decode.h"
#include "rnicdv/wqe/segments.h"
#include "rnicdv/wqe/send_wqe.h"
#include "wqe_test_util.h"

using namespace rnicdv;
using rnicdv::test::hex_dump;

namespace {

constexpr uint8_t kOpcodes[] = {
    MLX5_OPCODE_NOP,        MLX5_OPCODE_SEND,           MLX5_OPCODE_SEND_IMM,
    MLX5_OPCODE_RDMA_WRITE, MLX5_OPCODE_RDMA_WRITE_IMM, MLX5_OPCODE_RDMA_READ,
    MLX5_OPCODE_ATOMIC_CS,  MLX5_OPCODE_ATOMIC_FA};

// The WQE rdma-core's helpers build for `wr` (pointer SGEs only), laid out flat.
std::vector<uint8_t> oracle_wqe(const SendWr& wr, uint32_t pi, uint32_t qpn) {
  const uint8_t opcode = static_cast<uint8_t>(wr.opcode);
  const bool rdma = wr.opcode == WrOpcode::rdma_write || wr.opcode == WrOpcode::rdma_write_imm ||
                    wr.opcode == WrOpcode::rdma_read;
  const bool atomic =
      wr.opcode == WrOpcode::atomic_cmp_swap || wr.opcode == WrOpcode::atomic_fetch_add;
  std::vector<uint8_t> out(16 * 64, 0);
  uint8_t* seg = out.data() + 16;
  if (rdma || atomic) {
    mlx5_wqe_raddr_seg raddr{};
    raddr.raddr = htobe64(wr.remote_addr);
    raddr.rkey = htobe32(wr.rkey);
    std::memcpy(seg, &raddr, sizeof raddr);
    seg += 16;
  }
  if (atomic) {
    mlx5_wqe_atomic_seg operands{};
    const bool cas = wr.opcode == WrOpcode::atomic_cmp_swap;
    operands.swap_add = htobe64(cas ? wr.swap : wr.compare_add);
    operands.compare = cas ? htobe64(wr.compare_add) : 0;
    std::memcpy(seg, &operands, sizeof operands);
    seg += 16;
    mlx5dv_set_data_seg(reinterpret_cast<mlx5_wqe_data_seg*>(seg), 8, wr.sg_list[0].lkey,
                        wr.sg_list[0].addr);
    seg += 16;
  } else if (wr.opcode != WrOpcode::nop) {
    for (uint32_t i = 0; i < wr.num_sge; ++i) {
      if (wr.sg_list[i].length == 0) continue;
      mlx5dv_set_data_seg(reinterpret_cast<mlx5_wqe_data_seg*>(seg), wr.sg_list[i].length,
                          wr.sg_list[i].lkey, wr.sg_list[i].addr);
      seg += 16;
    }
  }
  const auto ds = static_cast<uint8_t>((seg - out.data()) / 16);
  const bool has_imm = wr.opcode == WrOpcode::send_imm || wr.opcode == WrOpcode::rdma_write_imm;
  mlx5dv_set_ctrl_seg(reinterpret_cast<mlx5_wqe_ctrl_seg*>(out.data()), static_cast<uint16_t>(pi),
                      opcode, 0, qpn, wqe::fm_ce_se_for(wr.flags), ds, 0,
                      has_imm ? htobe32(wr.imm_data) : 0);
  out.resize(size_t{ds} * 16);
  return out;
}

}  // namespace

TEST_CASE("ctrl segments are byte-identical to mlx5dv_set_ctrl_seg", "[wqe]") {
  std::mt19937_64 rng(0x5eed0001);
  for (int i = 0; i < 20000; ++i) {
    const auto pi = static_cast<uint32_t>(rng());
    const uint8_t opcode = kOpcodes[rng() % std::size(kOpcodes)];
    const auto qpn = static_cast<uint32_t>(rng() & 0xffffff);
    const auto ds = static_cast<uint8_t>(1 + rng() % 63);
    const auto fm_ce_se = static_cast<uint8_t>(rng() & 0xea);  // fence, CE, SE bits
    const auto imm = static_cast<uint32_t>(rng());

    unsigned char oracle[16] = {};  // the helper leaves dci_stream_channel_id alone
    mlx5dv_set_ctrl_seg(reinterpret_cast<mlx5_wqe_ctrl_seg*>(oracle), static_cast<uint16_t>(pi),
                        opcode, 0, qpn, fm_ce_se, ds, 0, imm);
    const mlx5_wqe_ctrl_seg ours = wqe::ctrl_segment(pi, opcode, qpn, ds, fm_ce_se, imm);

    INFO("pi " << pi << " opcode " << int(opcode) << " qpn " << qpn << " ds " << int(ds));
    REQUIRE(std::memcmp(&ours, oracle, sizeof oracle) == 0);
  }
}

TEST_CASE("data segments are byte-identical to mlx5dv_set_data_seg", "[wqe]") {
  std::mt19937_64 rng(0x5eed0002);
  for (int i = 0; i < 20000; ++i) {
    const auto length = static_cast<uint32_t>(rng());
    const auto lkey = static_cast<uint32_t>(rng());
    const uint64_t addr = rng();
    mlx5_wqe_data_seg oracle;
    std::memset(&oracle, 0x5a, sizeof oracle);
    mlx5dv_set_data_seg(&oracle, length, lkey, addr);
    const mlx5_wqe_data_seg ours = wqe::data_segment(length, lkey, addr);
    REQUIRE(std::memcmp(&ours, &oracle, sizeof oracle) == 0);
  }
}

TEST_CASE("encoded WQEs equal the WQE rdma-core's helpers build, at every ring offset", "[wqe]") {
  constexpr uint32_t kBbs = 16;
  const wqe::SqLimits limits{/*max_sge=*/24, /*max_inline=*/0};
  test::RandomSendWrs gen(0x5eed0003, limits);
  test::TestSq sq(kBbs);
  uint32_t pi = 0xfff0;  // crosses the 16-bit WQE index wrap as well as the ring's end
  for (int i = 0; i < 4000; ++i) {
    const SendWr& wr = gen.next();
    const auto qpn = static_cast<uint32_t>(gen.rng()() & 0xffffff);
    wqe::EncodedWqe enc;
    REQUIRE(wqe::encode_send_wqe(sq.ring, pi, kBbs, qpn, wr, limits, 0, &enc) == Errc::ok);

    const std::vector<uint8_t> expected = oracle_wqe(wr, pi, qpn);
    const std::vector<uint8_t> actual = test::wqe_bytes(sq.ring, pi, expected.size());
    INFO("pi " << pi << " opcode " << int(wr.opcode) << " num_sge " << wr.num_sge << "\nexpected\n"
               << hex_dump(expected.data(), expected.size()) << "actual\n"
               << hex_dump(actual.data(), actual.size()));
    REQUIRE(enc.ds == expected.size() / 16);
    REQUIRE(enc.bbs == (enc.ds + 3) / 4);
    REQUIRE(reinterpret_cast<uint8_t*>(enc.ctrl) == sq.ring.bb(pi));
    REQUIRE(actual == expected);
    pi += enc.bbs;
  }
}

// libmlx5's UD send (providers/mlx5/qp.c, set_datagram_seg): ctrl, then the address handle's
// mlx5_wqe_av with the destination QP (and MLX5_EXTENDED_UD_AV) and the Q_Key written over
// it, then the data segments or the inline payload.
TEST_CASE("a UD SEND carries the address vector, destination QP and Q_Key as libmlx5 lays "
          "them out, and a datagram is refused on any other opcode",
          "[wqe][ud]") {
  mlx5_wqe_av av;
  std::memset(&av, 0, sizeof av);
  av.stat_rate_sl = 3 << 1;
  av.tclass = 0x68;
  av.hop_limit = 64;
  av.grh_gid_fl = htobe32((3u << 20) | 0x12345);
  const uint8_t rmac[6] = {0x02, 0, 10, 0, 0, 2};
  std::memcpy(av.rmac, rmac, 6);
  const uint8_t rgid[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2};
  std::memcpy(av.rgid, rgid, 16);
  av.key.qkey.qkey = htobe32(0xdeadbeef);  // overwritten by the WR's Q_Key
  av.dqp_dct = htobe32(0x777);             // overwritten by the WR's QPN

  const Sge sge{0x1000200030004000ull, 512, 0x4242};
  for (uint32_t pi : {0u, 5u, 7u}) {  // 7: the payload starts at the ring's start
    INFO("pi " << pi);
    rnicdv::test::TestSq sq(8);
    SendWr wr;
    wr.wr_id = 1;
    wr.opcode = WrOpcode::send_imm;
    wr.imm_data = 0xabcdef01;
    wr.flags = send_flags::signaled;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.av = &av;
    wr.remote_qpn = 0x123456;
    wr.remote_qkey = 0x11111111;
    wqe::EncodedWqe enc;
    REQUIRE(wqe::encode_send_wqe(sq.ring, pi, 8, 0xabc, wr, wqe::SqLimits{1, 0}, 0, &enc) ==
            Errc::ok);
    CHECK(enc.ds == 5);  // ctrl + datagram (3) + data
    CHECK(enc.bbs == 2);

    uint8_t expect[80] = {};
    mlx5dv_set_ctrl_seg(reinterpret_cast<mlx5_wqe_ctrl_seg*>(expect), static_cast<uint16_t>(pi),
                        MLX5_OPCODE_SEND_IMM, 0, 0xabc, MLX5_WQE_CTRL_CQ_UPDATE, 5, 0,
                        htobe32(0xabcdef01));
    mlx5_wqe_datagram_seg dg;
    std::memcpy(&dg.av, &av, sizeof av);
    dg.av.dqp_dct = htobe32(0x123456 | MLX5_EXTENDED_UD_AV);
    dg.av.key.qkey.qkey = htobe32(0x11111111);
    std::memcpy(expect + 16, &dg, sizeof dg);
    mlx5dv_set_data_seg(reinterpret_cast<mlx5_wqe_data_seg*>(expect + 64), 512, 0x4242,
                        0x1000200030004000ull);
    const uint8_t* first = sq.ring.bb(pi);
    const uint8_t* second = sq.ring.bb(pi + 1);
    INFO(hex_dump(first, 64) << "\n" << hex_dump(second, 16));
    CHECK(std::memcmp(first, expect, 64) == 0);
    CHECK(std::memcmp(second, expect + 64, 16) == 0);
  }

  rnicdv::test::TestSq sq(8);
  for (WrOpcode op : {WrOpcode::rdma_write, WrOpcode::rdma_write_imm, WrOpcode::rdma_read,
                      WrOpcode::atomic_fetch_add, WrOpcode::atomic_cmp_swap, WrOpcode::nop}) {
    INFO("opcode " << static_cast<int>(op));
    const Sge eight{0x1000, 8, 1};
    SendWr wr;
    wr.opcode = op;
    wr.sg_list = &eight;
    wr.num_sge = 1;
    wr.remote_addr = 0x2000;
    wr.av = &av;
    wqe::EncodedWqe enc;
    uint8_t ds = 0;
    CHECK(wqe::send_wqe_size(wr, wqe::SqLimits{1, 0}, &ds) == Errc::invalid_argument);
    CHECK(wqe::encode_send_wqe(sq.ring, 0, 8, 1, wr, wqe::SqLimits{1, 0}, 0, &enc) ==
          Errc::invalid_argument);
    CHECK(rnicdv::test::all_bytes_are(sq.mem.data(), sq.mem.size(), rnicdv::test::kCanary));
  }

  // Inline: the payload after the datagram segment, sized with it.
  const char text[] = "datagram payload";
  const Sge inl{reinterpret_cast<uint64_t>(text), sizeof text, 0};
  SendWr wr;
  wr.opcode = WrOpcode::send;
  wr.flags = send_flags::inline_data;
  wr.sg_list = &inl;
  wr.num_sge = 1;
  wr.av = &av;
  uint8_t ds = 0;
  REQUIRE(wqe::send_wqe_size(wr, wqe::SqLimits{1, 64}, &ds) == Errc::ok);
  CHECK(ds == 4 + (4 + sizeof text + 15) / 16);
  wqe::EncodedWqe enc;
  REQUIRE(wqe::encode_send_wqe(sq.ring, 2, 8, 1, wr, wqe::SqLimits{1, 64}, 0, &enc) == Errc::ok);
  CHECK(enc.ds == ds);
  const uint8_t* payload = sq.ring.bb(3);
  CHECK(be32toh(*reinterpret_cast<const uint32_t*>(payload)) == (sizeof text | MLX5_INLINE_SEG));
  CHECK(std::memcmp(payload + 4, text, sizeof text) == 0);
}

// libmlx5's XRC send (providers/mlx5/qp.c, _mlx5_post_send on IBV_QPT_XRC_SEND): ctrl, then
// mlx5_wqe_xrc_seg (xrc_srqn big-endian, 12 reserved bytes, which this driver zeroes), then
// the RC WQE's segments; DS counts the XRC segment.
TEST_CASE("an XRC WQE is the RC WQE with mlx5_wqe_xrc_seg after ctrl, at every ring offset, "
          "and decodes back to its SRQ",
          "[wqe][xrc]") {
  constexpr uint32_t kBbs = 16;
  const wqe::SqLimits limits{/*max_sge=*/24, /*max_inline=*/0};
  test::RandomSendWrs gen(0x5eed0004, limits);
  test::TestSq sq(kBbs);
  uint32_t pi = 0xfff0;
  int built = 0;
  for (int i = 0; i < 4000; ++i) {
    SendWr wr = gen.next();
    if (wr.opcode == WrOpcode::nop) continue;
    wr.remote_srqn = static_cast<uint32_t>(gen.rng()() & 0xffffff);
    const auto qpn = static_cast<uint32_t>(gen.rng()() & 0xffffff);
    const std::vector<uint8_t> rc = oracle_wqe(wr, pi, qpn);
    wqe::EncodedWqe enc;
    const Errc err = wqe::encode_xrc_send_wqe(sq.ring, pi, kBbs, qpn, wr, limits, 0, &enc);
    if (rc.size() / 16 + 1 > wqe::kMaxWqeDs) {
      // One segment more than RC's largest WQE: too many SGEs for XRC.
      REQUIRE(err == Errc::too_many_sge);
      continue;
    }
    REQUIRE(err == Errc::ok);
    // ctrl, then mlx5_wqe_xrc_seg (the SRQ number, big-endian, then 12 reserved bytes), then
    // the rest of the RC WQE.
    std::vector<uint8_t> expected(rc.begin(), rc.begin() + 16);
    const uint32_t srqn = wr.remote_srqn;
    for (int shift = 24; shift >= 0; shift -= 8) {
      expected.push_back(static_cast<uint8_t>(srqn >> shift));
    }
    expected.resize(32, 0);
    expected.insert(expected.end(), rc.begin() + 16, rc.end());
    // The ctrl segment's DS counts the XRC segment.
    const bool has_imm = wr.opcode == WrOpcode::send_imm || wr.opcode == WrOpcode::rdma_write_imm;
    mlx5dv_set_ctrl_seg(reinterpret_cast<mlx5_wqe_ctrl_seg*>(expected.data()),
                        static_cast<uint16_t>(pi), static_cast<uint8_t>(wr.opcode), 0, qpn,
                        wqe::fm_ce_se_for(wr.flags), static_cast<uint8_t>(expected.size() / 16),
                        0, has_imm ? htobe32(wr.imm_data) : 0);
    const std::vector<uint8_t> actual = test::wqe_bytes(sq.ring, pi, expected.size());
    INFO("pi " << pi << " opcode " << int(wr.opcode) << "\nexpected\n"
               << hex_dump(expected.data(), expected.size()) << "actual\n"
               << hex_dump(actual.data(), actual.size()));
    REQUIRE(enc.ds == expected.size() / 16);
    REQUIRE(enc.bbs == (enc.ds + 3) / 4);
    REQUIRE(actual == expected);

    wqe::DecodedSendWqe d;
    REQUIRE(wqe::decode_send_wqe(sq.ring, pi, qpn, &d, nullptr, 0, wqe::SqTransport::xrc) ==
            wqe::WqeDefect::none);
    CHECK(d.xrc_srqn == wr.remote_srqn);
    CHECK(d.remote_addr == (wr.opcode == WrOpcode::send || wr.opcode == WrOpcode::send_imm
                                ? 0
                                : wr.remote_addr));
    pi += enc.bbs;
    ++built;
  }
  CHECK(built > 3000);

  // Refused: a datagram, a NOP, an SRQ number above 24 bits.
  const Sge eight{0x1000, 8, 1};
  SendWr wr;
  wr.opcode = WrOpcode::send;
  wr.sg_list = &eight;
  wr.num_sge = 1;
  wr.remote_srqn = 0x1000000;
  wqe::EncodedWqe enc;
  CHECK(wqe::encode_xrc_send_wqe(sq.ring, 0, kBbs, 1, wr, limits, 0, &enc) ==
        Errc::invalid_argument);
  wr.remote_srqn = 1;
  wr.opcode = WrOpcode::nop;
  CHECK(wqe::encode_xrc_send_wqe(sq.ring, 0, kBbs, 1, wr, limits, 0, &enc) ==
        Errc::invalid_argument);
}
