// SPDX-License-Identifier: BSD-3-Clause
// SendDoorbell::ring does what rdma-core's post_send_db does: the SQ word of the doorbell
// record, then either a BlueFlame copy of a single WQE that fits or an 8-byte write of the last
// WQE's ctrl bytes 0..7, into alternating halves of the register.
#include <endian.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

#include "../wqe/wqe_test_util.h"
#include "rnicdv/doorbell/send_doorbell.h"
#include "rnicdv/wqe/send_wqe.h"

using namespace rnicdv;
namespace db = rnicdv::doorbell;
using db::DoorbellMode;

namespace {

constexpr uint32_t kQpn = 0x4242;
constexpr uint32_t kBfSize = 256;
constexpr uint32_t kRingBbs = 8;

// A send queue, its doorbell record, and a register with two 256-byte halves followed by a
// guard area that must never be written.
struct Fixture {
  Fixture() : sq(kRingBbs), reg(2 * kBfSize + 256), dbrec_mem(8) {}

  __be32* dbrec() { return reinterpret_cast<__be32*>(dbrec_mem.data()); }

  // Encodes a SEND with `num_sge` pointer SGEs (or `inline_len` inline bytes) at pi.
  wqe::EncodedWqe post(uint32_t num_sge, uint32_t inline_len = 0) {
    std::vector<Sge> sges;
    for (uint32_t i = 0; i < num_sge; ++i) sges.push_back({0x1000 + i, 64, 0x77});
    if (inline_len) sges = {{reinterpret_cast<uintptr_t>(payload.data()), inline_len, 0}};
    SendWr wr;
    wr.opcode = WrOpcode::send;
    wr.flags = inline_len ? send_flags::inline_data : 0;
    wr.sg_list = sges.data();
    wr.num_sge = static_cast<uint32_t>(sges.size());
    wqe::EncodedWqe enc;
    REQUIRE(wqe::encode_send_wqe(sq.ring, pi, kRingBbs, kQpn, wr, {30, 512}, 0, &enc) == Errc::ok);
    pi += enc.bbs;
    return enc;
  }

  void ring(db::SendDoorbell& doorbell, const wqe::EncodedWqe& last, uint32_t nreq) {
    doorbell.ring(dbrec(), pi, reinterpret_cast<const uint8_t*>(last.ctrl), last.ds, nreq, sq.ring);
  }

  std::vector<uint8_t> reg_bytes(size_t offset, size_t n) const {
    return std::vector<uint8_t>(reg.data() + offset, reg.data() + offset + n);
  }

  test::TestSq sq;
  test::AlignedBuffer reg;
  test::AlignedBuffer dbrec_mem;
  std::vector<uint8_t> payload = std::vector<uint8_t>(512, 0x3c);
  uint32_t pi = 0;
};

std::vector<uint8_t> ctrl_head(const wqe::EncodedWqe& enc) {
  const auto* p = reinterpret_cast<const uint8_t*>(enc.ctrl);
  return std::vector<uint8_t>(p, p + 8);
}

}  // namespace

TEST_CASE("ring stores the SQ doorbell record big-endian, pi & 0xffff, and only that word",
          "[doorbell]") {
  Fixture f;
  db::SendDoorbell doorbell;
  REQUIRE(doorbell.init(f.reg.data(), kBfSize, false, DoorbellMode::db) == Errc::ok);
  f.pi = 0x12343;
  const wqe::EncodedWqe enc = f.post(4);  // DS 5: 2 BBs, so pi becomes 0x12345
  f.ring(doorbell, enc, 1);
  const uint8_t expected[] = {0x00, 0x00, 0x23, 0x45};
  REQUIRE(std::memcmp(f.dbrec_mem.data() + 4 * MLX5_SND_DBR, expected, 4) == 0);
  REQUIRE(test::all_bytes_are(f.dbrec_mem.data() + 4 * MLX5_RCV_DBR, 4, test::kCanary));
}

TEST_CASE("db mode writes exactly the last WQE's ctrl bytes 0..7", "[doorbell]") {
  Fixture f;
  db::SendDoorbell doorbell;
  REQUIRE(doorbell.init(f.reg.data(), kBfSize, false, DoorbellMode::db) == Errc::ok);
  f.post(1);
  const wqe::EncodedWqe last = f.post(2);
  f.ring(doorbell, last, 2);
  REQUIRE(f.reg_bytes(0, 8) == ctrl_head(last));
  REQUIRE(test::all_bytes_are(f.reg.data() + 8, f.reg.size() - 8, test::kCanary));
  // The 8 bytes are opmod_idx_opcode and qpn_ds: WQE index 1, SEND, QPN, DS 3.
  REQUIRE(f.reg_bytes(0, 8) ==
          std::vector<uint8_t>{0x00, 0x00, 0x01, 0x0a, 0x00, 0x42, 0x42, 0x03});
}

TEST_CASE("bf mode copies a single WQE that fits, following the ring's wrap", "[doorbell]") {
  Fixture f;
  db::SendDoorbell doorbell;
  REQUIRE(doorbell.init(f.reg.data(), kBfSize, false, DoorbellMode::bf) == Errc::ok);
  f.pi = kRingBbs - 1;                         // the WQE starts in the ring's last BB
  const wqe::EncodedWqe enc = f.post(0, 100);  // inline: DS 1 + 7 = 8, two BBs
  REQUIRE(enc.bbs == 2);
  f.ring(doorbell, enc, 1);
  REQUIRE(f.reg_bytes(0, 128) == test::wqe_bytes(f.sq.ring, kRingBbs - 1, 128));
  REQUIRE(test::all_bytes_are(f.reg.data() + 128, f.reg.size() - 128, test::kCanary));
}

TEST_CASE("bf mode copies align(DS * 16, 64) bytes: a 16-unit WQE fills a 256-byte half",
          "[doorbell]") {
  Fixture f;
  db::SendDoorbell doorbell;
  REQUIRE(doorbell.init(f.reg.data(), kBfSize, false, DoorbellMode::bf) == Errc::ok);
  f.pi = 6;
  const wqe::EncodedWqe enc = f.post(15);  // DS 16 = 256 bytes, wraps after 2 BBs
  REQUIRE(enc.ds == 16);
  f.ring(doorbell, enc, 1);
  REQUIRE(f.reg_bytes(0, 256) == test::wqe_bytes(f.sq.ring, 6, 256));
  REQUIRE(test::all_bytes_are(f.reg.data() + 256, f.reg.size() - 256, test::kCanary));
}

TEST_CASE("bf mode falls back to the 8-byte doorbell for a batch", "[doorbell]") {
  Fixture f;
  db::SendDoorbell doorbell;
  REQUIRE(doorbell.init(f.reg.data(), kBfSize, false, DoorbellMode::bf) == Errc::ok);
  f.post(1);
  const wqe::EncodedWqe last = f.post(1);
  f.ring(doorbell, last, 2);
  REQUIRE(f.reg_bytes(0, 8) == ctrl_head(last));
  REQUIRE(test::all_bytes_are(f.reg.data() + 8, f.reg.size() - 8, test::kCanary));
}

TEST_CASE("bf mode falls back to the 8-byte doorbell for a WQE larger than bf_size", "[doorbell]") {
  Fixture f;
  db::SendDoorbell doorbell;
  REQUIRE(doorbell.init(f.reg.data(), kBfSize, false, DoorbellMode::bf) == Errc::ok);
  const wqe::EncodedWqe enc = f.post(16);  // DS 17 = 272 bytes
  f.ring(doorbell, enc, 1);
  REQUIRE(f.reg_bytes(0, 8) == ctrl_head(enc));
  REQUIRE(test::all_bytes_are(f.reg.data() + 8, f.reg.size() - 8, test::kCanary));
}

TEST_CASE("consecutive doorbells alternate between the register's two halves", "[doorbell]") {
  for (DoorbellMode mode : {DoorbellMode::bf, DoorbellMode::db, DoorbellMode::db_lock}) {
    Fixture f;
    db::SendDoorbell doorbell;
    REQUIRE(doorbell.init(f.reg.data(), kBfSize, false, mode) == Errc::ok);
    INFO("mode " << db::doorbell_mode_name(mode));
    for (int i = 0; i < 6; ++i) {
      const uint32_t half = (i & 1) ? kBfSize : 0;
      REQUIRE(doorbell.bf_offset() == half);
      const wqe::EncodedWqe enc = f.post(1);
      f.ring(doorbell, enc, 1);
      // The write landed in this half and begins with this WQE's ctrl bytes.
      REQUIRE(f.reg_bytes(half, 8) == ctrl_head(enc));
    }
    REQUIRE(doorbell.bf_offset() == 0);
    REQUIRE(test::all_bytes_are(f.reg.data() + 2 * kBfSize, 256, test::kCanary));
  }
}

TEST_CASE("without a BlueFlame buffer the doorbell always uses offset 0", "[doorbell]") {
  Fixture f;
  db::SendDoorbell doorbell;
  REQUIRE(doorbell.init(f.reg.data(), 0, false, DoorbellMode::automatic) == Errc::ok);
  REQUIRE(doorbell.mode() == DoorbellMode::db);
  for (int i = 0; i < 3; ++i) {
    const wqe::EncodedWqe enc = f.post(1);
    f.ring(doorbell, enc, 1);
    REQUIRE(doorbell.bf_offset() == 0);
    REQUIRE(f.reg_bytes(0, 8) == ctrl_head(enc));
  }
  REQUIRE(test::all_bytes_are(f.reg.data() + 8, f.reg.size() - 8, test::kCanary));
}

TEST_CASE("a doorbell for zero requests touches nothing", "[doorbell]") {
  Fixture f;
  db::SendDoorbell doorbell;
  REQUIRE(doorbell.init(f.reg.data(), kBfSize, false, DoorbellMode::bf) == Errc::ok);
  const wqe::EncodedWqe enc = f.post(1);
  f.ring(doorbell, enc, 0);
  REQUIRE(test::all_bytes_are(f.dbrec_mem.data(), 8, test::kCanary));
  REQUIRE(test::all_bytes_are(f.reg.data(), f.reg.size(), test::kCanary));
  REQUIRE(doorbell.bf_offset() == 0);
}

TEST_CASE("db_lock writes like db and releases its lock", "[doorbell]") {
  Fixture f;
  db::SendDoorbell doorbell;
  REQUIRE(doorbell.init(f.reg.data(), kBfSize, true, DoorbellMode::db_lock) == Errc::ok);
  for (int i = 0; i < 3; ++i) {  // would spin forever if the lock were left held
    const wqe::EncodedWqe enc = f.post(2);
    f.ring(doorbell, enc, 1);
    REQUIRE(f.reg_bytes((i & 1) ? kBfSize : 0, 8) == ctrl_head(enc));
  }
  REQUIRE(test::all_bytes_are(f.reg.data() + 8, kBfSize - 8, test::kCanary));
}
