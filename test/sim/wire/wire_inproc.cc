// SPDX-License-Identifier: BSD-3-Clause
// The in-process wire: addressing, delivery, counting, ICRC on the way, bad input.
#include <catch2/catch.hpp>
#include <memory>
#include <vector>

#include "wire/icrc.h"
#include "wire/wire.h"
#include "wire_test_util.h"

using namespace rnicdv;
using namespace rnicdv::sim;
using namespace rnicdv::sim::test;

namespace {

std::unique_ptr<Wire> inproc(const WireConfig& config = {}) {
  auto wire = make_inproc_wire(config);
  REQUIRE(wire.is_ok());
  return std::move(wire.value());
}

const Endpoint kA{v4(127, 0, 0, 2), 4791};
const Endpoint kB{v4(127, 0, 0, 3), 4791};
const Endpoint kC{v4(127, 0, 0, 4), 4791};

}  // namespace

TEST_CASE("In-process wire delivers to the destination endpoint only", "[inproc]") {
  auto wire = inproc();
  CHECK(wire->kind() == WireKind::inproc);
  RecordingSink a, b, c;
  REQUIRE(wire->attach(kA, &a).is_ok());
  REQUIRE(wire->attach(kB, &b).is_ok());
  REQUIRE(wire->attach(kC, &c).is_ok());

  const std::vector<uint8_t> d = datagram(0x04, 0x12, 77, {}, {1, 2, 3, 4, 5});
  wire->transmit(kA, kB, d.data(), d.size());
  CHECK(wire->poll(kA, 16) == 0);
  CHECK(wire->poll(kC, 16) == 0);
  CHECK(wire->poll(kB, 16) == 1);

  const auto got = b.take();
  REQUIRE(got.size() == 1);
  CHECK(got[0].src == kA);
  CHECK(got[0].dst == kB);
  CHECK(got[0].bytes == d);  // ICRC verified and stripped
  CHECK(a.count() == 0);
  CHECK(c.count() == 0);

  const WireCounters n = wire->counters();
  CHECK(n.frames_tx == 1);
  CHECK(n.frames_rx == 1);
  CHECK(n.bytes_tx == d.size());
  CHECK(n.bytes_rx == d.size());
  CHECK(n.dropped_icrc == 0);
  CHECK(n.dropped_no_sink == 0);
}

TEST_CASE("In-process wire drops and counts frames for an address with no sink", "[inproc]") {
  auto wire = inproc();
  RecordingSink a;
  REQUIRE(wire->attach(kA, &a).is_ok());
  const std::vector<uint8_t> d = datagram(0x04, 1, 1, {}, {7});
  wire->transmit(kA, kB, d.data(), d.size());
  wire->transmit(kA, kC, d.data(), d.size());
  CHECK(wire->poll(kA, 16) == 0);
  CHECK(wire->poll(kB, 16) == 0);  // not attached: nothing to poll
  const WireCounters n = wire->counters();
  CHECK(n.frames_tx == 2);
  CHECK(n.dropped_no_sink == 2);
  CHECK(n.frames_rx == 0);
}

TEST_CASE("In-process attach picks free 127.0.0.x addresses and rejects duplicates", "[inproc]") {
  WireConfig config;
  config.udp_port = 5000;
  auto wire = inproc(config);
  RecordingSink s1, s2, s3;
  auto first = wire->attach(Endpoint{}, &s1);
  REQUIRE(first.is_ok());
  CHECK(first->ip == v4(127, 0, 0, 2));
  CHECK(first->port == 5000);  // port 0 means the configured UDP port
  auto second = wire->attach(Endpoint{}, &s2);
  REQUIRE(second.is_ok());
  CHECK(second->ip == v4(127, 0, 0, 3));

  auto dup = wire->attach(Endpoint{v4(127, 0, 0, 3), 5000}, &s3);
  REQUIRE_FALSE(dup.is_ok());
  CHECK(dup.status().code() == Errc::address_in_use);
  CHECK_THAT(dup.status().message(), Catch::Contains("127.0.0.3:5000"));

  auto no_sink = wire->attach(Endpoint{v4(10, 0, 0, 1), 4791}, nullptr);
  REQUIRE_FALSE(no_sink.is_ok());
  CHECK(no_sink.status().code() == Errc::invalid_argument);

  // After a detach the address is free again and is picked first.
  wire->detach(*first);
  auto again = wire->attach(Endpoint{}, &s3);
  REQUIRE(again.is_ok());
  CHECK(again->ip == v4(127, 0, 0, 2));
}

TEST_CASE("Detaching drops what was queued for the endpoint and stops delivery", "[inproc]") {
  auto wire = inproc();
  RecordingSink a, b;
  REQUIRE(wire->attach(kA, &a).is_ok());
  REQUIRE(wire->attach(kB, &b).is_ok());
  const std::vector<uint8_t> d = datagram(0x04, 1, 1, {}, {1, 2});
  for (int i = 0; i < 3; ++i) wire->transmit(kA, kB, d.data(), d.size());
  REQUIRE(wire->poll(kB, 1) == 1);
  wire->detach(kB);
  wire->transmit(kA, kB, d.data(), d.size());
  const WireCounters n = wire->counters();
  CHECK(n.frames_tx == 4);
  CHECK(n.frames_rx == 1);            // survives the detach
  CHECK(n.dropped_no_sink == 2 + 1);  // two queued at detach, one sent after
  CHECK(wire->poll(kB, 16) == 0);
  CHECK(wire->next_delivery_ns(kB) == UINT64_MAX);
}

TEST_CASE("In-process poll honours its budget and keeps order", "[inproc]") {
  auto wire = inproc();
  RecordingSink a, b;
  REQUIRE(wire->attach(kA, &a).is_ok());
  REQUIRE(wire->attach(kB, &b).is_ok());
  for (uint32_t i = 0; i < 10; ++i) {
    const auto d = tagged_datagram(1, i);
    wire->transmit(kA, kB, d.data(), d.size());
  }
  CHECK(wire->poll(kB, 0) == 0);
  CHECK(wire->poll(kB, 4) == 4);
  CHECK(wire->poll(kB, 4) == 4);
  CHECK(wire->poll(kB, 4) == 2);
  const auto got = b.take();
  REQUIRE(got.size() == 10);
  for (uint32_t i = 0; i < 10; ++i) CHECK(tag_index(got[i].bytes) == i);
}

TEST_CASE("A full receive ring drops and counts, as a link would", "[inproc]") {
  auto wire = inproc();
  RecordingSink a, b;
  REQUIRE(wire->attach(kA, &a).is_ok());
  REQUIRE(wire->attach(kB, &b).is_ok());
  const std::vector<uint8_t> d = datagram(0x04, 1, 1, {}, std::vector<uint8_t>(4096, 1));
  const int sent = 2000;
  for (int i = 0; i < sent; ++i) wire->transmit(kA, kB, d.data(), d.size());
  size_t delivered = 0;
  while (size_t n = wire->poll(kB, 64)) delivered += n;
  const WireCounters c = wire->counters();
  CHECK(delivered > 0);
  CHECK(c.dropped_queue_full > 0);
  CHECK(delivered + c.dropped_queue_full == static_cast<uint64_t>(sent));
  CHECK(c.frames_rx == delivered);
}

TEST_CASE("Runt, oversize and null datagrams are refused at transmit", "[inproc]") {
  auto wire = inproc();
  RecordingSink a, b;
  REQUIRE(wire->attach(kA, &a).is_ok());
  REQUIRE(wire->attach(kB, &b).is_ok());
  std::vector<uint8_t> big(kMaxDatagramLen + 1, 0);
  wire->transmit(kA, kB, big.data(), kBthLen - 1);
  wire->transmit(kA, kB, big.data(), 0);
  wire->transmit(kA, kB, big.data(), kMaxDatagramLen + 1);
  wire->transmit(kA, kB, nullptr, 64);
  // The largest legal datagram goes through.
  wire->transmit(kA, kB, big.data(), kMaxDatagramLen);
  CHECK(wire->poll(kB, 16) == 1);
  const WireCounters c = wire->counters();
  CHECK(c.dropped_malformed == 4);
  CHECK(c.frames_tx == 1);
  CHECK(b.take().at(0).bytes.size() == kMaxDatagramLen);
}

namespace {

// Answers every datagram from inside on_datagram, as a responder's ACK would be sent.
class EchoSink final : public WireSink {
 public:
  EchoSink(Wire* wire, Endpoint self) : wire_(wire), self_(self) {}
  void on_datagram(const Endpoint& src, const Endpoint&, const uint8_t* data, size_t len) override {
    ++seen;
    wire_->transmit(self_, src, data, len);
  }
  int seen = 0;

 private:
  Wire* wire_;
  Endpoint self_;
};

}  // namespace

TEST_CASE("A sink may transmit from inside on_datagram", "[inproc]") {
  auto wire = inproc();
  RecordingSink a;
  EchoSink echo(wire.get(), kB);
  REQUIRE(wire->attach(kA, &a).is_ok());
  REQUIRE(wire->attach(kB, &echo).is_ok());
  const auto d = tagged_datagram(3, 4);
  wire->transmit(kA, kB, d.data(), d.size());
  CHECK(wire->poll(kB, 8) == 1);
  CHECK(wire->poll(kA, 8) == 1);
  const auto got = a.take();
  REQUIRE(got.size() == 1);
  CHECK(got[0].src == kB);
  CHECK(got[0].bytes == d);

  // Loopback to itself from inside the sink (kC -> kC, echoed back to kC): delivered on a
  // later poll, not recursively.
  EchoSink self_echo(wire.get(), kC);
  REQUIRE(wire->attach(kC, &self_echo).is_ok());
  wire->transmit(kC, kC, d.data(), d.size());
  CHECK(wire->poll(kC, 1) == 1);
  CHECK(self_echo.seen == 1);
  CHECK(wire->poll(kC, 1) == 1);
  CHECK(self_echo.seen == 2);
}

TEST_CASE("In-process wire has no wait fd and nothing due when idle", "[inproc]") {
  auto wire = inproc();
  RecordingSink a;
  REQUIRE(wire->attach(kA, &a).is_ok());
  CHECK(wire->wait_fd(kA) == -1);
  CHECK(wire->next_delivery_ns(kA) == UINT64_MAX);
  CHECK(wire->next_delivery_ns(kB) == UINT64_MAX);
}

TEST_CASE("Wire factories reject fault probabilities outside [0, 1]", "[inproc][udp]") {
  WireConfig config;
  config.faults.drop = 1.5;
  auto bad = make_inproc_wire(config);
  REQUIRE_FALSE(bad.is_ok());
  CHECK(bad.status().code() == Errc::invalid_argument);
  CHECK_THAT(bad.status().message(), Catch::Contains("drop"));
  config.faults.drop = 0;
  config.faults.corrupt = -0.1;
  auto bad_udp = make_udp_wire(config);
  REQUIRE_FALSE(bad_udp.is_ok());
  CHECK(bad_udp.status().code() == Errc::invalid_argument);
  CHECK_THAT(bad_udp.status().message(), Catch::Contains("corrupt"));
}
