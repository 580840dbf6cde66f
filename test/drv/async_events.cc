// SPDX-License-Identifier: BSD-3-Clause
// Device::process_events: COMM_EST reaches the QP's handler (the connection layer's hook,
// which may move the QP to RTS and so release withheld work); a CQ overrun reports CQ_ERR on
// the CQ and moves the QPs using it to ERR in the driver's view.
#include <catch2/catch.hpp>

#include <poll.h>

#include "sim_env.h"

using namespace rnicdv;
using namespace rnicdv::test;

namespace {

struct CommEstContext {
  QueuePair* qp = nullptr;
  int calls = 0;
  Status rts;
};

void on_comm_est(void* ctx) {
  auto* c = static_cast<CommEstContext*>(ctx);
  ++c->calls;
  // What a connection layer does with COMM_EST: treat it as the RTU and go to RTS.
  c->rts = c->qp->to_rts(kPsnB);
}

}  // namespace

TEST_CASE("COMM_EST is forwarded to the QP's handler, which can release withheld work",
          "[drv][events]") {
  const hw::DeviceProfile profile = GENERATE(mlx5_profile(), scanning_profile());
  INFO("profile " << profile_label(profile));
  Pair p = make_pair(profile);
  to_rtr(p);
  to_rts(p.a, kPsnA);  // the active side is up; b (passive) waits in RTR

  CommEstContext ctx;
  ctx.qp = &*p.b.qp;
  p.b.qp->set_comm_est_handler(on_comm_est, &ctx);

  // b withholds a reply while in RTR.
  const Sge reply = p.b.sge(0, 16);
  REQUIRE(p.b.qp->post_send(write_wr(77, &reply, 1, p.a.addr(0x100), p.a.rkey())) == Errc::ok);
  CHECK(p.b.qp->withheld() == 1);

  // a's first request reaches b in RTR: b's device raises COMM_EST.
  const Sge req = p.a.sge(0, 16);
  REQUIRE(p.a.qp->post_send(write_wr(1, &req, 1, p.b.addr(0x100), p.b.rkey())) == Errc::ok);
  REQUIRE(poll_n(*p.fabric, *p.a.cq, 1).size() == 1);
  CHECK(p.b.snapshot().comm_est_raised);

  pollfd pfd{p.b.dev->async_fd(), POLLIN, 0};
  CHECK(::poll(&pfd, 1, 0) == 1);
  CHECK(p.b.dev->process_events() >= 1);
  CHECK(ctx.calls == 1);
  check(ctx.rts);
  CHECK(p.b.qp->state() == hw::QpState::rts);
  CHECK(p.b.qp->withheld() == 0);
  const auto got = poll_n(*p.fabric, *p.b.cq, 1);
  REQUIRE(got.size() == 1);
  CHECK(got[0].wr_id == 77);
  CHECK(got[0].status == IBV_WC_SUCCESS);
}

TEST_CASE("COMM_EST without a handler changes nothing", "[drv][events]") {
  Pair p = make_pair(mlx5_profile());
  to_rtr(p);
  to_rts(p.a, kPsnA);
  const Sge req = p.a.sge(0, 16);
  REQUIRE(p.a.qp->post_send(write_wr(1, &req, 1, p.b.addr(0x100), p.b.rkey())) == Errc::ok);
  REQUIRE(poll_n(*p.fabric, *p.a.cq, 1).size() == 1);
  CHECK(p.b.dev->process_events() >= 1);
  CHECK(p.b.qp->state() == hw::QpState::rtr);
  CHECK(p.b.qp->core()->comm_est_seen);
}

TEST_CASE("a CQ overrun is reported on the CQ and fails its QPs", "[drv][events]") {
  auto fabric = make_fabric();
  Node a = make_node(fabric, mlx5_profile(), default_qp_config(), 1 << 16, /*cq_entries=*/4);
  Node b = make_node(fabric, mlx5_profile(), default_qp_config());
  Pair p{fabric, std::move(a), std::move(b)};
  to_rtr(p);
  to_rts(p.b, kPsnB);
  to_rts(p.a, kPsnA);
  const uint32_t entries = p.a.cq->entries();
  const Sge sge = p.a.sge(0, 8);
  for (uint32_t i = 0; i < entries + 4; ++i)
    REQUIRE(p.a.qp->post_send(write_wr(i, &sge, 1, p.b.addr(0), p.b.rkey())) == Errc::ok);
  // Run the device without consuming CQEs until it overflows.
  REQUIRE(p.fabric->run_until([&] { return p.a.counters().cq_overflows > 0; }));
  CHECK_FALSE(p.a.cq->in_error());
  CHECK(p.a.dev->process_events() >= 2);  // CQ_ERR, then QP_FATAL
  CHECK(p.a.cq->in_error());
  CHECK(p.a.qp->state() == hw::QpState::err);
  // poll keeps returning what is in the ring.
  Completion c[64];
  CHECK(p.a.cq->poll(c, 64) == static_cast<int>(entries));
  for (uint32_t i = 0; i < entries; ++i) CHECK(c[i].wr_id == i);
}
