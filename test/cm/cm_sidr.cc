// SPDX-License-Identifier: BSD-3-Clause
// Service ID Resolution (IBA 12.11) between two CM agents on a deterministic MAD fabric: a UD
// QP asks a port of rdma_cm's UDP port space for its QPN and Q_Key (docs/connections.md).
#include <catch2/catch.hpp>

#include <cstring>

#include "cm/cm_agent.h"
#include "cm/mad.h"
#include "fake_mad_fabric.h"

using namespace rnicdv;
using namespace rnicdv::sim::cm;
using rnicdv::test::count_sent;
using rnicdv::test::FakeMadFabric;
using rnicdv::test::wait_event;

namespace {

constexpr hw::IpAddress kA = hw::IpAddress::v4(0x7f000002);  // the side that asks
constexpr hw::IpAddress kB = hw::IpAddress::v4(0x7f000003);  // the service
constexpr uint16_t kPort = 7174;

struct Pair {
  FakeMadFabric fab;
  std::shared_ptr<CmAgent> a = fab.add(kA, 0xa0a0a0a0a0a0a0a0ull);
  std::shared_ptr<CmAgent> b = fab.add(kB, 0xb0b0b0b0b0b0b0b0ull);
};

hw::CmConnectParams sidr_params(uint32_t timeout_ms = 2000) {
  hw::CmConnectParams p;
  p.space = hw::CmPortSpace::udp;
  p.remote = {kB, kPort};
  p.private_data = {'q', 'u', 'o', 't', 'e', 's'};
  p.timeout_ms = timeout_ms;
  p.max_cm_retries = 3;
  return p;
}

hw::CmAcceptParams sidr_accept(uint32_t qpn = 0x345, uint32_t qkey = hw::kRdmaUdpQkey) {
  hw::CmAcceptParams p;
  p.qp.qpn = qpn;
  p.qp.qkey = qkey;
  p.private_data = {'o', 'k'};
  return p;
}

// The last MAD `src` sent of attribute `attr`, decoded.
CmMad last_sent(const FakeMadFabric& fab, AttrId attr, const hw::IpAddress& src) {
  for (auto it = fab.log().rbegin(); it != fab.log().rend(); ++it)
    if (it->src == src && ((it->mad[16] << 8) | it->mad[17]) == static_cast<int>(attr))
      return decode_cm_mad(it->mad).value();
  FAIL("no such MAD was sent");
  return {};
}

}  // namespace

TEST_CASE("a SIDR request learns the service's QPN and Q_Key, and both sides keep nothing") {
  Pair p;
  auto listener = p.b->listen_ud({{}, kPort}, 16);
  REQUIRE(listener);
  auto active = p.a->connect(sidr_params());
  REQUIRE(active);

  hw::CmEvent req = wait_event(p.fab, **listener);
  REQUIRE(req.type == hw::CmEventType::connect_request);
  CHECK(req.sidr);
  CHECK(req.remote.ip == kA);
  CHECK(req.remote.port == (*active)->local_address().port);
  // The consumer's bytes follow rdma_cm's header: 216 - 36 of them.
  REQUIRE(req.private_data.size() == hw::kSidrReqPrivateDataMax);
  CHECK(std::memcmp(req.private_data.data(), "quotes", 6) == 0);
  // The SIDR_REQ on the wire: the UDP port space's service ID and the requester's ID.
  const CmMad sent = last_sent(p.fab, AttrId::sidr_req, kA);
  CHECK(std::get<SidrReqMsg>(sent.body).service_id == 0x0000000001110000ull + kPort);

  REQUIRE(req.request->accept(sidr_accept()).is_ok());
  hw::CmEvent rep = wait_event(p.fab, **active);
  REQUIRE(rep.type == hw::CmEventType::connect_response);
  CHECK(rep.sidr);
  CHECK(rep.peer.qpn == 0x345);
  CHECK(rep.peer.qkey == hw::kRdmaUdpQkey);
  REQUIRE(rep.private_data.size() == hw::kSidrRepPrivateDataMax);
  CHECK(std::memcmp(rep.private_data.data(), "ok", 2) == 0);
  const CmMad answer = last_sent(p.fab, AttrId::sidr_rep, kB);
  const auto& sr = std::get<SidrRepMsg>(answer.body);
  CHECK(sr.status == hw::sidr_status::success);
  CHECK(sr.request_id == std::get<SidrReqMsg>(sent.body).request_id);
  CHECK(answer.header.tid == sent.header.tid);

  // No connection follows: nothing to establish or disconnect, and no QP attributes.
  CHECK((*active)->establish().code() == Errc::bad_state);
  hw::QpAttr attr;
  uint32_t mask = 0;
  CHECK((*active)->qp_attr(hw::QpState::rtr, &attr, &mask).code() == Errc::bad_state);
  CHECK(req.request->accept(sidr_accept()).code() == Errc::bad_state);  // answered already
  active->reset();
  req.request.reset();
  CHECK(p.a->connection_count() == 0);
  CHECK(p.b->connection_count() == 0);
  CHECK(count_sent(p.fab, AttrId::sidr_req, kA) == 1);
  CHECK(count_sent(p.fab, AttrId::sidr_rep, kB) == 1);
}

TEST_CASE("a SIDR request to a port with no UDP listener is answered 'unsupported'") {
  Pair p;
  // A TCP-space listener on the same port does not take it: the spaces are apart.
  auto tcp = p.b->listen({{}, kPort});
  REQUIRE(tcp);
  auto active = p.a->connect(sidr_params());
  REQUIRE(active);
  hw::CmEvent ev = wait_event(p.fab, **active);
  CHECK(ev.type == hw::CmEventType::unreachable);
  CHECK(ev.sidr);
  CHECK(ev.sidr_status == hw::sidr_status::unsupported);
  CHECK(ev.detail.find("nothing listens") != std::string::npos);
  hw::CmEvent none;
  CHECK_FALSE((*tcp)->next_event(&none));
  // And a UDP listener leaves TCP REQs to the TCP one.
  auto udp = p.b->listen_ud({{}, kPort}, 16);
  REQUIRE(udp);
  CHECK(p.b->listen_ud({{}, kPort}, 16).status().code() == Errc::address_in_use);
}

TEST_CASE("a rejected SIDR request, and one its listener never took, are answered 'reject'") {
  Pair p;
  auto listener = p.b->listen_ud({{}, kPort}, 16);
  REQUIRE(listener);
  auto first = p.a->connect(sidr_params());
  REQUIRE(first);
  hw::CmEvent req = wait_event(p.fab, **listener);
  REQUIRE(req.type == hw::CmEventType::connect_request);
  const uint8_t too_much[hw::kSidrRepPrivateDataMax + 1] = {};
  CHECK(req.request->reject(28, too_much).code() == Errc::invalid_argument);
  const uint8_t why[] = {'n', 'o'};
  REQUIRE(req.request->reject(28, why).is_ok());
  hw::CmEvent ev = wait_event(p.fab, **first);
  CHECK(ev.type == hw::CmEventType::unreachable);
  CHECK(ev.sidr_status == hw::sidr_status::reject);
  CHECK(std::memcmp(ev.private_data.data(), "no", 2) == 0);

  // Untaken when the listener goes: refused for it.
  auto second = p.a->connect(sidr_params());
  REQUIRE(second);
  p.fab.run_until([&] { return p.b->counters().rx(AttrId::sidr_req) == 2; });
  listener->reset();
  hw::CmEvent ev2 = wait_event(p.fab, **second);
  CHECK(ev2.type == hw::CmEventType::unreachable);
  CHECK(ev2.sidr_status == hw::sidr_status::reject);
}

TEST_CASE("a lost SIDR_REQ is sent again, and unanswered ones end unreachable") {
  Pair p;
  auto listener = p.b->listen_ud({{}, kPort}, 16);
  REQUIRE(listener);
  p.a->drop_outgoing(AttrId::sidr_req, 2);
  auto active = p.a->connect(sidr_params(2000));
  REQUIRE(active);
  hw::CmEvent req = wait_event(p.fab, **listener);
  REQUIRE(req.type == hw::CmEventType::connect_request);
  CHECK(p.a->counters().retransmits == 2);
  REQUIRE(req.request->accept(sidr_accept(0x777, 0x1111)).is_ok());
  hw::CmEvent rep = wait_event(p.fab, **active);
  CHECK(rep.type == hw::CmEventType::connect_response);
  CHECK(rep.peer.qpn == 0x777);
  CHECK(rep.peer.qkey == 0x1111);

  // Nobody at the address: 1 + 3 tries within the 2 s budget, then UNREACHABLE.
  hw::CmConnectParams lost = sidr_params(2000);
  lost.remote.ip = hw::IpAddress::v4(0x7f000009);
  const uint64_t start = p.fab.now();
  auto nobody = p.a->connect(lost);
  REQUIRE(nobody);
  hw::CmEvent ev = wait_event(p.fab, **nobody);
  CHECK(ev.type == hw::CmEventType::unreachable);
  CHECK(ev.sidr_status == 0);
  CHECK(p.fab.now() - start <= 2'000'000'000ull);
  CHECK(ev.detail.find("4 SIDR_REQ attempts") != std::string::npos);
}

TEST_CASE("a retransmitted SIDR_REQ is offered once, and a forged SIDR_REP is dropped") {
  Pair p;
  auto listener = p.b->listen_ud({{}, kPort}, 16);
  REQUIRE(listener);
  auto active = p.a->connect(sidr_params(2000));
  REQUIRE(active);
  hw::CmEvent req = wait_event(p.fab, **listener);
  REQUIRE(req.type == hw::CmEventType::connect_request);
  // The requester's retries come while the application holds the request.
  p.fab.run_until([&] { return p.b->counters().rx(AttrId::sidr_req) >= 3; });
  hw::CmEvent again;
  CHECK_FALSE((*listener)->next_event(&again));
  CHECK(p.b->counters().duplicate_req_dropped >= 2);

  // A SIDR_REP from another address, or with another TID, answers nothing.
  const CmMad sent = last_sent(p.fab, AttrId::sidr_req, kA);
  CmMad forged;
  forged.header.tid = sent.header.tid;
  SidrRepMsg rep;
  rep.request_id = std::get<SidrReqMsg>(sent.body).request_id;
  rep.qpn = 0xbad;
  forged.body = rep;
  p.fab.inject(hw::IpAddress::v4(0x7f000009), kA, encode_cm_mad(forged));
  forged.header.tid ^= 1;
  p.fab.inject(kB, kA, encode_cm_mad(forged));
  p.fab.run_until([] { return false; }, 1'000'000);
  hw::CmEvent none;
  CHECK_FALSE((*active)->next_event(&none));
  CHECK(p.a->counters().rx_unmatched == 2);

  REQUIRE(req.request->accept(sidr_accept()).is_ok());
  CHECK(wait_event(p.fab, **active).peer.qpn == 0x345);
}

TEST_CASE("SIDR's arguments are checked, with the limits named") {
  Pair p;
  hw::CmConnectParams big = sidr_params();
  big.private_data.assign(hw::kSidrReqPrivateDataMax + 1, 0);
  auto r = p.a->connect(big);
  REQUIRE_FALSE(r);
  CHECK(r.status().code() == Errc::invalid_argument);
  CHECK(r.status().message().find("SIDR_REQ carries at most 180") != std::string::npos);

  auto listener = p.b->listen_ud({{}, kPort}, 16);
  REQUIRE(listener);
  auto active = p.a->connect(sidr_params());
  REQUIRE(active);
  hw::CmEvent req = wait_event(p.fab, **listener);
  CHECK(req.request->accept(sidr_accept(0)).code() == Errc::invalid_argument);
  hw::CmAcceptParams long_rep = sidr_accept();
  long_rep.private_data.assign(hw::kSidrRepPrivateDataMax + 1, 0);
  auto st = req.request->accept(long_rep);
  CHECK(st.code() == Errc::invalid_argument);
  CHECK(st.message().find("SIDR_REP carries at most 136") != std::string::npos);
  REQUIRE(req.request->accept(sidr_accept()).is_ok());
}
