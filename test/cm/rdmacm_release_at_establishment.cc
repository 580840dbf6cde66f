// SPDX-License-Identifier: BSD-3-Clause
// Release at establishment on the real-device connection path: the mlx5 backend's event thread
// (hw/mlx5/src/mlx5_event_thread.h) reads the passive connection's rdma_cm channel and the
// device's async fd, so that the RTU, or COMM_EST when the RTU is lost, moves the passive QP
// to RTS while the application only polls its CQs. Without release at establishment no thread
// is started and RTS waits for the application to read ESTABLISHED.
//
// Runs through libibverbs, libmlx5, librdmacm and the uverbs shim on a simulated HCA, with
// LD_PRELOAD=librnicdv-uverbs.so (meson sets it); elsewhere it skips (77).
#include <catch2/catch.hpp>

#include <infiniband/verbs.h>
#include <poll.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "cm/sim_cm.h"
#include "proc_threads.h"
#include "shim_rig.h"
#include "rnicdv/connection.h"
#include "rnicdv/rnicdv.h"
#include "rnicdv/sim/sim.h"

using namespace rnicdv;
using namespace std::chrono_literals;

namespace {

constexpr uint32_t kEarly = 4;
constexpr size_t kMsg = test::ShimRig::kMsg;
constexpr const char* kEventThread = "rnicdv-mlx5-ev";  // mlx5_event_thread.h

using Rig = test::ShimRig;
using test::take;

using test::open_fds;
using test::thread_count;
using test::threads_named;

// A joined thread may still be listed for a moment: the kernel wakes pthread_join before it
// removes the task. A thread that still runs never goes.
bool event_thread_gone() {
  const auto end = std::chrono::steady_clock::now() + 5s;
  while (threads_named(kEventThread) != 0)
    if (std::chrono::steady_clock::now() > end) return false;
  return true;
}

bool readable(int fd, int timeout_ms = 0) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, timeout_ms) > 0;
}

Rig& rig() {
  static Rig r;
  return r;
}

// qa connects to qb on `port`; qb is accepted with `options` and posts kEarly sends (slots
// 8..) right after accept, in RTR; qa has kEarly receives (slots 0..) for them. The active
// side then reads its ESTABLISHED (which sends the RTU); the passive side reads nothing.
struct Pair {
  std::optional<Listener> listener;
  std::optional<Connection> active, passive;
};

Pair listen(Rig& r, uint16_t port) {
  Pair p;
  p.listener.emplace(take(Listener::listen(*r.dev, r.ip, port)));
  return p;
}

void connect_and_post_early(Rig& r, Pair& p, const ConnectionOptions& options) {
  p.active.emplace(take(Connection::connect(*r.qa, r.ip, p.listener->address().port)));
  for (uint32_t i = 0; i < kEarly; ++i) REQUIRE(r.post_recv(*r.qa, 100 + i, i) == Errc::ok);
  auto req = p.listener->wait_event(10s);
  REQUIRE(req);
  REQUIRE(req->type == ConnectionEventType::connect_request);
  REQUIRE(req->request);
  p.passive.emplace(take(req->request->accept(*r.qb, {}, options)));
  CHECK(r.qb->state() == hw::QpState::rtr);
  for (uint32_t i = 0; i < kEarly; ++i)
    REQUIRE(r.post_send(*r.qb, i, 8 + i, static_cast<uint8_t>(0x40 + i)) == Errc::ok);
  CHECK(r.qb->withheld() == kEarly);
  CHECK(r.doorbells(*r.qb) == 0);
  auto ea = p.active->wait_event(10s);
  REQUIRE(ea);
  REQUIRE(ea->type == ConnectionEventType::established);
}

// The early batch ran once, in posting order, with one doorbell at most: the simulator counts
// register writes it reads, not a store it catches on the UAR page while it sleeps
// (hw/sim/src/uar_watch.h), as it may after a quiet wait.
void check_early_batch(Rig& r, std::map<uint64_t, int>& sent, std::map<uint64_t, int>& received) {
  for (uint32_t i = 0; i < kEarly; ++i) {
    CHECK(sent[i] == 1);
    CHECK(received[100 + i] == 1);
    CHECK(r.mem[i * kMsg] == 0x40 + i);
  }
  CHECK(r.doorbells(*r.qb) <= 1);
}

// ESTABLISHED is queued once the driver's notifier returned: the QP is in RTS with nothing
// withheld before the application reads the event, which it reads exactly once. (The batch
// may complete before the move to RTS is published: the doorbell comes first.)
void check_established_once(Rig& r, Connection& passive) {
  REQUIRE(readable(passive.event_fd(), 10'000));
  CHECK(r.qb->state() == hw::QpState::rts);
  CHECK(r.qb->withheld() == 0);
  auto eb = passive.poll_event();
  REQUIRE(eb);
  INFO(eb->status.message());
  CHECK(eb->type == ConnectionEventType::established);
  CHECK_FALSE(passive.poll_event());
}

void close_pair(Pair& p) {
  REQUIRE(p.active->disconnect().is_ok());
  auto da = p.active->wait_event(10s);
  REQUIRE(da);
  CHECK(da->type == ConnectionEventType::disconnected);
  p.passive.reset();
  p.active.reset();
  p.listener.reset();
}

}  // namespace

TEST_CASE("without release at establishment no thread is started and RTS waits for the "
          "application to read ESTABLISHED") {
  Rig& r = rig();
  r.new_qps();
  Pair p = listen(r, 17491);
  // Counted once the listener has its channel: the shim's rdma_cm, the kernel's stand-in,
  // starts a thread of its own with the first one.
  const size_t before = thread_count();
  ConnectionOptions options;
  options.release_at_establishment = false;
  connect_and_post_early(r, p, options);
  CHECK(threads_named(kEventThread) == 0);
  CHECK(thread_count() == before);

  // The RTU has been sent; with nobody reading the passive connection nothing moves.
  std::map<uint64_t, int> early = r.completions(*r.cqb, 1, 300ms);
  CHECK(early.empty());
  CHECK(r.qb->state() == hw::QpState::rtr);
  CHECK(r.qb->withheld() == kEarly);
  CHECK(r.doorbells(*r.qb) == 0);

  auto eb = p.passive->wait_event(10s);
  REQUIRE(eb);
  CHECK(eb->type == ConnectionEventType::established);
  CHECK(r.qb->state() == hw::QpState::rts);
  CHECK(r.qb->withheld() == 0);
  std::map<uint64_t, int> sent = r.completions(*r.cqb, kEarly);
  std::map<uint64_t, int> received = r.completions(*r.cqa, kEarly);
  check_early_batch(r, sent, received);
  CHECK(threads_named(kEventThread) == 0);
  CHECK(thread_count() == before);
  close_pair(p);
}

TEST_CASE("with release at establishment, the RTU releases the early sends while the "
          "application polls only its CQs, and ESTABLISHED finds the QP in RTS") {
  Rig& r = rig();
  r.new_qps();
  Pair p = listen(r, 17492);
  connect_and_post_early(r, p, ConnectionOptions{});
  CHECK(threads_named(kEventThread) == 1);

  std::map<uint64_t, int> sent = r.completions(*r.cqb, kEarly);
  std::map<uint64_t, int> received = r.completions(*r.cqa, kEarly);
  check_early_batch(r, sent, received);
  check_established_once(r, *p.passive);

  // The thread ends with the last connection and QP that asked for it.
  close_pair(p);
  CHECK(event_thread_gone());
}

TEST_CASE("with every RTU dropped, COMM_EST read by the event thread releases the early sends "
          "while the application polls only its CQs") {
  Rig& r = rig();
  r.new_qps();
  sim::cm::CmAgent& agent = sim::cm::cm_agent_of(*r.sim);
  const sim::cm::CmCounters before = agent.counters();
  agent.drop_outgoing(sim::cm::AttrId::rtu, 1000);

  Pair p = listen(r, 17493);
  connect_and_post_early(r, p, ConnectionOptions{});
  // No RTU reaches the passive side: it stays in RTR until A's first message arrives there.
  std::map<uint64_t, int> early = r.completions(*r.cqb, 1, 300ms);
  CHECK(early.empty());
  CHECK(r.qb->state() == hw::QpState::rtr);
  CHECK(r.doorbells(*r.qb) == 0);
  REQUIRE(r.post_recv(*r.qb, 200, 20) == Errc::ok);
  REQUIRE(r.post_send(*r.qa, 300, 21, 0x77) == Errc::ok);

  std::map<uint64_t, int> sent = r.completions(*r.cqb, kEarly + 1);
  std::map<uint64_t, int> received = r.completions(*r.cqa, kEarly + 1);
  check_early_batch(r, sent, received);
  CHECK(sent[200] == 1);
  CHECK(received[300] == 1);
  const sim::cm::CmCounters after = agent.counters();
  CHECK(after.comm_est_established == before.comm_est_established + 1);
  CHECK(after.dropped_by_test_hook > before.dropped_by_test_hook);

  // The thread queued what it read: COMM_EST once for the application, ESTABLISHED once.
  REQUIRE(readable(r.dev->async_fd()));
  int comm_est = 0;
  hw::AsyncEvent ev{hw::AsyncEventType::device_fatal};
  while (r.dev->hw().next_async_event(&ev))
    if (ev.type == hw::AsyncEventType::comm_est && ev.qpn == r.qb->qpn()) ++comm_est;
  CHECK(comm_est == 1);
  CHECK_FALSE(readable(r.dev->async_fd()));
  check_established_once(r, *p.passive);
  agent.drop_outgoing(sim::cm::AttrId::rtu, 0);
  close_pair(p);
  CHECK(event_thread_gone());
}

TEST_CASE("passive connections destroyed while the event thread reads them leave no thread "
          "and no descriptor behind") {
  Rig& r = rig();
  const size_t fds = open_fds();
  for (uint16_t i = 0; i < 20; ++i) {
    r.new_qps();
    Listener listener = take(Listener::listen(*r.dev, r.ip, static_cast<uint16_t>(17500 + i)));
    std::optional<Connection> active(
        take(Connection::connect(*r.qa, r.ip, static_cast<uint16_t>(17500 + i))));
    auto req = listener.wait_event(10s);
    REQUIRE(req);
    REQUIRE(req->request);
    std::optional<Connection> passive(take(req->request->accept(*r.qb)));
    // The RTU, then the DREQ, race the destruction of the passive side on the event thread.
    auto ea = active->wait_event(10s);
    REQUIRE(ea);
    CHECK(ea->type == ConnectionEventType::established);
    if (i % 2) REQUIRE(active->disconnect().is_ok());
    passive.reset();
    active.reset();
    CHECK(event_thread_gone());
  }
  r.qa.reset();
  r.qb.reset();
  CHECK(open_fds() == fds);
}
