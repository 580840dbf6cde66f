// SPDX-License-Identifier: BSD-3-Clause
// The feed-handler example's classes (tools/examples/feed_handler/feed.h) on simulated HCAs:
// an exchange's multicast stream reaches the handler whole and in order without loss, and the
// handler's
// republished stream reaches every subscriber the same way; under seeded loss the handler
// reports exactly the messages the fabric dropped, as gaps, and its subscribers see the same
// gaps; the sequence accounting itself.
#include <catch2/catch.hpp>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "feed.h"
#include "sim_env.h"

using namespace rnicdv;
using namespace rnicdv::test;

namespace {

struct Received {
  std::vector<uint64_t> seqs;  // in arrival order, stale ones included
  uint64_t bad_payloads = 0;
};

uint8_t payload_byte(uint64_t seq, uint32_t i) { return static_cast<uint8_t>(seq * 13 + i); }

// An exchange (device 0) publishing `messages` messages of `payload` bytes to 239.2.0.1, the
// handler (device 1) republishing to 239.2.0.2, and `subscribers` subscribers. `loss` drops
// that share of the exchange's frames, drawn from `seed`.
struct FeedRun {
  std::shared_ptr<sim::Fabric> fabric;
  std::vector<std::shared_ptr<sim::Device>> hws;
  std::vector<std::optional<Device>> devices;
  std::optional<feed::Publisher> exchange;
  std::optional<feed::FeedHandler> handler;
  std::vector<std::unique_ptr<feed::Subscriber>> subs;
  std::vector<Received> handler_in_order;  // [0]: what the handler accepted, in order
  std::vector<Received> at_sub;

  FeedRun(uint32_t subscribers, double loss, uint64_t seed) {
    sim::FabricConfig fc;
    fc.mode = sim::ExecMode::deterministic;
    fc.wire = sim::WireKind::inproc;
    fc.seed = seed;
    if (loss > 0) fc.fault_spec = "drop p=" + std::to_string(loss) + " device=0";
    fabric = take(sim::Fabric::create(fc));
    devices.resize(2 + subscribers);
    for (auto& d : devices) {
      hws.push_back(take(fabric->add_device()));
      d.emplace(take(Device::wrap(hws.back())));
    }
    exchange.emplace(take(feed::Publisher::create(*devices[0], "239.2.0.1", 1)));
    handler.emplace(take(feed::FeedHandler::create(*devices[1], "239.2.0.1", "239.2.0.2", 2)));
    for (uint32_t k = 0; k < subscribers; ++k)
      subs.push_back(std::make_unique<feed::Subscriber>(
          take(feed::Subscriber::create(*devices[2 + k], "239.2.0.2"))));
    at_sub.resize(subscribers);
  }

  void pump() {
    for (int idle = 0; idle < 64;) {
      int n = handler->run_once(0);
      REQUIRE(n >= 0);
      for (size_t k = 0; k < subs.size(); ++k)
        n += subs[k]->poll([&](const feed::Message& m) {
          at_sub[k].seqs.push_back(m.header.seq);
          for (uint32_t i = 0; i < m.header.length; ++i)
            if (m.payload[i] != payload_byte(m.header.seq, i)) {
              ++at_sub[k].bad_payloads;
              break;
            }
        });
      idle = n ? 0 : idle + 1;
    }
  }

  void publish(uint64_t messages, uint32_t payload) {
    std::vector<uint8_t> bytes(payload);
    for (uint64_t seq = 1; seq <= messages; ++seq) {
      for (uint32_t i = 0; i < payload; ++i) bytes[i] = payload_byte(seq, i);
      REQUIRE(exchange->publish(seq, bytes.data(), payload, 0) == Errc::ok);
      if (seq % 100 == 0 || seq == messages) pump();
    }
    handler->tracker().finish(messages);
  }
};

// The sequence numbers 1..n that `gaps` leaves out.
std::vector<uint64_t> complement(const std::vector<feed::Gap>& gaps, uint64_t n) {
  std::vector<uint64_t> out;
  size_t g = 0;
  for (uint64_t s = 1; s <= n; ++s) {
    while (g < gaps.size() && gaps[g].last < s) ++g;
    if (g < gaps.size() && gaps[g].first <= s) continue;
    out.push_back(s);
  }
  return out;
}

}  // namespace

TEST_CASE("the feed handler receives every message of a multicast stream in order without loss, "
          "and every subscriber receives its republished stream whole and in order",
          "[drv][ud][multicast][feed]") {
  const uint32_t payload = GENERATE(40u, 1000u);  // inline datagrams, and gathered ones
  INFO("payload " << payload);
  FeedRun run(2, 0, 1);
  run.publish(3000, payload);
  const feed::GapTracker& h = run.handler->tracker();
  CHECK(h.accepted() == 3000);
  CHECK(h.missing() == 0);
  CHECK(h.gaps().empty());
  CHECK(h.stale() == 0);
  std::vector<uint64_t> all(3000);
  for (uint64_t i = 0; i < 3000; ++i) all[i] = i + 1;
  for (const Received& r : run.at_sub) {
    CHECK(r.seqs == all);  // each once, in order
    CHECK(r.bad_payloads == 0);
  }
  for (const auto& s : run.subs) CHECK(s->errors() == 0);
}

TEST_CASE("under seeded loss the feed handler reports exactly the messages the fabric dropped "
          "as gaps, its subscribers see the same gaps, and the same seed gives the same gaps",
          "[drv][ud][multicast][feed]") {
  constexpr uint64_t kMessages = 4000;
  const auto run_with = [](uint64_t seed) {
    auto run = std::make_unique<FeedRun>(2, 0.03, seed);
    run->publish(kMessages, 64);
    return run;
  };
  auto a = run_with(11);
  const feed::GapTracker& h = a->handler->tracker();
  const uint64_t dropped =
      a->hws[0]->counters().packets_tx - a->hws[1]->counters().packets_rx;
  INFO("dropped " << dropped << ", gaps " << h.gaps().size());
  CHECK(dropped > 40);  // 3% of 4000, give or take
  CHECK(h.missing() == dropped);
  CHECK(h.accepted() + h.missing() == kMessages);
  uint64_t in_gaps = 0;
  for (size_t i = 0; i < h.gaps().size(); ++i) {
    CHECK(h.gaps()[i].first <= h.gaps()[i].last);
    if (i) CHECK(h.gaps()[i - 1].last + 1 < h.gaps()[i].first);  // apart, in order
    in_gaps += h.gaps()[i].count();
  }
  CHECK(in_gaps == h.missing());
  // Each subscriber got exactly the messages outside the gaps, once each, in order.
  const std::vector<uint64_t> expected = complement(h.gaps(), kMessages);
  CHECK(expected.size() == h.accepted());
  for (const Received& r : a->at_sub) {
    CHECK(r.seqs == expected);
    CHECK(r.bad_payloads == 0);
  }

  auto again = run_with(11);
  CHECK(again->handler->tracker().gaps() == h.gaps());
  auto other = run_with(12);
  CHECK(other->handler->tracker().gaps() != h.gaps());
}

TEST_CASE("sequence accounting: gaps as ranges, late and repeated messages stale, a lost tail "
          "found against the published count",
          "[feed]") {
  feed::GapTracker t;
  using V = feed::GapTracker::Verdict;
  CHECK(t.see(1) == V::in_order);
  CHECK(t.see(2) == V::in_order);
  CHECK(t.see(5) == V::after_gap);
  CHECK(t.see(4) == V::stale);  // late
  CHECK(t.see(5) == V::stale);  // repeated
  CHECK(t.see(6) == V::in_order);
  CHECK(t.see(9) == V::after_gap);
  t.finish(12);
  CHECK(t.gaps() == std::vector<feed::Gap>{{3, 4}, {7, 8}, {10, 12}});
  CHECK(t.accepted() == 5);
  CHECK(t.missing() == 7);
  CHECK(t.stale() == 2);
  CHECK(t.last() == 12);
}
