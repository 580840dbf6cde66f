// SPDX-License-Identifier: BSD-3-Clause
// A capture of a real run (SEND, multi-packet SEND, WRITE with immediate, a multi-packet
// READ, both atomics, an RNR NAK and ACKs) decodes in tshark as RoCEv2
// (eth:ethertype:ip:udp:infiniband) with no malformed frame. Skipped (exit code 77) where
// tshark is absent.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <set>
#include <sstream>

#include "sim_harness.h"
#include "tshark.h"

using namespace simtest;
using rnicdv::test::skip_without_tshark;
using rnicdv::test::tshark;

namespace {

void traffic(const std::string& pcap) {
  FabricOptions fo;
  fo.pcap_path = pcap;
  Pair p(fo);
  ConnectOptions o;
  o.mtu = hw::Mtu::mtu1024;
  p.connect(o, o);
  Buffer a = p.a.reg(8192);
  Buffer b = p.b.reg(8192);
  fill_pattern(a.data(), 8192, 1);
  Sge small{a.addr(), 100, a.lkey()};
  Sge big{a.addr(), 3000, a.lkey()};
  // RNR first: no receive posted yet.
  REQUIRE(p.a.post_and_ring(make_wr(WrOpcode::send, &small, 1)) == Errc::ok);
  p.run_until([&] { return p.a.snapshot().rnr_naks_rx >= 1; });
  REQUIRE(p.b.post_recv(b, 0, 4096) == Errc::ok);
  REQUIRE(p.wait_send(p.a).status == IBV_WC_SUCCESS);
  REQUIRE(p.b.post_recv(b, 0, 4096) == Errc::ok);
  REQUIRE(p.a.post_and_ring(make_wr(WrOpcode::send, &big, 1)) == Errc::ok);
  REQUIRE(p.wait_send(p.a).status == IBV_WC_SUCCESS);
  REQUIRE(p.b.post_recv(b, 0, 0) == Errc::ok);
  SendWr w = make_wr(WrOpcode::rdma_write_imm, &small, 1);
  w.remote_addr = b.addr(4096);
  w.rkey = b.rkey();
  w.imm_data = 0x1234;
  REQUIRE(p.a.post_and_ring(w) == Errc::ok);
  REQUIRE(p.wait_send(p.a).status == IBV_WC_SUCCESS);
  SendWr r = make_wr(WrOpcode::rdma_read, &big, 1);
  r.remote_addr = b.addr();
  r.rkey = b.rkey();
  REQUIRE(p.a.post_and_ring(r) == Errc::ok);
  REQUIRE(p.wait_send(p.a).status == IBV_WC_SUCCESS);
  Sge eight{a.addr(), 8, a.lkey()};
  SendWr cs = make_wr(WrOpcode::atomic_cmp_swap, &eight, 1);
  cs.remote_addr = b.addr(8000);
  cs.rkey = b.rkey();
  REQUIRE(p.a.post_and_ring(cs) == Errc::ok);
  REQUIRE(p.wait_send(p.a).status == IBV_WC_SUCCESS);
  cs.opcode = WrOpcode::atomic_fetch_add;
  REQUIRE(p.a.post_and_ring(cs) == Errc::ok);
  REQUIRE(p.wait_send(p.a).status == IBV_WC_SUCCESS);
  p.settle();
}

}  // namespace

TEST_CASE("a capture of a real run decodes as RoCEv2 in tshark, nothing malformed") {
  skip_without_tshark();
  char dir[] = "/tmp/rnicdv-sim-pcap-XXXXXX";
  REQUIRE(::mkdtemp(dir) != nullptr);
  const std::string pcap = std::string(dir) + "/run.pcap";
  traffic(pcap);  // the fabric is gone: the capture is complete

  const std::string fields = tshark(pcap, "-T fields -e frame.protocols -e infiniband.bth.opcode");
  std::istringstream lines(fields);
  std::string line;
  std::set<int> opcodes;
  int frames = 0;
  while (std::getline(lines, line)) {
    ++frames;
    const auto tab = line.find('\t');
    REQUIRE(tab != std::string::npos);
    INFO(line);
    CHECK(line.rfind("eth:ethertype:ip:udp:infiniband", 0) == 0);
    opcodes.insert(std::stoi(line.substr(tab + 1)));
  }
  CHECK(frames > 15);
  // SEND_ONLY, SEND_FIRST/MIDDLE/LAST, WRITE_ONLY_IMM, READ_REQUEST, READ_RESPONSE
  // FIRST/MIDDLE/LAST, ACKNOWLEDGE, ATOMIC_ACKNOWLEDGE, COMPARE_SWAP, FETCH_ADD.
  for (int op : {4, 0, 1, 2, 11, 12, 13, 14, 15, 17, 18, 19, 20}) {
    INFO("opcode " << op);
    CHECK(opcodes.count(op) == 1);
  }
  CHECK(tshark(pcap, "-Y _ws.malformed").empty());
  // The RNR NAK carries the responder's timer code in its AETH.
  const std::string rnr = tshark(pcap,
                                 "-Y 'infiniband.aeth.syndrome.opcode == 1' -T fields "
                                 "-e infiniband.aeth.syndrome.timer");
  CHECK_FALSE(rnr.empty());
  std::remove(pcap.c_str());
  ::rmdir(dir);
}
