// SPDX-License-Identifier: BSD-3-Clause
// Early posting on the real-device connection path: the mlx5 backend with librdmacm
// (RdmaCmConnectionManager), run through libibverbs, libmlx5, librdmacm and the uverbs shim
// on a simulated HCA. The passive side posts right after accept, with its QP in RTR; the batch
// must ring one doorbell and run exactly once, whether the RTU or, with every RTU dropped,
// COMM_EST establishes the connection.
//
// Runs with LD_PRELOAD=librnicdv-uverbs.so (meson sets it); elsewhere it skips (77).
#include <catch2/catch.hpp>

#include <infiniband/verbs.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <thread>
#include <vector>

#include "cm/sim_cm.h"
#include "cm_env.h"
#include "shim_rig.h"
#include "rnicdv/connection.h"
#include "rnicdv/rnicdv.h"
#include "rnicdv/sim/sim.h"

using namespace rnicdv;
using namespace std::chrono_literals;

namespace {

constexpr uint32_t kEarly = 4;
constexpr size_t kMsg = test::ShimRig::kMsg;

using Rig = test::ShimRig;
using test::take;

// Connects qa to qb over rdma_cm on `port`; qb posts kEarly sends (slots 8..) right after
// accept, in RTR, and A has kEarly receives (slots 0..) for them.
struct Early {
  std::optional<Listener> listener;
  std::optional<Connection> active, passive;
};

Early connect_and_post_early(Rig& r, uint16_t port) {
  Early e;
  e.listener.emplace(take(Listener::listen(*r.dev, r.ip, port)));
  e.active.emplace(take(Connection::connect(*r.qa, r.ip, port)));
  for (uint32_t i = 0; i < kEarly; ++i) REQUIRE(r.post_recv(*r.qa, 100 + i, i) == Errc::ok);
  auto req = e.listener->wait_event(10s);
  REQUIRE(req);
  REQUIRE(req->type == ConnectionEventType::connect_request);
  REQUIRE(req->request);
  CHECK(req->request->peer().qpn == r.qa->qpn());
  e.passive.emplace(take(req->request->accept(*r.qb)));
  CHECK(r.qb->state() == hw::QpState::rtr);
  for (uint32_t i = 0; i < kEarly; ++i)
    REQUIRE(r.post_send(*r.qb, i, 8 + i, static_cast<uint8_t>(0x40 + i)) == Errc::ok);
  CHECK(r.qb->withheld() == kEarly);
  CHECK(r.doorbells(*r.qb) == 0);
  return e;
}

void check_released_once(Rig& r) {
  std::map<uint64_t, int> sent = r.completions(*r.cqb, kEarly);
  std::map<uint64_t, int> received = r.completions(*r.cqa, kEarly);
  for (uint32_t i = 0; i < kEarly; ++i) {
    CHECK(sent[i] == 1);
    CHECK(received[100 + i] == 1);
    CHECK(r.mem[i * kMsg] == 0x40 + i);  // in posting order
  }
  CHECK(r.qb->withheld() == 0);
  // One doorbell for the whole batch. The device counts a UAR store when it reads the
  // register; a store that woke it from a deep sleep (uar_watch.h) is let go, and read by its
  // next pass, only after the pass that ran the WQEs it announced (found through the doorbell
  // record): the count may come just after the completions.
  for (int i = 0; i < 2000 && r.doorbells(*r.qb) == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(r.doorbells(*r.qb) == 1);
  // Nothing more arrives: each ran once.
  Completion wc[4];
  for (int i = 0; i < 100; ++i) {
    CHECK(r.cqa->poll(wc, 4) == 0);
    CHECK(r.cqb->poll(wc, 4) == 0);
  }
}

Rig& rig() {
  static Rig r;
  return r;
}

}  // namespace

TEST_CASE("on the rdma_cm path, sends posted in RTR right after accept run once after the RTU") {
  Rig& r = rig();
  Early e = connect_and_post_early(r, 17481);
  auto ea = e.active->wait_event(10s);
  REQUIRE(ea);
  CHECK(ea->type == ConnectionEventType::established);
  CHECK(r.qa->state() == hw::QpState::rts);
  auto eb = e.passive->wait_event(10s);
  REQUIRE(eb);
  CHECK(eb->type == ConnectionEventType::established);
  CHECK(r.qb->state() == hw::QpState::rts);
  check_released_once(r);
  CHECK_FALSE(e.passive->poll_event());  // ESTABLISHED once
  REQUIRE(e.active->disconnect().is_ok());
  auto da = e.active->wait_event(10s);
  REQUIRE(da);
  CHECK(da->type == ConnectionEventType::disconnected);
}

TEST_CASE("on the rdma_cm path, with every RTU dropped, COMM_EST releases the early sends once") {
  Rig& r = rig();
  r.new_qps();  // the previous case's are connected (and then disconnected)
  sim::cm::CmAgent& agent = sim::cm::cm_agent_of(*r.sim);
  const sim::cm::CmCounters before = agent.counters();
  agent.drop_outgoing(sim::cm::AttrId::rtu, 1000);

  Early e = connect_and_post_early(r, 17482);
  auto ea = e.active->wait_event(10s);
  REQUIRE(ea);
  CHECK(ea->type == ConnectionEventType::established);
  // No RTU reaches the passive side: it stays in RTR, nothing rung, until A's first message
  // arrives there and raises COMM_EST.
  CHECK(r.qb->state() == hw::QpState::rtr);
  CHECK(r.doorbells(*r.qb) == 0);
  REQUIRE(r.post_recv(*r.qb, 200, 20) == Errc::ok);
  REQUIRE(r.post_send(*r.qa, 300, 21, 0x77) == Errc::ok);

  auto eb = test::wait_event_with_async(*e.passive, *r.dev, 10s);
  REQUIRE(eb);
  INFO(eb->status.message());
  REQUIRE(eb->type == ConnectionEventType::established);
  CHECK(r.qb->state() == hw::QpState::rts);
  const sim::cm::CmCounters after = agent.counters();
  CHECK(after.comm_est_established == before.comm_est_established + 1);
  CHECK(after.dropped_by_test_hook > before.dropped_by_test_hook);

  // B's withheld sends and A's message: each once.
  std::map<uint64_t, int> b_done = r.completions(*r.cqb, kEarly + 1);
  std::map<uint64_t, int> a_done = r.completions(*r.cqa, kEarly + 1);
  for (uint32_t i = 0; i < kEarly; ++i) {
    CHECK(b_done[i] == 1);
    CHECK(a_done[100 + i] == 1);
  }
  CHECK(b_done[200] == 1);
  CHECK(a_done[300] == 1);
  CHECK(r.doorbells(*r.qb) == 1);
  for (int i = 0; i < 100; ++i) {
    r.dev->process_events();
    CHECK_FALSE(e.passive->poll_event());
  }
  agent.drop_outgoing(sim::cm::AttrId::rtu, 0);
}
