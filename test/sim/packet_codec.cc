// SPDX-License-Identifier: BSD-3-Clause
// The RoCEv2 transport packet codec against hand-computed bytes (IBA 9.2-9.5 layouts), and
// its parser against hostile input.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <vector>

#include "packet/packet.h"
#include "packet/psn.h"

using namespace rnicdv::sim;
using namespace rnicdv::sim::pkt;

namespace {

std::vector<uint8_t> build(const Packet& p) {
  std::vector<uint8_t> buf(kMaxPacketBytes + 8);
  const size_t n = build_packet(p, buf.data(), buf.size());
  buf.resize(n);
  return buf;
}

}  // namespace

TEST_CASE("SEND_ONLY is a BTH, the payload and a pad to four bytes") {
  const uint8_t payload[] = {'a', 'b', 'c'};
  Packet p;
  p.bth.opcode = opcode::rc_send_only;
  p.bth.dest_qp = 0x000011;
  p.bth.psn = 0x123456;
  p.bth.ack_req = true;
  p.payload = payload;
  p.payload_len = 3;
  const std::vector<uint8_t> expected = {0x04, 0x10, 0xff, 0xff, 0x00, 0x00, 0x00, 0x11,
                                         0x80, 0x12, 0x34, 0x56, 'a',  'b',  'c',  0x00};
  CHECK(build(p) == expected);
}

TEST_CASE("WRITE_ONLY with immediate carries RETH then ImmDt, big-endian") {
  const uint8_t payload[] = {1, 2, 3, 4};
  Packet p;
  p.bth.opcode = opcode::rc_write_only_imm;
  p.bth.solicited = true;
  p.bth.dest_qp = 0xabcdef;
  p.bth.psn = 0xffffff;
  p.reth = Reth{0x0102030405060708ull, 0xaabbccdd, 4};
  p.imm = 0xdeadbeef;
  p.payload = payload;
  p.payload_len = 4;
  const std::vector<uint8_t> expected = {
      0x0b, 0x80, 0xff, 0xff, 0x00, 0xab, 0xcd, 0xef, 0x00, 0xff, 0xff, 0xff,  // BTH
      0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,                          // RETH VA
      0xaa, 0xbb, 0xcc, 0xdd, 0x00, 0x00, 0x00, 0x04,                          // rkey, len
      0xde, 0xad, 0xbe, 0xef,                                                  // ImmDt
      1,    2,    3,    4};
  CHECK(build(p) == expected);
}

TEST_CASE("ACKNOWLEDGE carries an AETH: syndrome then 24-bit MSN") {
  Packet p;
  p.bth.opcode = opcode::rc_acknowledge;
  p.bth.dest_qp = 0x22;
  p.bth.psn = 7;
  p.aeth = Aeth{0x61, 0x000102};
  const std::vector<uint8_t> expected = {0x11, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x22,
                                         0x00, 0x00, 0x00, 0x07, 0x61, 0x00, 0x01, 0x02};
  CHECK(build(p) == expected);
}

TEST_CASE("COMPARE_SWAP carries the 28-byte AtomicETH, ATOMIC_ACK the original value") {
  Packet p;
  p.bth.opcode = opcode::rc_compare_swap;
  p.atomic =
      AtomicEth{0x1122334455667788ull, 0x01020304, 0xa0a1a2a3a4a5a6a7ull, 0xb0b1b2b3b4b5b6b7ull};
  std::vector<uint8_t> bytes = build(p);
  REQUIRE(bytes.size() == 40);
  const std::vector<uint8_t> eth(bytes.begin() + 12, bytes.end());
  const std::vector<uint8_t> expected = {0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x01, 0x02,
                                         0x03, 0x04, 0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7,
                                         0xb0, 0xb1, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 0xb7};
  CHECK(eth == expected);

  Packet ack;
  ack.bth.opcode = opcode::rc_atomic_acknowledge;
  ack.aeth = Aeth{0x1f, 3};
  ack.atomic_orig = 0x0807060504030201ull;
  bytes = build(ack);
  REQUIRE(bytes.size() == 24);
  CHECK(bytes[12] == 0x1f);
  CHECK(bytes[16] == 0x08);
  CHECK(bytes[23] == 0x01);
}

TEST_CASE("UD SEND_ONLY to QP1 carries a DETH with the Q_Key and source QP") {
  const uint8_t mad[256] = {1};
  Packet p;
  p.bth.opcode = opcode::ud_send_only;
  p.bth.dest_qp = 1;
  p.deth = Deth{0x80010000, 1};
  p.payload = mad;
  p.payload_len = 256;
  const std::vector<uint8_t> bytes = build(p);
  REQUIRE(bytes.size() == 12 + 8 + 256);
  const std::vector<uint8_t> deth(bytes.begin() + 12, bytes.begin() + 20);
  CHECK(deth == std::vector<uint8_t>{0x80, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01});
}

// IBA Annex A14: XRC's opcodes are RC's at 0xa0, and every request carries a 4-byte XRCETH
// (8 reserved bits, the XRC SRQ number) right after the BTH, before a RETH or AtomicETH.
TEST_CASE("XRC requests carry the XRCETH after the BTH and before the RETH; responses do not") {
  Packet w;
  w.bth.opcode = opcode::xrc_base + opcode::rc_write_only;
  w.bth.dest_qp = 0x000102;
  w.bth.psn = 7;
  w.xrc_srqn = 0x0a0b0c;
  w.reth = Reth{0x1122334455667788ull, 0x99aabbcc, 4};
  const uint8_t four[4] = {1, 2, 3, 4};
  w.payload = four;
  w.payload_len = 4;
  const std::vector<uint8_t> expected = {
      0xaa, 0x00, 0xff, 0xff, 0x00, 0x00, 0x01, 0x02, 0x00, 0x00, 0x00, 0x07,  // BTH
      0x00, 0x0a, 0x0b, 0x0c,                                                  // XRCETH
      0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc,  // RETH
      0x00, 0x00, 0x00, 0x04,                                                  //
      1,    2,    3,    4};
  CHECK(build(w) == expected);
  CHECK(std::string(opcode_name(0xaa)) == "XRC_WRITE_ONLY");
  CHECK(std::string(opcode_name(0xb4)) == "XRC_FETCH_ADD");
  CHECK_FALSE(opcode_info(0xb5).known);

  Packet ack;
  ack.bth.opcode = opcode::xrc_base + opcode::rc_acknowledge;
  ack.aeth = Aeth{0x1f, 3};
  ack.xrc_srqn = 0x0a0b0c;  // ignored: a response has no XRCETH
  const std::vector<uint8_t> bytes = build(ack);
  REQUIRE(bytes.size() == 16);
  CHECK(bytes[0] == 0xb1);
  CHECK(std::vector<uint8_t>(bytes.begin() + 12, bytes.end()) ==
        std::vector<uint8_t>{0x1f, 0x00, 0x00, 0x03});
  Packet q;
  REQUIRE(parse_packet(expected.data(), expected.size(), &q) == ParseError::none);
  CHECK(q.xrc_srqn == 0x0a0b0c);
  CHECK(q.reth.rkey == 0x99aabbcc);
  // A runt: the XRCETH cut short.
  CHECK(parse_packet(expected.data(), 14, &q) == ParseError::runt);
}

TEST_CASE("every known opcode survives a build/parse round trip") {
  std::vector<uint8_t> payload(333);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i);
  for (int op = 0; op < 256; ++op) {
    const OpcodeInfo& info = opcode_info(static_cast<uint8_t>(op));
    if (!info.known) continue;
    Packet p;
    p.bth.opcode = static_cast<uint8_t>(op);
    p.bth.solicited = true;
    p.bth.dest_qp = 0x123456;
    p.bth.psn = 0xfedcba;
    p.bth.ack_req = true;
    p.reth = Reth{0x1000, 0x55aa, 333};
    p.atomic = AtomicEth{0x2000, 0x66bb, 5, 6};
    p.aeth = Aeth{0x20 | 14, 0x345678};
    p.atomic_orig = 0x1234;
    p.imm = 0xcafef00d;
    p.deth = Deth{0x80010000, 0x11};
    p.xrc_srqn = 0xabcdef;
    if (info.payload) {
      p.payload = payload.data();
      p.payload_len = static_cast<uint32_t>(payload.size());
    }
    const std::vector<uint8_t> bytes = build(p);
    INFO(opcode_name(static_cast<uint8_t>(op)));
    REQUIRE(bytes.size() % 4 == 0);
    Packet q;
    REQUIRE(parse_packet(bytes.data(), bytes.size(), &q) == ParseError::none);
    CHECK(q.bth.opcode == op);
    CHECK(q.bth.dest_qp == 0x123456);
    CHECK(q.bth.psn == 0xfedcba);
    CHECK(q.bth.ack_req);
    CHECK(q.bth.solicited);
    CHECK(q.headers == info.headers);
    if (info.headers & hdr::reth) CHECK(q.reth.dma_length == 333);
    if (info.headers & hdr::atomic_eth) CHECK(q.atomic.compare == 6);
    if (info.headers & hdr::aeth) CHECK(q.aeth.msn == 0x345678);
    if (info.headers & hdr::atomic_ack_eth) CHECK(q.atomic_orig == 0x1234);
    if (info.headers & hdr::immdt) CHECK(q.imm == 0xcafef00d);
    if (info.headers & hdr::deth) CHECK(q.deth.src_qp == 0x11);
    if (info.headers & hdr::xrceth) CHECK(q.xrc_srqn == 0xabcdef);
    CHECK(q.payload_len == (info.payload ? 333u : 0u));
    if (info.payload) CHECK(std::memcmp(q.payload, payload.data(), 333) == 0);
  }
}

TEST_CASE("the parser rejects runts, unknown opcodes, bad versions, pads and lengths") {
  uint8_t ok[16] = {0x04, 0x00, 0xff, 0xff, 0, 0, 0, 1, 0x80, 0, 0, 1, 1, 2, 3, 4};
  Packet p;
  REQUIRE(parse_packet(ok, sizeof ok, &p) == ParseError::none);
  CHECK(parse_packet(ok, 11, &p) == ParseError::runt);

  uint8_t b[16];
  std::memcpy(b, ok, 16);
  b[0] = 0x15;  // reserved
  CHECK(parse_packet(b, 16, &p) == ParseError::unknown_opcode);
  b[0] = 0x44;  // RD SEND_ONLY: not executed by this model
  CHECK(parse_packet(b, 16, &p) == ParseError::unknown_opcode);
  b[0] = 0x24;  // UC SEND_ONLY: RC's SEND_ONLY with transport bits 001
  REQUIRE(parse_packet(b, 16, &p) == ParseError::none);
  CHECK(std::string(opcode_name(0x24)) == "UC_SEND_ONLY");
  CHECK(opcode_info(0x2b).headers == opcode_info(0x0b).headers);  // WRITE_ONLY_IMM: RETH, ImmDt

  std::memcpy(b, ok, 16);
  b[1] = 0x01;  // TVer 1
  CHECK(parse_packet(b, 16, &p) == ParseError::bad_version);

  std::memcpy(b, ok, 16);
  CHECK(parse_packet(b, 15, &p) == ParseError::bad_pad);  // 3 bytes of body: not aligned
  b[1] = 0x30;                                            // pad 3 with a 4-byte body: payload 1
  REQUIRE(parse_packet(b, 16, &p) == ParseError::none);
  CHECK(p.payload_len == 1);
  CHECK(parse_packet(b, 12, &p) == ParseError::bad_pad);  // pad 3 but no body

  uint8_t ack[20] = {0x11, 0, 0xff, 0xff, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 9, 9, 9, 9};
  CHECK(parse_packet(ack, 16, &p) == ParseError::none);
  CHECK(parse_packet(ack, 20, &p) == ParseError::unexpected_payload);
  CHECK(parse_packet(ack, 14, &p) == ParseError::runt);

  std::vector<uint8_t> big(12 + 4100, 0);
  big[0] = 0x04;
  CHECK(parse_packet(big.data(), big.size(), &p) == ParseError::too_long);
}

TEST_CASE("the parser never reads outside random input") {
  std::mt19937 rng(42);
  Packet p;
  for (int i = 0; i < 20000; ++i) {
    const size_t len = rng() % 96;
    std::vector<uint8_t> bytes(len);
    for (auto& x : bytes) x = static_cast<uint8_t>(rng());
    if (len && (rng() & 1)) bytes[0] = static_cast<uint8_t>(rng() % 0x18);
    if (parse_packet(bytes.data(), bytes.size(), &p) == ParseError::none) {
      CHECK(p.payload + p.payload_len <= bytes.data() + bytes.size());
    }
  }
}

TEST_CASE("PSN arithmetic wraps at 2^24 and compares within half the space") {
  CHECK(psn_add(0xffffff, 1) == 0);
  CHECK(psn_add(0xfffffe, 5) == 3);
  CHECK(psn_cmp(0, 0xffffff) > 0);
  CHECK(psn_cmp(0xffffff, 0) < 0);
  CHECK(psn_cmp(5, 5) == 0);
  CHECK(psn_cmp(0x7fffff, 0) > 0);
  CHECK(psn_cmp(0x800001, 0) < 0);
  CHECK(psn_diff(2, 0xfffffe) == 4);
}
