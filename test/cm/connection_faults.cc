// SPDX-License-Identifier: BSD-3-Clause
// Faults during connection on the simulated fabric: lost REQ and REP, REJ, no listener, nobody
// at the address, the REP never answered, the peer gone mid-transfer, orderly DREQ/DREP. In
// every case each posted WR completes exactly once: with success or with a flush error.
#include <catch2/catch.hpp>

#include "cm_env.h"

using namespace rnicdv;
using namespace rnicdv::test;
using sim::cm::AttrId;

namespace {

struct Net {
  explicit Net(sim::ExecMode mode = sim::ExecMode::deterministic) : fabric(make_fabric(mode)) {}
  std::shared_ptr<sim::Fabric> fabric;
  Side a = make_side(fabric);
  Side b = make_side(fabric);
};

}  // namespace

TEST_CASE("a lost REQ is retransmitted and the connection still comes up") {
  Net n;
  Listener l = take(Listener::listen(*n.b.dev, "", kCmPort));
  n.a.cm().drop_outgoing(AttrId::req, 2);
  Connection ca = take(Connection::connect(*n.a.qp, n.b.ip(), kCmPort, {}, quick_options()));
  ConnectionEvent req = wait_event(l);
  Connection cb = take(req.request->accept(*n.b.qp));
  REQUIRE(wait_event(ca).type == ConnectionEventType::established);
  REQUIRE(wait_event(cb).type == ConnectionEventType::established);
  CHECK(n.a.cm().counters().retransmits >= 2);
}

TEST_CASE("a lost REP is retransmitted; sends withheld meanwhile run once") {
  Net n;
  Listener l = take(Listener::listen(*n.b.dev, "", kCmPort));
  Connection ca = take(Connection::connect(*n.a.qp, n.b.ip(), kCmPort, {}, quick_options()));
  for (uint32_t i = 0; i < 3; ++i) REQUIRE(n.a.post_recv(100 + i, i) == Errc::ok);
  ConnectionEvent req = wait_event(l);
  n.b.cm().drop_outgoing(AttrId::rep, 1);
  Connection cb = take(req.request->accept(*n.b.qp, {}, quick_options()));
  for (uint32_t i = 0; i < 3; ++i) REQUIRE(n.b.post_send(i, i) == Errc::ok);
  REQUIRE(wait_event(ca).type == ConnectionEventType::established);
  REQUIRE(wait_event(cb).type == ConnectionEventType::established);
  CHECK(n.b.cm().counters().retransmits >= 1);
  REQUIRE(n.b.wait_completions(3));
  REQUIRE(n.a.wait_completions(3));
  n.b.check_each_once(0, 3, IBV_WC_SUCCESS);
  n.a.check_each_once(100, 3, IBV_WC_SUCCESS);
}

TEST_CASE("a REJ reaches the active side with its reason and private data; receives flush") {
  Net n;
  Listener l = take(Listener::listen(*n.b.dev, "", kCmPort));
  Connection ca = take(Connection::connect(*n.a.qp, n.b.ip(), kCmPort, bytes("let me in")));
  for (uint32_t i = 0; i < 5; ++i) REQUIRE(n.a.post_recv(i, i) == Errc::ok);
  ConnectionEvent req = wait_event(l);
  REQUIRE(req.request->reject(hw::reject_reason::consumer_defined, bytes("go away")).is_ok());
  ConnectionEvent ev = wait_event(ca);
  REQUIRE(ev.type == ConnectionEventType::rejected);
  CHECK(ev.reject_reason == 28);
  CHECK(std::memcmp(ev.private_data.data(), "go away", 7) == 0);
  CHECK(ev.status.code() == Errc::rejected);
  CHECK(ev.status.message() == ca.name() + ": rejected by " + n.b.ip() +
                                   ":7471: consumer "
                                   "defined (28)");
  CHECK(n.a.qp->state() == hw::QpState::err);
  CHECK(ca.state() == ConnectionState::closed);
  REQUIRE(n.a.wait_completions(5));
  n.a.check_each_once(0, 5, IBV_WC_WR_FLUSH_ERR);
}

TEST_CASE("connecting to a port nobody listens on is rejected with reason 8") {
  Net n;
  Connection ca = take(Connection::connect(*n.a.qp, n.b.ip(), 9999, {}, quick_options()));
  ConnectionEvent ev = wait_event(ca);
  REQUIRE(ev.type == ConnectionEventType::rejected);
  CHECK(ev.reject_reason == hw::reject_reason::invalid_service_id);
  CHECK(ev.status.message().find("invalid service ID (nothing listens on that port) (8)") !=
        std::string::npos);
  CHECK(n.a.qp->state() == hw::QpState::err);
}

TEST_CASE("connecting to an address where no HCA answers ends UNREACHABLE within the timeout") {
  Net n;
  Connection ca =
      take(Connection::connect(*n.a.qp, "127.0.9.9", kCmPort, {}, quick_options(500ms)));
  for (uint32_t i = 0; i < 2; ++i) REQUIRE(n.a.post_recv(i, i) == Errc::ok);
  const uint64_t start = n.fabric->now_ns();
  ConnectionEvent ev = wait_event(ca);
  REQUIRE(ev.type == ConnectionEventType::unreachable);
  CHECK(ev.status.code() == Errc::unreachable);
  CHECK(ev.status.message() == ca.name() + ": no REP from 127.0.9.9:7471 after 5 REQ attempts");
  CHECK(n.fabric->now_ns() - start <= 500'000'000ull);  // virtual time, inside the budget
  REQUIRE(n.a.wait_completions(2));
  n.a.check_each_once(0, 2, IBV_WC_WR_FLUSH_ERR);
}

TEST_CASE("an accepted connection whose RTU never comes times out and flushes what it withheld") {
  Net n;
  Listener l = take(Listener::listen(*n.b.dev, "", kCmPort));
  n.a.cm().drop_outgoing(AttrId::rtu, 1000);
  Connection ca = take(Connection::connect(*n.a.qp, n.b.ip(), kCmPort, {}, quick_options()));
  ConnectionEvent req = wait_event(l);
  Connection cb = take(req.request->accept(*n.b.qp));
  for (uint32_t i = 0; i < 6; ++i) REQUIRE(n.b.post_send(i, i) == Errc::ok);
  for (uint32_t i = 0; i < 2; ++i) REQUIRE(n.b.post_recv(50 + i, 10 + i) == Errc::ok);
  // The active side is established (it sent its RTUs) but sends nothing: no COMM_EST.
  REQUIRE(wait_event(ca).type == ConnectionEventType::established);
  ConnectionEvent ev = wait_event(cb);
  REQUIRE(ev.type == ConnectionEventType::timeout);
  CHECK(ev.status.message().find("no RTU from") != std::string::npos);
  CHECK(n.b.qp->state() == hw::QpState::err);
  CHECK(n.b.snapshot().uar_doorbells == 0);  // the withheld sends never reached the device
  REQUIRE(n.b.wait_completions(8));
  n.b.check_each_once(0, 6, IBV_WC_WR_FLUSH_ERR);
  n.b.check_each_once(50, 2, IBV_WC_WR_FLUSH_ERR);
  // The passive side told the active one (REJ "timeout"): it is disconnected too.
  ConnectionEvent gone = wait_event(ca);
  CHECK(gone.type == ConnectionEventType::disconnected);
  CHECK(n.a.qp->state() == hw::QpState::err);
}

TEST_CASE("the requester giving up while the QP is in RTR flushes the withheld sends") {
  Net n;
  Listener l = take(Listener::listen(*n.b.dev, "", kCmPort));
  std::optional<Connection> ca(take(Connection::connect(*n.a.qp, n.b.ip(), kCmPort)));
  ConnectionEvent req = wait_event(l);
  Connection cb = take(req.request->accept(*n.b.qp));
  for (uint32_t i = 0; i < 4; ++i) REQUIRE(n.b.post_send(i, i) == Errc::ok);
  ca.reset();  // before the REP is processed: REJ "timeout" from REQ_SENT or REP_RCVD
  ConnectionEvent ev = wait_event(cb);
  REQUIRE(ev.type == ConnectionEventType::rejected);
  REQUIRE(n.b.wait_completions(4));
  n.b.check_each_once(0, 4, IBV_WC_WR_FLUSH_ERR);
}

TEST_CASE("DREQ and DREP: an orderly disconnect flushes outstanding receives on both sides") {
  Net n;
  Listener l = take(Listener::listen(*n.b.dev, "", kCmPort));
  Connection ca = take(Connection::connect(*n.a.qp, n.b.ip(), kCmPort, {}, quick_options()));
  ConnectionEvent req = wait_event(l);
  Connection cb = take(req.request->accept(*n.b.qp));
  REQUIRE(wait_event(ca).type == ConnectionEventType::established);
  REQUIRE(wait_event(cb).type == ConnectionEventType::established);
  for (uint32_t i = 0; i < 3; ++i) {
    REQUIRE(n.a.post_recv(i, i) == Errc::ok);
    REQUIRE(n.b.post_recv(10 + i, i) == Errc::ok);
  }
  REQUIRE(n.a.post_send(20, 8) == Errc::ok);  // consumes one of B's receives
  REQUIRE(n.a.wait_completions(1));

  REQUIRE(ca.disconnect().is_ok());
  CHECK(n.a.qp->state() == hw::QpState::err);
  ConnectionEvent eb = wait_event(cb);
  REQUIRE(eb.type == ConnectionEventType::disconnected);
  CHECK(eb.status.message() == cb.name() + ": DREQ received from " + n.a.ip() + ":" +
                                   std::to_string(ca.local_address().port));
  CHECK(n.b.qp->state() == hw::QpState::err);
  ConnectionEvent ea = wait_event(ca);
  REQUIRE(ea.type == ConnectionEventType::disconnected);
  CHECK(ea.status.message() == ca.name() + ": DREP received from " + n.b.ip() + ":7471");
  CHECK(ca.disconnect().is_ok());  // closed: nothing to do

  REQUIRE(n.a.wait_completions(4));
  REQUIRE(n.b.wait_completions(3));
  n.a.check_each_once(20, 1, IBV_WC_SUCCESS);
  n.a.check_each_once(0, 3, IBV_WC_WR_FLUSH_ERR);
  n.b.check_each_once(10, 1, IBV_WC_SUCCESS);
  n.b.check_each_once(11, 2, IBV_WC_WR_FLUSH_ERR);
  CHECK(n.a.cm().counters().tx(AttrId::dreq) == 1);
  CHECK(n.b.cm().counters().tx(AttrId::drep) == 1);
}

TEST_CASE("a peer that stops mid-transfer: retry exhaustion, flush, and a bounded disconnect") {
  // Real time (threaded): the stopped device must not hold the fabric's clock back.
  Net n(sim::ExecMode::threaded);
  Listener l = take(Listener::listen(*n.b.dev, "", kCmPort));
  ConnectionOptions o = quick_options(1000ms);
  Connection ca = take(Connection::connect(*n.a.qp, n.b.ip(), kCmPort, {}, o));
  ConnectionEvent req = wait_event(l);
  Connection cb = take(req.request->accept(*n.b.qp));
  for (uint32_t i = 0; i < 8; ++i) REQUIRE(n.b.post_recv(100 + i, i) == Errc::ok);
  REQUIRE(wait_event(ca).type == ConnectionEventType::established);
  REQUIRE(wait_event(cb).type == ConnectionEventType::established);
  REQUIRE(n.a.post_send(0, 0) == Errc::ok);
  REQUIRE(n.a.wait_completions(1));

  n.b.sim->pause();  // B stops answering anything: no ACKs, no MADs
  for (uint32_t i = 1; i < 6; ++i) REQUIRE(n.a.post_send(i, i) == Errc::ok);
  // Transport retries run out (retry_count 3, ACK timeout 4 ms): one error, then flushes.
  REQUIRE(n.a.wait_completions(6, 20s));
  n.a.check_each_once(0, 1, IBV_WC_SUCCESS);
  CHECK(n.a.completions[1].at(0) == IBV_WC_RETRY_EXC_ERR);
  for (uint64_t id = 2; id < 6; ++id) {
    INFO("wr_id " << id);
    REQUIRE(n.a.completions[id].size() == 1);
    CHECK(n.a.completions[id][0] == IBV_WC_WR_FLUSH_ERR);
  }
  // Disconnecting a dead peer: the DREQ retries run out and DISCONNECTED still comes.
  REQUIRE(ca.disconnect().is_ok());
  ConnectionEvent ev = wait_event(ca, 20s);
  REQUIRE(ev.type == ConnectionEventType::disconnected);
  CHECK(ev.status.message().find("DREQ attempts") != std::string::npos);
  n.b.sim->resume();
}

TEST_CASE("connection API errors name the connection, the operation and the reason") {
  Net n;
  auto bad = Connection::connect(*n.a.qp, "not-an-address", kCmPort);
  CHECK(bad.status().code() == Errc::invalid_argument);
  CHECK(bad.status().message().find("\"not-an-address\": neither IPv4 nor IPv6") !=
        std::string::npos);
  auto any = Connection::connect(*n.a.qp, "::", kCmPort);
  CHECK(any.status().code() == Errc::invalid_argument);
  CHECK(any.status().message().find(":: is not a peer address") != std::string::npos);
  // The device's address is IPv4: an IPv6 peer is refused, naming both.
  auto other_version = Connection::connect(*n.a.qp, "fd00::2", kCmPort);
  CHECK(other_version.status().code() == Errc::invalid_argument);
  CHECK(other_version.status().message().find("fd00::2 is IPv6") != std::string::npos);
  CHECK(other_version.status().message().find(n.a.ip() + " is IPv4") != std::string::npos);
  std::vector<uint8_t> big(57, 1);
  auto too_much = Connection::connect(*n.a.qp, n.b.ip(), kCmPort, big);
  CHECK(too_much.status().code() == Errc::invalid_argument);
  CHECK(too_much.status().message().find("57 bytes of private data, a REQ carries at most 56") !=
        std::string::npos);

  REQUIRE(n.b.qp->to_init().is_ok());
  REQUIRE(n.b.qp->to_error().is_ok());
  auto wrong_state = Connection::connect(*n.b.qp, n.a.ip(), kCmPort);
  CHECK(wrong_state.status().code() == Errc::bad_state);
  CHECK(wrong_state.status().message().find("the QP is in ERR; a connection starts from RESET "
                                            "or INIT") != std::string::npos);

  Listener l = take(Listener::listen(*n.b.dev, "", kCmPort));
  auto twice = Listener::listen(*n.b.dev, "", kCmPort);
  CHECK(twice.status().code() == Errc::address_in_use);
  auto foreign = Listener::listen(*n.b.dev, n.a.ip(), 1);
  CHECK(foreign.status().code() == Errc::invalid_argument);

  // A request accepted with a QP of another device.
  Connection ca = take(Connection::connect(*n.a.qp, n.b.ip(), kCmPort));
  ConnectionEvent req = wait_event(l);
  Side c = make_side(n.fabric);
  auto cross = req.request->accept(*c.qp);
  CHECK(cross.status().code() == Errc::invalid_argument);
  CHECK(req.request->accept(*c.qp).status().message().find("belongs to device") !=
        std::string::npos);
}
