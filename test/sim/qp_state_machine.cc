// SPDX-License-Identifier: BSD-3-Clause
// The IB QP state machine (IBA 10.3.1): legal transitions with their required attributes,
// errors that name the QP, the transition and the reason, inbound handling per state, and
// COMM_EST on the first request that reaches a QP in RTR.
#include <poll.h>
#include <catch2/catch.hpp>

#include <cstdio>

#include "sim_harness.h"

using namespace simtest;

namespace {

std::string qp_prefix(const Host& h) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "qp %#x: ", h.qpn());
  return buf;
}

}  // namespace

TEST_CASE("a QP walks RESET->INIT->RTR->RTS->SQD->RTS->ERR->RESET") {
  Pair p;
  CHECK(p.a.qp->state() == hw::QpState::reset);
  to_init(p.a);
  CHECK(p.a.qp->state() == hw::QpState::init);
  to_init(p.a);  // INIT->INIT is legal
  to_rtr(p.a, p.b);
  CHECK(p.a.qp->state() == hw::QpState::rtr);
  to_rts(p.a);
  CHECK(p.a.qp->state() == hw::QpState::rts);
  hw::QpAttr attr;
  attr.state = hw::QpState::rts;
  attr.min_rnr_timer = 3;
  CHECK(p.a.modify(attr, hw::qp_attr::state | hw::qp_attr::min_rnr_timer));
  to_state(p.a, hw::QpState::sqd);
  CHECK(p.a.qp->state() == hw::QpState::sqd);
  to_state(p.a, hw::QpState::rts);
  to_state(p.a, hw::QpState::err);
  CHECK(p.a.qp->state() == hw::QpState::err);
  to_state(p.a, hw::QpState::reset);
  CHECK(p.a.qp->state() == hw::QpState::reset);
}

TEST_CASE("an illegal transition is refused with the QP, the transition and the reason") {
  Pair p;
  to_init(p.a);
  hw::QpAttr attr;
  attr.state = hw::QpState::rts;
  Status s = p.a.modify(attr, hw::qp_attr::state | hw::qp_attr::sq_psn);
  CHECK(s.code() == Errc::bad_state);
  CHECK(s.message() == qp_prefix(p.a) + "modify INIT->RTS: illegal transition");
  CHECK(p.a.qp->state() == hw::QpState::init);

  attr.state = hw::QpState::sqd;
  s = p.a.modify(attr, hw::qp_attr::state);
  CHECK(s.message() == qp_prefix(p.a) + "modify INIT->SQD: illegal transition");
  attr.state = hw::QpState::sqe;
  CHECK(p.a.modify(attr, hw::qp_attr::state).code() == Errc::bad_state);
}

TEST_CASE("a transition without a required attribute names the missing attribute") {
  Pair p;
  hw::QpAttr attr;
  attr.state = hw::QpState::init;
  Status s = p.a.modify(attr, hw::qp_attr::state | hw::qp_attr::port);
  CHECK(s.code() == Errc::invalid_argument);
  CHECK(s.message() == qp_prefix(p.a) + "modify RESET->INIT: access_flags not set");

  to_init(p.a);
  attr.state = hw::QpState::rtr;
  attr.remote_gid = hw::Gid::from_ipv4(p.b.dev->ipv4());
  s = p.a.modify(attr, hw::qp_attr::state | hw::qp_attr::av | hw::qp_attr::path_mtu |
                           hw::qp_attr::rq_psn | hw::qp_attr::max_dest_rd_atomic |
                           hw::qp_attr::min_rnr_timer);
  CHECK(s.message() == qp_prefix(p.a) + "modify INIT->RTR: dest_qpn not set");

  to_rtr(p.a, p.b);
  attr.state = hw::QpState::rts;
  s = p.a.modify(attr, hw::qp_attr::state | hw::qp_attr::timeout | hw::qp_attr::retry_cnt |
                           hw::qp_attr::rnr_retry | hw::qp_attr::max_rd_atomic);
  CHECK(s.message() == qp_prefix(p.a) + "modify RTR->RTS: sq_psn not set");
  CHECK(p.a.qp->state() == hw::QpState::rtr);
}

TEST_CASE("attributes that do not belong to a transition, or bad values, are refused") {
  Pair p;
  hw::QpAttr attr;
  attr.state = hw::QpState::init;
  Status s = p.a.modify(attr, hw::qp_attr::state | hw::qp_attr::port | hw::qp_attr::access_flags |
                                  hw::qp_attr::sq_psn);
  CHECK(s.message() ==
        qp_prefix(p.a) + "modify RESET->INIT: sq_psn is not an attribute of this transition");
  to_init(p.a);

  attr.state = hw::QpState::rtr;
  attr.dest_qpn = p.b.qpn();
  attr.remote_gid = hw::Gid{};  // unspecified
  const uint32_t rtr_mask = hw::qp_attr::state | hw::qp_attr::av | hw::qp_attr::path_mtu |
                            hw::qp_attr::dest_qpn | hw::qp_attr::rq_psn |
                            hw::qp_attr::max_dest_rd_atomic | hw::qp_attr::min_rnr_timer;
  s = p.a.modify(attr, rtr_mask);
  CHECK(s.code() == Errc::invalid_argument);
  CHECK(s.message().find("remote GID is unspecified") != std::string::npos);
  // An IPv6 GID towards a device with an IPv4 address: one IP version end to end.
  attr.remote_gid = hw::Gid::from_ip(must(hw::IpAddress::parse("fd00::2")));
  s = p.a.modify(attr, rtr_mask);
  CHECK(s.code() == Errc::invalid_argument);
  CHECK(s.message().find("remote GID fd00::2 is IPv6-addressed, the device's address 127.0.0.") !=
        std::string::npos);
  attr.remote_gid = hw::Gid::from_ipv4(p.b.dev->ipv4());
  attr.rq_psn = 1u << 24;
  CHECK(p.a.modify(attr, rtr_mask).message().find("rq_psn") != std::string::npos);
  attr.rq_psn = 0;
  attr.max_dest_rd_atomic = 200;
  CHECK(p.a.modify(attr, rtr_mask).message().find("max_dest_rd_atomic") != std::string::npos);
  attr.max_dest_rd_atomic = 1;
  REQUIRE(p.a.modify(attr, rtr_mask));

  attr.state = hw::QpState::rts;
  attr.retry_cnt = 8;
  s = p.a.modify(attr, hw::qp_attr::state | hw::qp_attr::sq_psn | hw::qp_attr::timeout |
                           hw::qp_attr::retry_cnt | hw::qp_attr::rnr_retry |
                           hw::qp_attr::max_rd_atomic);
  CHECK(s.message() == qp_prefix(p.a) + "modify RTR->RTS: retry_cnt above 7");
}

TEST_CASE("inbound requests to a QP in INIT are dropped and counted, then retried into RTR") {
  Pair p;
  ConnectOptions o;
  o.timeout = 8;  // ~1 ms
  to_init(p.a, o);
  to_init(p.b, o);
  to_rtr(p.a, p.b, o);
  to_rts(p.a, o);  // a sends while b is still in INIT
  Buffer a = p.a.reg(64, all_remote(), 9);
  Buffer b = p.b.reg(64);
  REQUIRE(p.b.post_recv(b, 0, 64) == Errc::ok);
  Sge sge{a.addr(), 64, a.lkey()};
  REQUIRE(p.a.post_and_ring(make_wr(WrOpcode::send, &sge, 1)) == Errc::ok);
  p.run_until([&] { return p.b.counters().rx_dropped >= 2; });
  Completion c;
  CHECK_FALSE(p.b.rcq->poll(&c));
  CHECK(p.a.snapshot().retransmits >= 1);
  to_rtr(p.b, p.a, o);
  CHECK(p.wait_recv(p.b).byte_len == 64);
  CHECK(p.wait_send(p.a).status == IBV_WC_SUCCESS);
}

TEST_CASE("COMM_EST is raised once, on the first request that reaches a QP in RTR") {
  Pair p;
  to_init(p.a);
  to_init(p.b);
  to_rtr(p.a, p.b);
  to_rtr(p.b, p.a);
  to_rts(p.a);
  Buffer a = p.a.reg(64);
  Buffer b = p.b.reg(1024);
  for (int i = 0; i < 4; ++i) REQUIRE(p.b.post_recv(b, 0, 64) == Errc::ok);
  Sge sge{a.addr(), 16, a.lkey()};
  hw::AsyncEvent ev;
  CHECK_FALSE(p.b.dev->next_async_event(&ev));
  pollfd pfd{p.b.dev->async_fd(), POLLIN, 0};
  CHECK(::poll(&pfd, 1, 0) == 0);

  for (int i = 0; i < 2; ++i) REQUIRE(p.a.post(make_wr(WrOpcode::send, &sge, 1)) == Errc::ok);
  p.a.ring();
  p.wait_recv(p.b);
  p.wait_recv(p.b);  // receives are processed in RTR
  CHECK(p.b.qp->state() == hw::QpState::rtr);
  CHECK(::poll(&pfd, 1, 0) == 1);  // the async fd is readable
  REQUIRE(p.b.dev->next_async_event(&ev));
  CHECK(ev.type == hw::AsyncEventType::comm_est);
  CHECK(ev.qpn == p.b.qpn());
  CHECK_FALSE(p.b.dev->next_async_event(&ev));
  CHECK(::poll(&pfd, 1, 0) == 0);
  CHECK(p.b.snapshot().comm_est_raised);
  CHECK(p.b.counters().comm_est_raised == 1);

  to_rts(p.b);
  REQUIRE(p.a.post_and_ring(make_wr(WrOpcode::send, &sge, 1)) == Errc::ok);
  p.wait_recv(p.b);
  CHECK_FALSE(p.b.dev->next_async_event(&ev));
  CHECK(p.b.counters().comm_est_raised == 1);
}

TEST_CASE("SQD finishes the message in flight, starts nothing new, and resumes at RTS") {
  Pair p;
  ConnectOptions o;
  o.mtu = hw::Mtu::mtu256;
  p.connect(o, o);
  Buffer a = p.a.reg(64 * 1024, all_remote(), 0x61);
  Buffer b = p.b.reg(64 * 1024);
  Sge big{a.addr(), 32 * 1024, a.lkey()};
  SendWr w1 = make_wr(WrOpcode::rdma_write, &big, 1);
  w1.remote_addr = b.addr();
  w1.rkey = b.rkey();
  REQUIRE(p.a.post_and_ring(w1) == Errc::ok);
  p.fabric->step();  // the first packets are out: the message is in flight
  to_state(p.a, hw::QpState::sqd);
  Sge small{a.addr(32 * 1024), 100, a.lkey()};
  SendWr w2 = make_wr(WrOpcode::rdma_write, &small, 1);
  w2.remote_addr = b.addr(32 * 1024);
  w2.rkey = b.rkey();
  REQUIRE(p.a.post_and_ring(w2) == Errc::ok);
  CHECK(p.wait_send(p.a).status == IBV_WC_SUCCESS);  // the message in flight finished
  hw::AsyncEvent ev;
  REQUIRE(p.run_until([&] { return p.a.dev->next_async_event(&ev); }));
  CHECK(ev.type == hw::AsyncEventType::sq_drained);
  p.settle();
  Completion c;
  CHECK_FALSE(p.a.poll_send(&c));  // the second did not start
  CHECK(b.mem[32 * 1024] == 0);
  to_state(p.a, hw::QpState::rts);
  CHECK(p.wait_send(p.a).status == IBV_WC_SUCCESS);
  CHECK(b.mem[32 * 1024] == 0x61);
}
