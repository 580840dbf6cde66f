// SPDX-License-Identifier: BSD-3-Clause
// Reliability details: PSNs wrapping at 2^24, retry exhaustion (RETRY_EXC_ERR then flush,
// never a hang), a timeout of 0 meaning no timer, max_rd_atomic and fences.
#include <catch2/catch.hpp>

#include <cstring>

#include "device_impl.h"
#include "sim_harness.h"

using namespace simtest;

TEST_CASE("PSNs wrap around 2^24 in both directions, with and without faults") {
  for (double drop : {0.0, 0.1}) {
    INFO("drop " << drop);
    FabricOptions fo;
    fo.faults.drop = drop;
    fo.faults.reorder = drop;
    fo.seed = 99;
    Pair p(fo);
    ConnectOptions oa, ob;
    oa.mtu = ob.mtu = hw::Mtu::mtu256;
    oa.sq_psn = 0xffffff - 20;
    ob.sq_psn = 0xffffff - 3;
    oa.timeout = ob.timeout = 8;
    p.connect(oa, ob);
    Buffer a = p.a.reg(16384);
    Buffer b = p.b.reg(16384);
    for (int i = 0; i < 6; ++i) {
      fill_pattern(a.data(), 16384, i);
      Sge sge{a.addr(), 16384, a.lkey()};  // 64 packets per message
      SendWr w = make_wr(WrOpcode::rdma_write, &sge, 1);
      w.remote_addr = b.addr();
      w.rkey = b.rkey();
      REQUIRE(p.a.post_and_ring(w) == Errc::ok);
      REQUIRE(p.wait_send(p.a).status == IBV_WC_SUCCESS);
      CHECK(std::memcmp(a.data(), b.data(), 16384) == 0);
      // And the other way, as a READ (responses consume the requester's PSNs).
      fill_pattern(a.data(), 16384, i + 50);
      Sge rs{b.addr(), 16384, b.lkey()};
      SendWr r = make_wr(WrOpcode::rdma_read, &rs, 1);
      r.remote_addr = a.addr();
      r.rkey = a.rkey();
      REQUIRE(p.b.post_and_ring(r) == Errc::ok);
      REQUIRE(p.wait_send(p.b).status == IBV_WC_SUCCESS);
      CHECK(std::memcmp(a.data(), b.data(), 16384) == 0);
    }
    CHECK(p.a.snapshot().next_psn < 1000);  // wrapped
    CHECK(p.b.snapshot().next_psn < 1000);
    CHECK(p.b.snapshot().expected_psn == p.a.snapshot().next_psn);
  }
}

TEST_CASE("retry exhaustion completes with RETRY_EXC_ERR and flushes; it never hangs") {
  FabricOptions fo;
  fo.faults.drop = 1.0;  // a dead link
  Pair p(fo);
  ConnectOptions o;
  o.timeout = 12;  // 16.8 ms
  o.retry_cnt = 3;
  p.connect(o, o);
  Buffer a = p.a.reg(64);
  Sge sge{a.addr(), 64, a.lkey()};
  SendWr w = make_wr(WrOpcode::rdma_write, &sge, 1, 0, 0);
  w.remote_addr = 0x1000;
  w.rkey = 0x100;
  REQUIRE(p.a.post(w) == Errc::ok);
  REQUIRE(p.a.post(w) == Errc::ok);
  p.a.ring();
  const uint64_t start = p.fabric->now_ns();
  Completion c = p.wait_send(p.a);
  CHECK(c.status == IBV_WC_RETRY_EXC_ERR);
  CHECK(p.wait_send(p.a).status == IBV_WC_WR_FLUSH_ERR);
  CHECK(p.a.qp->state() == hw::QpState::err);
  CHECK(p.a.counters().timeouts == 4);  // the first try and three retries timed out
  CHECK(p.a.snapshot().retransmits == 3);
  // Four local ACK timeouts of 4.096 us * 2^12 passed in virtual time.
  CHECK(p.fabric->now_ns() - start >= 4 * (4096ull << 12));
}

TEST_CASE("a timeout of 0 means no retransmit timer") {
  FabricOptions fo;
  fo.faults.drop = 1.0;
  Pair p(fo);
  ConnectOptions o;
  o.timeout = 0;
  p.connect(o, o);
  Buffer a = p.a.reg(64);
  Sge sge{a.addr(), 64, a.lkey()};
  REQUIRE(p.a.post_and_ring(make_wr(WrOpcode::send, &sge, 1)) == Errc::ok);
  p.settle();
  Completion c;
  CHECK_FALSE(p.a.poll_send(&c));
  CHECK(p.a.counters().timeouts == 0);
  CHECK(p.a.qp->state() == hw::QpState::rts);
}

namespace {

struct Tap {
  std::vector<uint8_t> opcodes;
};

void count_read_requests_in_first_pass(uint8_t max_rd_atomic, size_t expected) {
  Pair p;
  ConnectOptions o;
  o.max_rd_atomic = max_rd_atomic;
  p.connect(o, o);
  Buffer a = p.a.reg(16384);
  Buffer b = p.b.reg(16384);
  std::vector<uint8_t> sent;
  p.a.dev->impl().hca->set_tx_tap(
      [&](const hw::IpAddress&, const uint8_t* d, size_t) { sent.push_back(d[0]); });
  for (int i = 0; i < 6; ++i) {
    Sge sge{a.addr(i * 2048), 2048, a.lkey()};
    SendWr r = make_wr(WrOpcode::rdma_read, &sge, 1);
    r.remote_addr = b.addr(i * 2048);
    r.rkey = b.rkey();
    REQUIRE(p.a.post(r) == Errc::ok);
  }
  p.a.ring();
  p.a.dev->impl().hca->run_engine_pass();  // only the requester runs: no response yet
  CHECK(static_cast<size_t>(std::count(sent.begin(), sent.end(), 0x0c)) == expected);
  for (int i = 0; i < 6; ++i) CHECK(p.wait_send(p.a).status == IBV_WC_SUCCESS);
  p.a.dev->impl().hca->set_tx_tap({});
}

}  // namespace

TEST_CASE("no more than max_rd_atomic READ requests are outstanding") {
  count_read_requests_in_first_pass(1, 1);
  count_read_requests_in_first_pass(4, 4);
  count_read_requests_in_first_pass(16, 6);
}

TEST_CASE("a fenced WQE waits for the READ before it; an unfenced one does not") {
  for (bool fence : {false, true}) {
    INFO("fence " << fence);
    Pair p;
    p.connect();
    Buffer a = p.a.reg(8192);
    Buffer b = p.b.reg(8192, all_remote(), 0x3d);
    std::vector<uint8_t> sent;
    p.a.dev->impl().hca->set_tx_tap(
        [&](const hw::IpAddress&, const uint8_t* d, size_t) { sent.push_back(d[0]); });
    Sge rs{a.addr(), 4096, a.lkey()};
    SendWr r = make_wr(WrOpcode::rdma_read, &rs, 1);
    r.remote_addr = b.addr();
    r.rkey = b.rkey();
    REQUIRE(p.a.post(r) == Errc::ok);
    // The fenced WRITE sends what the READ brought: it must not start before.
    Sge ws{a.addr(), 4096, a.lkey()};
    SendWr w = make_wr(WrOpcode::rdma_write, &ws, 1, 0,
                       send_flags::signaled | (fence ? send_flags::fence : send_flags::none));
    w.remote_addr = b.addr(4096);
    w.rkey = b.rkey();
    REQUIRE(p.a.post(w) == Errc::ok);
    p.a.ring();
    p.a.dev->impl().hca->run_engine_pass();
    const bool write_went_early =
        std::find(sent.begin(), sent.end(), 0x06) != sent.end();  // WRITE_FIRST
    CHECK(write_went_early == !fence);
    CHECK(p.wait_send(p.a).status == IBV_WC_SUCCESS);
    CHECK(p.wait_send(p.a).status == IBV_WC_SUCCESS);
    if (fence) CHECK(b.mem[4096] == 0x3d);  // the WRITE carried the data the READ fetched
    p.a.dev->impl().hca->set_tx_tap({});
  }
}

TEST_CASE("a paused device's overdue timer does not stop virtual time for the others") {
  FabricOptions fo;
  fo.faults.drop = 1.0;  // every frame lost: only timers move these QPs forward
  Pair p(fo);
  Host c(p.fabric, Pair::default_host());
  Host d(p.fabric, Pair::default_host());
  ConnectOptions o;
  o.timeout = 10;  // ~4 ms
  o.retry_cnt = 0;
  p.connect(o, o);
  simtest::connect(c, d, o, o);
  Buffer ba = p.a.reg(64);
  Buffer bc = c.reg(64);
  Sge sa{ba.addr(), 64, ba.lkey()};
  Sge sc{bc.addr(), 64, bc.lkey()};
  auto write = [](Sge* sge) {
    SendWr w = make_wr(WrOpcode::rdma_write, sge, 1);
    w.remote_addr = 0x1000;
    w.rkey = 0x100;
    return w;
  };
  // a sends and arms its retransmit timer; then it is paused with the timer pending.
  REQUIRE(p.a.post_and_ring(write(&sa)) == Errc::ok);
  REQUIRE(p.run_until([&] { return p.a.snapshot().wqes_executed > 0; }));
  CHECK(p.a.counters().timeouts == 0);
  p.a.dev->pause();
  p.fabric->advance_time(1'000'000);
  // c's timer is due after a's. Reaching it means jumping past a's, which a cannot act on.
  REQUIRE(c.post_and_ring(write(&sc)) == Errc::ok);
  Completion comp{};
  REQUIRE(p.run_until([&] { return c.poll_send(&comp); }, 1'000'000'000ull));
  CHECK(comp.status == IBV_WC_RETRY_EXC_ERR);
  CHECK_FALSE(p.a.poll_send(&comp));  // paused: its timer waits for resume
  p.a.dev->resume();
  REQUIRE(p.run_until([&] { return p.a.poll_send(&comp); }, 1'000'000'000ull));
  CHECK(comp.status == IBV_WC_RETRY_EXC_ERR);
}
