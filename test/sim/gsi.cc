// SPDX-License-Identifier: BSD-3-Clause
// QP1 for the connection manager: MADs as UD SEND_ONLY to QP1 with the GSI Q_Key, a handler
// for inbound MADs, and timers on the fabric clock (virtual time in deterministic mode).
#include <catch2/catch.hpp>

#include <cstring>

#include "device_impl.h"
#include "gsi.h"
#include "packet/packet.h"
#include "sim_harness.h"

using namespace simtest;
namespace pkt = rnicdv::sim::pkt;

TEST_CASE("a MAD travels as a UD SEND_ONLY to QP1 and reaches the peer's handler") {
  auto fabric = make_fabric();
  auto a = must(fabric->add_device());
  auto b = must(fabric->add_device());
  sim::Gsi& ga = sim::gsi_of(*a);
  sim::Gsi& gb = sim::gsi_of(*b);
  std::vector<std::vector<uint8_t>> got;
  hw::IpAddress from;
  gb.set_mad_handler([&](const hw::IpAddress& src, const uint8_t* mad, size_t len) {
    from = src;
    got.emplace_back(mad, mad + len);
  });
  std::vector<uint8_t> frame;
  a->impl().hca->set_tx_tap(
      [&](const hw::IpAddress&, const uint8_t* d, size_t n) { frame.assign(d, d + n); });
  uint8_t mad[sim::kMadBytes];
  for (size_t i = 0; i < sizeof mad; ++i) mad[i] = static_cast<uint8_t>(i);
  REQUIRE(ga.send_mad(b->address(), mad));
  fabric->run_until([&] { return !got.empty(); });
  REQUIRE(got.size() == 1);
  CHECK(from == a->address());
  CHECK(std::memcmp(got[0].data(), mad, sizeof mad) == 0);

  pkt::Packet p;
  REQUIRE(pkt::parse_packet(frame.data(), frame.size(), &p) == pkt::ParseError::none);
  CHECK(p.bth.opcode == 0x64);
  CHECK(p.bth.dest_qp == 1);
  CHECK(p.bth.pkey == 0xffff);
  CHECK(p.deth.qkey == 0x80010000);
  CHECK(p.deth.src_qp == 1);
  CHECK(p.payload_len == 256);
  a->impl().hca->set_tx_tap({});
  CHECK(a->connection_manager() != nullptr);  // the IB CM sits on QP1 of every device
}

TEST_CASE("GSI timers run on the fabric's virtual clock, in order, and can be cancelled") {
  auto fabric = make_fabric();
  auto dev = must(fabric->add_device());
  sim::Gsi& g = sim::gsi_of(*dev);
  std::vector<int> fired;
  const uint64_t t0 = g.now_ns();
  g.schedule_after(5'000'000'000ull, [&] { fired.push_back(2); });  // 5 s of virtual time
  g.schedule_after(1'000'000, [&] { fired.push_back(1); });
  const sim::TimerId never = g.schedule_after(2'000'000, [&] { fired.push_back(99); });
  CHECK(g.cancel(never));
  CHECK_FALSE(g.cancel(never));
  fabric->run_until([&] { return fired.size() == 2; }, 10'000'000'000ull);
  CHECK(fired == std::vector<int>{1, 2});
  CHECK(g.now_ns() - t0 >= 5'000'000'000ull);
}

TEST_CASE("a handler may call back into the device: it runs outside the device lock") {
  auto fabric = make_fabric();
  auto a = must(fabric->add_device());
  auto b = must(fabric->add_device());
  int replies = 0;
  sim::gsi_of(*b).set_mad_handler([&](const hw::IpAddress& src, const uint8_t* mad, size_t len) {
    (void)b->counters();  // takes the device lock
    auto pd = must(b->alloc_pd());
    (void)sim::gsi_of(*b).send_mad(src, mad, len);
  });
  sim::gsi_of(*a).set_mad_handler([&](const hw::IpAddress&, const uint8_t*, size_t) { ++replies; });
  uint8_t mad[256] = {};
  REQUIRE(sim::gsi_of(*a).send_mad(b->address(), mad));
  CHECK(fabric->run_until([&] { return replies == 1; }));
}

TEST_CASE("packets to QP1 that are not GSI MADs are dropped") {
  auto fabric = make_fabric();
  auto a = must(fabric->add_device());
  uint64_t got = 0;
  sim::gsi_of(*a).set_mad_handler([&](const hw::IpAddress&, const uint8_t*, size_t) { ++got; });
  pkt::Packet p;
  p.bth.opcode = 0x64;
  p.bth.dest_qp = 1;
  p.deth = pkt::Deth{0x1234, 1};  // wrong Q_Key
  uint8_t mad[256] = {};
  p.payload = mad;
  p.payload_len = 256;
  std::vector<uint8_t> f(pkt::kMaxPacketBytes);
  f.resize(pkt::build_packet(p, f.data(), f.size()));
  const uint64_t dropped = a->counters().rx_dropped;
  a->impl().hca->inject_datagram(hw::IpAddress::v4(0x7f000009), f.data(), f.size());
  fabric->run_until([] { return false; }, 1'000'000);
  CHECK(got == 0);
  CHECK(a->counters().rx_dropped == dropped + 1);
}
