// SPDX-License-Identifier: BSD-3-Clause
// Counters, per-QP snapshots, the state dump, and pause/resume.
#include <catch2/catch.hpp>

#include "sim_harness.h"

using namespace simtest;

TEST_CASE("counters and snapshots follow the traffic; the dump names every object") {
  Pair p;
  p.connect();
  Buffer a = p.a.reg(4096, all_remote(), 1);
  Buffer b = p.b.reg(4096);
  REQUIRE(p.b.post_recv(b, 0, 4096) == Errc::ok);
  Sge sge{a.addr(), 3000, a.lkey()};
  REQUIRE(p.a.post_and_ring(make_wr(WrOpcode::send, &sge, 1)) == Errc::ok);
  p.wait_recv(p.b);
  p.wait_send(p.a);
  const sim::DeviceCounters ca = p.a.counters();
  const sim::DeviceCounters cb = p.b.counters();
  CHECK(ca.uar_doorbells == 1);
  CHECK(ca.sq_dbr_advances == 1);
  CHECK(ca.wqes_fetched == 1);
  CHECK(ca.packets_tx == 3);  // 3000 bytes at MTU 1024
  CHECK(cb.packets_rx == 3);
  CHECK(cb.acks_tx == 1);
  CHECK(ca.acks_rx == 1);
  CHECK(cb.rq_dbr_advances == 1);
  CHECK(ca.cqes_written == 1);
  CHECK(cb.cqes_written == 1);
  CHECK(ca.bytes_tx == cb.bytes_rx);
  const sim::QpSnapshot s = p.a.snapshot();
  CHECK(s.state == hw::QpState::rts);
  CHECK(s.sq_dbr == 1);
  CHECK(s.sq_consumed == 1);
  CHECK(s.next_psn == 3);
  CHECK(s.wqes_executed == 1);
  CHECK(p.b.snapshot().expected_psn == 3);
  CHECK(p.b.snapshot().rq_consumed == 1);
  CHECK_FALSE(p.a.dev->qp_snapshot(0xabcdef));

  const std::string dump = p.a.dev->dump();
  INFO(dump);
  char qpn[32];
  std::snprintf(qpn, sizeof qpn, "qp %#x RTS", p.a.qpn());
  CHECK(dump.find(qpn) != std::string::npos);
  CHECK(dump.find("pd ") != std::string::npos);
  CHECK(dump.find("mr key") != std::string::npos);
  CHECK(dump.find("cq 0x") != std::string::npos);
  CHECK(dump.find("psn next 0x3") != std::string::npos);
}

TEST_CASE("port counters under their sysfs names follow the traffic; unknown names and ports "
          "are refused, naming what the device keeps") {
  Pair p;
  p.connect();
  Buffer a = p.a.reg(4096, all_remote(), 1);
  Buffer b = p.b.reg(4096);
  auto counter = [](Host& s, const char* name) {
    Result<uint64_t> v = s.dev->read_port_counter(1, name);
    REQUIRE(v);
    return v.value();
  };
  REQUIRE(counter(p.a, "counters/port_xmit_packets") == 0);
  // A SEND with no receive posted: an RNR NAK, which is a packet dropped for want of a WQE.
  Sge sge{a.addr(), 3000, a.lkey()};
  REQUIRE(p.a.post_and_ring(make_wr(WrOpcode::send, &sge, 1)) == Errc::ok);
  p.fabric->run_until([&] { return p.b.counters().rnr_naks_tx != 0; }, 1'000'000'000);
  REQUIRE(p.b.post_recv(b, 0, 4096) == Errc::ok);
  p.wait_recv(p.b);
  p.wait_send(p.a);
  const sim::DeviceCounters ca = p.a.counters();
  const sim::DeviceCounters cb = p.b.counters();
  CHECK(counter(p.a, "counters/port_xmit_packets") == ca.packets_tx);
  CHECK(counter(p.a, "counters/port_xmit_packets") > 3);  // sent again after the RNR NAK
  CHECK(counter(p.a, "counters/port_xmit_data") == ca.bytes_tx / 4);
  CHECK(counter(p.b, "counters/port_rcv_packets") == cb.packets_rx);
  CHECK(counter(p.b, "counters/port_rcv_data") == cb.bytes_rx / 4);
  CHECK(counter(p.b, "hw_counters/out_of_buffer") == cb.rnr_naks_tx);
  CHECK(counter(p.b, "hw_counters/out_of_buffer") >= 1);
  CHECK(counter(p.a, "hw_counters/rnr_nak_retry_err") == ca.rnr_naks_rx);
  CHECK(counter(p.a, "hw_counters/rnr_nak_retry_err") >= 1);
  CHECK(counter(p.a, "hw_counters/local_ack_timeout_err") == ca.timeouts);
  CHECK(counter(p.a, "counters/port_xmit_discards") == 0);

  Result<uint64_t> bad = p.a.dev->read_port_counter(1, "counters/port_xmit_wait");
  REQUIRE_FALSE(bad);
  CHECK(bad.status().code() == Errc::invalid_argument);
  CHECK_THAT(bad.status().message(), Catch::Contains("no counter 'counters/port_xmit_wait'") &&
                                         Catch::Contains("hw_counters/out_of_buffer"));
  bad = p.a.dev->read_port_counter(2, "counters/port_xmit_data");
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.status().message(), Catch::Contains("port 2: the device has port 1 only"));
  CHECK(sim::port_counter_names().size() == 8);
}

TEST_CASE("a paused device records doorbells and executes them after resume") {
  Pair p;
  p.connect();
  Buffer a = p.a.reg(64, all_remote(), 0x2b);
  Buffer b = p.b.reg(64);
  p.a.dev->pause();
  CHECK(p.a.dev->dump().find("PAUSED") != std::string::npos);
  Sge sge{a.addr(), 64, a.lkey()};
  SendWr w = make_wr(WrOpcode::rdma_write, &sge, 1);
  w.remote_addr = b.addr();
  w.rkey = b.rkey();
  REQUIRE(p.a.post_and_ring(w) == Errc::ok);
  p.settle();
  CHECK(p.a.counters().uar_doorbells == 1);
  CHECK(p.a.counters().packets_tx == 0);
  CHECK(b.mem[0] == 0);
  p.a.dev->resume();
  CHECK(p.wait_send(p.a).status == IBV_WC_SUCCESS);
  CHECK(b.mem[0] == 0x2b);
}

TEST_CASE("the progress hook of a deterministic device steps the whole fabric") {
  Pair p;
  p.connect();
  Buffer a = p.a.reg(64, all_remote(), 0x6d);
  Buffer b = p.b.reg(64);
  Sge sge{a.addr(), 64, a.lkey()};
  SendWr w = make_wr(WrOpcode::rdma_write, &sge, 1);
  w.remote_addr = b.addr();
  w.rkey = b.rkey();
  REQUIRE(p.a.post_and_ring(w) == Errc::ok);
  hw::ProgressHook hook = p.a.dev->progress_hook();
  Completion c;
  int calls = 0;
  while (!p.a.poll_send(&c) && calls < 1000) {
    hook();
    ++calls;
  }
  CHECK(c.status == IBV_WC_SUCCESS);
  CHECK(b.mem[0] == 0x6d);
}
