// SPDX-License-Identifier: BSD-3-Clause
// Datagram services in rnicdv's API (docs/connections.md, "UD services: SIDR"): a UD QP asks
// the service at a CM port of rdma_cm's UDP port space for its QPN and Q_Key, and sends to it
// with what came back; the refusals, each named.
#include <catch2/catch.hpp>

#include <thread>

#include "cm_env.h"

using namespace rnicdv;
using namespace rnicdv::test;

namespace {

constexpr uint16_t kServicePort = 7174;
constexpr uint32_t kQkey = 0x11111111;
constexpr size_t kGrh = 40;

void check_ok(const Status& s) {
  INFO(s.message());
  REQUIRE(s.is_ok());
}

QueuePair make_ud_qp(Side& s) {
  QpConfig qc;
  qc.type = hw::QpType::ud;
  qc.caps.max_send_wr = 16;
  qc.caps.max_recv_wr = 16;
  QueuePair qp = take(s.dev->create_qp(*s.pd, *s.cq, *s.cq, qc));
  hw::QpAttr a;
  a.state = hw::QpState::init;
  a.qkey = kQkey;
  check_ok(qp.modify(a, hw::qp_attr::state | hw::qp_attr::port | hw::qp_attr::qkey));
  a.state = hw::QpState::rtr;
  check_ok(qp.modify(a, hw::qp_attr::state));
  a.state = hw::QpState::rts;
  a.sq_psn = 0;
  check_ok(qp.modify(a, hw::qp_attr::state | hw::qp_attr::sq_psn));
  return qp;
}

// The service's side, on its own thread: the first request it sees is answered with `answer`.
template <class Answer>
std::thread serve_one(Listener& listener, Answer answer) {
  return std::thread([&listener, answer]() mutable {
    std::optional<ConnectionEvent> ev = listener.wait_event(10s);
    if (ev && ev->request) answer(*ev->request);
  });
}

}  // namespace

TEST_CASE("a UD QP learns a datagram service's QPN and Q_Key and its datagram arrives there",
          "[cm][sidr]") {
  // Over IPv4, and over IPv6 (the SIDR MADs, the datagram and its GRH in IPv6 frames).
  const bool ipv6 = GENERATE(false, true);
  INFO((ipv6 ? "IPv6" : "IPv4"));
  auto fabric = make_fabric(sim::ExecMode::threaded);
  Side a = make_side(fabric, {}, ipv6 ? take(hw::IpAddress::parse("fd00::a")) : hw::IpAddress{});
  Side b = make_side(fabric, {}, ipv6 ? take(hw::IpAddress::parse("fd00::b")) : hw::IpAddress{});
  QueuePair client = make_ud_qp(a), service = make_ud_qp(b);
  Listener listener =
      take(Listener::listen_datagram(*b.dev, ipv6 ? "fd00::b" : "", kServicePort));

  bool datagram = false;
  std::vector<uint8_t> asked;
  std::thread server = serve_one(listener, [&](ConnectionRequest& req) {
    datagram = req.datagram();
    asked = req.private_data();
    (void)req.accept_datagram(service, kQkey, bytes("welcome"));
  });
  Result<DatagramService> found =
      resolve_datagram_service(*a.dev, b.ip(), kServicePort, bytes("quotes"));
  server.join();
  DatagramService svc = take(std::move(found));
  CHECK(datagram);
  REQUIRE(asked.size() == hw::kSidrReqPrivateDataMax);
  CHECK(std::memcmp(asked.data(), "quotes", 6) == 0);
  CHECK(svc.qpn == service.qpn());
  CHECK(svc.qkey == kQkey);
  CHECK(svc.address.ip == b.sim->address());
  CHECK(svc.address.port == kServicePort);
  REQUIRE(svc.private_data.size() == hw::kSidrRepPrivateDataMax);
  CHECK(std::memcmp(svc.private_data.data(), "welcome", 7) == 0);

  // A datagram sent with what the service said reaches its QP.
  Sge rsge = b.mr->sge(0, kGrh + 64);
  RecvWr r;
  r.wr_id = 9;
  r.sg_list = &rsge;
  r.num_sge = 1;
  REQUIRE(service.post_recv(r) == Errc::ok);
  hw::AhAttr attr;
  attr.remote_gid = hw::Gid::from_ip(svc.address.ip);
  AddressHandle ah = take(a.pd->create_ah(attr));
  std::memcpy(a.mem.data() + 4096, "tick", 4);
  Sge ssge = a.mr->sge(4096, 4);
  SendWr wr;
  wr.wr_id = 1;
  wr.opcode = WrOpcode::send;
  wr.flags = send_flags::signaled;
  wr.sg_list = &ssge;
  wr.num_sge = 1;
  wr.av = ah.av();
  wr.remote_qpn = svc.qpn;
  wr.remote_qkey = svc.qkey;
  REQUIRE(client.post_send(wr) == Errc::ok);
  REQUIRE(b.wait_completions(1));
  REQUIRE(a.wait_completions(1));
  b.check_each_once(9, 1, 0);
  CHECK(std::memcmp(b.mem.data() + kGrh, "tick", 4) == 0);
  // The GRH is the IPv6 header itself over IPv6 (version 6, source fd00::a at bytes 8..23),
  // the IPv4 header in its last 20 bytes over IPv4.
  if (ipv6) {
    CHECK(b.mem[0] >> 4 == 6);
    CHECK(hw::IpAddress::from_bytes(b.mem.data() + 8) == a.sim->address());
  } else {
    CHECK(b.mem[20] >> 4 == 4);
  }
}

TEST_CASE("a datagram service that refuses, or a port with no UDP listener, is named in the error",
          "[cm][sidr][errors]") {
  auto fabric = make_fabric(sim::ExecMode::threaded);
  Side a = make_side(fabric), b = make_side(fabric);
  QueuePair service = make_ud_qp(b);

  SECTION("nothing listens in the UDP port space: a connection listener does not answer") {
    Listener tcp = take(Listener::listen(*b.dev, "", kServicePort));
    auto r = resolve_datagram_service(*a.dev, b.ip(), kServicePort, {}, 2000ms);
    REQUIRE_FALSE(r);
    CHECK(r.status().code() == Errc::unreachable);
    CHECK(r.status().message().find("nothing listens") != std::string::npos);
    CHECK(r.status().message().find(b.ip() + ":7174") != std::string::npos);
  }
  SECTION("the service rejects") {
    Listener listener = take(Listener::listen_datagram(*b.dev, "", kServicePort));
    std::thread server =
        serve_one(listener, [](ConnectionRequest& req) { (void)req.reject(); });
    auto r = resolve_datagram_service(*a.dev, b.ip(), kServicePort, {}, 2000ms);
    server.join();
    REQUIRE_FALSE(r);
    CHECK(r.status().code() == Errc::rejected);
    CHECK(r.status().message().find("rejected by the service") != std::string::npos);
  }
  SECTION("a request is answered by the call of its kind, with a UD QP") {
    Listener listener = take(Listener::listen_datagram(*b.dev, "", kServicePort));
    Status by_accept, by_rc_qp, answered;
    std::thread server = serve_one(listener, [&](ConnectionRequest& req) {
      by_accept = req.accept(*b.qp).status();
      by_rc_qp = req.accept_datagram(*b.qp, kQkey);
      answered = req.accept_datagram(service, kQkey);
    });
    auto r = resolve_datagram_service(*a.dev, b.ip(), kServicePort, {}, 5000ms);
    server.join();
    CHECK(by_accept.code() == Errc::bad_state);
    CHECK(by_accept.message().find("accept_datagram()") != std::string::npos);
    CHECK(by_rc_qp.code() == Errc::invalid_argument);
    CHECK(by_rc_qp.message().find("answers with a UD QP; this one is RC") != std::string::npos);
    CHECK(answered.is_ok());
    CHECK(take(std::move(r)).qpn == service.qpn());
  }
  SECTION("bad arguments") {
    auto port0 = resolve_datagram_service(*a.dev, b.ip(), 0);
    CHECK(port0.status().code() == Errc::invalid_argument);
    auto bad = resolve_datagram_service(*a.dev, "not-an-address", kServicePort);
    CHECK(bad.status().code() == Errc::invalid_argument);
    std::vector<uint8_t> big(hw::kSidrReqPrivateDataMax + 1);
    auto too_much = resolve_datagram_service(*a.dev, b.ip(), kServicePort, big);
    CHECK(too_much.status().code() == Errc::invalid_argument);
    CHECK(too_much.status().message().find("at most 180") != std::string::npos);
  }
}

TEST_CASE("a connection request is not answered by accept_datagram", "[cm][sidr][errors]") {
  auto fabric = make_fabric(sim::ExecMode::threaded);
  Side a = make_side(fabric), b = make_side(fabric);
  QueuePair service = make_ud_qp(b);
  Listener listener = take(Listener::listen(*b.dev, "", kCmPort));
  auto conn = Connection::connect(*a.qp, b.ip(), kCmPort, {}, quick_options());
  REQUIRE(conn);
  ConnectionEvent ev = wait_event(listener);
  REQUIRE(ev.request);
  CHECK_FALSE(ev.request->datagram());
  Status st = ev.request->accept_datagram(service, kQkey);
  CHECK(st.code() == Errc::bad_state);
  CHECK(st.message().find("a connection request") != std::string::npos);
}
