// SPDX-License-Identifier: BSD-3-Clause
// The CQ ring: the owner bit flips every lap (rdma-core get_sw_cqe), and a producer that
// would pass the consumer index the driver published raises CQ_ERR instead of overwriting.
#include <catch2/catch.hpp>

#include "sim_harness.h"

using namespace simtest;

namespace {

SendWr write_wr(Sge* sge, Buffer& dst, SendFlags flags = send_flags::signaled) {
  SendWr wr = make_wr(WrOpcode::rdma_write, sge, 1, 0, flags);
  wr.remote_addr = dst.addr();
  wr.rkey = dst.rkey();
  return wr;
}

}  // namespace

TEST_CASE("the owner bit flips on every lap of the CQ ring") {
  HostOptions o = Pair::default_host();
  o.cqe = 16;
  Pair p(FabricOptions{}, o, o);
  p.connect();
  Buffer a = p.a.reg(64);
  Buffer b = p.b.reg(64);
  Sge sge{a.addr(), 8, a.lkey()};
  const uint32_t cnt = p.a.scq->cq->view().dv.cqe_cnt;
  REQUIRE(cnt == 16);
  for (uint32_t i = 0; i < 5 * cnt; ++i) {
    const uint32_t pi = p.a.sq_pi;
    REQUIRE(p.a.post_and_ring(write_wr(&sge, b)) == Errc::ok);
    const mlx5_cqe64* cqe = nullptr;
    TestCq& cq = *p.a.scq;
    const uint32_t ci = cq.ci;
    REQUIRE(p.run_until([&] { return (cqe = cq.next()) != nullptr; }));
    CHECK((cqe->op_own & 1) == ((ci / cnt) & 1));
    CHECK(be16toh(cqe->wqe_counter) == (pi & 0xffff));
    p.a.retire_through(static_cast<uint16_t>(pi));
  }
  CHECK(p.a.counters().cq_overflows == 0);
}

TEST_CASE("CQ overflow raises CQ_ERR, overwrites nothing, and moves its QPs to ERR") {
  HostOptions o = Pair::default_host();
  o.cqe = 4;
  Pair p(FabricOptions{}, o, Pair::default_host());
  p.connect();
  Buffer a = p.a.reg(64);
  Buffer b = p.b.reg(64);
  Sge sge{a.addr(), 8, a.lkey()};
  REQUIRE(p.a.scq->cq->view().dv.cqe_cnt == 4);
  std::vector<uint32_t> pis;
  for (int i = 0; i < 6; ++i) {
    pis.push_back(p.a.sq_pi);
    REQUIRE(p.a.post(write_wr(&sge, b)) == Errc::ok);
  }
  p.a.ring();
  p.settle();
  // Nobody consumed: four CQEs fit, the fifth overflows.
  hw::AsyncEvent ev;
  bool cq_err = false, qp_fatal = false;
  while (p.a.dev->next_async_event(&ev)) {
    if (ev.type == hw::AsyncEventType::cq_err) {
      cq_err = true;
      CHECK(ev.cqn == p.a.scq->cq->view().dv.cqn);
    }
    if (ev.type == hw::AsyncEventType::qp_fatal) {
      qp_fatal = true;
      CHECK(ev.qpn == p.a.qpn());
    }
  }
  CHECK(cq_err);
  CHECK(qp_fatal);
  CHECK(p.a.counters().cq_overflows == 1);
  CHECK(p.a.qp->state() == hw::QpState::err);
  // The four CQEs are the first four WQEs, untouched, all of the first lap.
  for (int i = 0; i < 4; ++i) {
    Completion c;
    wqe::CqeFields f;
    REQUIRE(p.a.scq->poll(&c, &f));
    CHECK(c.status == IBV_WC_SUCCESS);
    CHECK(f.wqe_counter == pis[i]);
  }
  Completion c;
  CHECK_FALSE(p.a.scq->poll(&c));  // nothing was written past the consumer
  p.settle();
  CHECK_FALSE(p.a.scq->poll(&c));  // and nothing more after CQ_ERR
}

TEST_CASE("a consumer that keeps up never overflows a small CQ") {
  HostOptions o = Pair::default_host();
  o.cqe = 2;
  Pair p(FabricOptions{}, o, Pair::default_host());
  p.connect();
  Buffer a = p.a.reg(64);
  Buffer b = p.b.reg(64);
  Sge sge{a.addr(), 8, a.lkey()};
  for (int i = 0; i < 50; ++i) {
    REQUIRE(p.a.post_and_ring(write_wr(&sge, b)) == Errc::ok);
    CHECK(p.wait_send(p.a).status == IBV_WC_SUCCESS);
  }
  CHECK(p.a.counters().cq_overflows == 0);
}
