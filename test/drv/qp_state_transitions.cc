// SPDX-License-Identifier: BSD-3-Clause
// QP state transitions as the driver applies them: required attributes and legal transitions
// with messages naming the QP and the move, the flush on RTS, RESET discarding everything,
// and the state table of post_recv.
#include <catch2/catch.hpp>

#include <cstring>

#include "sim_env.h"

using namespace rnicdv;
using namespace rnicdv::test;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {

std::string qp_prefix(const QueuePair& qp) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "qp %#x: ", qp.qpn());
  return buf;
}

}  // namespace

TEST_CASE("a modify missing a required attribute names the QP, the move and the attribute",
          "[drv][state]") {
  Pair p = make_pair(mlx5_profile());
  QueuePair& qp = *p.a.qp;
  hw::QpAttr attr;
  attr.state = hw::QpState::init;
  Status s = qp.modify(attr, hw::qp_attr::state | hw::qp_attr::port);
  CHECK(s.code() == Errc::invalid_argument);
  CHECK_THAT(s.message(),
             StartsWith(qp_prefix(qp)) && Contains("modify RESET->INIT: access_flags not set"));
  check(qp.to_init());
  check(qp.to_rtr(p.b.qp->local_endpoint(kPsnB), hw::Mtu::mtu1024));
  attr.state = hw::QpState::rts;
  namespace a = hw::qp_attr;
  s = qp.modify(attr, a::state | a::timeout | a::retry_cnt | a::rnr_retry | a::max_rd_atomic);
  CHECK(s.code() == Errc::invalid_argument);
  CHECK(s.message() == qp_prefix(qp) + "modify RTR->RTS: sq_psn not set");
  CHECK(qp.state() == hw::QpState::rtr);
}

TEST_CASE("an invalid transition is refused and changes nothing", "[drv][state]") {
  Pair p = make_pair(mlx5_profile());
  QueuePair& qp = *p.a.qp;
  const Status s = qp.to_rts(kPsnA);
  CHECK(s.code() == Errc::bad_state);
  CHECK(s.message() == qp_prefix(qp) + "modify RESET->RTS: not a valid transition");
  CHECK(qp.state() == hw::QpState::reset);
  CHECK(p.a.snapshot().state == hw::QpState::reset);
  hw::QpAttr attr;
  attr.state = hw::QpState::sqe;
  CHECK(qp.modify(attr, hw::qp_attr::state).code() == Errc::bad_state);
}

TEST_CASE("a failed move to RTS releases nothing", "[drv][state]") {
  Pair p = make_pair(mlx5_profile());
  to_rtr(p);
  const Sge sge = p.a.sge(0, 8);
  REQUIRE(p.a.qp->post_send(write_wr(1, &sge, 1, p.b.addr(0), p.b.rkey())) == Errc::ok);
  // retry_cnt above 7 is not an IB value: the device refuses the transition.
  const Status s = p.a.qp->to_rts(kPsnA, 14, 9);
  REQUIRE_FALSE(s.is_ok());
  CHECK_THAT(s.message(), StartsWith(qp_prefix(*p.a.qp)));
  CHECK(p.a.qp->state() == hw::QpState::rtr);
  CHECK(p.a.qp->withheld() == 1);
  CHECK(p.a.snapshot().sq_dbr == 0);
  CHECK(p.a.snapshot().uar_doorbells == 0);
  to_rts(p.b, kPsnB);
  to_rts(p.a, kPsnA);
  CHECK(poll_n(*p.fabric, *p.a.cq, 1).size() == 1);
}

TEST_CASE(
    "RESET discards withheld work and pending flush errors, zeroes the doorbell records "
    "and restarts the indices",
    "[drv][state]") {
  const hw::DeviceProfile profile = GENERATE(mlx5_profile(), scanning_profile());
  const bool via_error = GENERATE(false, true);
  INFO("profile " << profile_label(profile) << (via_error ? ", through ERR" : ", from RTR"));
  Pair p = make_pair(profile);
  Node& a = p.a;
  to_rtr(p);
  const Sge sge = a.sge(0, 8);
  for (uint32_t i = 0; i < 5; ++i)
    REQUIRE(a.qp->post_send(write_wr(i, &sge, 1, p.b.addr(0), p.b.rkey())) == Errc::ok);
  RecvWr rwr;
  rwr.sg_list = &sge;
  rwr.num_sge = 1;
  REQUIRE(a.qp->post_recv(rwr) == Errc::ok);
  if (via_error) check(a.qp->to_error());
  check(a.qp->reset());
  CHECK(a.qp->state() == hw::QpState::reset);
  CHECK(a.qp->withheld() == 0);
  const sim::QpSnapshot s = a.snapshot();
  CHECK(s.sq_dbr == 0);
  CHECK(s.rq_dbr == 0);
  const __be32* dbrec = a.qp->core()->dbrec;
  CHECK(dbrec[MLX5_SND_DBR] == 0);
  CHECK(dbrec[MLX5_RCV_DBR] == 0);
  CHECK(poll_for(*p.fabric, *a.cq).empty());

  // A second life: indices start at zero again and nothing from the first one shows up.
  check(a.qp->to_init());
  check(a.qp->to_rtr(p.b.qp->local_endpoint(kPsnB), hw::Mtu::mtu1024));
  to_rts(p.b, kPsnB);
  to_rts(a, kPsnA);
  REQUIRE(a.qp->post_send(write_wr(42, &sge, 1, p.b.addr(0), p.b.rkey())) == Errc::ok);
  const auto got = poll_n(*p.fabric, *a.cq, 1);
  CHECK(poll_for(*p.fabric, *a.cq).empty());
  REQUIRE(got.size() == 1);
  CHECK(got[0].wr_id == 42);
  CHECK(got[0].wqe_counter == 0);
  CHECK(got[0].status == IBV_WC_SUCCESS);
}

TEST_CASE("receives are refused in RESET and flushed in ERR", "[drv][state]") {
  Pair p = make_pair(mlx5_profile());
  Node& a = p.a;
  const Sge sge = a.sge(0x100, 32);
  RecvWr rwr;
  rwr.wr_id = 5;
  rwr.sg_list = &sge;
  rwr.num_sge = 1;
  size_t bad = 99;
  CHECK(a.qp->post_recv(std::span(&rwr, 1), &bad) == Errc::bad_state);
  CHECK(bad == 0);
  check(a.qp->to_init());
  REQUIRE(a.qp->post_recv(rwr) == Errc::ok);
  check(a.qp->to_error());
  rwr.wr_id = 6;
  REQUIRE(a.qp->post_recv(rwr) == Errc::ok);
  const auto got = poll_n(*p.fabric, *a.cq, 2);
  REQUIRE(got.size() == 2);
  CHECK(got[0].wr_id == 5);
  CHECK(got[1].wr_id == 6);
  for (const auto& c : got) {
    CHECK(c.status == IBV_WC_WR_FLUSH_ERR);
    CHECK(c.qp_num == a.qp->qpn());
  }
}

TEST_CASE("SQD accepts sends and runs them back in RTS", "[drv][state]") {
  Pair p = make_connected_pair(mlx5_profile());
  hw::QpAttr attr;
  attr.state = hw::QpState::sqd;
  check(p.a.qp->modify(attr, hw::qp_attr::state));
  CHECK(p.a.qp->state() == hw::QpState::sqd);
  const Sge sge = p.a.sge(0, 8);
  REQUIRE(p.a.qp->post_send(write_wr(3, &sge, 1, p.b.addr(0), p.b.rkey())) == Errc::ok);
  attr.state = hw::QpState::rts;
  check(p.a.qp->modify(attr, hw::qp_attr::state));
  const auto got = poll_n(*p.fabric, *p.a.cq, 1);
  REQUIRE(got.size() == 1);
  CHECK(got[0].wr_id == 3);
  CHECK(got[0].status == IBV_WC_SUCCESS);
}
