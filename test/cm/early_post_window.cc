// SPDX-License-Identifier: BSD-3-Clause
// The early-post window the CM creates: the passive QP sits in RTR from the REP until the RTU
// (or a COMM_EST); sends posted there ring no doorbell and run, once, after establishment.
#include <catch2/catch.hpp>

#include "cm_env.h"

using namespace rnicdv;
using namespace rnicdv::test;

namespace {

constexpr uint32_t kEarlySends = 4;

struct Accepted {
  std::shared_ptr<sim::Fabric> fabric;
  Side a, b;
  std::optional<Listener> listener;
  std::optional<Connection> active;
  std::optional<Connection> passive;
};

// A connects to B; B accepts (QP in RTR) and posts kEarlySends sends before anything else.
// `a_address` and `b_address`: the devices' (unspecified: the fabric's IPv4 ones).
Accepted accept_and_post_early(hw::DeviceProfile profile, const ConnectionOptions& passive = {},
                               const hw::IpAddress& a_address = {},
                               const hw::IpAddress& b_address = {}) {
  Accepted x;
  x.fabric = make_fabric();
  x.a = make_side(x.fabric, {}, a_address);
  x.b = make_side(x.fabric, profile, b_address);
  x.listener.emplace(take(Listener::listen(*x.b.dev, "", kCmPort)));
  x.active.emplace(take(Connection::connect(*x.a.qp, x.b.ip(), kCmPort, bytes("hello"))));
  CHECK(x.a.qp->state() == hw::QpState::init);
  CHECK(x.active->state() == ConnectionState::connecting);
  for (uint32_t i = 0; i < kEarlySends; ++i) REQUIRE(x.a.post_recv(100 + i, i) == Errc::ok);

  ConnectionEvent req = wait_event(*x.listener);
  REQUIRE(req.type == ConnectionEventType::connect_request);
  REQUIRE(req.request);
  CHECK(std::memcmp(req.request->private_data().data(), "hello", 5) == 0);
  CHECK(req.request->peer().qpn == x.a.qp->qpn());
  x.passive.emplace(take(req.request->accept(*x.b.qp, bytes("welcome"), passive)));
  CHECK(x.b.qp->state() == hw::QpState::rtr);
  CHECK(x.passive->state() == ConnectionState::accepted);

  for (uint32_t i = 0; i < kEarlySends; ++i) REQUIRE(x.b.post_send(i, i) == Errc::ok);
  CHECK(x.b.qp->withheld() == kEarlySends);
  return x;
}

void check_no_doorbell(Side& s) {
  const sim::QpSnapshot snap = s.snapshot();
  CHECK(snap.uar_doorbells == 0);
  CHECK(snap.sq_dbr == 0);
  CHECK(snap.sq_dbr_advances == 0);
  CHECK(snap.wqes_executed == 0);
}

}  // namespace

TEST_CASE("sends posted by the passive side in RTR ring no doorbell and run after the RTU") {
  const hw::DeviceProfile profile =
      GENERATE(hw::DeviceProfile{false, true}, hw::DeviceProfile{true, true});
  // The same over IPv6: the CM's MADs and the QPs' packets in IPv6 frames.
  const bool ipv6 = GENERATE(false, true);
  INFO("profile " << sim::profile_name(profile) << (ipv6 ? ", IPv6" : ", IPv4"));
  const hw::IpAddress a_address = ipv6 ? take(hw::IpAddress::parse("fd00::a")) : hw::IpAddress{};
  const hw::IpAddress b_address = ipv6 ? take(hw::IpAddress::parse("fd00::b")) : hw::IpAddress{};
  Accepted x = accept_and_post_early(profile, {}, a_address, b_address);
  CHECK(x.active->remote_address().ip == x.b.sim->address());
  CHECK(x.passive->remote_address().ip == x.a.sim->address());
  CHECK(x.b.sim->address().is_v6() == ipv6);
  check_no_doorbell(x.b);
  const uint64_t doorbells_before = x.b.sim->counters().uar_doorbells;

  // The active side gets the REP: RTR, RTS, RTU, ESTABLISHED with the REP's private data.
  ConnectionEvent ea = wait_event(*x.active);
  REQUIRE(ea.type == ConnectionEventType::established);
  CHECK(ea.status.is_ok());
  CHECK(std::memcmp(ea.private_data.data(), "welcome", 7) == 0);
  CHECK(x.a.qp->state() == hw::QpState::rts);
  CHECK(x.active->state() == ConnectionState::established);

  // Until the passive side handles its ESTABLISHED, its QP stays in RTR with nothing rung.
  CHECK(x.b.qp->state() == hw::QpState::rtr);
  check_no_doorbell(x.b);
  CHECK(x.b.sim->counters().uar_doorbells == doorbells_before);

  ConnectionEvent eb = wait_event(*x.passive);
  REQUIRE(eb.type == ConnectionEventType::established);
  CHECK(x.b.qp->state() == hw::QpState::rts);
  CHECK(x.b.qp->withheld() == 0);
  CHECK(x.b.cm().counters().comm_est_established == 0);  // the RTU did it

  // The batch was released with one doorbell, and every send ran exactly once.
  REQUIRE(x.b.wait_completions(kEarlySends));
  REQUIRE(x.a.wait_completions(kEarlySends));
  CHECK(x.b.snapshot().uar_doorbells == 1);
  CHECK(x.b.snapshot().wqes_executed == kEarlySends);
  x.b.check_each_once(0, kEarlySends, IBV_WC_SUCCESS);
  x.a.check_each_once(100, kEarlySends, IBV_WC_SUCCESS);
  for (uint32_t i = 0; i < kEarlySends; ++i)  // in posting order, into A's buffers i
    CHECK(x.a.mem[i * kMsgBytes] == 0x40 + i);

  // ESTABLISHED was reported once on each side.
  for (int i = 0; i < 100; ++i) {
    CHECK_FALSE(x.passive->poll_event());
    CHECK_FALSE(x.active->poll_event());
  }
}

TEST_CASE("the RTU alone moves the passive QP to RTS and releases its withheld sends, before the "
          "application reads ESTABLISHED") {
  Accepted x = accept_and_post_early(hw::DeviceProfile{});
  REQUIRE(wait_event(*x.active).type == ConnectionEventType::established);
  // Only the device is driven on the passive side: its CQ is polled, its events are not read.
  REQUIRE(x.b.wait_completions(kEarlySends));
  CHECK(x.b.qp->state() == hw::QpState::rts);
  CHECK(x.passive->state() == ConnectionState::accepted);  // the application has not looked
  CHECK(x.b.snapshot().uar_doorbells == 1);
  x.b.check_each_once(0, kEarlySends, IBV_WC_SUCCESS);
  REQUIRE(x.a.wait_completions(kEarlySends));
  // The event still comes, once, and finds the QP already in RTS.
  ConnectionEvent eb = wait_event(*x.passive);
  CHECK(eb.type == ConnectionEventType::established);
  CHECK(eb.status.is_ok());
  CHECK(x.passive->state() == ConnectionState::established);
  for (int i = 0; i < 50; ++i) CHECK_FALSE(x.passive->poll_event());
  CHECK(x.b.snapshot().uar_doorbells == 1);
}

TEST_CASE("without release at establishment, the passive QP waits in RTR for the application to "
          "read ESTABLISHED") {
  ConnectionOptions o;
  o.release_at_establishment = false;
  Accepted x = accept_and_post_early(hw::DeviceProfile{}, o);
  REQUIRE(wait_event(*x.active).type == ConnectionEventType::established);
  // Drive the fabric well past the RTU's arrival without reading the passive side's events.
  CHECK_FALSE(x.b.wait_completions(1, 300ms));
  CHECK(x.b.qp->state() == hw::QpState::rtr);
  check_no_doorbell(x.b);
  CHECK(x.b.cm().counters().rx_by_attr[static_cast<size_t>(sim::cm::AttrId::rtu)] == 1);
  REQUIRE(wait_event(*x.passive).type == ConnectionEventType::established);
  CHECK(x.b.qp->state() == hw::QpState::rts);
  REQUIRE(x.b.wait_completions(kEarlySends));
  x.b.check_each_once(0, kEarlySends, IBV_WC_SUCCESS);
}

TEST_CASE("with the RTU lost, COMM_EST establishes the passive side exactly once") {
  Accepted x = accept_and_post_early(hw::DeviceProfile{});
  x.a.cm().drop_outgoing(sim::cm::AttrId::rtu, 1000);  // every RTU, first and resent

  ConnectionEvent ea = wait_event(*x.active);
  REQUIRE(ea.type == ConnectionEventType::established);
  // The active side's first message reaches the passive QP while it is still in RTR.
  for (uint32_t i = 0; i < 2; ++i) REQUIRE(x.b.post_recv(200 + i, 32 + i) == Errc::ok);
  REQUIRE(x.a.post_send(300, 8) == Errc::ok);
  check_no_doorbell(x.b);

  // Device::process_events() forwards COMM_EST to the connection, which reports ESTABLISHED.
  std::optional<ConnectionEvent> eb = wait_event_with_async(*x.passive, *x.b.dev, 10s);
  REQUIRE(eb);
  INFO(eb->status.message());
  REQUIRE(eb->type == ConnectionEventType::established);
  CHECK(x.b.qp->state() == hw::QpState::rts);
  CHECK(x.b.sim->counters().comm_est_raised == 1);
  CHECK(x.b.cm().counters().comm_est_established == 1);
  CHECK(x.a.cm().counters().dropped_by_test_hook >= 1);

  REQUIRE(x.b.wait_completions(kEarlySends + 1));  // the withheld sends, and A's message
  REQUIRE(x.a.wait_completions(kEarlySends + 1));
  x.b.check_each_once(0, kEarlySends, IBV_WC_SUCCESS);
  x.b.check_each_once(200, 1, IBV_WC_SUCCESS);
  x.a.check_each_once(100, kEarlySends, IBV_WC_SUCCESS);
  x.a.check_each_once(300, 1, IBV_WC_SUCCESS);

  // Later REP retries (answered by RTUs that are dropped), COMM_EST again: still once.
  for (int i = 0; i < 200; ++i) {
    x.b.dev->process_events();
    CHECK_FALSE(x.passive->poll_event());
  }
  CHECK(x.passive->state() == ConnectionState::established);
}

TEST_CASE("with the RTU lost, the device releases the passive QP where it learns COMM_EST, "
          "before the application reads anything") {
  Accepted x = accept_and_post_early(hw::DeviceProfile{});
  x.a.cm().drop_outgoing(sim::cm::AttrId::rtu, 1000);  // every RTU, first and resent
  REQUIRE(wait_event(*x.active).type == ConnectionEventType::established);
  for (uint32_t i = 0; i < 2; ++i) REQUIRE(x.b.post_recv(200 + i, 32 + i) == Errc::ok);
  REQUIRE(x.a.post_send(300, 8) == Errc::ok);
  // Only the passive side's CQ is polled: neither its async events nor its connection events
  // are read. The first request raised COMM_EST in the device, which released the QP.
  REQUIRE(x.b.wait_completions(kEarlySends + 1, 10s, false));
  CHECK(x.b.qp->state() == hw::QpState::rts);
  CHECK(x.passive->state() == ConnectionState::accepted);  // the application has not looked
  CHECK(x.b.sim->counters().comm_est_raised == 1);
  CHECK(x.b.cm().counters().comm_est_established == 1);
  CHECK(x.b.snapshot().uar_doorbells == 1);  // the batch rang once
  x.b.check_each_once(0, kEarlySends, IBV_WC_SUCCESS);
  x.b.check_each_once(200, 1, IBV_WC_SUCCESS);
  REQUIRE(x.a.wait_completions(kEarlySends + 1));
  // ESTABLISHED still comes, once, when the application looks; the async event finds the
  // connection established already.
  std::optional<ConnectionEvent> eb = wait_event_with_async(*x.passive, *x.b.dev, 10s);
  REQUIRE(eb);
  CHECK(eb->type == ConnectionEventType::established);
  for (int i = 0; i < 50; ++i) {
    x.b.dev->process_events();
    CHECK_FALSE(x.passive->poll_event());
  }
}

TEST_CASE("with the RTU lost and no traffic, the REP retry brings a new RTU") {
  Accepted x = accept_and_post_early(hw::DeviceProfile{});
  x.a.cm().drop_outgoing(sim::cm::AttrId::rtu, 1);
  REQUIRE(wait_event(*x.active).type == ConnectionEventType::established);
  ConnectionEvent eb = wait_event(*x.passive);
  REQUIRE(eb.type == ConnectionEventType::established);
  CHECK(x.a.cm().counters().rtu_resent == 1);
  CHECK(x.b.cm().counters().retransmits >= 1);
  CHECK(x.b.cm().counters().comm_est_established == 0);
  REQUIRE(x.b.wait_completions(kEarlySends));
  x.b.check_each_once(0, kEarlySends, IBV_WC_SUCCESS);
}

TEST_CASE("a strict QP refuses sends in the accepted window with a state error") {
  auto fabric = make_fabric();
  Side a = make_side(fabric);
  Side b;
  {
    sim::DeviceConfig dc;
    b.sim = take(fabric->add_device(dc));
    b.dev.emplace(take(Device::wrap(b.sim)));
    b.pd.emplace(take(b.dev->alloc_pd()));
    b.cq.emplace(take(b.dev->create_cq(64)));
    b.mem.assign(16 * kMsgBytes, 0);
    b.mr.emplace(take(b.pd->reg_mr(b.mem.data(), b.mem.size(), hw::access::local_write)));
    QpConfig qc;
    qc.early_post = EarlyPost::strict;
    b.qp.emplace(take(b.dev->create_qp(*b.pd, *b.cq, *b.cq, qc)));
  }
  Listener l = take(Listener::listen(*b.dev, b.ip(), kCmPort));
  Connection ca = take(Connection::connect(*a.qp, b.ip(), kCmPort));
  ConnectionEvent req = wait_event(l);
  Connection cb = take(req.request->accept(*b.qp));
  CHECK(b.qp->state() == hw::QpState::rtr);
  CHECK(b.post_send(1, 0) == Errc::bad_state);
  REQUIRE(wait_event(ca).type == ConnectionEventType::established);
  REQUIRE(wait_event(cb).type == ConnectionEventType::established);
  CHECK(b.post_send(2, 0) == Errc::ok);
}
