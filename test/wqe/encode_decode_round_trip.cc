// SPDX-License-Identifier: BSD-3-Clause
// What the driver encodes, the device decodes back: random WQEs (all opcodes, SGE lists with
// empty entries, inline payloads up to 34 units) posted back to back around a small ring, so
// multi-BB WQEs start at every BB and wrap at every offset.
#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

#include "rnicdv/wqe/decode.h"
#include "rnicdv/wqe/send_wqe.h"
#include "wqe_test_util.h"

using namespace rnicdv;

namespace {

constexpr uint32_t kQpn = 0xabcdef;

bool is_rdma(WrOpcode op) {
  return op == WrOpcode::rdma_write || op == WrOpcode::rdma_write_imm || op == WrOpcode::rdma_read;
}
bool is_atomic(WrOpcode op) {
  return op == WrOpcode::atomic_cmp_swap || op == WrOpcode::atomic_fetch_add;
}

// Checks `got` against the request it was encoded from.
void require_decodes_to(const wqe::DecodedSendWqe& got, const uint8_t* inline_buf, const SendWr& wr,
                        uint32_t pi, const wqe::EncodedWqe& enc) {
  REQUIRE(got.opcode == static_cast<uint8_t>(wr.opcode));
  REQUIRE(got.opmod == 0);
  REQUIRE(got.wqe_index == (pi & 0xffff));
  REQUIRE(got.qpn == kQpn);
  REQUIRE(got.ds == enc.ds);
  REQUIRE(got.bbs == enc.bbs);
  REQUIRE(got.signaled() == ((wr.flags & send_flags::signaled) != 0));
  REQUIRE(got.solicited() == ((wr.flags & send_flags::solicited) != 0));
  REQUIRE(got.fenced() == ((wr.flags & send_flags::fence) != 0));
  const bool has_imm = wr.opcode == WrOpcode::send_imm || wr.opcode == WrOpcode::rdma_write_imm;
  REQUIRE(got.imm == (has_imm ? wr.imm_data : 0));
  if (is_rdma(wr.opcode) || is_atomic(wr.opcode)) {
    REQUIRE(got.remote_addr == wr.remote_addr);
    REQUIRE(got.rkey == wr.rkey);
  }
  if (wr.opcode == WrOpcode::atomic_cmp_swap) {
    REQUIRE(got.swap_add == wr.swap);
    REQUIRE(got.compare == wr.compare_add);
  } else if (wr.opcode == WrOpcode::atomic_fetch_add) {
    REQUIRE(got.swap_add == wr.compare_add);
  }

  if (wr.opcode == WrOpcode::nop) {
    REQUIRE(got.num_entries == 0);
    return;
  }
  if (wr.flags & send_flags::inline_data) {
    std::vector<uint8_t> payload;
    for (uint32_t i = 0; i < wr.num_sge; ++i) {
      const auto* p = reinterpret_cast<const uint8_t*>(wr.sg_list[i].addr);
      payload.insert(payload.end(), p, p + wr.sg_list[i].length);
    }
    REQUIRE(got.total_length == payload.size());
    REQUIRE(got.inline_bytes == payload.size());
    REQUIRE(got.num_entries == (payload.empty() ? 0u : 1u));
    if (!payload.empty()) {
      REQUIRE(got.entries[0].is_inline);
      REQUIRE(got.entries[0].addr == 0);
      REQUIRE(got.entries[0].length == payload.size());
      REQUIRE(std::memcmp(inline_buf, payload.data(), payload.size()) == 0);
    }
    return;
  }
  uint32_t n = 0;
  uint64_t total = 0;
  for (uint32_t i = 0; i < wr.num_sge; ++i) {
    const Sge& sge = wr.sg_list[i];
    if (sge.length == 0) continue;
    REQUIRE(n < got.num_entries);
    REQUIRE_FALSE(got.entries[n].is_inline);
    REQUIRE(got.entries[n].addr == sge.addr);
    REQUIRE(got.entries[n].length == (is_atomic(wr.opcode) ? 8u : sge.length));
    REQUIRE(got.entries[n].lkey == sge.lkey);
    total += got.entries[n].length;
    ++n;
  }
  REQUIRE(got.num_entries == n);
  REQUIRE(got.total_length == total);
}

void round_trip(uint32_t ring_bbs, uint32_t first_pi, int count, uint64_t seed) {
  const wqe::SqLimits limits{/*max_sge=*/30, /*max_inline=*/512};
  test::RandomSendWrs gen(seed, limits);
  test::TestSq sq(ring_bbs);
  std::vector<uint8_t> inline_buf(wqe::kMaxWqeDs * wqe::kDsBytes);
  auto decoded = std::make_unique<wqe::DecodedSendWqe>();
  uint32_t pi = first_pi;
  std::vector<int> starts_seen(ring_bbs, 0);
  for (int i = 0; i < count; ++i) {
    const SendWr& wr = gen.next();
    wqe::EncodedWqe enc;
    REQUIRE(wqe::encode_send_wqe(sq.ring, pi, ring_bbs, kQpn, wr, limits, 0, &enc) == Errc::ok);
    REQUIRE(wqe::looks_valid_send_wqe(sq.ring, pi, kQpn));
    const wqe::WqeDefect defect =
        wqe::decode_send_wqe(sq.ring, pi, kQpn, decoded.get(), inline_buf.data(),
                             static_cast<uint32_t>(inline_buf.size()));
    INFO("wqe " << i << " pi " << pi << " opcode " << int(wr.opcode) << " flags " << wr.flags
                << " num_sge " << wr.num_sge << " ds " << int(enc.ds));
    REQUIRE(defect == wqe::WqeDefect::none);
    require_decodes_to(*decoded, inline_buf.data(), wr, pi, enc);
    ++starts_seen[pi & (ring_bbs - 1)];
    pi += enc.bbs;
  }
  for (uint32_t bb = 0; bb < ring_bbs; ++bb) {
    INFO("no WQE started at BB " << bb);
    REQUIRE(starts_seen[bb] > 0);
  }
}

}  // namespace

TEST_CASE("random WQEs decode to their requests around a 16-BB ring", "[wqe]") {
  round_trip(16, 0, 3000, 0x7e57);
}

TEST_CASE("random WQEs decode to their requests across the 16-bit WQE index wrap", "[wqe]") {
  round_trip(16, 0xffff - 40, 500, 0x7e58);
  round_trip(16, 0xffffffffu - 40, 500, 0x7e59);
}

TEST_CASE("the largest WQEs (16 BBs) fill a ring of 16 BBs from any start", "[wqe]") {
  const wqe::SqLimits limits{/*max_sge=*/61, /*max_inline=*/988};
  std::vector<uint8_t> payload(988);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i * 7);
  const Sge inline_sge{reinterpret_cast<uintptr_t>(payload.data()), 988, 0};
  std::vector<Sge> pointers(62);
  for (size_t i = 0; i < pointers.size(); ++i)
    pointers[i] = {0x1000 * i + 1, uint32_t(i + 1), uint32_t(i)};

  std::vector<uint8_t> inline_buf(wqe::kMaxWqeDs * wqe::kDsBytes);
  auto decoded = std::make_unique<wqe::DecodedSendWqe>();
  for (uint32_t start = 0; start < 16; ++start) {
    test::TestSq sq(16);
    SendWr send_inline;
    send_inline.opcode = WrOpcode::send;
    send_inline.flags = send_flags::inline_data;
    send_inline.sg_list = &inline_sge;
    send_inline.num_sge = 1;
    wqe::EncodedWqe enc;
    REQUIRE(wqe::encode_send_wqe(sq.ring, start, 16, kQpn, send_inline, limits, 0, &enc) ==
            Errc::ok);
    REQUIRE(enc.ds == 63);  // 1 + ceil((988 + 4) / 16)
    REQUIRE(enc.bbs == 16);
    REQUIRE(wqe::decode_send_wqe(sq.ring, start, kQpn, decoded.get(), inline_buf.data(),
                                 static_cast<uint32_t>(inline_buf.size())) == wqe::WqeDefect::none);
    require_decodes_to(*decoded, inline_buf.data(), send_inline, start, enc);

    SendWr write;
    write.opcode = WrOpcode::rdma_write;
    write.sg_list = pointers.data();
    write.num_sge = 61;
    REQUIRE(wqe::encode_send_wqe(sq.ring, start, 16, kQpn, write, limits, 0, &enc) == Errc::ok);
    REQUIRE(enc.ds == 63);
    REQUIRE(wqe::decode_send_wqe(sq.ring, start, kQpn, decoded.get(), inline_buf.data(),
                                 static_cast<uint32_t>(inline_buf.size())) == wqe::WqeDefect::none);
    require_decodes_to(*decoded, inline_buf.data(), write, start, enc);
  }
}

TEST_CASE("force_fm_ce_se is OR-ed into the WQE's flags (sq_sig_all)", "[wqe]") {
  test::TestSq sq(4);
  SendWr wr;
  wr.opcode = WrOpcode::nop;
  wqe::EncodedWqe enc;
  REQUIRE(wqe::encode_send_wqe(sq.ring, 0, 4, kQpn, wr, {}, MLX5_WQE_CTRL_CQ_UPDATE, &enc) ==
          Errc::ok);
  REQUIRE(enc.ctrl->fm_ce_se == MLX5_WQE_CTRL_CQ_UPDATE);
}
