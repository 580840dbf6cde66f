// SPDX-License-Identifier: BSD-3-Clause
// Two responder behaviours the fault campaign depends on, each shown on a single packet:
//  * a duplicate SEND/WRITE is acknowledged even without AckReq (IBA C9-105): after a lost
//    NAK or ACK the requester learns where the responder is from its retransmission, instead
//    of timing out round after round until retry_cnt runs out on a link that works;
//  * a READ asked for again replaces the response stream still under way, so that a lossy
//    link does not carry the rest of a large READ once per re-request.
#include <catch2/catch.hpp>

#include <algorithm>
#include <vector>

#include "../sim/sim_harness.h"
#include "device_impl.h"
#include "packet/opcode.h"
#include "packet/packet.h"

using namespace simtest;
namespace pkt = rnicdv::sim::pkt;

namespace {

using Frame = std::vector<uint8_t>;

bool is_read_response(uint8_t opcode) {
  return opcode >= pkt::opcode::rc_read_response_first &&
         opcode <= pkt::opcode::rc_read_response_only;
}

}  // namespace

TEST_CASE("a duplicate WRITE without AckReq is acknowledged again (C9-105)") {
  Pair p;
  p.connect();
  Buffer a = p.a.reg(8192, all_remote(), 0x42);
  Buffer b = p.b.reg(8192);
  std::vector<Frame> sent;
  p.a.dev->impl().hca->set_tx_tap(
      [&](const hw::IpAddress&, const uint8_t* d, size_t n) { sent.emplace_back(d, d + n); });
  Sge sge{a.addr(), 4096, a.lkey()};  // four packets at MTU 1024
  SendWr w = make_wr(WrOpcode::rdma_write, &sge, 1);
  w.remote_addr = b.addr();
  w.rkey = b.rkey();
  REQUIRE(p.a.post_and_ring(w) == Errc::ok);
  REQUIRE(p.wait_send(p.a).status == IBV_WC_SUCCESS);
  p.settle();
  p.a.dev->impl().hca->set_tx_tap({});
  // WRITE_MIDDLE carries no AckReq.
  auto middle = std::find_if(sent.begin(), sent.end(),
                             [](const Frame& f) { return f[0] == pkt::opcode::rc_write_middle; });
  REQUIRE(middle != sent.end());
  REQUIRE(((*middle)[8] & 0x80) == 0);
  const uint64_t acks = p.b.counters().acks_tx;
  const uint64_t dups = p.b.counters().duplicates_rx;
  p.b.dev->impl().hca->inject_datagram(p.a.dev->address(), middle->data(), middle->size());
  p.settle();
  CHECK(p.b.counters().duplicates_rx == dups + 1);
  CHECK(p.b.counters().acks_tx == acks + 1);
  CHECK(std::all_of(b.mem.begin(), b.mem.begin() + 4096, [](uint8_t x) { return x == 0x42; }));
  CHECK(b.mem[4096] == 0);
}

TEST_CASE("a READ asked for again replaces the response stream under way") {
  FabricOptions fo;
  fo.faults.drop = 1.0;  // only what the test injects reaches B
  Pair p(fo);
  p.connect();
  Buffer a = p.a.reg(65536);
  Buffer b = p.b.reg(65536, all_remote(), 0x5e);
  std::vector<Frame> from_a, from_b;
  p.a.dev->impl().hca->set_tx_tap(
      [&](const hw::IpAddress&, const uint8_t* d, size_t n) { from_a.emplace_back(d, d + n); });
  p.b.dev->impl().hca->set_tx_tap(
      [&](const hw::IpAddress&, const uint8_t* d, size_t n) { from_b.emplace_back(d, d + n); });
  Sge sge{a.addr(), 65536, a.lkey()};  // 64 response packets at MTU 1024
  SendWr r = make_wr(WrOpcode::rdma_read, &sge, 1);
  r.remote_addr = b.addr();
  r.rkey = b.rkey();
  REQUIRE(p.a.post_and_ring(r) == Errc::ok);
  p.a.dev->impl().hca->run_engine_pass();
  auto request = std::find_if(from_a.begin(), from_a.end(), [](const Frame& f) {
    return f[0] == pkt::opcode::rc_read_request;
  });
  REQUIRE(request != from_a.end());
  const Frame req = *request;
  // The request, then the same request again (a retransmission) before B has sent anything.
  auto& hca_b = *p.b.dev->impl().hca;
  hca_b.inject_datagram(p.a.dev->address(), req.data(), req.size());
  hca_b.inject_datagram(p.a.dev->address(), req.data(), req.size());
  for (int i = 0; i < 1000 && hca_b.run_engine_pass(); ++i) {
  }
  const auto responses = std::count_if(from_b.begin(), from_b.end(),
                                       [](const Frame& f) { return is_read_response(f[0]); });
  CHECK(responses == 64);  // one stream, not two
  p.a.dev->impl().hca->set_tx_tap({});
  p.b.dev->impl().hca->set_tx_tap({});
}
