// SPDX-License-Identifier: BSD-3-Clause
// Seeded fault injection on the in-process wire: rates, reproducibility, the ICRC catching
// corruption, and held-back frames released by the virtual clock.
#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <memory>
#include <vector>

#include "wire/wire.h"
#include "wire_test_util.h"

using namespace rnicdv;
using namespace rnicdv::sim;
using namespace rnicdv::sim::test;

namespace {

const Endpoint kA{v4(127, 0, 0, 2), 4791};
const Endpoint kB{v4(127, 0, 0, 3), 4791};

struct Run {
  std::vector<uint32_t> delivered;  // tag indices in delivery order
  WireCounters counters;
  size_t corrupt_deliveries = 0;  // delivered bytes that differ from what was sent
};

// Sends `frames` tagged datagrams A -> B, `step_ns` of virtual time apart, polling B as it
// goes, then lets virtual time run until nothing is held.
Run run(const FaultConfig& faults, uint64_t seed, uint32_t frames, uint64_t step_ns = 1000) {
  VirtualClock clock;
  WireConfig config;
  config.faults = faults;
  config.seed = seed;
  config.clock = &clock;
  auto made = make_inproc_wire(config);
  REQUIRE(made.is_ok());
  Wire& wire = **made;
  RecordingSink a, b;
  REQUIRE(wire.attach(kA, &a).is_ok());
  REQUIRE(wire.attach(kB, &b).is_ok());

  for (uint32_t i = 0; i < frames; ++i) {
    const auto d = tagged_datagram(1, i, 16 + i % 200);
    wire.transmit(kA, kB, d.data(), d.size());
    clock.advance(step_ns);
    if (i % 32 == 31) wire.poll(kB, 1024);
  }
  for (int guard = 0; guard < 10'000; ++guard) {
    wire.poll(kB, 1024);
    const uint64_t next = wire.next_delivery_ns(kB);
    if (next == UINT64_MAX) break;
    if (next > clock.now_ns()) clock.set(next);
  }
  Run r;
  for (const Received& got : b.take()) {
    const uint32_t index = tag_index(got.bytes);
    r.delivered.push_back(index);
    if (index >= frames || got.bytes != tagged_datagram(1, index, 16 + index % 200))
      ++r.corrupt_deliveries;
  }
  r.counters = wire.counters();
  return r;
}

void check_near(uint64_t observed, double expected) {
  INFO("observed " << observed << ", expected about " << expected);
  CHECK(static_cast<double>(observed) > expected * 0.7);
  CHECK(static_cast<double>(observed) < expected * 1.3);
}

}  // namespace

TEST_CASE("Fault rates land near the configured probabilities", "[faults]") {
  FaultConfig f;
  f.drop = 0.05;
  f.duplicate = 0.1;
  f.reorder = 0.15;
  f.corrupt = 0.08;
  f.delay = 0.12;
  f.max_delay_ns = 50'000;
  const uint32_t n = 20'000;
  const Run r = run(f, 42, n);
  const WireCounters& c = r.counters;
  CHECK(c.frames_tx == n);
  check_near(c.faults_dropped, n * f.drop);
  const double kept = n * (1 - f.drop);  // the other faults apply to frames not dropped
  check_near(c.faults_duplicated, kept * f.duplicate);
  check_near(c.faults_reordered, kept * f.reorder);
  check_near(c.faults_corrupted, kept * f.corrupt);
  check_near(c.faults_delayed, kept * f.delay);

  // Every frame is accounted for: delivered, or dropped by the fault or the ICRC check.
  const uint64_t on_link = c.frames_tx - c.faults_dropped + c.faults_duplicated;
  CHECK(c.frames_rx + c.dropped_icrc + c.dropped_queue_full + c.dropped_no_sink == on_link);
  CHECK(c.dropped_queue_full == 0);
  // Corrupted frames (both copies, if also duplicated) die at the ICRC check...
  CHECK(c.dropped_icrc >= c.faults_corrupted);
  CHECK(c.dropped_icrc <= 2 * c.faults_corrupted);
  // ... so nothing corrupted reaches the sink.
  CHECK(r.corrupt_deliveries == 0);
  CHECK(r.delivered.size() == c.frames_rx);
}

TEST_CASE("The same seed gives the same faults on the same frames", "[faults]") {
  FaultConfig f;
  f.drop = 0.1;
  f.duplicate = 0.1;
  f.reorder = 0.1;
  f.corrupt = 0.1;
  f.delay = 0.1;
  const Run first = run(f, 7, 3000);
  const Run second = run(f, 7, 3000);
  CHECK(first.delivered == second.delivered);
  CHECK(first.counters.faults_dropped == second.counters.faults_dropped);
  CHECK(first.counters.faults_duplicated == second.counters.faults_duplicated);
  CHECK(first.counters.faults_reordered == second.counters.faults_reordered);
  CHECK(first.counters.faults_corrupted == second.counters.faults_corrupted);
  CHECK(first.counters.faults_delayed == second.counters.faults_delayed);
  CHECK(first.counters.dropped_icrc == second.counters.dropped_icrc);

  const Run other = run(f, 8, 3000);
  CHECK(other.delivered != first.delivered);
}

TEST_CASE("Every corrupted frame is caught by the receiver's ICRC check", "[faults]") {
  FaultConfig f;
  f.corrupt = 1.0;
  const Run r = run(f, 3, 2000);
  CHECK(r.delivered.empty());
  CHECK(r.counters.faults_corrupted == 2000);
  CHECK(r.counters.dropped_icrc == 2000);
}

TEST_CASE("Dropped frames never arrive and duplicated ones arrive twice", "[faults]") {
  FaultConfig drop;
  drop.drop = 1.0;
  const Run dropped = run(drop, 1, 500);
  CHECK(dropped.delivered.empty());
  CHECK(dropped.counters.faults_dropped == 500);
  CHECK(dropped.counters.frames_rx == 0);

  FaultConfig dup;
  dup.duplicate = 1.0;
  const Run duplicated = run(dup, 1, 200);
  REQUIRE(duplicated.delivered.size() == 400);
  for (uint32_t i = 0; i < 200; ++i) {
    CHECK(duplicated.delivered[2 * i] == i);  // the copy follows the original
    CHECK(duplicated.delivered[2 * i + 1] == i);
  }
}

TEST_CASE("Reordered frames are overtaken by later ones and still all arrive", "[faults]") {
  FaultConfig f;
  f.reorder = 0.3;
  const uint32_t n = 2000;
  // 100 ns apart: a reordered frame (held 10-20 us) is overtaken by ~100-200 later frames.
  const Run r = run(f, 11, n, 100);
  REQUIRE(r.delivered.size() == n);
  std::vector<uint32_t> sorted = r.delivered;
  std::sort(sorted.begin(), sorted.end());
  for (uint32_t i = 0; i < n; ++i) REQUIRE(sorted[i] == i);
  size_t overtaken = 0;
  uint32_t highest = 0;
  for (uint32_t idx : r.delivered) {
    if (idx < highest) ++overtaken;
    highest = std::max(highest, idx);
  }
  check_near(r.counters.faults_reordered, n * 0.3);
  // Only a reordered frame can arrive after a later one; each is overtaken unless nothing
  // was sent during its hold (the last few frames).
  CHECK(overtaken <= r.counters.faults_reordered);
  CHECK(overtaken + 10 >= r.counters.faults_reordered);
}

TEST_CASE("A delayed frame is held until the virtual clock reaches its due time", "[faults]") {
  VirtualClock clock;
  WireConfig config;
  config.faults.delay = 1.0;
  config.faults.max_delay_ns = 100'000;
  config.clock = &clock;
  auto made = make_inproc_wire(config);
  REQUIRE(made.is_ok());
  Wire& wire = **made;
  RecordingSink a, b;
  REQUIRE(wire.attach(kA, &a).is_ok());
  REQUIRE(wire.attach(kB, &b).is_ok());

  const uint64_t t0 = clock.now_ns();
  const auto d = tagged_datagram(1, 1);
  wire.transmit(kA, kB, d.data(), d.size());
  CHECK(wire.counters().faults_delayed == 1);
  // Queued but not yet examined: due "now" as far as the poller knows.
  CHECK(wire.next_delivery_ns(kB) <= t0);
  CHECK(wire.poll(kB, 16) == 0);
  const uint64_t due = wire.next_delivery_ns(kB);
  CHECK(due > t0);
  CHECK(due <= t0 + 100'000);
  CHECK(wire.next_delivery_ns(kA) == UINT64_MAX);

  clock.set(due - 1);
  CHECK(wire.poll(kB, 16) == 0);
  CHECK(b.count() == 0);
  clock.set(due);
  CHECK(wire.poll(kB, 16) == 1);
  REQUIRE(b.count() == 1);
  CHECK(wire.next_delivery_ns(kB) == UINT64_MAX);
}

TEST_CASE("Held frames leave in due-time order, merged with frames that were not held",
          "[faults]") {
  VirtualClock clock;
  WireConfig config;
  config.faults.delay = 0.5;
  config.faults.max_delay_ns = 5'000;
  config.clock = &clock;
  auto made = make_inproc_wire(config);
  REQUIRE(made.is_ok());
  Wire& wire = **made;
  RecordingSink a, b;
  REQUIRE(wire.attach(kA, &a).is_ok());
  REQUIRE(wire.attach(kB, &b).is_ok());

  // 300 frames 1 us apart, never polled until the end: frame i is due at t0 + i us + its
  // delay (0 for undelayed frames), so any frame delivered before frame j must have been
  // sent no more than 5 us after j.
  for (uint32_t i = 0; i < 300; ++i) {
    const auto d = tagged_datagram(1, i);
    wire.transmit(kA, kB, d.data(), d.size());
    clock.advance(1000);
  }
  clock.advance(1'000'000);
  while (wire.poll(kB, 64) > 0) {
  }
  const auto got = b.take();
  REQUIRE(got.size() == 300);
  for (size_t k = 1; k < got.size(); ++k) {
    const uint32_t before = tag_index(got[k - 1].bytes), after = tag_index(got[k].bytes);
    CHECK(before <= after + 5);
  }
  CHECK(wire.counters().faults_delayed > 100);
}
