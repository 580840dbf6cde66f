// SPDX-License-Identifier: BSD-3-Clause
// Receiver not ready (IBA 9.7.5.2.8): a SEND (or WRITE with immediate) that finds no receive
// WQE gets an RNR NAK with the responder's min_rnr_timer; the requester waits that long and
// retries, rnr_retry times (7: forever), then completes with RNR_RETRY_EXC_ERR.
#include <catch2/catch.hpp>

#include <cstring>

#include "sim_harness.h"

using namespace simtest;

TEST_CASE("finite rnr_retry ends in RNR_RETRY_EXC_ERR after rnr_retry retries") {
  Pair p;
  ConnectOptions oa, ob;
  oa.rnr_retry = 2;
  ob.min_rnr_timer = 14;  // 1.28 ms
  p.connect(oa, ob);
  Buffer a = p.a.reg(64);
  Sge sge{a.addr(), 64, a.lkey()};
  REQUIRE(p.a.post(make_wr(WrOpcode::send, &sge, 1)) == Errc::ok);
  REQUIRE(p.a.post(make_wr(WrOpcode::send, &sge, 1)) == Errc::ok);
  p.a.ring();
  const uint64_t start = p.fabric->now_ns();
  Completion c = p.wait_send(p.a);
  CHECK(c.status == IBV_WC_RNR_RETRY_EXC_ERR);
  CHECK(p.wait_send(p.a).status == IBV_WC_WR_FLUSH_ERR);
  CHECK(p.a.qp->state() == hw::QpState::err);
  CHECK(p.a.snapshot().rnr_naks_rx == 3);  // the first try and two retries
  CHECK(p.b.counters().rnr_naks_tx == 3);
  // Two waits of the advertised timer (1.28 ms each) passed in virtual time.
  CHECK(p.fabric->now_ns() - start >= 2 * 1'280'000);
  CHECK(p.b.qp->state() == hw::QpState::rts);  // RNR is not an error for the responder
}

TEST_CASE("rnr_retry 7 retries forever; a receive posted later completes the SEND") {
  Pair p;
  ConnectOptions oa, ob;
  oa.rnr_retry = 7;
  ob.min_rnr_timer = 1;  // 10 us
  p.connect(oa, ob);
  Buffer a = p.a.reg(5000, all_remote(), 0x3c);
  Buffer b = p.b.reg(5000);
  Sge sge{a.addr(), 5000, a.lkey()};
  REQUIRE(p.a.post_and_ring(make_wr(WrOpcode::send, &sge, 1)) == Errc::ok);
  p.run_until([&] { return p.a.snapshot().rnr_naks_rx >= 50; });
  Completion c;
  CHECK_FALSE(p.a.poll_send(&c));
  CHECK(p.a.qp->state() == hw::QpState::rts);
  REQUIRE(p.b.post_recv(b, 0, 5000) == Errc::ok);
  CHECK(p.wait_recv(p.b).byte_len == 5000);
  CHECK(p.wait_send(p.a).status == IBV_WC_SUCCESS);
  CHECK(std::memcmp(a.data(), b.data(), 5000) == 0);
}

TEST_CASE("a WRITE with immediate without a receive WQE is retried after RNR, placed once") {
  Pair p;
  ConnectOptions o;
  o.mtu = hw::Mtu::mtu256;
  p.connect(o, o);
  Buffer a = p.a.reg(1000, all_remote(), 0x77);
  Buffer b = p.b.reg(1000);
  Sge sge{a.addr(), 1000, a.lkey()};
  SendWr wr = make_wr(WrOpcode::rdma_write_imm, &sge, 1);
  wr.remote_addr = b.addr();
  wr.rkey = b.rkey();
  wr.imm_data = 5;
  REQUIRE(p.a.post_and_ring(wr) == Errc::ok);
  p.run_until([&] { return p.a.snapshot().rnr_naks_rx >= 3; });
  Buffer rb = p.b.reg(16);
  REQUIRE(p.b.post_recv(rb, 0, 16) == Errc::ok);
  Completion r = p.wait_recv(p.b);
  CHECK(r.opcode == IBV_WC_RECV_RDMA_WITH_IMM);
  CHECK(r.imm_data == 5);
  CHECK(p.wait_send(p.a).status == IBV_WC_SUCCESS);
  CHECK(std::memcmp(a.data(), b.data(), 1000) == 0);
  p.settle();
  CHECK_FALSE(p.b.rcq->poll(&r));  // exactly one receive completion
}
