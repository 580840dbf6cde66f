// SPDX-License-Identifier: BSD-3-Clause
// The in-process wire under concurrency: several transmitting threads, a polling thread,
// endpoints coming and going. Meant to run under TSan as well as ASan.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "wire/wire.h"
#include "wire_test_util.h"

using namespace rnicdv;
using namespace rnicdv::sim;
using namespace rnicdv::sim::test;

namespace {

constexpr uint32_t kProducers = 4;
const Endpoint kB{v4(127, 0, 0, 3), 4791};
const Endpoint kC{v4(127, 0, 0, 4), 4791};

Endpoint producer_endpoint(uint32_t p) {
  return Endpoint{v4(127, 0, 1, uint8_t(10 + p)), 4791};
}

// Checks per-stream order and content as datagrams arrive, on the polling thread.
class CheckingSink final : public WireSink {
 public:
  void on_datagram(const Endpoint& src, const Endpoint&, const uint8_t* data, size_t len) override {
    ++total;
    if (data == nullptr || len < 20) {
      ++bad;
      return;
    }
    const uint32_t stream = get32(data + 12), index = get32(data + 16);
    if (stream >= kProducers) {
      ++bad;
      return;
    }
    if (src != producer_endpoint(stream) ||
        std::vector<uint8_t>(data, data + len) != tagged_datagram(stream, index, 32 + index % 64) ||
        (seen[stream] > 0 && index <= last[stream])) {
      ++bad;
    }
    last[stream] = index;
    ++seen[stream];
  }
  uint32_t last[kProducers] = {};
  uint64_t seen[kProducers] = {};
  uint64_t total = 0;
  uint64_t bad = 0;
};

class CountingSink final : public WireSink {
 public:
  void on_datagram(const Endpoint&, const Endpoint&, const uint8_t*, size_t) override {
    count.fetch_add(1, std::memory_order_relaxed);
  }
  std::atomic<uint64_t> count{0};
};

}  // namespace

TEST_CASE("Concurrent transmitters lose nothing unaccounted and keep per-sender order",
          "[inproc][stress]") {
  auto made = make_inproc_wire(WireConfig{});
  REQUIRE(made.is_ok());
  Wire& wire = **made;
  CheckingSink sink;
  REQUIRE(wire.attach(kB, &sink).is_ok());

  const uint32_t per_producer = 20'000;
  std::atomic<uint32_t> running{kProducers};
  std::vector<std::thread> producers;
  for (uint32_t p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      for (uint32_t i = 0; i < per_producer; ++i) {
        const auto d = tagged_datagram(p, i, 32 + i % 64);
        wire.transmit(producer_endpoint(p), kB, d.data(), d.size());
        if ((i & 63) == 0) std::this_thread::yield();  // let the poller keep up sometimes
      }
      running.fetch_sub(1);
    });
  }
  // The poller: this thread, as a device engine would.
  for (;;) {
    const bool done = running.load() == 0;
    const size_t n = wire.poll(kB, 256);
    if (done && n == 0) break;
    if (n == 0) std::this_thread::yield();
  }
  for (auto& t : producers) t.join();

  const WireCounters c = wire.counters();
  const uint64_t sent = uint64_t{kProducers} * per_producer;
  CHECK(c.frames_tx == sent);
  CHECK(sink.bad == 0);
  CHECK(c.frames_rx == sink.total);
  CHECK(c.frames_rx + c.dropped_queue_full == sent);
  CHECK(c.dropped_icrc == 0);
  CHECK(c.dropped_no_sink == 0);
  INFO("dropped on a full ring: " << c.dropped_queue_full);
  CHECK(c.frames_rx > 0);
}

TEST_CASE("Endpoints attach and detach safely while others transmit and poll", "[inproc][stress]") {
  auto made = make_inproc_wire(WireConfig{});
  REQUIRE(made.is_ok());
  Wire& wire = **made;
  CountingSink sink_b, sink_c;
  REQUIRE(wire.attach(kB, &sink_b).is_ok());

  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (uint32_t p = 0; p < 2; ++p) {
    threads.emplace_back([&, p] {
      uint32_t i = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        const auto d = tagged_datagram(p, i++);
        wire.transmit(producer_endpoint(p), (i & 1) ? kB : kC, d.data(), d.size());
      }
    });
  }
  threads.emplace_back([&] {  // polls both, racing the attach/detach of C
    while (!stop.load(std::memory_order_relaxed)) {
      wire.poll(kB, 64);
      wire.poll(kC, 64);
      (void)wire.next_delivery_ns(kC);
      (void)wire.counters();
    }
  });
  for (int round = 0; round < 300; ++round) {
    REQUIRE(wire.attach(kC, &sink_c).is_ok());
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    wire.detach(kC);
  }
  stop.store(true);
  for (auto& t : threads) t.join();
  while (wire.poll(kB, 1024) > 0) {
  }

  const WireCounters c = wire.counters();
  CHECK(c.frames_rx == sink_b.count.load() + sink_c.count.load());
  CHECK(c.frames_tx == c.frames_rx + c.dropped_no_sink + c.dropped_queue_full);
  CHECK(c.dropped_icrc == 0);
}

TEST_CASE("Faults from concurrent transmitters are all accounted for", "[inproc][stress]") {
  WireConfig config;
  config.faults.drop = 0.05;
  config.faults.duplicate = 0.05;
  config.faults.reorder = 0.05;
  config.faults.corrupt = 0.05;
  config.faults.delay = 0.05;
  config.faults.max_delay_ns = 20'000;
  auto made = make_inproc_wire(config);  // CLOCK_MONOTONIC
  REQUIRE(made.is_ok());
  Wire& wire = **made;
  CountingSink sink;
  REQUIRE(wire.attach(kB, &sink).is_ok());

  std::atomic<uint32_t> running{kProducers};
  std::vector<std::thread> producers;
  for (uint32_t p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      for (uint32_t i = 0; i < 5000; ++i) {
        const auto d = tagged_datagram(p, i);
        wire.transmit(producer_endpoint(p), kB, d.data(), d.size());
        if ((i & 31) == 0) std::this_thread::yield();
      }
      running.fetch_sub(1);
    });
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (;;) {
    const bool done = running.load() == 0;
    const size_t n = wire.poll(kB, 256);
    if (done && n == 0 && wire.next_delivery_ns(kB) == UINT64_MAX) break;
    if (std::chrono::steady_clock::now() > deadline) break;
    if (n == 0) std::this_thread::yield();
  }
  for (auto& t : producers) t.join();

  const WireCounters c = wire.counters();
  CHECK(c.frames_tx == kProducers * 5000);
  const uint64_t on_link = c.frames_tx - c.faults_dropped + c.faults_duplicated;
  CHECK(c.frames_rx + c.dropped_icrc + c.dropped_queue_full == on_link);
  CHECK(c.frames_rx == sink.count.load());
  CHECK(c.faults_delayed > 0);
  CHECK(c.faults_reordered > 0);
}
