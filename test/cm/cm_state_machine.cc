// SPDX-License-Identifier: BSD-3-Clause
// The IB CM state machine between two agents on a deterministic MAD fabric: the handshake,
// negotiation, losses at every step, rejects, teardown, duplicates, stale connections and
// hostile MADs (IBA 12.9 and 12.6; docs/connections.md).
#include <catch2/catch.hpp>

#include <cstring>
#include <random>

#include "cm/cm_agent.h"
#include "cm/mad.h"
#include "fake_mad_fabric.h"

using namespace rnicdv;
using namespace rnicdv::sim::cm;
using rnicdv::test::count_sent;
using rnicdv::test::FakeMadFabric;
using rnicdv::test::wait_event;

namespace {

constexpr hw::IpAddress kA = hw::IpAddress::v4(0x7f000002);  // 127.0.0.2: the active side
constexpr hw::IpAddress kB = hw::IpAddress::v4(0x7f000003);  // 127.0.0.3: the passive side
constexpr uint16_t kPort = 7471;

struct Pair {
  FakeMadFabric fab;
  std::shared_ptr<CmAgent> a = fab.add(kA, 0xa0a0a0a0a0a0a0a0ull);
  std::shared_ptr<CmAgent> b = fab.add(kB, 0xb0b0b0b0b0b0b0b0ull);
};

hw::CmConnectParams connect_params(uint32_t qpn = 0x111, uint32_t timeout_ms = 2000) {
  hw::CmConnectParams p;
  p.remote = {kB, kPort};
  p.qp.qpn = qpn;
  p.qp.responder_resources = 8;
  p.qp.initiator_depth = 4;
  p.qp.retry_count = 5;
  p.qp.rnr_retry_count = 6;
  p.qp.local_ack_timeout = 12;
  p.qp.path_mtu = hw::Mtu::mtu2048;
  p.private_data = {'h', 'e', 'l', 'l', 'o'};
  p.timeout_ms = timeout_ms;
  return p;
}

hw::CmAcceptParams accept_params(uint32_t qpn = 0x222) {
  hw::CmAcceptParams p;
  p.qp.qpn = qpn;
  p.qp.responder_resources = 2;
  p.qp.initiator_depth = 16;
  p.qp.rnr_retry_count = 3;
  p.private_data = {'w', 'e', 'l', 'c', 'o', 'm', 'e'};
  return p;
}

template <class Source>
bool has_event(Source& src) {
  hw::CmEvent ev;
  return src.next_event(&ev);
}

// A full handshake: returns {active, passive} connections, both established.
struct Connected {
  std::unique_ptr<hw::CmListener> listener;
  std::unique_ptr<hw::CmConnection> active;
  std::unique_ptr<hw::CmConnection> passive;
};

// Up to the REP: the passive side has accepted, the active side has its connect_response,
// and no RTU has been sent.
Connected accepted(Pair& p) {
  Connected c;
  c.listener = std::move(p.b->listen({{}, kPort}).value());
  c.active = std::move(p.a->connect(connect_params()).value());
  hw::CmEvent req = wait_event(p.fab, *c.listener);
  REQUIRE(req.type == hw::CmEventType::connect_request);
  c.passive = std::move(req.request);
  REQUIRE(c.passive->accept(accept_params()).is_ok());
  hw::CmEvent rep = wait_event(p.fab, *c.active);
  REQUIRE(rep.type == hw::CmEventType::connect_response);
  return c;
}

Connected handshake(Pair& p) {
  Connected c = accepted(p);
  REQUIRE(c.active->establish().is_ok());
  hw::CmEvent est = wait_event(p.fab, *c.passive);
  REQUIRE(est.type == hw::CmEventType::established);
  return c;
}

}  // namespace

TEST_CASE("the SRQ bit of each side's QP reaches the other side in the REQ and the REP") {
  for (const bool active_srq : {false, true}) {
    Pair p;
    auto listener = p.b->listen({{}, kPort});
    REQUIRE(listener);
    hw::CmConnectParams cp = connect_params();
    cp.qp.srq = active_srq;
    auto active = p.a->connect(cp);
    REQUIRE(active);
    hw::CmEvent req = wait_event(p.fab, **listener);
    REQUIRE(req.type == hw::CmEventType::connect_request);
    CHECK(req.peer.srq == active_srq);
    hw::CmAcceptParams ap = accept_params();
    ap.qp.srq = !active_srq;
    REQUIRE(req.request->accept(ap).is_ok());
    hw::CmEvent rep = wait_event(p.fab, **active);
    REQUIRE(rep.type == hw::CmEventType::connect_response);
    CHECK(rep.peer.srq == !active_srq);
  }
}

TEST_CASE("a REQ/REP/RTU handshake negotiates QPNs, PSNs, MTU, retries and rd_atomic") {
  Pair p;
  auto listener = p.b->listen({{}, kPort});
  REQUIRE(listener);
  auto active = p.a->connect(connect_params());
  REQUIRE(active);

  hw::CmEvent req = wait_event(p.fab, **listener);
  REQUIRE(req.type == hw::CmEventType::connect_request);
  CHECK(req.remote.ip == kA);
  CHECK(req.remote.port == (*active)->local_address().port);
  REQUIRE(req.private_data.size() == hw::kReqPrivateDataMax);
  CHECK(std::memcmp(req.private_data.data(), "hello", 5) == 0);
  CHECK(req.peer.qpn == 0x111);
  CHECK(req.peer.path_mtu == hw::Mtu::mtu2048);
  CHECK(req.peer.responder_resources == 8);
  CHECK(req.peer.initiator_depth == 4);
  CHECK(req.peer.ca_guid == 0xa0a0a0a0a0a0a0a0ull);
  auto& passive = req.request;
  REQUIRE(passive);

  hw::QpAttr attr;
  uint32_t mask = 0;
  // Before the REP, the active side has nothing for RTR.
  CHECK((*active)->qp_attr(hw::QpState::rtr, &attr, &mask).code() == Errc::bad_state);

  // Passive: RTR attributes are known from the REQ alone (the QP goes to RTR before the REP).
  REQUIRE(passive->qp_attr(hw::QpState::rtr, &attr, &mask).is_ok());
  CHECK(attr.dest_qpn == 0x111);
  CHECK(attr.path_mtu == hw::Mtu::mtu2048);
  CHECK(attr.max_dest_rd_atomic == 4);  // what the active side will issue
  CHECK(attr.remote_gid.ip() == kA);
  const uint32_t active_psn = attr.rq_psn;
  CHECK((mask & hw::qp_attr::av) != 0);

  REQUIRE(passive->accept(accept_params()).is_ok());
  hw::CmEvent rep = wait_event(p.fab, **active);
  REQUIRE(rep.type == hw::CmEventType::connect_response);
  CHECK(rep.peer.qpn == 0x222);
  REQUIRE(rep.private_data.size() == hw::kRepPrivateDataMax);
  CHECK(std::memcmp(rep.private_data.data(), "welcome", 7) == 0);
  CHECK(rep.peer.responder_resources == 2);  // min(4 the active issues, 2 offered)
  CHECK(rep.peer.initiator_depth == 8);      // min(8 the active answers, 16 offered)

  REQUIRE((*active)->qp_attr(hw::QpState::rtr, &attr, &mask).is_ok());
  CHECK(attr.dest_qpn == 0x222);
  CHECK(attr.max_dest_rd_atomic == 8);  // min(8 offered, the passive's initiator depth 8)
  const uint32_t passive_psn = attr.rq_psn;
  REQUIRE((*active)->qp_attr(hw::QpState::rts, &attr, &mask).is_ok());
  CHECK(attr.sq_psn == active_psn);
  CHECK(attr.max_rd_atomic == 2);  // the passive answers at most 2
  CHECK(attr.retry_cnt == 5);
  CHECK(attr.rnr_retry == 3);  // from the REP
  CHECK(attr.timeout == 12);

  REQUIRE((*active)->establish().is_ok());
  hw::CmEvent est = wait_event(p.fab, *passive);
  CHECK(est.type == hw::CmEventType::established);
  CHECK(est.detail == "RTU received");

  REQUIRE(passive->qp_attr(hw::QpState::rts, &attr, &mask).is_ok());
  CHECK(attr.sq_psn == passive_psn);
  CHECK(attr.max_rd_atomic == 8);  // min(16 offered, the active's responder resources 8)
  CHECK(attr.retry_cnt == 5);      // the requester's values
  CHECK(attr.rnr_retry == 6);
  CHECK(attr.timeout == 12);
}

TEST_CASE("every reply echoes the REQ's TID and carries the peer's communication ID") {
  Pair p;
  Connected c = handshake(p);
  const auto& log = p.fab.log();
  REQUIRE(log.size() == 3);
  auto req = decode_cm_mad(log[0].mad);
  auto rep = decode_cm_mad(log[1].mad);
  auto rtu = decode_cm_mad(log[2].mad);
  REQUIRE(req);
  REQUIRE(rep);
  REQUIRE(rtu);
  CHECK(rep->header.tid == req->header.tid);
  CHECK(rtu->header.tid == req->header.tid);
  const auto& q = std::get<ReqMsg>(req->body);
  const auto& r = std::get<RepMsg>(rep->body);
  const auto& u = std::get<RtuMsg>(rtu->body);
  CHECK(r.remote_comm_id == q.local_comm_id);
  CHECK(u.local_comm_id == q.local_comm_id);
  CHECK(u.remote_comm_id == r.local_comm_id);
  CHECK(q.service_id == 0x0000000001060000ull + kPort);
  CHECK(q.remote_cm_response_timeout == q.local_cm_response_timeout);
  CHECK(q.max_cm_retries == 15);
  CHECK(static_cast<uint32_t>(req->header.tid) == q.local_comm_id);
}

TEST_CASE("a REQ to a port nobody listens on is rejected with reason 8") {
  Pair p;
  auto active = p.a->connect(connect_params());
  REQUIRE(active);
  hw::CmEvent ev = wait_event(p.fab, **active);
  CHECK(ev.type == hw::CmEventType::rejected);
  CHECK(ev.reject_reason == hw::reject_reason::invalid_service_id);
  CHECK(ev.detail ==
        "rejected by 127.0.0.3:7471: invalid service ID (nothing listens on that "
        "port) (8)");
  CHECK(p.a->connection_count() == 1);  // until the handle goes
  active->reset();
  CHECK(p.a->connection_count() == 0);
}

TEST_CASE("a consumer reject reaches the requester with reason 28 and its private data") {
  Pair p;
  auto listener = p.b->listen({{}, kPort});
  auto active = p.a->connect(connect_params());
  hw::CmEvent req = wait_event(p.fab, **listener);
  const uint8_t why[] = {'b', 'u', 's', 'y'};
  REQUIRE(req.request->reject(hw::reject_reason::consumer_defined, why).is_ok());
  hw::CmEvent ev = wait_event(p.fab, **active);
  CHECK(ev.type == hw::CmEventType::rejected);
  CHECK(ev.reject_reason == 28);
  REQUIRE(ev.private_data.size() == hw::kRejPrivateDataMax);
  CHECK(std::memcmp(ev.private_data.data(), "busy", 4) == 0);
  // A second answer to the same request is refused.
  CHECK(req.request->accept(accept_params()).code() == Errc::bad_state);
}

TEST_CASE("a REJ from an address other than the peer's is ignored") {
  Pair p;
  auto listener = p.b->listen({{}, kPort});
  auto active = p.a->connect(connect_params());
  hw::CmEvent req = wait_event(p.fab, **listener);
  REQUIRE(req.type == hw::CmEventType::connect_request);
  // The requester's communication ID, from its REQ on the wire.
  uint32_t a_id = 0;
  for (const auto& s : p.fab.log()) {
    if (s.src != kA) continue;
    Result<CmMad> m = decode_cm_mad(s.mad);
    if (m && std::holds_alternative<ReqMsg>(m->body)) a_id = std::get<ReqMsg>(m->body).local_comm_id;
  }
  REQUIRE(a_id != 0);
  CmMad forged;
  forged.header.tid = 1;
  RejMsg rej;
  rej.remote_comm_id = a_id;  // names the requester's connection, as the peer's REJ would
  rej.reason = hw::reject_reason::consumer_defined;
  forged.body = rej;
  const uint64_t unmatched = p.a->counters().rx_unmatched;
  p.fab.inject(hw::IpAddress::v4(0x7f000009), kA, encode_cm_mad(forged));  // not the peer
  p.fab.run_until([] { return false; }, 1'000'000);
  CHECK_FALSE(has_event(**active));
  CHECK(p.a->counters().rx_unmatched == unmatched + 1);
  // The real peer still completes the handshake.
  REQUIRE(req.request->accept(accept_params()).is_ok());
  hw::CmEvent rep = wait_event(p.fab, **active);
  CHECK(rep.type == hw::CmEventType::connect_response);
}

namespace {

// The communication ID `src` put in the first message of type M it sent.
template <class M>
uint32_t sent_comm_id(const FakeMadFabric& fab, const hw::IpAddress& src) {
  for (const auto& s : fab.log()) {
    if (s.src != src) continue;
    Result<CmMad> m = decode_cm_mad(s.mad);
    if (m && std::holds_alternative<M>(m->body)) return std::get<M>(m->body).local_comm_id;
  }
  return 0;
}

constexpr hw::IpAddress kStranger = hw::IpAddress::v4(0x7f000009);  // 127.0.0.9: no side of the connection

template <class M>
void inject_from_stranger(FakeMadFabric& fab, const hw::IpAddress& dst, const M& body) {
  CmMad forged;
  forged.header.tid = 1;
  forged.body = body;
  fab.inject(kStranger, dst, encode_cm_mad(forged));
  fab.run_until([] { return false; }, 1'000'000);
}

}  // namespace

TEST_CASE("an RTU from an address other than the peer's does not establish the passive side") {
  Pair p;
  Connected c = accepted(p);
  RtuMsg rtu;
  rtu.local_comm_id = sent_comm_id<ReqMsg>(p.fab, kA);
  rtu.remote_comm_id = sent_comm_id<RepMsg>(p.fab, kB);
  REQUIRE(rtu.local_comm_id != 0);
  REQUIRE(rtu.remote_comm_id != 0);
  const uint64_t unmatched = p.b->counters().rx_unmatched;
  inject_from_stranger(p.fab, kB, rtu);
  CHECK_FALSE(has_event(*c.passive));
  CHECK(p.b->counters().rx_unmatched == unmatched + 1);
  // The real RTU establishes it.
  REQUIRE(c.active->establish().is_ok());
  CHECK(wait_event(p.fab, *c.passive).type == hw::CmEventType::established);
}

TEST_CASE("an MRA from an address other than the peer's does not stretch a pending REQ") {
  Pair p;
  auto listener = p.b->listen({{}, kPort});
  auto active = p.a->connect(connect_params());
  hw::CmEvent req = wait_event(p.fab, **listener);  // held, never answered
  REQUIRE(req.type == hw::CmEventType::connect_request);
  MraMsg mra;
  mra.local_comm_id = 0x4242;
  mra.remote_comm_id = sent_comm_id<ReqMsg>(p.fab, kA);
  mra.message_mraed = 0;      // the REQ
  mra.service_timeout = 31;  // 4.096 us * 2^31: hours, if it were taken
  const uint64_t unmatched = p.a->counters().rx_unmatched;
  const uint64_t retransmits = p.a->counters().retransmits;
  inject_from_stranger(p.fab, kA, mra);
  CHECK(p.a->counters().rx_unmatched == unmatched + 1);
  // The REQ's own timer still runs: it is sent again within its usual interval.
  CHECK(p.fab.run_until([&] { return p.a->counters().retransmits > retransmits; },
                        60'000'000'000ull));
}

TEST_CASE("a DREP from an address other than the peer's does not end the disconnect") {
  Pair p;
  Connected c = handshake(p);
  p.b->drop_outgoing(AttrId::drep, 1000);  // the real DREP never arrives
  REQUIRE(c.active->disconnect().is_ok());
  REQUIRE(wait_event(p.fab, *c.passive).type == hw::CmEventType::disconnected);
  DrepMsg drep;
  drep.local_comm_id = sent_comm_id<RepMsg>(p.fab, kB);
  drep.remote_comm_id = sent_comm_id<ReqMsg>(p.fab, kA);
  const uint64_t unmatched = p.a->counters().rx_unmatched;
  inject_from_stranger(p.fab, kA, drep);
  CHECK(p.a->counters().rx_unmatched == unmatched + 1);
  CHECK_FALSE(has_event(*c.active));
  // It ends by its own retries, not by the forged DREP.
  hw::CmEvent ev = wait_event(p.fab, *c.active);
  CHECK(ev.type == hw::CmEventType::disconnected);
  CHECK(ev.detail.find("DREQ attempts") != std::string::npos);
}

TEST_CASE("a lost REQ is sent again by its timer") {
  Pair p;
  auto listener = p.b->listen({{}, kPort});
  p.a->drop_outgoing(AttrId::req, 2);
  auto active = p.a->connect(connect_params());
  hw::CmEvent req = wait_event(p.fab, **listener);
  CHECK(req.type == hw::CmEventType::connect_request);
  CHECK(p.a->counters().retransmits == 2);
  CHECK(p.a->counters().dropped_by_test_hook == 2);
}

TEST_CASE("a lost REP is sent again by the passive side's timer; duplicate REQs are dropped") {
  Pair p;
  auto listener = p.b->listen({{}, kPort});
  auto active = p.a->connect(connect_params(0x111, 20'000));
  hw::CmEvent req = wait_event(p.fab, **listener);
  p.b->drop_outgoing(AttrId::rep, 3);
  REQUIRE(req.request->accept(accept_params()).is_ok());
  hw::CmEvent rep = wait_event(p.fab, **active);
  CHECK(rep.type == hw::CmEventType::connect_response);
  CHECK(p.b->counters().retransmits >= 3);
  // Nothing else reached the listener: retried REQs were recognised as duplicates.
  CHECK_FALSE(has_event(**listener));
}

TEST_CASE("a lost RTU: the REP is sent again and the duplicate REP is answered with a new RTU") {
  Pair p;
  Connected c = accepted(p);
  p.a->drop_outgoing(AttrId::rtu, 1);
  REQUIRE(c.active->establish().is_ok());
  hw::CmEvent est = wait_event(p.fab, *c.passive);
  CHECK(est.type == hw::CmEventType::established);
  CHECK(p.a->counters().rtu_resent == 1);
  CHECK(p.a->counters().tx(AttrId::rtu) == 2);
  // Exactly once: nothing more arrives, even after every timer has run.
  p.fab.run_until([] { return false; }, 60'000'000'000ull);
  CHECK_FALSE(has_event(*c.passive));
}

TEST_CASE("COMM_EST stands in for a lost RTU, exactly once, and stops the REP retries") {
  Pair p;
  Connected c = accepted(p);
  p.a->drop_outgoing(AttrId::rtu, 100);
  REQUIRE(c.active->establish().is_ok());
  // Let the RTU get lost, but not long enough for the REP timer.
  p.fab.run_until([] { return false; }, 100'000);
  CHECK_FALSE(has_event(*c.passive));

  REQUIRE(c.passive->notify_comm_est().is_ok());
  hw::CmEvent est;
  REQUIRE(c.passive->next_event(&est));
  CHECK(est.type == hw::CmEventType::established);
  CHECK(est.detail == "COMM_EST (first request received in RTR)");
  // A second COMM_EST is harmless and reports nothing new (EISCONN).
  CHECK(c.passive->notify_comm_est().is_ok());
  const uint64_t reps = p.b->counters().tx(AttrId::rep);
  p.fab.run_until([] { return false; }, 60'000'000'000ull);
  CHECK(p.b->counters().tx(AttrId::rep) == reps);
  CHECK_FALSE(has_event(*c.passive));
  CHECK(p.b->counters().comm_est_established == 1);
}

TEST_CASE("an RTU after COMM_EST is dropped, and COMM_EST after the RTU changes nothing") {
  Pair p;
  Connected c = handshake(p);
  CHECK(c.passive->notify_comm_est().is_ok());
  CHECK_FALSE(has_event(*c.passive));
}

TEST_CASE("an address where nobody answers is unreachable once every REQ try has run out") {
  Pair p;
  p.fab.blackhole(kB);
  auto params = connect_params(0x111, 1000);
  params.max_cm_retries = 3;
  auto active = p.a->connect(params);
  const uint64_t start = p.fab.now();
  hw::CmEvent ev = wait_event(p.fab, **active);
  CHECK(ev.type == hw::CmEventType::unreachable);
  CHECK(ev.detail == "no REP from 127.0.0.3:7471 after 4 REQ attempts");
  CHECK(count_sent(p.fab, AttrId::req, kA) == 4);
  CHECK(p.fab.now() - start <= 1'000'000'000ull);  // inside the caller's budget (virtual)
}

TEST_CASE("a passive side whose REP is never answered times out and tells the requester") {
  Pair p;
  auto listener = p.b->listen({{}, kPort});
  auto params = connect_params(0x111, 500);
  params.max_cm_retries = 2;
  auto active = p.a->connect(params);
  hw::CmEvent req = wait_event(p.fab, **listener);
  p.b->drop_outgoing(AttrId::rep, 100);
  REQUIRE(req.request->accept(accept_params()).is_ok());
  hw::CmEvent ev = wait_event(p.fab, *req.request);
  CHECK(ev.type == hw::CmEventType::timeout);
  CHECK(ev.detail == "no RTU from 127.0.0.2:" + std::to_string((*active)->local_address().port) +
                         " after 3 REP attempts");
  // The active side learns it through REJ "timeout" with the passive CA GUID as ARI, or has
  // already given up on its own REQ timer.
  hw::CmEvent a = wait_event(p.fab, **active);
  CHECK((a.type == hw::CmEventType::rejected || a.type == hw::CmEventType::unreachable));
}

TEST_CASE("DREQ and DREP end an established connection on both sides, then TIMEWAIT ends") {
  Pair p;
  Connected c = handshake(p);
  REQUIRE(c.active->disconnect().is_ok());
  hw::CmEvent pev = wait_event(p.fab, *c.passive);
  CHECK(pev.type == hw::CmEventType::disconnected);
  CHECK(pev.detail ==
        "DREQ received from 127.0.0.2:" + std::to_string(c.active->local_address().port));
  hw::CmEvent aev = wait_event(p.fab, *c.active);
  CHECK(aev.type == hw::CmEventType::disconnected);
  CHECK(aev.detail == "DREP received from 127.0.0.3:7471");
  CHECK(c.active->disconnect().is_ok());  // idempotent
  c.active.reset();
  c.passive.reset();
  p.fab.run_until([&] { return p.a->connection_count() == 0 && p.b->connection_count() == 0; });
  CHECK(p.a->connection_count() == 0);
  CHECK(p.b->connection_count() == 0);
}

TEST_CASE("a DREQ nobody answers still ends in DISCONNECTED after its retries") {
  Pair p;
  Connected c = handshake(p);
  p.fab.blackhole(kB);
  REQUIRE(c.active->disconnect().is_ok());
  hw::CmEvent ev = wait_event(p.fab, *c.active);
  CHECK(ev.type == hw::CmEventType::disconnected);
  CHECK(ev.detail.find("DREQ attempts") != std::string::npos);
  CHECK(count_sent(p.fab, AttrId::dreq, kA) == 16);
}

TEST_CASE("a DREQ that matches no connection is still answered with a DREP") {
  Pair p;
  DreqMsg d;
  d.local_comm_id = 0x1234;
  d.remote_comm_id = 0x5678;
  d.remote_qpn = 0x99;
  CmMad mad;
  mad.header.tid = 0xabcdef;
  mad.body = d;
  p.fab.inject(kA, kB, encode_cm_mad(mad));
  p.fab.run_until([&] { return count_sent(p.fab, AttrId::drep, kB) == 1; });
  auto drep = decode_cm_mad(p.fab.log().back().mad);
  REQUIRE(drep);
  CHECK(drep->header.tid == 0xabcdef);
  CHECK(std::get<DrepMsg>(drep->body).local_comm_id == 0x5678);
  CHECK(std::get<DrepMsg>(drep->body).remote_comm_id == 0x1234);
  CHECK(p.b->counters().unmatched_dreq_answered == 1);
}

TEST_CASE("destroying a connection mid-handshake tells the peer") {
  Pair p;
  auto listener = p.b->listen({{}, kPort});
  auto active = p.a->connect(connect_params());
  hw::CmEvent req = wait_event(p.fab, **listener);
  active->reset();  // REJ "timeout" with our CA GUID, as cm_destroy_id in REQ_SENT
  hw::CmEvent ev = wait_event(p.fab, *req.request);
  CHECK(ev.type == hw::CmEventType::rejected);
  CHECK(ev.reject_reason == hw::reject_reason::timeout);
  CHECK(req.request->accept(accept_params()).code() == Errc::rejected);
}

TEST_CASE("a REQ from a QPN still bound to a live connection is rejected as stale") {
  Pair p;
  Connected c = handshake(p);
  // The same QPN connects again, as if the active host had lost its connection.
  auto again = p.a->connect(connect_params());
  hw::CmEvent ev = wait_event(p.fab, **again);
  CHECK(ev.type == hw::CmEventType::rejected);
  CHECK(ev.reject_reason == hw::reject_reason::stale_connection);
  hw::CmEvent old = wait_event(p.fab, *c.passive);
  CHECK(old.type == hw::CmEventType::disconnected);
}

TEST_CASE("listen refuses a taken port and an address that is not the device's") {
  Pair p;
  auto l = p.b->listen({{}, kPort});
  REQUIRE(l);
  auto again = p.b->listen({kB, kPort});
  CHECK(again.status().code() == Errc::address_in_use);
  CHECK(again.status().message() ==
        "listen 127.0.0.3:7471: port 7471 already has a listener "
        "on fake1");
  CHECK(p.b->listen({kA, 1}).status().code() == Errc::invalid_argument);
  l->reset();
  CHECK(p.b->listen({kB, kPort}));
}

TEST_CASE("connect refuses bad arguments with a clear error") {
  Pair p;
  auto params = connect_params();
  params.private_data.assign(57, 0);
  auto r = p.a->connect(params);
  CHECK(r.status().code() == Errc::invalid_argument);
  CHECK(r.status().message() ==
        "connect to 127.0.0.3:7471: 57 bytes of private data, a REQ carries at most 56");
  params = connect_params(0);
  CHECK(p.a->connect(params).status().code() == Errc::invalid_argument);
  params = connect_params();
  params.remote.port = 0;
  CHECK(p.a->connect(params).status().code() == Errc::invalid_argument);
}

TEST_CASE("a listener bound to one address rejects REQs whose cma_hdr names another") {
  Pair p;
  auto l = p.b->listen({kB, kPort});
  // Connect with a cma_hdr destination that is not the listener's address.
  ReqMsg q;
  q.local_comm_id = 0x42;
  q.service_id = service_id_for_port(kPort);
  q.local_ca_guid = 0x77;
  q.local_qpn = 0x99;
  q.path_mtu = 3;
  CmaHeader cma;
  cma.src = kA;
  cma.dst = hw::IpAddress::v4(0x0a000001);
  encode_cma_header(cma, q.private_data.data());
  CmMad mad;
  mad.body = q;
  p.fab.inject(kA, kB, encode_cm_mad(mad));
  p.fab.run_until([&] { return count_sent(p.fab, AttrId::rej, kB) == 1; });
  auto rej = decode_cm_mad(p.fab.log().back().mad);
  REQUIRE(rej);
  CHECK(std::get<RejMsg>(rej->body).reason == hw::reject_reason::invalid_service_id);
  CHECK(std::get<RejMsg>(rej->body).remote_comm_id == 0x42);
  CHECK_FALSE(has_event(**l));
}

TEST_CASE("hostile MADs never crash the CM and never create connections") {
  Pair p;
  Connected c = handshake(p);
  std::mt19937_64 rng(99);
  MadBytes mad;
  for (int i = 0; i < 20000; ++i) {
    for (auto& byte : mad) byte = static_cast<uint8_t>(rng());
    if (i % 2) {  // a CM header over a garbage body
      mad[0] = 1;
      mad[1] = 7;
      mad[2] = 2;
      mad[3] = 3;
      mad[16] = 0;
      mad[17] = static_cast<uint8_t>(0x10 + rng() % 7);
    }
    p.b->on_mad(kA, mad);
    p.a->on_mad(kB, std::span(mad).first(rng() % 256));
  }
  p.fab.run_until([] { return false; }, 1'000'000);
  CHECK(p.a->counters().rx_malformed > 0);
  CHECK(p.b->counters().rx_malformed > 0);
  // Random bodies name random service IDs and communication IDs: no request reached the
  // listener and the established connection is untouched.
  CHECK_FALSE(has_event(*c.listener));
  CHECK_FALSE(has_event(*c.passive));
  CHECK_FALSE(has_event(*c.active));
}

TEST_CASE("a peer found gone ends its connections at once: established, DREQ sent, REQ sent") {
  SECTION("established: DISCONNECTED, and no DREQ") {
    Pair p;
    Connected c = handshake(p);
    p.fab.blackhole(kB);
    const uint64_t start = p.fab.now();
    p.a->on_peer_unreachable(kB);
    hw::CmEvent ev;
    REQUIRE(c.active->next_event(&ev));
    CHECK(ev.type == hw::CmEventType::disconnected);
    CHECK(ev.detail == "127.0.0.3:7471 is unreachable (its port is closed): the peer is gone");
    CHECK(p.fab.now() == start);  // at once, not after a timer
    CHECK(count_sent(p.fab, AttrId::dreq, kA) == 0);
    CHECK(p.a->counters().peers_gone == 1);
    // A later disconnect finds the connection closing: nothing more is sent or reported.
    REQUIRE(c.active->disconnect().is_ok());
    CHECK(count_sent(p.fab, AttrId::dreq, kA) == 0);
    CHECK_FALSE(has_event(*c.active));
  }
  SECTION("DREQ sent: DISCONNECTED without waiting for its 16 tries") {
    Pair p;
    Connected c = handshake(p);
    p.fab.blackhole(kB);
    REQUIRE(c.active->disconnect().is_ok());
    p.a->on_peer_unreachable(kB);
    hw::CmEvent ev;
    REQUIRE(c.active->next_event(&ev));
    CHECK(ev.type == hw::CmEventType::disconnected);
    CHECK(ev.detail == "no DREP from 127.0.0.3:7471: it is unreachable (its port is closed)");
    CHECK(count_sent(p.fab, AttrId::dreq, kA) == 1);
  }
  SECTION("REQ sent: UNREACHABLE, as when the last REQ try is unanswered") {
    Pair p;
    p.fab.blackhole(kB);
    auto active = p.a->connect(connect_params());
    REQUIRE(active.is_ok());
    p.a->on_peer_unreachable(kB);
    hw::CmEvent ev;
    REQUIRE((*active)->next_event(&ev));
    CHECK(ev.type == hw::CmEventType::unreachable);
  }
  SECTION("another address: nothing changes") {
    Pair p;
    Connected c = handshake(p);
    p.a->on_peer_unreachable(kStranger);
    CHECK_FALSE(has_event(*c.active));
    CHECK(p.a->counters().peers_gone == 0);
    REQUIRE(c.active->disconnect().is_ok());
    CHECK(wait_event(p.fab, *c.active).detail == "DREP received from 127.0.0.3:7471");
  }
}

TEST_CASE("a farewell sends the DREQ of every established connection and leaves the handles") {
  Pair p;
  Connected c = handshake(p);
  REQUIRE(count_sent(p.fab, AttrId::dreq, kA) == 0);
  REQUIRE(p.a->farewell(1'000'000'000));
  CHECK(count_sent(p.fab, AttrId::dreq, kA) == 1);
  hw::CmEvent ev = wait_event(p.fab, *c.passive);
  CHECK(ev.type == hw::CmEventType::disconnected);
  CHECK(ev.detail ==
        "DREQ received from 127.0.0.2:" + std::to_string(c.active->local_address().port));
  // A second farewell finds it closing: nothing more.
  REQUIRE(p.a->farewell(1'000'000'000));
  CHECK(count_sent(p.fab, AttrId::dreq, kA) == 1);
}

TEST_CASE("two IPv6 agents connect: the REQ names their GIDs and the cma_hdr says IPv6") {
  const hw::IpAddress a6 = hw::IpAddress::parse("fd00::a").value();
  const hw::IpAddress b6 = hw::IpAddress::parse("fd00::b").value();
  FakeMadFabric fab;
  auto a = fab.add(a6, 0xa6a6a6a6a6a6a6a6ull);
  auto b = fab.add(b6, 0xb6b6b6b6b6b6b6b6ull);
  auto listener = b->listen({b6, kPort});
  REQUIRE(listener);
  hw::CmConnectParams cp = connect_params();
  cp.remote = {b6, kPort};
  auto active = a->connect(cp);
  REQUIRE(active);
  CHECK((*active)->local_address().ip == a6);
  hw::CmEvent req = wait_event(fab, **listener);
  REQUIRE(req.type == hw::CmEventType::connect_request);
  CHECK(req.remote.ip == a6);
  CHECK(req.remote.port == (*active)->local_address().port);
  CHECK(hw::cm_address_string(req.remote) ==
        "[fd00::a]:" + std::to_string((*active)->local_address().port));

  // On the wire: the REQ's primary path GIDs are the two addresses, and its private data
  // starts with an IP version 6 cma_hdr naming both whole.
  auto sent = decode_cm_mad(fab.log().front().mad);
  REQUIRE(sent);
  const auto& q = std::get<ReqMsg>(sent->body);
  CHECK(hw::IpAddress::from_bytes(q.primary_local_gid.data()) == a6);
  CHECK(hw::IpAddress::from_bytes(q.primary_remote_gid.data()) == b6);
  CHECK(q.private_data[1] == 0x60);
  auto cma = decode_cma_header(std::span(q.private_data).first(kCmaHeaderSize));
  REQUIRE(cma);
  CHECK(cma->src == a6);
  CHECK(cma->dst == b6);

  hw::QpAttr attr;
  uint32_t mask = 0;
  REQUIRE(req.request->qp_attr(hw::QpState::rtr, &attr, &mask).is_ok());
  CHECK(attr.remote_gid.ip() == a6);
  REQUIRE(req.request->accept(accept_params()).is_ok());
  hw::CmEvent rep = wait_event(fab, **active);
  REQUIRE(rep.type == hw::CmEventType::connect_response);
  REQUIRE((*active)->qp_attr(hw::QpState::rtr, &attr, &mask).is_ok());
  CHECK(attr.remote_gid.ip() == b6);
  REQUIRE((*active)->establish().is_ok());
  CHECK(wait_event(fab, *req.request).type == hw::CmEventType::established);

  // A listen on an address that is not the agent's own is refused.
  auto other = a->listen({b6, kPort + 1});
  CHECK(other.status().code() == Errc::invalid_argument);
  // One IP version per device: an IPv4 peer is refused before anything is sent.
  const size_t before = fab.log().size();
  hw::CmConnectParams v4 = connect_params();
  v4.remote = {kB, kPort};
  auto refused = a->connect(v4);
  CHECK(refused.status().code() == Errc::invalid_argument);
  CHECK(refused.status().message().find("127.0.0.3 is IPv4") != std::string::npos);
  CHECK(refused.status().message().find("fd00::a is IPv6") != std::string::npos);
  CHECK(fab.log().size() == before);
}

TEST_CASE("a listener on 0.0.0.0 hears IPv4 requests only, one on :: hears any, as Linux's "
          "wildcards of each family") {
  const hw::IpAddress a6 = hw::IpAddress::parse("fd00::a").value();
  const hw::IpAddress b6 = hw::IpAddress::parse("fd00::b").value();
  FakeMadFabric fab;
  auto a = fab.add(a6, 0xa6a6a6a6a6a6a6a6ull);
  auto b = fab.add(b6, 0xb6b6b6b6b6b6b6b6ull);
  auto v4_any = b->listen({hw::IpAddress::v4(0), kPort});
  REQUIRE(v4_any);
  hw::CmConnectParams cp = connect_params();
  cp.remote = {b6, kPort};
  auto refused = a->connect(cp);
  REQUIRE(refused);
  hw::CmEvent ev = wait_event(fab, **refused);
  CHECK(ev.type == hw::CmEventType::rejected);
  CHECK(ev.reject_reason == hw::reject_reason::invalid_service_id);
  CHECK_FALSE(has_event(**v4_any));
  v4_any->reset();

  auto any = b->listen({hw::IpAddress{}, kPort});
  REQUIRE(any);
  auto heard = a->connect(cp);
  REQUIRE(heard);
  hw::CmEvent req = wait_event(fab, **any);
  CHECK(req.type == hw::CmEventType::connect_request);
  CHECK(req.remote.ip == a6);
}
