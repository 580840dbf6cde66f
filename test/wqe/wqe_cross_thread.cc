// SPDX-License-Identifier: BSD-3-Clause
// A device that runs valid-looking WQEs past the doorbell record reads each WQE while the
// driver may still be writing it. The writer stores every byte of a WQE before its ctrl
// segment's head, with release ordering (wqe::publish_ctrl_segment), and the reader tests the
// head with one acquire load before it reads anything else (looks_valid_send_wqe): so a WQE
// seen valid is never torn, neither its ctrl segment's other half (fm_ce_se: whether a CQE
// is wanted; the immediate) nor its other segments. Each writer the driver has is checked:
// the SEND/WRITE/READ encoder, the atomic encoder, the NOP, and the shadow flush's copy.
// Run under ThreadSanitizer this also proves the protocol race-free.
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdint>
#include <sstream>
#include <string>
#include <thread>

#include "rnicdv/doorbell/barrier.h"
#include "rnicdv/wqe/decode.h"
#include "rnicdv/wqe/send_wqe.h"
#include "wqe_test_util.h"

using namespace rnicdv;

namespace {

constexpr uint32_t kQpn = 0x1234;
constexpr uint32_t kBbs = 64;  // ring size
constexpr uint64_t kLocalBase = 0x100000;

enum class Writer { send_imm, write_imm, read, fetch_add, nop, shadow_copy };

const char* writer_name(Writer w) {
  switch (w) {
    case Writer::send_imm:
      return "SEND_IMM encoder";
    case Writer::write_imm:
      return "WRITE_IMM encoder";
    case Writer::read:
      return "READ encoder";
    case Writer::fetch_add:
      return "fetch-and-add encoder";
    case Writer::nop:
      return "NOP encoder";
    case Writer::shadow_copy:
      return "shadow flush copy";
  }
  return "?";
}

// The WR the writer posts at `pi`: every field that lands in the WQE depends on `pi`, and the
// signaled bit alternates, so a read of a half-written WQE cannot pass for the right one.
SendWr wr_for(Writer w, uint32_t pi, Sge* sge) {
  SendWr wr;
  wr.wr_id = pi;
  wr.flags = (pi & 1) ? send_flags::signaled : send_flags::solicited;
  sge->addr = kLocalBase + uint64_t{pi} * 8;
  sge->length = 8;
  sge->lkey = 0x5000 + pi;
  wr.sg_list = sge;
  wr.num_sge = 1;
  wr.imm_data = ~pi;
  wr.remote_addr = 0x9000000 + uint64_t{pi} * 8;
  wr.rkey = 0x7000 + pi;
  wr.compare_add = uint64_t{pi} << 20;
  switch (w) {
    case Writer::send_imm:
    case Writer::shadow_copy:
      wr.opcode = WrOpcode::send_imm;
      break;
    case Writer::write_imm:
      wr.opcode = WrOpcode::rdma_write_imm;
      break;
    case Writer::read:
      wr.opcode = WrOpcode::rdma_read;
      break;
    case Writer::fetch_add:
      wr.opcode = WrOpcode::atomic_fetch_add;
      break;
    case Writer::nop:
      wr.opcode = WrOpcode::nop;
      wr.num_sge = 0;
      break;
  }
  return wr;
}

// What the reader found wrong with the WQE at `pi`, or an empty string.
std::string check_wqe(Writer w, uint32_t pi, const wqe::DecodedSendWqe& d) {
  Sge sge;
  const SendWr wr = wr_for(w, pi, &sge);
  std::ostringstream bad;
  const uint8_t fm = (pi & 1) ? MLX5_WQE_CTRL_CQ_UPDATE : MLX5_WQE_CTRL_SOLICITED;
  if (d.fm_ce_se != fm) bad << " fm_ce_se " << int{d.fm_ce_se} << " (want " << int{fm} << ")";
  if (w == Writer::nop) return bad.str();
  const bool has_imm = wr.opcode == WrOpcode::send_imm || wr.opcode == WrOpcode::rdma_write_imm;
  if (has_imm && d.imm != wr.imm_data) bad << " imm";
  if (wr.opcode != WrOpcode::send_imm && (d.remote_addr != wr.remote_addr || d.rkey != wr.rkey))
    bad << " raddr";
  if (wr.opcode == WrOpcode::atomic_fetch_add && d.swap_add != wr.compare_add) bad << " atomic";
  if (d.num_entries != 1 || d.entries[0].addr != sge.addr || d.entries[0].lkey != sge.lkey)
    bad << " data segment";
  return bad.str();
}

// Writes `count` WQEs into one ring while another thread reads each as soon as it looks
// valid. Returns the first torn WQE the reader found, or an empty string.
std::string race(Writer w, uint32_t count) {
  test::TestSq sq(kBbs, 0);
  test::TestSq shadow(kBbs, 0);
  std::atomic<uint32_t> consumed{0};
  std::thread writer([&] {
    for (uint32_t pi = 0; pi < count; ++pi) {
      // Never overwrite a slot the reader has not finished with.
      while (pi - consumed.load(std::memory_order_acquire) >= kBbs - 1) doorbell::cpu_relax();
      Sge sge;
      const SendWr wr = wr_for(w, pi, &sge);
      const wqe::SqLimits limits{4, 64};
      wqe::EncodedWqe enc;
      if (w == Writer::nop) {
        const uint8_t fm = (pi & 1) ? MLX5_WQE_CTRL_CQ_UPDATE : MLX5_WQE_CTRL_SOLICITED;
        (void)wqe::encode_nop_wqe(sq.ring, pi, kBbs, kQpn, 1, fm, &enc);
      } else if (w == Writer::shadow_copy) {
        (void)wqe::encode_send_wqe(shadow.ring, pi, kBbs, kQpn, wr, limits, 0, &enc);
        wqe::copy_wqe_ctrl_last(shadow.ring, sq.ring, pi, 1);
      } else {
        (void)wqe::encode_send_wqe(sq.ring, pi, kBbs, kQpn, wr, limits, 0, &enc);
      }
    }
  });
  std::string torn;
  wqe::DecodedSendWqe d;
  for (uint32_t pi = 0; pi < count; ++pi) {
    while (!wqe::looks_valid_send_wqe(sq.ring, pi, kQpn)) doorbell::cpu_relax();
    const wqe::WqeDefect defect = wqe::decode_send_wqe(sq.ring, pi, kQpn, &d, nullptr, 0);
    std::string bad = defect == wqe::WqeDefect::none
                          ? check_wqe(w, pi, d)
                          : std::string(" defect ") + wqe::wqe_defect_name(defect);
    if (!bad.empty() && torn.empty()) torn = "WQE " + std::to_string(pi) + ":" + bad;
    consumed.store(pi + 1, std::memory_order_release);
  }
  writer.join();
  return torn;
}

}  // namespace

TEST_CASE("a WQE seen valid by a scanning reader is never torn, whoever writes it", "[wqe]") {
  const Writer w = GENERATE(Writer::send_imm, Writer::write_imm, Writer::read, Writer::fetch_add,
                            Writer::nop, Writer::shadow_copy);
  INFO(writer_name(w));
  CHECK(race(w, 200000) == "");
}
