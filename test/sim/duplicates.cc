// SPDX-License-Identifier: BSD-3-Clause
// Duplicate requests (IBA 9.7.5.1.2): a packet of the requester is captured and delivered to
// the responder a second time. A duplicate SEND/WRITE is re-acknowledged and places nothing;
// a duplicate READ is executed again (memory is read again); a duplicate atomic is answered
// with the saved original value and never applied twice.
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "device_impl.h"
#include "packet/packet.h"
#include "sim_harness.h"

using namespace simtest;
namespace pkt = rnicdv::sim::pkt;

namespace {

using Frame = std::vector<uint8_t>;

struct Tapped {
  Pair p;
  std::vector<Frame> from_a, from_b;

  Tapped() {
    p.connect();
    p.a.dev->impl().hca->set_tx_tap([this](const hw::IpAddress&, const uint8_t* d, size_t n) {
      from_a.emplace_back(d, d + n);
    });
    p.b.dev->impl().hca->set_tx_tap([this](const hw::IpAddress&, const uint8_t* d, size_t n) {
      from_b.emplace_back(d, d + n);
    });
  }
  ~Tapped() {
    p.a.dev->impl().hca->set_tx_tap({});
    p.b.dev->impl().hca->set_tx_tap({});
  }
  const Frame& first_from_a(uint8_t opcode) {
    for (const Frame& f : from_a)
      if (f[0] == opcode) return f;
    FAIL("no frame with opcode " << int(opcode));
    static Frame none;
    return none;
  }
  void replay_to_b(const Frame& f) {
    from_b.clear();
    p.b.dev->impl().hca->inject_datagram(p.a.dev->address(), f.data(), f.size());
    p.settle();
  }
  std::vector<pkt::Packet> parsed_from_b() {
    std::vector<pkt::Packet> out;
    for (const Frame& f : from_b) {
      pkt::Packet pk;
      REQUIRE(pkt::parse_packet(f.data(), f.size(), &pk) == pkt::ParseError::none);
      out.push_back(pk);
    }
    return out;
  }
};

}  // namespace

TEST_CASE("a duplicate atomic replays the saved original value and is not applied again") {
  Tapped t;
  Buffer a = t.p.a.reg(64);
  Buffer b = t.p.b.reg(64);
  auto* target = reinterpret_cast<uint64_t*>(b.data());
  *target = 40;
  Sge sge{a.addr(), 8, a.lkey()};
  SendWr wr = make_wr(WrOpcode::atomic_fetch_add, &sge, 1);
  wr.remote_addr = b.addr();
  wr.rkey = b.rkey();
  wr.compare_add = 2;
  REQUIRE(t.p.a.post_and_ring(wr) == Errc::ok);
  REQUIRE(t.p.wait_send(t.p.a).status == IBV_WC_SUCCESS);
  REQUIRE(*target == 42);

  const uint64_t dups = t.p.b.counters().duplicates_rx;
  t.replay_to_b(t.first_from_a(pkt::opcode::rc_fetch_add));
  CHECK(*target == 42);  // not applied twice
  CHECK(t.p.b.counters().duplicates_rx == dups + 1);
  const auto answers = t.parsed_from_b();
  REQUIRE(answers.size() == 1);
  CHECK(answers[0].bth.opcode == pkt::opcode::rc_atomic_acknowledge);
  CHECK(answers[0].atomic_orig == 40);  // the saved original value
  Completion c;
  CHECK_FALSE(t.p.a.poll_send(&c));  // the requester drops the stale answer
}

TEST_CASE("a duplicate compare-and-swap does not swap again") {
  Tapped t;
  Buffer a = t.p.a.reg(64);
  Buffer b = t.p.b.reg(64);
  auto* target = reinterpret_cast<uint64_t*>(b.data());
  *target = 1;
  Sge sge{a.addr(), 8, a.lkey()};
  SendWr wr = make_wr(WrOpcode::atomic_cmp_swap, &sge, 1);
  wr.remote_addr = b.addr();
  wr.rkey = b.rkey();
  wr.compare_add = 1;
  wr.swap = 2;
  REQUIRE(t.p.a.post_and_ring(wr) == Errc::ok);
  REQUIRE(t.p.wait_send(t.p.a).status == IBV_WC_SUCCESS);
  *target = 1;  // if the duplicate executed, it would swap again
  t.replay_to_b(t.first_from_a(pkt::opcode::rc_compare_swap));
  CHECK(*target == 1);
  const auto answers = t.parsed_from_b();
  REQUIRE(answers.size() == 1);
  CHECK(answers[0].atomic_orig == 1);
}

TEST_CASE("a duplicate READ is executed again from memory") {
  Tapped t;
  Buffer a = t.p.a.reg(3000);
  Buffer b = t.p.b.reg(3000, all_remote(), 0x11);
  Sge sge{a.addr(), 3000, a.lkey()};
  SendWr wr = make_wr(WrOpcode::rdma_read, &sge, 1);
  wr.remote_addr = b.addr();
  wr.rkey = b.rkey();
  REQUIRE(t.p.a.post_and_ring(wr) == Errc::ok);
  REQUIRE(t.p.wait_send(t.p.a).status == IBV_WC_SUCCESS);
  CHECK(a.mem[2999] == 0x11);

  std::memset(b.data(), 0x22, b.size());
  t.replay_to_b(t.first_from_a(pkt::opcode::rc_read_request));
  const auto answers = t.parsed_from_b();
  REQUIRE(answers.size() == 3);  // 3000 bytes at MTU 1024
  CHECK(answers[0].bth.opcode == pkt::opcode::rc_read_response_first);
  CHECK(answers[1].bth.opcode == pkt::opcode::rc_read_response_middle);
  CHECK(answers[2].bth.opcode == pkt::opcode::rc_read_response_last);
  for (const auto& r : answers) CHECK(r.payload[0] == 0x22);  // read again, not replayed
  CHECK(a.mem[0] == 0x11);  // the requester ignored the stale responses
}

TEST_CASE("a duplicate SEND or WRITE is acknowledged again and places nothing") {
  Tapped t;
  Buffer a = t.p.a.reg(100, all_remote(), 0x33);
  Buffer b = t.p.b.reg(200);
  REQUIRE(t.p.b.post_recv(b, 0, 100) == Errc::ok);
  REQUIRE(t.p.b.post_recv(b, 100, 100) == Errc::ok);
  Sge sge{a.addr(), 100, a.lkey()};
  REQUIRE(t.p.a.post_and_ring(make_wr(WrOpcode::send, &sge, 1)) == Errc::ok);
  REQUIRE(t.p.wait_send(t.p.a).status == IBV_WC_SUCCESS);
  REQUIRE(t.p.wait_recv(t.p.b).status == IBV_WC_SUCCESS);
  t.replay_to_b(t.first_from_a(pkt::opcode::rc_send_only));
  Completion c;
  CHECK_FALSE(t.p.b.rcq->poll(&c));  // no second receive completion
  CHECK(b.mem[100] == 0);            // the second receive buffer is untouched
  auto answers = t.parsed_from_b();
  REQUIRE(answers.size() == 1);
  CHECK(answers[0].bth.opcode == pkt::opcode::rc_acknowledge);
  CHECK(answers[0].aeth.syndrome == 0x1f);

  Buffer w = t.p.b.reg(100);
  SendWr wr = make_wr(WrOpcode::rdma_write, &sge, 1);
  wr.remote_addr = w.addr();
  wr.rkey = w.rkey();
  REQUIRE(t.p.a.post_and_ring(wr) == Errc::ok);
  REQUIRE(t.p.wait_send(t.p.a).status == IBV_WC_SUCCESS);
  std::memset(w.data(), 0x44, 100);
  t.replay_to_b(t.first_from_a(pkt::opcode::rc_write_only));
  CHECK(w.mem[0] == 0x44);  // not written again
}

TEST_CASE("a request from an address the QP is not connected to is dropped and counted") {
  Tapped t;
  Buffer b = t.p.b.reg(100);
  REQUIRE(t.p.b.post_recv(b, 0, 100) == Errc::ok);
  Buffer a = t.p.a.reg(100, all_remote(), 0x55);
  Sge sge{a.addr(), 100, a.lkey()};
  t.p.a.dev->pause();
  REQUIRE(t.p.a.post_and_ring(make_wr(WrOpcode::send, &sge, 1)) == Errc::ok);
  // Build the SEND by hand and deliver it from a stranger's address.
  pkt::Packet pk;
  pk.bth.opcode = pkt::opcode::rc_send_only;
  pk.bth.dest_qp = t.p.b.qpn();
  pk.bth.psn = 0;
  pk.bth.ack_req = true;
  pk.payload = a.data();
  pk.payload_len = 100;
  Frame f(pkt::kMaxPacketBytes);
  f.resize(pkt::build_packet(pk, f.data(), f.size()));
  const uint64_t dropped = t.p.b.counters().rx_dropped;
  t.p.b.dev->impl().hca->inject_datagram(hw::IpAddress::v4(0x7f000063), f.data(), f.size());
  // And to a QPN that does not exist, from the right address.
  Frame g = f;
  g[7] ^= 0x40;
  t.p.b.dev->impl().hca->inject_datagram(t.p.a.dev->address(), g.data(), g.size());
  CHECK(t.p.b.counters().rx_dropped == dropped + 2);
  Completion c;
  CHECK_FALSE(t.p.b.rcq->poll(&c));
  CHECK(b.mem[0] == 0);
  t.p.a.dev->resume();
  CHECK(t.p.wait_recv(t.p.b).byte_len == 100);  // the real one still arrives
}
