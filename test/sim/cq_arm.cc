// SPDX-License-Identifier: BSD-3-Clause
// Completion-event arming: CQs armed exactly as rdma-core's libmlx5 arms them (mlx5_arm_cq:
// the arm word in dbrec[MLX5_CQ_ARM_DB], then a big-endian 8-byte store of word << 32 | CQN
// to the UAR page's CQ doorbell at 0x20), and the events the device raises for them through
// set_cq_event_handler.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "handles.h"
#include "sim_harness.h"

using namespace simtest;

namespace {

// libmlx5's index of the arm word in the CQ doorbell record (providers/mlx5/mlx5.h
// MLX5_CQ_ARM_DB); mlx5dv.h does not export it.
constexpr unsigned kMlx5CqArmDb = 1;

uint32_t arm_word(uint32_t sn, bool solicited, uint32_t ci) {
  return (sn & 3) << 28 | (solicited ? MLX5_CQ_DB_REQ_NOT_SOL : MLX5_CQ_DB_REQ_NOT) |
         (ci & 0xffffff);
}

// mlx5_arm_cq, step by step, with the consumer index `cq` has published.
void arm_like_libmlx5(TestCq& cq, uint32_t sn, bool solicited) {
  const mlx5dv_cq& dv = cq.cq->view().dv;
  const uint32_t word = arm_word(sn, solicited, cq.ci);
  __atomic_store_n(&dv.dbrec[kMlx5CqArmDb], htobe32(word), __ATOMIC_RELAXED);
  __atomic_thread_fence(__ATOMIC_RELEASE);  // mmio_wc_start
  auto* reg = reinterpret_cast<uint64_t*>(static_cast<uint8_t*>(dv.cq_uar) + MLX5_CQ_DOORBELL);
  __atomic_store_n(reg, htobe64(uint64_t{word} << 32 | dv.cqn), __ATOMIC_RELAXED);
}

uint64_t cq_register(const TestCq& cq) {
  const mlx5dv_cq& dv = cq.cq->view().dv;
  return __atomic_load_n(
      reinterpret_cast<const uint64_t*>(static_cast<uint8_t*>(dv.cq_uar) + MLX5_CQ_DOORBELL),
      __ATOMIC_RELAXED);
}

// A connected pair on a deterministic fabric, with helpers that put one CQE at a time into
// b's receive CQ (or b's send CQ).
struct Fixture {
  Pair p;
  Buffer abuf, bbuf;

  Fixture() {
    p.connect();
    abuf = p.a.reg(4096);
    bbuf = p.b.reg(4096);
  }

  void watch(TestCq& cq, int* count) {
    must_ok(sim::set_cq_event_handler(*cq.cq, [count] { ++*count; }));
  }

  // A SEND from a to b; runs until everything (b's receive CQE, a's send CQE) is done.
  void send_to_b(bool solicited) {
    REQUIRE(p.b.post_recv(bbuf, 0, 64) == Errc::ok);
    Sge sge{abuf.addr(), 32, abuf.lkey()};
    const SendFlags flags = send_flags::signaled | (solicited ? send_flags::solicited : send_flags::none);
    REQUIRE(p.a.post_and_ring(make_wr(WrOpcode::send, &sge, 1, 1, flags)) == Errc::ok);
    p.settle();
    Completion c{};
    REQUIRE(p.a.poll_send(&c));
    REQUIRE(c.status == IBV_WC_SUCCESS);
  }

  // A SEND from b to a: one CQE in b's send CQ.
  void send_from_b() {
    REQUIRE(p.a.post_recv(abuf, 0, 64) == Errc::ok);
    Sge sge{bbuf.addr(), 32, bbuf.lkey()};
    REQUIRE(p.b.post_and_ring(make_wr(WrOpcode::send, &sge, 1, 2)) == Errc::ok);
    p.settle();
    Completion c{};
    REQUIRE(p.a.rcq->poll(&c));
  }

  // Polls every CQE in `cq`; returns how many there were.
  int drain(TestCq& cq) {
    int n = 0;
    Completion c{};
    while (cq.poll(&c)) ++n;
    return n;
  }
};

}  // namespace

TEST_CASE("an armed CQ raises one event for a CQE written after the arm (register write)") {
  Fixture f;
  int events = 0;
  SECTION("armed once the handler is set") {
    f.watch(*f.p.b.rcq, &events);
    arm_like_libmlx5(*f.p.b.rcq, 0, false);
  }
  SECTION("armed before the handler is set: only the register still tells") {
    // No CQ of the device has a handler yet, so nothing reads the register; the record
    // keeps the word 0, which the device then takes as the CQ's initial state.
    arm_like_libmlx5(*f.p.b.rcq, 0, false);
    f.p.settle();
    f.watch(*f.p.b.rcq, &events);
  }
  REQUIRE(cq_register(*f.p.b.rcq) != 0);
  f.p.settle();
  CHECK(cq_register(*f.p.b.rcq) == 0);  // consumed
  CHECK(events == 0);                   // armed, but no CQE yet
  f.send_to_b(false);
  CHECK(events == 1);
  CHECK(f.p.b.counters().cq_arms == 1);
  CHECK(f.p.b.counters().cq_events == 1);
  CHECK(f.drain(*f.p.b.rcq) == 1);
}

TEST_CASE("an arm raises the event at once when CQEs already sit beyond the armed index") {
  Fixture f;
  int events = 0;
  f.watch(*f.p.b.rcq, &events);
  f.send_to_b(false);
  f.send_to_b(false);
  REQUIRE(events == 0);
  // Poll one of the two: the other is still at or beyond the consumer index.
  Completion c{};
  REQUIRE(f.p.b.rcq->poll(&c));
  arm_like_libmlx5(*f.p.b.rcq, 0, false);
  f.p.fabric->step();
  CHECK(events == 1);
  // Polled up to the producer index, an arm finds nothing and waits.
  REQUIRE(f.drain(*f.p.b.rcq) == 1);
  arm_like_libmlx5(*f.p.b.rcq, 1, false);
  f.p.settle();
  CHECK(events == 1);
  f.send_to_b(false);
  CHECK(events == 2);
}

TEST_CASE("a CQ that was not armed raises no event") {
  Fixture f;
  int events = 0;
  f.watch(*f.p.b.rcq, &events);
  f.send_to_b(false);
  f.send_to_b(true);
  CHECK(f.drain(*f.p.b.rcq) == 2);
  CHECK(events == 0);
  CHECK(f.p.b.counters().cq_events == 0);
}

TEST_CASE("an armed CQ raises its event once, not again until it is re-armed") {
  Fixture f;
  int events = 0;
  f.watch(*f.p.b.rcq, &events);
  arm_like_libmlx5(*f.p.b.rcq, 0, false);
  f.send_to_b(false);
  REQUIRE(events == 1);
  f.send_to_b(false);
  f.send_to_b(true);
  CHECK(events == 1);
  CHECK(f.p.b.counters().cq_events == 1);
}

TEST_CASE("re-arming with the next sequence number raises the next event") {
  Fixture f;
  int events = 0;
  f.watch(*f.p.b.rcq, &events);
  for (uint32_t sn = 0; sn < 6; ++sn) {  // wraps the 2-bit sequence number
    REQUIRE(f.drain(*f.p.b.rcq) == (sn == 0 ? 0 : 1));
    arm_like_libmlx5(*f.p.b.rcq, sn, false);
    f.p.settle();
    REQUIRE(events == static_cast<int>(sn));
    f.send_to_b(false);
    REQUIRE(events == static_cast<int>(sn + 1));
  }
}

TEST_CASE("an arm repeating the sequence number of the arm that fired is ignored") {
  Fixture f;
  int events = 0;
  f.watch(*f.p.b.rcq, &events);
  arm_like_libmlx5(*f.p.b.rcq, 0, false);
  f.send_to_b(false);
  REQUIRE(events == 1);
  REQUIRE(f.drain(*f.p.b.rcq) == 1);
  // The consumer has not taken the event yet, so its sequence number is still 0.
  arm_like_libmlx5(*f.p.b.rcq, 0, false);
  f.send_to_b(false);
  CHECK(events == 1);
  // Once it takes the event it arms with sn 1, and the CQE waiting there fires at once.
  arm_like_libmlx5(*f.p.b.rcq, 1, false);
  f.p.fabric->step();
  CHECK(events == 2);
}

TEST_CASE("a solicited arm ignores unsolicited receives and fires on a solicited one") {
  Fixture f;
  int events = 0;
  f.watch(*f.p.b.rcq, &events);
  arm_like_libmlx5(*f.p.b.rcq, 0, true);
  f.send_to_b(false);
  f.send_to_b(false);
  CHECK(events == 0);
  // Re-arming over the unsolicited CQEs still waiting does not fire either.
  arm_like_libmlx5(*f.p.b.rcq, 0, true);
  f.p.settle();
  CHECK(events == 0);
  f.send_to_b(true);
  CHECK(events == 1);
  wqe::CqeFields fields;
  Completion c{};
  for (int i = 0; i < 2; ++i) {
    REQUIRE(f.p.b.rcq->poll(&c, &fields));
    CHECK_FALSE(fields.solicited);
  }
  REQUIRE(f.p.b.rcq->poll(&c, &fields));
  CHECK(fields.solicited);
}

TEST_CASE("a solicited arm fires on an error CQE") {
  Fixture f;
  int events = 0;
  f.watch(*f.p.b.rcq, &events);
  arm_like_libmlx5(*f.p.b.rcq, 0, true);
  f.p.settle();
  // A receive flushed by the move to ERR completes with an error.
  REQUIRE(f.p.b.post_recv(f.bbuf, 0, 64) == Errc::ok);
  to_state(f.p.b, hw::QpState::err);
  f.p.settle();
  CHECK(events == 1);
  Completion c{};
  REQUIRE(f.p.b.rcq->poll(&c));
  CHECK(c.status == IBV_WC_WR_FLUSH_ERR);
}

TEST_CASE("a solicited arm fires at once only for a solicited or error CQE already in the ring") {
  Fixture f;
  int events = 0;
  f.watch(*f.p.b.rcq, &events);
  f.send_to_b(false);

  SECTION("an unsolicited receive waiting") {
    f.send_to_b(false);
    arm_like_libmlx5(*f.p.b.rcq, 0, true);
    f.p.settle();
    CHECK(events == 0);
  }
  SECTION("a solicited receive waiting") {
    f.send_to_b(true);
    arm_like_libmlx5(*f.p.b.rcq, 0, true);
    f.p.fabric->step();
    CHECK(events == 1);
  }
  SECTION("an error CQE waiting") {
    REQUIRE(f.p.b.post_recv(f.bbuf, 0, 64) == Errc::ok);
    to_state(f.p.b, hw::QpState::err);
    f.p.settle();
    REQUIRE(events == 0);
    arm_like_libmlx5(*f.p.b.rcq, 0, true);
    f.p.fabric->step();
    CHECK(events == 1);
  }
}

TEST_CASE("an overrun CQ raises no completion event, even when armed over its CQEs") {
  HostOptions small = Pair::default_host();
  small.cqe = 4;
  Pair p(FabricOptions{}, small, Pair::default_host());
  p.connect();
  Buffer a = p.a.reg(64), b = p.b.reg(64);
  int events = 0;
  must_ok(sim::set_cq_event_handler(*p.a.scq->cq, [&events] { ++events; }));
  REQUIRE(p.a.scq->cq->view().dv.cqe_cnt == 4);
  Sge sge{a.addr(), 8, a.lkey()};
  for (int i = 0; i < 6; ++i) {
    SendWr w = make_wr(WrOpcode::rdma_write, &sge, 1);
    w.remote_addr = b.addr();
    w.rkey = b.rkey();
    REQUIRE(p.a.post(w) == Errc::ok);
  }
  p.a.ring();
  p.settle();
  REQUIRE(p.a.counters().cq_overflows == 1);
  // Four unpolled CQEs sit beyond ci 0: an arm of a healthy CQ would fire at once.
  arm_like_libmlx5(*p.a.scq, 0, false);
  p.settle();
  CHECK(events == 0);
  CHECK(p.a.counters().cq_arms == 0);
}

TEST_CASE("two CQs armed through the same page register before the device looks both fire") {
  Fixture f;
  int send_events = 0, recv_events = 0;
  TestCq& scq = *f.p.b.scq;
  TestCq& rcq = *f.p.b.rcq;
  REQUIRE(scq.cq->view().dv.cq_uar == rcq.cq->view().dv.cq_uar);
  f.watch(scq, &send_events);
  f.watch(rcq, &recv_events);

  SECTION("first arms, whose words are 0 (perftest arms both CQs so at start)") {
  }
  SECTION("later arms, after a CQE polled on each") {
    f.send_to_b(false);
    f.send_from_b();
    REQUIRE(f.drain(rcq) == 1);
    REQUIRE(f.drain(scq) == 1);
    f.p.settle();
  }
  arm_like_libmlx5(scq, 0, false);
  arm_like_libmlx5(rcq, 0, false);  // overwrites the send CQ's register write
  REQUIRE((be64toh(cq_register(rcq)) & 0xffffff) == rcq.cq->view().dv.cqn);
  const uint64_t arms_before = f.p.b.counters().cq_arms;
  f.p.fabric->step();  // one engine pass of every device
  CHECK(f.p.b.counters().cq_arms - arms_before == 2);
  f.send_to_b(false);
  f.send_from_b();
  CHECK(recv_events == 1);
  CHECK(send_events == 1);
}

TEST_CASE("an arm written to a UAR page given to attach_uar_page is seen") {
  auto fabric = make_fabric();
  auto dev_a = must(fabric->add_device());
  auto dev_b = must(fabric->add_device());
  // b's receive CQ in memory b's device did not allocate, with its doorbell on such a page.
  void* uar = std::aligned_alloc(4096, 4096);
  void* ring = std::aligned_alloc(4096, 64 * 64);
  void* dbrec = std::aligned_alloc(64, 64);
  std::memset(uar, 0, 4096);
  std::memset(ring, 0, 64 * 64);
  std::memset(dbrec, 0, 64);
  for (uint32_t i = 0; i < 64; ++i) static_cast<uint8_t*>(ring)[i * 64 + 63] = 0xF0;
  must_ok(sim::attach_uar_page(*dev_b, uar, uar));
  {
    Host a, b;
    a.init_on(dev_a, Pair::default_host());
    b.dev = dev_b;
    b.pd = must(dev_b->alloc_pd());
    b.scq->cq = must(dev_b->create_cq(64));
    sim::ExternalCqMemory mem;
    mem.buf = static_cast<uint8_t*>(ring);
    mem.cqe_cnt = 64;
    mem.cqe_size = 64;
    mem.dbrec = static_cast<uint32_t*>(dbrec);
    mem.cq_uar = static_cast<uint8_t*>(uar);
    b.rcq->cq = must(sim::create_cq_external(*dev_b, mem));
    b.qp = must(dev_b->create_qp(*b.pd, *b.scq->cq, *b.rcq->cq, Pair::default_host().caps));
    connect(a, b);
    Buffer abuf = a.reg(4096), bbuf = b.reg(4096);

    int events = 0;
    must_ok(sim::set_cq_event_handler(*b.rcq->cq, [&events] { ++events; }));
    arm_like_libmlx5(*b.rcq, 0, false);  // word 0: seen through the register only
    REQUIRE(b.post_recv(bbuf, 0, 64) == Errc::ok);
    Sge sge{abuf.addr(), 32, abuf.lkey()};
    REQUIRE(a.post_and_ring(make_wr(WrOpcode::send, &sge, 1)) == Errc::ok);
    REQUIRE(fabric->run_until([&] { return events == 1; }));
    CHECK(static_cast<volatile uint64_t*>(uar)[MLX5_CQ_DOORBELL / 8] == 0);
    Completion c{};
    CHECK(b.rcq->poll(&c));
    sim::detach_uar_page(*dev_b, uar);
  }
  std::free(dbrec);
  std::free(ring);
  std::free(uar);
}

TEST_CASE("a destroyed CQ's handler is never called") {
  Fixture f;
  int events = 0;
  f.watch(*f.p.b.rcq, &events);

  SECTION("armed, then destroyed before a CQE arrives") {
    arm_like_libmlx5(*f.p.b.rcq, 0, false);
    f.p.settle();
    f.p.b.rcq->cq.reset();  // the QP still completes into it
    REQUIRE(f.p.b.post_recv(f.bbuf, 0, 64) == Errc::ok);
    Sge sge{f.abuf.addr(), 32, f.abuf.lkey()};
    REQUIRE(f.p.a.post_and_ring(make_wr(WrOpcode::send, &sge, 1)) == Errc::ok);
    f.p.settle();
    CHECK(f.p.b.counters().cqes_written >= 1);
    CHECK(events == 0);
  }
  SECTION("event raised, then the CQ destroyed before it is delivered") {
    arm_like_libmlx5(*f.p.b.rcq, 0, false);
    f.p.settle();
    REQUIRE(f.p.b.post_recv(f.bbuf, 0, 64) == Errc::ok);
    to_state(f.p.b, hw::QpState::err);  // the flush CQE raises the event outside a pass
    REQUIRE(f.p.b.counters().cq_events == 1);
    f.p.b.rcq->cq.reset();
    f.p.settle();
    CHECK(events == 0);
  }
  SECTION("handler removed, then a CQE arrives") {
    must_ok(sim::set_cq_event_handler(*f.p.b.rcq->cq, {}));
    arm_like_libmlx5(*f.p.b.rcq, 0, false);
    f.send_to_b(false);
    CHECK(events == 0);
  }
}

TEST_CASE("a threaded device delivers an arm's event from its own thread") {
  // Declared before the devices: their threads may still run the handler until it is removed.
  std::atomic<int> events{0};
  std::atomic<bool> on_caller{false};
  FabricOptions fo;
  fo.mode = sim::ExecMode::threaded;
  Pair p(fo);
  p.connect();
  Buffer abuf = p.a.reg(4096), bbuf = p.b.reg(4096);
  const auto caller = std::this_thread::get_id();
  must_ok(sim::set_cq_event_handler(*p.b.rcq->cq, [&] {
    if (std::this_thread::get_id() == caller) on_caller = true;
    ++events;
  }));
  arm_like_libmlx5(*p.b.rcq, 0, false);
  REQUIRE(p.b.post_recv(bbuf, 0, 64) == Errc::ok);
  Sge sge{abuf.addr(), 32, abuf.lkey()};
  REQUIRE(p.a.post_and_ring(make_wr(WrOpcode::send, &sge, 1)) == Errc::ok);
  // No progress calls here: only the device threads run the engines.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (events.load() == 0 && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(events.load() == 1);
  CHECK_FALSE(on_caller.load());
  must_ok(sim::set_cq_event_handler(*p.b.rcq->cq, {}));
}
