// SPDX-License-Identifier: BSD-3-Clause
// The fuzz entry points (fuzz_entry.h) survive random and mutated input: any bytes in the
// send queue and any datagram on the wire give an error CQE, a NAK or a drop, never a crash
// (run under ASan/UBSan in CI).
#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "fuzz_entry.h"
#include "packet/packet.h"
#include "rnicdv/wqe/send_wqe.h"

using namespace rnicdv;
namespace pkt = rnicdv::sim::pkt;

TEST_CASE("random and mutated datagrams never crash the receive path") {
  std::mt19937 rng(7);
  std::vector<uint8_t> payload(600);
  for (auto& b : payload) b = static_cast<uint8_t>(rng());
  for (int i = 0; i < 1500; ++i) {
    std::vector<uint8_t> frame;
    if (i % 3 == 0) {
      frame.resize(rng() % 128);
      for (auto& b : frame) b = static_cast<uint8_t>(rng());
    } else {
      // A well-formed packet of a random opcode with random fields, then a few bit flips.
      pkt::Packet p;
      const uint8_t ops[] = {0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a,
                             0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10, 0x11, 0x12, 0x13, 0x14, 0x64};
      p.bth.opcode = ops[rng() % sizeof ops];
      p.bth.dest_qp = 0x100;
      p.bth.psn = rng() % 4;
      p.bth.ack_req = rng() & 1;
      p.reth = pkt::Reth{rng(), static_cast<uint32_t>(rng()), static_cast<uint32_t>(rng() % 5000)};
      p.atomic = pkt::AtomicEth{rng(), static_cast<uint32_t>(rng()), rng(), rng()};
      p.aeth = pkt::Aeth{static_cast<uint8_t>(rng()), static_cast<uint32_t>(rng())};
      if (pkt::opcode_info(p.bth.opcode).payload) {
        p.payload = payload.data();
        p.payload_len = rng() % 600;
      }
      frame.resize(pkt::kMaxPacketBytes);
      frame.resize(pkt::build_packet(p, frame.data(), frame.size()));
      for (int flips = rng() % 3; flips > 0 && !frame.empty(); --flips)
        frame[rng() % frame.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
    }
    sim::fuzz_receive_datagram(frame.data(), frame.size());
  }
  // The inputs got past the parser into the QP engines.
  const sim::DeviceCounters r = sim::fuzz_responder_counters();
  CHECK(r.packets_rx >= 1500);
  CHECK(r.cqes_written > 0);
  CHECK(r.rx_dropped < r.packets_rx);
}

TEST_CASE("mutated XRC requests reach the XRC target: an SRQ of its domain receives, any "
          "other number is refused") {
  REQUIRE(sim::fuzz_xrc_qpn() == sim::kFuzzXrcQpn);
  REQUIRE(sim::fuzz_xrc_srqn() == sim::kFuzzXrcSrqn);
  REQUIRE(sim::fuzz_foreign_xrc_srqn() == sim::kFuzzForeignXrcSrqn);
  std::mt19937 rng(13);
  std::vector<uint8_t> payload(300, 0x3c);
  const uint32_t naks_before = static_cast<uint32_t>(sim::fuzz_responder_counters().naks_tx);
  const uint64_t cqes_before = sim::fuzz_responder_counters().cqes_written;
  // In order: a SEND ONLY naming the domain's SRQ is received; one naming the other domain's
  // SRQ is refused with a NAK.
  for (uint32_t srqn : {sim::fuzz_xrc_srqn(), sim::fuzz_foreign_xrc_srqn()}) {
    pkt::Packet p;
    p.bth.opcode = pkt::opcode::xrc_base + pkt::opcode::rc_send_only;
    p.bth.dest_qp = sim::kFuzzXrcQpn;
    p.bth.psn = 0;
    p.bth.ack_req = true;
    p.xrc_srqn = srqn;
    p.payload = payload.data();
    p.payload_len = 100;
    std::vector<uint8_t> frame(pkt::kMaxPacketBytes);
    frame.resize(pkt::build_packet(p, frame.data(), frame.size()));
    sim::fuzz_receive_datagram(frame.data(), frame.size());
  }
  CHECK(sim::fuzz_responder_counters().cqes_written > cqes_before);
  CHECK(sim::fuzz_responder_counters().naks_tx > naks_before);
  // Then random XRC opcodes, SRQ numbers and fields, with bit flips.
  for (int i = 0; i < 600; ++i) {
    pkt::Packet p;
    p.bth.opcode = static_cast<uint8_t>(pkt::opcode::xrc_base + rng() % 0x15);
    p.bth.dest_qp = rng() % 4 ? sim::kFuzzXrcQpn : 0x100 + rng() % 4;
    p.bth.psn = rng() % 4;
    p.bth.ack_req = rng() & 1;
    p.xrc_srqn = rng() % 3 == 0 ? static_cast<uint32_t>(rng()) : sim::fuzz_xrc_srqn();
    p.reth = pkt::Reth{rng(), static_cast<uint32_t>(rng()), static_cast<uint32_t>(rng() % 2000)};
    p.atomic = pkt::AtomicEth{rng(), static_cast<uint32_t>(rng()), rng(), rng()};
    p.aeth = pkt::Aeth{static_cast<uint8_t>(rng()), static_cast<uint32_t>(rng())};
    if (pkt::opcode_info(p.bth.opcode).payload) {
      p.payload = payload.data();
      p.payload_len = rng() % 300;
    }
    std::vector<uint8_t> frame(pkt::kMaxPacketBytes);
    frame.resize(pkt::build_packet(p, frame.data(), frame.size()));
    for (int flips = rng() % 3; flips > 0 && !frame.empty(); --flips)
      frame[rng() % frame.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
    sim::fuzz_receive_datagram(frame.data(), frame.size());
  }
}

TEST_CASE("random and mutated send queues never crash the executor") {
  std::mt19937 rng(11);
  for (int i = 0; i < 400; ++i) {
    std::vector<uint8_t> ring(64 * (1 + rng() % 8));
    for (auto& b : ring) b = static_cast<uint8_t>(rng());
    if (i & 1) {
      // Plausible control segments: right index, a known opcode, small DS; the rest random.
      for (size_t bb = 0; bb < ring.size() / 64; ++bb) {
        auto* c = reinterpret_cast<mlx5_wqe_ctrl_seg*>(ring.data() + bb * 64);
        const uint8_t ops[] = {0x00, 0x08, 0x09, 0x0a, 0x0b, 0x10, 0x11, 0x12};
        c->opmod_idx_opcode = htobe32(static_cast<uint32_t>(bb) << 8 | ops[rng() % 8]);
        c->qpn_ds = htobe32(0x100u << 8 | (1 + rng() % 4));
      }
    }
    sim::fuzz_execute_send_queue(ring.data(), ring.size());
  }
  const sim::DeviceCounters q = sim::fuzz_requester_counters();
  CHECK(q.wqes_fetched >= 400);
  CHECK(q.error_cqes > 0);
  CHECK(q.packets_tx > 0);
}
