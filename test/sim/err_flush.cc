// SPDX-License-Identifier: BSD-3-Clause
// ERR flushes both queues (IBA 10.3.1.7, C10-42/C10-96): every outstanding WQE, signaled or
// not, completes with WR_FLUSH_ERR in queue order, after the error CQE that caused it; work
// posted later is flushed as it is seen. RESET discards everything without completions.
#include <catch2/catch.hpp>

#include "sim_harness.h"

using namespace simtest;

namespace {

std::vector<wqe::CqeFields> drain(Pair& p, TestCq& cq) {
  p.settle();
  std::vector<wqe::CqeFields> out;
  Completion c;
  wqe::CqeFields f;
  while (cq.poll(&c, &f)) out.push_back(f);
  return out;
}

}  // namespace

TEST_CASE("modify to ERR flushes every posted WQE of both queues, in order") {
  Pair p;
  // No retransmit timer: the steps below jump virtual time forward, and the sends must still
  // be outstanding (not failed with RETRY_EXC_ERR) when the QP is moved to ERR.
  ConnectOptions o;
  o.timeout = 0;
  p.connect(o, o);
  Buffer buf = p.a.reg(4096);
  // Receives: four posted.
  for (int i = 0; i < 4; ++i) REQUIRE(p.a.post_recv(buf, 0, 64) == Errc::ok);
  // Sends the peer never answers (paused): two unsignaled, one signaled, one unsignaled.
  p.b.dev->pause();
  Sge sge{buf.addr(), 16, buf.lkey()};
  std::vector<uint32_t> pis;
  for (SendFlags flags : {send_flags::none, send_flags::none, send_flags::signaled, send_flags::none}) {
    pis.push_back(p.a.sq_pi);
    REQUIRE(p.a.post(make_wr(WrOpcode::send, &sge, 1, 0, flags)) == Errc::ok);
  }
  p.a.ring();
  for (int i = 0; i < 20; ++i) p.fabric->step();
  to_state(p.a, hw::QpState::err);

  std::vector<wqe::CqeFields> sq = drain(p, *p.a.scq);
  REQUIRE(sq.size() == 4);
  for (size_t i = 0; i < 4; ++i) {
    CHECK(sq[i].cqe_opcode == MLX5_CQE_REQ_ERR);
    CHECK(sq[i].syndrome == MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
    CHECK(sq[i].wqe_counter == pis[i]);
    CHECK(sq[i].send_opcode == MLX5_OPCODE_SEND);
  }
  std::vector<wqe::CqeFields> rq = drain(p, *p.a.rcq);
  REQUIRE(rq.size() == 4);
  for (size_t i = 0; i < 4; ++i) {
    CHECK(rq[i].cqe_opcode == MLX5_CQE_RESP_ERR);
    CHECK(rq[i].syndrome == MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
    CHECK(rq[i].wqe_counter == i);
  }
  p.b.dev->resume();
}

TEST_CASE("work posted to a QP in ERR is flushed as soon as it is seen") {
  Pair p;
  p.connect();
  Buffer buf = p.a.reg(64);
  to_state(p.a, hw::QpState::err);
  Sge sge{buf.addr(), 8, buf.lkey()};
  const uint32_t pi = p.a.sq_pi;
  REQUIRE(p.a.post_and_ring(make_wr(WrOpcode::send, &sge, 1, 0, 0)) == Errc::ok);
  REQUIRE(p.a.post_recv(buf, 0, 8) == Errc::ok);
  wqe::CqeFields f;
  Completion c = p.wait_send(p.a, &f);
  CHECK(c.status == IBV_WC_WR_FLUSH_ERR);
  CHECK(f.wqe_counter == pi);
  c = p.wait_recv(p.a);
  CHECK(c.status == IBV_WC_WR_FLUSH_ERR);
  // Even without a doorbell, a doorbell-record move in ERR is seen and flushed.
  REQUIRE(p.a.post(make_wr(WrOpcode::send, &sge, 1, 0, 0)) == Errc::ok);
  p.a.store_sq_dbr();
  CHECK(p.wait_send(p.a).status == IBV_WC_WR_FLUSH_ERR);
}

TEST_CASE("an error CQE comes first, then the flushes of the WQEs after it") {
  Pair p;
  p.connect();
  Buffer buf = p.a.reg(4096);
  Buffer remote = p.b.reg(64);
  Sge sge{buf.addr(), 8, buf.lkey()};
  SendWr good = make_wr(WrOpcode::rdma_write, &sge, 1, 0, 0);
  good.remote_addr = remote.addr();
  good.rkey = remote.rkey();
  SendWr bad = good;
  bad.rkey ^= 0x80;
  REQUIRE(p.a.post(good) == Errc::ok);
  REQUIRE(p.a.post(bad) == Errc::ok);
  for (int i = 0; i < 3; ++i) REQUIRE(p.a.post(good) == Errc::ok);
  REQUIRE(p.a.post_recv(buf, 0, 64) == Errc::ok);
  p.a.ring();
  std::vector<wqe::CqeFields> sq = drain(p, *p.a.scq);
  REQUIRE(sq.size() == 4);  // the good unsignaled first WQE writes nothing
  CHECK(sq[0].syndrome == MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
  for (size_t i = 1; i < 4; ++i) CHECK(sq[i].syndrome == MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
  std::vector<wqe::CqeFields> rq = drain(p, *p.a.rcq);
  REQUIRE(rq.size() == 1);
  CHECK(rq[0].syndrome == MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
}

TEST_CASE("RESET discards everything without completions and rewinds the device's indices") {
  Pair p;
  p.connect();
  Buffer buf = p.a.reg(64);
  p.b.dev->pause();
  Sge sge{buf.addr(), 8, buf.lkey()};
  for (int i = 0; i < 3; ++i) REQUIRE(p.a.post(make_wr(WrOpcode::send, &sge, 1)) == Errc::ok);
  p.a.ring();
  REQUIRE(p.a.post_recv(buf, 0, 8) == Errc::ok);
  for (int i = 0; i < 10; ++i) p.fabric->step();
  to_state(p.a, hw::QpState::reset);
  CHECK(drain(p, *p.a.scq).empty());
  CHECK(drain(p, *p.a.rcq).empty());
  sim::QpSnapshot s = p.a.snapshot();
  CHECK(s.state == hw::QpState::reset);
  CHECK(s.sq_consumed == 0);
  CHECK(s.rq_consumed == 0);
  p.b.dev->resume();
}
