// SPDX-License-Identifier: BSD-3-Clause
// Multicast on the in-process and UDP wires: a datagram sent to a group reaches every endpoint
// joined to it (the sender's own included) once, with the group as its destination and a good
// ICRC; leaving and detaching stop it; the joins the wires refuse.
#include <poll.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <vector>

#include "wire/wire.h"
#include "wire_test_util.h"

using namespace rnicdv;
using namespace rnicdv::sim;
using namespace rnicdv::sim::test;

namespace {

constexpr IpAddress kGroup = v4(239, 1, 2, 3);
constexpr IpAddress kOtherGroup = v4(239, 1, 2, 4);

std::unique_ptr<Wire> make_wire(WireKind kind, uint16_t port) {
  WireConfig config;
  config.udp_port = port;
  auto made = kind == WireKind::udp ? make_udp_wire(config) : make_inproc_wire(config);
  REQUIRE(made.is_ok());
  return std::move(made.value());
}

}  // namespace

TEST_CASE("a datagram sent to a group reaches every member once, the sender's own endpoint too, "
          "with the group as its destination",
          "[wire][multicast]") {
  for (WireKind kind : {WireKind::inproc, WireKind::udp}) {
    INFO(wire_kind_name(kind));
    const uint16_t port = free_udp_port();
    auto wire = make_wire(kind, port);
    RecordingSink sa, sb, sc, sd;
    const Endpoint a{v4(127, 0, 0, 2), port}, b{v4(127, 0, 0, 3), port}, c{v4(127, 0, 0, 4), port},
        d{v4(127, 0, 0, 5), port};
    REQUIRE(wire->attach(a, &sa).is_ok());
    REQUIRE(wire->attach(b, &sb).is_ok());
    REQUIRE(wire->attach(c, &sc).is_ok());
    REQUIRE(wire->attach(d, &sd).is_ok());
    const int b_fd = wire->wait_fd(b);
    REQUIRE(wire->join_group(a, kGroup).is_ok());
    REQUIRE(wire->join_group(b, kGroup).is_ok());
    REQUIRE(wire->join_group(c, kGroup).is_ok());
    REQUIRE(wire->join_group(d, kOtherGroup).is_ok());  // another group: hears nothing of it
    if (kind == WireKind::udp) CHECK(wire->wait_fd(b) != b_fd);  // now an epoll set

    std::vector<std::vector<uint8_t>> sent;
    for (uint32_t i = 0; i < 20; ++i) {
      sent.push_back(datagram(0x64, 0xFFFFFF, i, {}, std::vector<uint8_t>(64 + i, uint8_t(i))));
      wire->transmit(a, Endpoint{kGroup, port}, sent.back().data(), sent.back().size());
    }
    // Unicast still reaches b through its own address.
    const auto unicast = datagram(0x64, 7, 99, {}, std::vector<uint8_t>(32, 0xEE));
    wire->transmit(a, b, unicast.data(), unicast.size());

    poll_until(*wire, a, sa, 20);
    poll_until(*wire, b, sb, 21);
    poll_until(*wire, c, sc, 20);
    poll_until(*wire, d, sd, 0);
    for (RecordingSink* sink : {&sa, &sc}) {
      const auto got = sink->take();
      REQUIRE(got.size() == 20);
      for (uint32_t i = 0; i < 20; ++i) {
        CHECK(got[i].src == a);
        CHECK(got[i].dst == Endpoint{kGroup, port});
        CHECK(got[i].bytes == sent[i]);
      }
    }
    const auto at_b = sb.take();
    REQUIRE(at_b.size() == 21);
    size_t to_group = 0;
    for (const Received& r : at_b) {
      if (r.dst == b) {
        CHECK(r.bytes == unicast);
      } else {
        CHECK(r.dst == Endpoint{kGroup, port});
        ++to_group;
      }
    }
    CHECK(to_group == 20);
    CHECK(sd.count() == 0);
    const WireCounters counters = wire->counters();
    CHECK(counters.frames_rx == 61);
    CHECK(counters.dropped_icrc == 0);
    CHECK(counters.dropped_no_sink == 0);

    // b leaves; c detaches (which leaves every group): only a hears the next one.
    REQUIRE(wire->leave_group(b, kGroup).is_ok());
    wire->detach(c);
    const auto last = datagram(0x64, 0xFFFFFF, 50, {}, std::vector<uint8_t>(16, 1));
    wire->transmit(d, Endpoint{kGroup, port}, last.data(), last.size());
    poll_until(*wire, a, sa, 1);
    poll_until(*wire, b, sb, 0);
    CHECK(sa.take().size() == 1);
    CHECK(sb.count() == 0);
    CHECK(wire->wait_fd(b) >= (kind == WireKind::udp ? 0 : -1));
    wire->detach(a);
    wire->detach(b);
    wire->detach(d);
  }
}

TEST_CASE("a wire refuses a join to an address that is not a group's, a second join and a leave "
          "of a group never joined, naming each",
          "[wire][multicast][errors]") {
  for (WireKind kind : {WireKind::inproc, WireKind::udp}) {
    INFO(wire_kind_name(kind));
    const uint16_t port = free_udp_port();
    auto wire = make_wire(kind, port);
    RecordingSink sink;
    const Endpoint a{v4(127, 0, 0, 2), port};
    REQUIRE(wire->attach(a, &sink).is_ok());

    Status s = wire->join_group(a, v4(10, 1, 2, 3));
    CHECK(s.code() == Errc::invalid_argument);
    CHECK_THAT(s.message(), Catch::Contains("10.1.2.3") && Catch::Contains("not a multicast"));
    // One IP version per endpoint: an IPv6 group from an IPv4 endpoint is refused by name.
    s = wire->join_group(a, IpAddress::parse("ff0e::1").value());
    CHECK(s.code() == Errc::invalid_argument);
    CHECK_THAT(s.message(), Catch::Contains("ff0e::1") &&
                                Catch::Contains("an IPv6 group, from an IPv4 endpoint"));
    REQUIRE(wire->join_group(a, kGroup).is_ok());
    s = wire->join_group(a, kGroup);
    CHECK(s.code() == Errc::address_in_use);
    CHECK_THAT(s.message(), Catch::Contains("239.1.2.3") && Catch::Contains("already a member"));
    s = wire->leave_group(a, kOtherGroup);
    CHECK(s.code() == Errc::not_found);
    CHECK_THAT(s.message(), Catch::Contains("239.1.2.4") && Catch::Contains("never joined"));
    s = wire->join_group(Endpoint{v4(127, 0, 0, 9), port}, kGroup);
    CHECK(s.code() == Errc::not_found);
    CHECK_THAT(s.message(), Catch::Contains("127.0.0.9") && Catch::Contains("not attached"));
    CHECK(wire->leave_group(a, kGroup).is_ok());
    wire->detach(a);
  }
}
