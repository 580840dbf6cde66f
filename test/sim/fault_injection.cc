// SPDX-License-Identifier: BSD-3-Clause
// RC over a faulty wire: at 1%, 10% and 30% (drop at that rate, plus duplicates, reordering,
// corruption and delays), every opcode delivers each message exactly once and intact
// (payload checksums; fetch-and-add counts), reproducibly from the fabric seed.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>

#include "sim_harness.h"

using namespace simtest;

namespace {

constexpr int kMessages = 30;
constexpr uint32_t kMaxLen = 9000;

sim::FaultConfig faults(double rate) {
  sim::FaultConfig f;
  f.drop = rate;
  f.duplicate = rate / 2;
  f.reorder = rate / 2;
  f.corrupt = rate / 4;
  f.delay = rate / 4;
  f.max_delay_ns = 200'000;
  return f;
}

struct FaultyPair {
  Pair p;
  Buffer a, b;
  std::mt19937 rng;

  FaultyPair(double rate, uint64_t seed)
      : p([&] {
          FabricOptions fo;
          fo.faults = faults(rate);
          fo.seed = seed;
          return fo;
        }()),
        rng(static_cast<uint32_t>(seed)) {
    ConnectOptions o;
    o.mtu = hw::Mtu::mtu1024;
    o.timeout = 8;  // ~1 ms, above the wire's delays
    o.retry_cnt = 7;
    o.rnr_retry = 7;
    p.connect(o, o);
    a = p.a.reg(kMessages * kMaxLen);
    b = p.b.reg(kMessages * kMaxLen);
  }
  uint32_t random_len() { return rng() % kMaxLen; }
};

// FNV-1a: a payload checksum independent of the data's position.
uint64_t crc(const uint8_t* p, uint32_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint32_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

void check_counters_sane(FaultyPair& f, double rate) {
  if (rate >= 0.1) {
    CHECK(f.p.a.counters().retransmits + f.p.b.counters().retransmits > 0);
  }
}

void run_sends(double rate, bool imm, uint64_t seed) {
  FaultyPair f(rate, seed);
  std::vector<uint32_t> lens;
  std::vector<uint64_t> crcs;
  for (int i = 0; i < kMessages; ++i) {
    const uint32_t len = f.random_len();
    lens.push_back(len);
    fill_pattern(f.a.data() + i * kMaxLen, len, static_cast<uint32_t>(seed + i));
    crcs.push_back(crc(f.a.data() + i * kMaxLen, len));
    REQUIRE(f.p.b.post_recv(f.b, i * kMaxLen, kMaxLen) == Errc::ok);
  }
  for (int i = 0; i < kMessages; ++i) {
    Sge sge{f.a.addr(i * kMaxLen), lens[i], f.a.lkey()};
    SendWr wr = make_wr(imm ? WrOpcode::send_imm : WrOpcode::send, &sge, lens[i] ? 1 : 0);
    wr.imm_data = static_cast<uint32_t>(i);
    REQUIRE(f.p.a.post(wr) == Errc::ok);
    if (i % 7 == 6 || i + 1 == kMessages) f.p.a.ring();
  }
  for (int i = 0; i < kMessages; ++i) {
    Completion r = f.p.wait_recv(f.p.b);
    REQUIRE(r.status == IBV_WC_SUCCESS);
    CHECK(r.byte_len == lens[i]);  // in order: receive i holds message i
    if (imm) CHECK(r.imm_data == static_cast<uint32_t>(i));
    CHECK(crc(f.b.data() + i * kMaxLen, lens[i]) == crcs[i]);
    Completion s = f.p.wait_send(f.p.a);
    REQUIRE(s.status == IBV_WC_SUCCESS);
  }
  f.p.settle();
  Completion extra;
  CHECK_FALSE(f.p.b.rcq->poll(&extra));  // exactly once: no second delivery
  CHECK_FALSE(f.p.a.poll_send(&extra));
  check_counters_sane(f, rate);
}

void run_writes(double rate, bool imm, uint64_t seed) {
  FaultyPair f(rate, seed);
  std::vector<uint32_t> lens;
  std::vector<uint64_t> crcs;
  for (int i = 0; i < kMessages; ++i) {
    const uint32_t len = f.random_len();
    lens.push_back(len);
    fill_pattern(f.a.data() + i * kMaxLen, len, static_cast<uint32_t>(seed * 3 + i));
    crcs.push_back(crc(f.a.data() + i * kMaxLen, len));
    if (imm) REQUIRE(f.p.b.post_recv(f.b, 0, 0) == Errc::ok);
  }
  for (int i = 0; i < kMessages; ++i) {
    Sge sge{f.a.addr(i * kMaxLen), lens[i], f.a.lkey()};
    SendWr wr =
        make_wr(imm ? WrOpcode::rdma_write_imm : WrOpcode::rdma_write, &sge, lens[i] ? 1 : 0);
    wr.remote_addr = f.b.addr(i * kMaxLen);
    wr.rkey = f.b.rkey();
    wr.imm_data = static_cast<uint32_t>(1000 + i);
    REQUIRE(f.p.a.post(wr) == Errc::ok);
    if (i % 5 == 4 || i + 1 == kMessages) f.p.a.ring();
  }
  for (int i = 0; i < kMessages; ++i) {
    REQUIRE(f.p.wait_send(f.p.a).status == IBV_WC_SUCCESS);
    if (imm) {
      Completion r = f.p.wait_recv(f.p.b);
      REQUIRE(r.status == IBV_WC_SUCCESS);
      CHECK(r.imm_data == static_cast<uint32_t>(1000 + i));
      CHECK(r.byte_len == lens[i]);
    }
  }
  for (int i = 0; i < kMessages; ++i) CHECK(crc(f.b.data() + i * kMaxLen, lens[i]) == crcs[i]);
  f.p.settle();
  Completion extra;
  CHECK_FALSE(f.p.b.rcq->poll(&extra));
  check_counters_sane(f, rate);
}

void run_reads(double rate, uint64_t seed) {
  FaultyPair f(rate, seed);
  std::vector<uint32_t> lens;
  fill_pattern(f.b.data(), f.b.size(), static_cast<uint32_t>(seed));
  std::memset(f.a.data(), 0, f.a.size());
  for (int i = 0; i < kMessages; ++i) {
    lens.push_back(f.random_len());
    Sge sge{f.a.addr(i * kMaxLen), lens[i], f.a.lkey()};
    SendWr wr = make_wr(WrOpcode::rdma_read, &sge, lens[i] ? 1 : 0);
    wr.remote_addr = f.b.addr(i * kMaxLen);
    wr.rkey = f.b.rkey();
    REQUIRE(f.p.a.post(wr) == Errc::ok);
    if (i % 4 == 3 || i + 1 == kMessages) f.p.a.ring();
  }
  for (int i = 0; i < kMessages; ++i) {
    Completion c = f.p.wait_send(f.p.a);
    REQUIRE(c.status == IBV_WC_SUCCESS);
    CHECK(c.byte_len == lens[i]);
  }
  for (int i = 0; i < kMessages; ++i)
    CHECK(crc(f.a.data() + i * kMaxLen, lens[i]) == crc(f.b.data() + i * kMaxLen, lens[i]));
  check_counters_sane(f, rate);
}

void run_atomics(double rate, uint64_t seed) {
  FaultyPair f(rate, seed);
  auto* counter = reinterpret_cast<uint64_t*>(f.b.data());
  auto* word = reinterpret_cast<uint64_t*>(f.b.data() + 8);
  *counter = 0;
  *word = 0;
  for (int i = 0; i < kMessages; ++i) {
    Sge sge{f.a.addr(16 * i), 8, f.a.lkey()};
    SendWr wr = make_wr((i & 1) ? WrOpcode::atomic_cmp_swap : WrOpcode::atomic_fetch_add, &sge, 1);
    wr.rkey = f.b.rkey();
    if (i & 1) {
      // Compare-and-swap chain: only succeeds if every earlier swap happened exactly once.
      wr.remote_addr = f.b.addr(8);
      wr.compare_add = static_cast<uint64_t>(i / 2);
      wr.swap = static_cast<uint64_t>(i / 2 + 1);
    } else {
      wr.remote_addr = f.b.addr(0);
      wr.compare_add = 1;
    }
    REQUIRE(f.p.a.post(wr) == Errc::ok);
    if (i % 3 == 2 || i + 1 == kMessages) f.p.a.ring();
  }
  for (int i = 0; i < kMessages; ++i) REQUIRE(f.p.wait_send(f.p.a).status == IBV_WC_SUCCESS);
  CHECK(*counter == kMessages / 2);  // each add applied exactly once
  CHECK(*word == kMessages / 2);
  for (int i = 0; i < kMessages; ++i) {
    const uint64_t orig = *reinterpret_cast<uint64_t*>(f.a.data() + 16 * i);
    CHECK(orig == static_cast<uint64_t>(i / 2));  // the value before this operation
  }
  check_counters_sane(f, rate);
}

}  // namespace

TEST_CASE("SEND and SEND_IMM arrive exactly once and intact at 1%, 10% and 30% faults") {
  for (double rate : {0.01, 0.10, 0.30}) {
    for (bool imm : {false, true}) {
      INFO("rate " << rate << " imm " << imm);
      run_sends(rate, imm, 11 + static_cast<uint64_t>(rate * 100) + imm);
    }
  }
}

TEST_CASE("WRITE and WRITE_IMM arrive exactly once and intact at 1%, 10% and 30% faults") {
  for (double rate : {0.01, 0.10, 0.30}) {
    for (bool imm : {false, true}) {
      INFO("rate " << rate << " imm " << imm);
      run_writes(rate, imm, 23 + static_cast<uint64_t>(rate * 100) + imm);
    }
  }
}

TEST_CASE("READ returns intact data at 1%, 10% and 30% faults") {
  for (double rate : {0.01, 0.10, 0.30}) {
    INFO("rate " << rate);
    run_reads(rate, 37 + static_cast<uint64_t>(rate * 100));
  }
}

TEST_CASE("atomics apply exactly once at 1%, 10% and 30% faults") {
  for (double rate : {0.01, 0.10, 0.30}) {
    INFO("rate " << rate);
    run_atomics(rate, 41 + static_cast<uint64_t>(rate * 100));
  }
}

TEST_CASE("the same seed gives the same run") {
  auto trace = [](uint64_t seed) {
    FaultyPair f(0.2, seed);
    for (int i = 0; i < 10; ++i) {
      Sge sge{f.a.addr(0), 5000, f.a.lkey()};
      SendWr wr = make_wr(WrOpcode::rdma_write, &sge, 1);
      wr.remote_addr = f.b.addr(0);
      wr.rkey = f.b.rkey();
      REQUIRE(f.p.a.post_and_ring(wr) == Errc::ok);
      REQUIRE(f.p.wait_send(f.p.a).status == IBV_WC_SUCCESS);
    }
    const sim::DeviceCounters c = f.p.a.counters();
    return std::vector<uint64_t>{c.packets_tx, c.packets_rx, c.retransmits, c.timeouts,
                                 f.p.fabric->now_ns()};
  };
  CHECK(trace(5) == trace(5));
}
