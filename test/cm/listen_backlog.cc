// SPDX-License-Identifier: BSD-3-Clause
// What connection requests may cost a listener, on a deterministic MAD fabric: the backlog
// and each source address's share of it (REQs beyond them are dropped, as Linux drops them,
// with no REJ), no descriptor per waiting request, and bounded waits for requests and REPs
// whatever timeouts the REQ claims (hostile requesters; docs/reliability.md).
#include <catch2/catch.hpp>

#include <poll.h>

#include <algorithm>
#include <vector>

#include "cm/cm_agent.h"
#include "cm/mad.h"
#include "fake_mad_fabric.h"
#include "flood_rig.h"

using namespace rnicdv;
using namespace rnicdv::sim::cm;
using rnicdv::test::count_sent;
using rnicdv::test::FakeMadFabric;
using rnicdv::test::wait_event;
using rnicdv::test::forged_req;
using rnicdv::test::open_descriptors;

namespace {

constexpr hw::IpAddress kA = hw::IpAddress::v4(0x7f000002);       // 127.0.0.2: a legitimate requester
constexpr hw::IpAddress kB = hw::IpAddress::v4(0x7f000003);       // 127.0.0.3: the listener
// 10.99.0.0 and up: forged source addresses.
constexpr hw::IpAddress forged(uint32_t i) {
  return hw::IpAddress::v4(0x0a630000 + i);
}
constexpr uint16_t kPort = 7471;
constexpr uint64_t kMs = 1'000'000;

struct Pair {
  FakeMadFabric fab;
  std::shared_ptr<CmAgent> a = fab.add(kA, 0xa0a0a0a0a0a0a0a0ull);
  std::shared_ptr<CmAgent> b = fab.add(kB, 0xb0b0b0b0b0b0b0b0ull);
};

// Delivers everything in flight (1 ms of virtual time: no CM timer is that short here).
void deliver(FakeMadFabric& fab) {
  fab.run_until([] { return false; }, 1 * kMs);
}

std::vector<RejMsg> rejs_sent(const FakeMadFabric& fab, const hw::IpAddress& src) {
  std::vector<RejMsg> out;
  for (const auto& s : fab.log()) {
    if (s.src != src) continue;
    auto mad = decode_cm_mad(s.mad);
    if (mad && std::holds_alternative<RejMsg>(mad->body))
      out.push_back(std::get<RejMsg>(mad->body));
  }
  return out;
}

template <class Source>
bool has_event(Source& src) {
  hw::CmEvent ev;
  return src.next_event(&ev);
}

bool readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

hw::CmAcceptParams accept_params(uint32_t qpn = 0x222) {
  hw::CmAcceptParams p;
  p.qp.qpn = qpn;
  return p;
}

}  // namespace

TEST_CASE(
    "a flood of 10,000 forged REQs holds no descriptor per request, never more than the "
    "backlog waits, and the REQs past it are dropped without a REJ") {
  Pair p;
  auto listener = p.b->listen({{}, kPort});  // the default backlog, 1024
  REQUIRE(listener);
  const size_t fds_before = open_descriptors();
  constexpr uint32_t kFlood = 10'000;
  constexpr uint32_t kSources = 16;  // 64 each fill the backlog, within each one's share
  size_t most_waiting = 0;
  size_t most_fds = fds_before;
  for (uint32_t i = 0; i < kFlood; ++i) {
    const hw::IpAddress src = forged(i % kSources);
    p.fab.inject(src, kB, forged_req(src, kB, kPort, 0x10000 + i, 0x100 + i));
    if (i % 100 == 99 || i == kFlood - 1) {
      deliver(p.fab);
      most_waiting = std::max(most_waiting, p.b->pending_requests(kPort));
      most_fds = std::max(most_fds, open_descriptors());
    }
  }
  const CmCounters c = p.b->counters();
  CHECK(c.rx(AttrId::req) == kFlood);
  CHECK(most_waiting == static_cast<size_t>(hw::kDefaultListenBacklog));
  CHECK(p.b->pending_requests(kPort) == static_cast<size_t>(hw::kDefaultListenBacklog));
  CHECK(c.req_dropped_backlog == kFlood - hw::kDefaultListenBacklog);
  CHECK(c.req_dropped_source_share == 0);
  CHECK(count_sent(p.fab, AttrId::rej, kB) == 0);
  CHECK(count_sent(p.fab, AttrId::rep, kB) == 0);
  INFO("descriptors before the flood " << fds_before << ", at most " << most_fds);
  CHECK(most_fds <= fds_before + 2);

  // A legitimate requester is not answered with a REJ either: its REQ is dropped and its REQ
  // timer sends it again, to find room once waiting requests are answered or expire.
  hw::CmConnectParams params;
  params.remote = {kB, kPort};
  params.qp.qpn = 0x111;
  params.timeout_ms = 20'000;
  params.max_cm_retries = 15;
  auto active = p.a->connect(params);
  REQUIRE(active);
  hw::CmEvent req;
  // The application takes every request and leaves the forged ones unanswered: they expire
  // within the bound, and the retried REQ then gets in.
  std::vector<hw::CmEvent> held;
  REQUIRE(p.fab.run_until(
      [&] {
        hw::CmEvent ev;
        while (listener.value()->next_event(&ev)) {
          if (ev.remote.ip == kA) {
            req = std::move(ev);
            return true;
          }
          held.push_back(std::move(ev));
        }
        return false;
      },
      CmAgent::kRequestWaitMaxNs + 2'000 * kMs));
  CHECK(p.b->counters().requests_expired == hw::kDefaultListenBacklog);
  REQUIRE(req.request->accept(accept_params()).is_ok());
  hw::CmEvent ev = wait_event(p.fab, **active, 100 * kMs);
  CHECK(ev.type == hw::CmEventType::connect_response);
}

TEST_CASE("a request holds no descriptor until the application accepts it") {
  Pair p;
  auto listener = p.b->listen({{}, kPort});
  REQUIRE(listener);
  for (uint32_t i = 0; i < 200; ++i) {
    const hw::IpAddress src = forged(i % 4);
    p.fab.inject(src, kB, forged_req(src, kB, kPort, 0x20000 + i, 0x200 + i));
  }
  deliver(p.fab);
  const size_t fds_waiting = open_descriptors();
  // Taken by the application: its events wake the listener's descriptor until it is accepted.
  std::vector<hw::CmEvent> taken(100);
  for (auto& ev : taken) {
    REQUIRE(listener.value()->next_event(&ev));
    REQUIRE(ev.request);
    CHECK(ev.request->event_fd() == listener.value()->event_fd());
  }
  CHECK(open_descriptors() == fds_waiting);
  REQUIRE(taken[0].request->accept(accept_params()).is_ok());
  CHECK(taken[0].request->event_fd() != listener.value()->event_fd());
  CHECK(open_descriptors() == fds_waiting + 1);
  // Accepted, it no longer counts against the backlog; taken, unanswered ones still do.
  CHECK(p.b->pending_requests(kPort) == 199);
}

TEST_CASE(
    "a taken request's events wake the listener's descriptor only while someone watches "
    "them") {
  Pair p;
  auto listener = p.b->listen({{}, kPort});
  REQUIRE(listener);
  for (uint32_t i = 0; i < 2; ++i)
    p.fab.inject(forged(i), kB, forged_req(forged(i), kB, kPort, 0x60000 + i, 0x600 + i));
  deliver(p.fab);
  hw::CmEvent watched, unwatched;
  REQUIRE(listener.value()->next_event(&watched));
  REQUIRE(listener.value()->next_event(&unwatched));
  const int fd = watched.request->event_fd();  // watched from here (as the shim's pump does)
  CHECK_FALSE(readable(fd));
  // Both expire; only the watched one's TIMEOUT makes the listener's descriptor readable, and
  // only until it is read (the unwatched one, as the driver holds it, never does).
  REQUIRE(p.fab.run_until([&] { return p.b->counters().requests_expired == 2; },
                          CmAgent::kRequestWaitMaxNs + 1'000 * kMs));
  CHECK(readable(fd));
  hw::CmEvent ev;
  REQUIRE(watched.request->next_event(&ev));
  CHECK(ev.type == hw::CmEventType::timeout);
  CHECK_FALSE(readable(fd));
  CHECK_FALSE(has_event(**listener));
  REQUIRE(unwatched.request->next_event(&ev));
  CHECK(ev.type == hw::CmEventType::timeout);
}

TEST_CASE(
    "one source address holds at most its share of a listener's backlog; others still "
    "connect") {
  CHECK(CmAgent::source_share(1024) == 128);
  CHECK(CmAgent::source_share(256) == 32);
  CHECK(CmAgent::source_share(64) == 16);
  CHECK(CmAgent::source_share(10) == 10);

  Pair p;
  auto listener = p.b->listen({{}, kPort});
  REQUIRE(listener);
  constexpr uint32_t kFlood = 1'000;
  for (uint32_t i = 0; i < kFlood; ++i)
    p.fab.inject(forged(0), kB, forged_req(forged(0), kB, kPort, 0x30000 + i, 0x300 + i));
  deliver(p.fab);
  const size_t share = static_cast<size_t>(CmAgent::source_share(hw::kDefaultListenBacklog));
  CHECK(p.b->pending_requests_from(kPort, forged(0)) == share);
  CHECK(p.b->pending_requests(kPort) == share);
  CHECK(p.b->counters().req_dropped_source_share == kFlood - share);
  CHECK(count_sent(p.fab, AttrId::rej, kB) == 0);

  // Another address gets in at once, behind the requests already announced.
  hw::CmConnectParams params;
  params.remote = {kB, kPort};
  params.qp.qpn = 0x111;
  auto active = p.a->connect(params);
  REQUIRE(active);
  deliver(p.fab);
  CHECK(p.b->pending_requests_from(kPort, kA) == 1);
  std::vector<hw::CmEvent> held;  // the forged requests, taken and left unanswered
  hw::CmEvent req;
  while (listener.value()->next_event(&req) && req.remote.ip != kA)
    held.push_back(std::move(req));
  REQUIRE(req.remote.ip == kA);
  CHECK(held.size() == share);
  REQUIRE(req.request->accept(accept_params()).is_ok());
  hw::CmEvent ev = wait_event(p.fab, **active, 10 * kMs);
  REQUIRE(ev.type == hw::CmEventType::connect_response);
  REQUIRE((*active)->establish().is_ok());
  ev = wait_event(p.fab, *req.request, 10 * kMs);
  CHECK(ev.type == hw::CmEventType::established);
}

TEST_CASE("listen's backlog bounds the waiting requests; 0 means the default; it can change") {
  Pair p;
  auto listener = p.b->listen({{}, kPort}, 10);
  REQUIRE(listener);
  for (uint32_t i = 0; i < 30; ++i) {
    const hw::IpAddress src = forged(i % 3);
    p.fab.inject(src, kB, forged_req(src, kB, kPort, 0x40000 + i, 0x400 + i));
  }
  deliver(p.fab);
  CHECK(p.b->pending_requests(kPort) == 10);
  CHECK(p.b->counters().req_dropped_backlog == 20);
  REQUIRE(listener.value()->set_backlog(12).is_ok());
  for (uint32_t i = 30; i < 40; ++i)
    p.fab.inject(forged(5), kB, forged_req(forged(5), kB, kPort, 0x40000 + i, 0x400 + i));
  deliver(p.fab);
  CHECK(p.b->pending_requests(kPort) == 12);
  CHECK(hw::listen_backlog(0) == hw::kDefaultListenBacklog);
  CHECK(hw::listen_backlog(-3) == hw::kDefaultListenBacklog);
  CHECK(hw::listen_backlog(5000) == hw::kDefaultListenBacklog);
  CHECK(hw::listen_backlog(7) == 7);
  // Closing the listener rejects the requests nobody took (REJ 28) and frees their slots.
  listener.value().reset();
  deliver(p.fab);
  CHECK(count_sent(p.fab, AttrId::rej, kB) == 12);
}

TEST_CASE("a half-open request whose REQ claims the longest timeouts is gone within the bound") {
  Pair p;
  auto listener = p.b->listen({{}, kPort});
  REQUIRE(listener);
  // 4.096 us * 2^31 (2.4 hours) per try and 15 retries: what the REQ claims the passive side
  // should wait for.
  p.fab.inject(forged(0), kB, forged_req(forged(0), kB, kPort, 0x50000, 0x500, 31, 15));
  deliver(p.fab);
  REQUIRE(p.b->pending_requests(kPort) == 1);
  const uint64_t start = p.fab.now();

  SECTION("never taken: the request goes away, and only the requester hears of it (REJ 28)") {
    REQUIRE(p.fab.run_until([&] { return p.b->connection_count() == 0; },
                            CmAgent::kRequestWaitMaxNs + 1'000 * kMs));
    CHECK(p.fab.now() - start <= CmAgent::kRequestWaitMaxNs + kMs);
    CHECK(p.b->pending_requests(kPort) == 0);
    CHECK(p.b->counters().requests_expired == 1);
    CHECK_FALSE(has_event(**listener));
    const std::vector<RejMsg> rejs = rejs_sent(p.fab, kB);
    REQUIRE(rejs.size() == 1);
    CHECK(rejs[0].reason == hw::reject_reason::consumer_defined);
    CHECK(rejs[0].remote_comm_id == 0x50000);
  }

  SECTION("taken, not accepted: TIMEOUT, and accept then fails naming the expiry") {
    hw::CmEvent req;
    REQUIRE(listener.value()->next_event(&req));
    hw::CmEvent ev = wait_event(p.fab, *req.request, CmAgent::kRequestWaitMaxNs + 1'000 * kMs);
    CHECK(p.fab.now() - start <= CmAgent::kRequestWaitMaxNs + kMs);
    CHECK(ev.type == hw::CmEventType::timeout);
    CHECK(ev.detail == "the request from 10.99.0.0:" + std::to_string(req.remote.port) +
                           " was not accepted within 4000 ms");
    CHECK(p.b->pending_requests(kPort) == 0);
    Status st = req.request->accept(accept_params());
    CHECK(st.code() == Errc::rejected);
    CHECK(st.message().find("the request expired (not accepted within 4000 ms)") !=
          std::string::npos);
  }

  SECTION("accepted, never answered with an RTU: TIMEOUT within the bound of the REP") {
    hw::CmEvent req;
    REQUIRE(listener.value()->next_event(&req));
    REQUIRE(req.request->accept(accept_params()).is_ok());
    CHECK(p.b->pending_requests(kPort) == 0);
    const uint64_t accepted = p.fab.now();
    hw::CmEvent ev = wait_event(p.fab, *req.request, CmAgent::kRepWaitMaxNs + 1'000 * kMs);
    CHECK(p.fab.now() - accepted <= CmAgent::kRepWaitMaxNs + kMs);
    CHECK(ev.type == hw::CmEventType::timeout);
    CHECK(ev.detail == "no RTU from 10.99.0.0:" + std::to_string(req.remote.port) +
                           " within 4000 ms of the REP");
    // One REP per kRepTryMaxNs, not one per 2.4 hours; then REJ "timeout".
    CHECK(count_sent(p.fab, AttrId::rep, kB) == CmAgent::kRepWaitMaxNs / CmAgent::kRepTryMaxNs);
    const std::vector<RejMsg> rejs = rejs_sent(p.fab, kB);
    REQUIRE(rejs.size() == 1);
    CHECK(rejs[0].reason == hw::reject_reason::timeout);
    CHECK(p.b->counters().rep_waits_expired == 1);
    req.request.reset();
    CHECK(p.b->connection_count() == 0);
  }
}
