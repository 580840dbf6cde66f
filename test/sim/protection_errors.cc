// SPDX-License-Identifier: BSD-3-Clause
// Protection (IBA 10.6): every remote access is checked against the rkey, the region's bounds
// and rights, and the PD; every local one against the lkey. A violation gives the NAK and
// error CQE of IBA 9.7.5.2.4 / mlx5, moves the QPs to ERR, and leaves target memory exactly
// as it was (checked with canaries around and inside the region).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>

#include "sim_harness.h"

using namespace simtest;

namespace {

constexpr uint8_t kCanary = 0xc5;

struct Scenario {
  Pair p;
  std::vector<uint8_t> arena = std::vector<uint8_t>(3 * 4096, kCanary);
  std::unique_ptr<hw::Mr> target;  // the middle 4096 bytes of the arena
  Buffer local;

  explicit Scenario(uint32_t target_access = all_remote(), ConnectOptions ob = {}) {
    p.connect({}, ob);
    target = must(p.b.dev->reg_mr(*p.b.pd, arena.data() + 4096, 4096, target_access));
    local = p.a.reg(8192, all_remote(), 0x11);
  }

  bool arena_untouched() const {
    return std::all_of(arena.begin(), arena.end(), [](uint8_t b) { return b == kCanary; });
  }
  uint64_t target_addr(uint64_t off = 0) const {
    return reinterpret_cast<uintptr_t>(arena.data()) + 4096 + off;
  }

  // Posts `wr` and a signaled SEND after it; returns both completions.
  std::pair<Completion, Completion> run(SendWr wr) {
    REQUIRE(p.a.post(wr) == Errc::ok);
    Sge sge{local.addr(), 4, local.lkey()};
    SendWr after = make_wr(WrOpcode::send, &sge, 1);
    REQUIRE(p.a.post(after) == Errc::ok);
    p.a.ring();
    Completion first = p.wait_send(p.a);
    Completion second = p.wait_send(p.a);
    p.settle();
    return {first, second};
  }
};

SendWr rdma(WrOpcode op, Sge* sge, uint64_t addr, uint32_t rkey) {
  SendWr wr = make_wr(op, sge, 1);
  wr.remote_addr = addr;
  wr.rkey = rkey;
  return wr;
}

void expect_remote_access_error(Scenario& s, SendWr wr) {
  auto [first, second] = s.run(wr);
  CHECK(first.status == IBV_WC_REM_ACCESS_ERR);
  CHECK(second.status == IBV_WC_WR_FLUSH_ERR);
  CHECK(s.p.a.qp->state() == hw::QpState::err);
  CHECK(s.p.b.qp->state() == hw::QpState::err);
  CHECK(s.arena_untouched());
  hw::AsyncEvent ev;
  REQUIRE(s.p.b.dev->next_async_event(&ev));
  CHECK(ev.type == hw::AsyncEventType::qp_access_err);
  CHECK(ev.qpn == s.p.b.qpn());
}

}  // namespace

TEST_CASE("a WRITE past the end of the region: remote access error, memory untouched") {
  Scenario s;
  Sge sge{s.local.addr(), 100, s.local.lkey()};
  expect_remote_access_error(
      s, rdma(WrOpcode::rdma_write, &sge, s.target_addr(4000), s.target->rkey()));
}

TEST_CASE("a WRITE below the start of the region: remote access error") {
  Scenario s;
  Sge sge{s.local.addr(), 16, s.local.lkey()};
  expect_remote_access_error(
      s, rdma(WrOpcode::rdma_write, &sge, s.target_addr() - 8, s.target->rkey()));
}

TEST_CASE("a WRITE with a wrong key tag: remote access error") {
  Scenario s;
  Sge sge{s.local.addr(), 16, s.local.lkey()};
  expect_remote_access_error(
      s, rdma(WrOpcode::rdma_write, &sge, s.target_addr(), s.target->rkey() ^ 0x01));
}

TEST_CASE("a WRITE with the key of a deregistered region: remote access error") {
  Scenario s;
  const uint32_t stale = s.target->rkey();
  s.target.reset();
  // A new region in the same slot gets a new tag: the stale key matches nothing.
  auto again = must(s.p.b.dev->reg_mr(*s.p.b.pd, s.arena.data() + 4096, 4096, all_remote()));
  CHECK(again->rkey() != stale);
  Sge sge{s.local.addr(), 16, s.local.lkey()};
  expect_remote_access_error(s, rdma(WrOpcode::rdma_write, &sge, s.target_addr(), stale));
}

TEST_CASE("a WRITE with the key of another PD's region: remote access error") {
  Scenario s;
  auto other_pd = must(s.p.b.dev->alloc_pd());
  auto foreign = must(s.p.b.dev->reg_mr(*other_pd, s.arena.data() + 4096, 4096, all_remote()));
  Sge sge{s.local.addr(), 16, s.local.lkey()};
  expect_remote_access_error(s, rdma(WrOpcode::rdma_write, &sge, s.target_addr(), foreign->rkey()));
}

TEST_CASE("a WRITE to a region without REMOTE_WRITE: remote access error") {
  Scenario s(hw::access::local_write | hw::access::remote_read);
  Sge sge{s.local.addr(), 16, s.local.lkey()};
  expect_remote_access_error(s,
                             rdma(WrOpcode::rdma_write, &sge, s.target_addr(), s.target->rkey()));
}

TEST_CASE("a READ of a region without REMOTE_READ: remote access error, local buffer untouched") {
  Scenario s(hw::access::local_write | hw::access::remote_write);
  Sge sge{s.local.addr(), 64, s.local.lkey()};
  expect_remote_access_error(s, rdma(WrOpcode::rdma_read, &sge, s.target_addr(), s.target->rkey()));
  CHECK(std::all_of(s.local.mem.begin(), s.local.mem.end(), [](uint8_t b) { return b == 0x11; }));
}

TEST_CASE("an atomic on a region without REMOTE_ATOMIC: remote access error") {
  Scenario s(hw::access::local_write | hw::access::remote_write | hw::access::remote_read);
  Sge sge{s.local.addr(), 8, s.local.lkey()};
  SendWr wr = rdma(WrOpcode::atomic_fetch_add, &sge, s.target_addr(8), s.target->rkey());
  wr.compare_add = 1;
  expect_remote_access_error(s, wr);
}

TEST_CASE("a misaligned atomic is an invalid request") {
  Scenario s;
  Sge sge{s.local.addr(), 8, s.local.lkey()};
  SendWr wr = rdma(WrOpcode::atomic_fetch_add, &sge, s.target_addr(8), s.target->rkey());
  wr.compare_add = 1;
  // The encoder refuses a misaligned address; a hostile driver writes one anyway.
  REQUIRE(s.p.a.post(wr) == Errc::ok);
  auto* raddr = reinterpret_cast<mlx5_wqe_raddr_seg*>(reinterpret_cast<uint8_t*>(s.p.a.last_ctrl) +
                                                      sizeof(mlx5_wqe_ctrl_seg));
  raddr->raddr = htobe64(s.target_addr(4));
  Sge after_sge{s.local.addr(), 4, s.local.lkey()};
  SendWr after = make_wr(WrOpcode::send, &after_sge, 1);
  REQUIRE(s.p.a.post(after) == Errc::ok);
  s.p.a.ring();
  Completion first = s.p.wait_send(s.p.a);
  Completion second = s.p.wait_send(s.p.a);
  CHECK(first.status == IBV_WC_REM_INV_REQ_ERR);
  CHECK(second.status == IBV_WC_WR_FLUSH_ERR);
  CHECK(s.arena_untouched());
}

TEST_CASE("a WRITE to a QP without remote write access is an invalid request") {
  ConnectOptions ob;
  ob.access = hw::access::remote_read;
  Scenario s(all_remote(), ob);
  Sge sge{s.local.addr(), 16, s.local.lkey()};
  auto [first, second] = s.run(rdma(WrOpcode::rdma_write, &sge, s.target_addr(), s.target->rkey()));
  CHECK(first.status == IBV_WC_REM_INV_REQ_ERR);
  CHECK(s.arena_untouched());
  CHECK(s.p.b.qp->state() == hw::QpState::err);
}

TEST_CASE("local keys: bad lkey, other PD, no LOCAL_WRITE for a READ, length past the region") {
  SECTION("bad lkey") {
    Scenario s;
    Sge sge{s.local.addr(), 16, 0x12345600};
    auto [first, second] =
        s.run(rdma(WrOpcode::rdma_write, &sge, s.target_addr(), s.target->rkey()));
    CHECK(first.status == IBV_WC_LOC_PROT_ERR);
    CHECK(second.status == IBV_WC_WR_FLUSH_ERR);
    CHECK(s.arena_untouched());
    CHECK(s.p.b.counters().packets_rx == 0);  // nothing went on the wire
  }
  SECTION("lkey of another PD") {
    Scenario s;
    auto other_pd = must(s.p.a.dev->alloc_pd());
    auto mr = must(s.p.a.dev->reg_mr(*other_pd, s.local.data(), 64, all_remote()));
    Sge sge{s.local.addr(), 16, mr->lkey()};
    auto [first, second] =
        s.run(rdma(WrOpcode::rdma_write, &sge, s.target_addr(), s.target->rkey()));
    CHECK(first.status == IBV_WC_LOC_PROT_ERR);
    CHECK(s.arena_untouched());
  }
  SECTION("READ into a region without LOCAL_WRITE") {
    Scenario s;
    auto ro = must(s.p.a.dev->reg_mr(*s.p.a.pd, s.local.data(), 64, 0));
    Sge sge{s.local.addr(), 16, ro->lkey()};
    auto [first, second] =
        s.run(rdma(WrOpcode::rdma_read, &sge, s.target_addr(), s.target->rkey()));
    CHECK(first.status == IBV_WC_LOC_PROT_ERR);
    CHECK(std::all_of(s.local.mem.begin(), s.local.mem.end(), [](uint8_t b) { return b == 0x11; }));
  }
  SECTION("gather past the end of the region") {
    Scenario s;
    Sge sge{s.local.addr(8000), 400, s.local.lkey()};
    auto [first, second] =
        s.run(rdma(WrOpcode::rdma_write, &sge, s.target_addr(), s.target->rkey()));
    CHECK(first.status == IBV_WC_LOC_PROT_ERR);
    CHECK(s.arena_untouched());
  }
}

TEST_CASE("a receive WQE with a bad lkey: local protection error there, remote op error here") {
  Scenario s;
  Sge bad{s.target_addr(), 4096, 0x77777700};
  RecvWr rwr{1, &bad, 1};
  REQUIRE(s.p.b.post_recv(rwr) == Errc::ok);
  Sge sge{s.local.addr(), 100, s.local.lkey()};
  auto [first, second] = s.run(make_wr(WrOpcode::send, &sge, 1));
  CHECK(first.status == IBV_WC_REM_OP_ERR);
  Completion r = s.p.wait_recv(s.p.b);
  CHECK(r.status == IBV_WC_LOC_PROT_ERR);
  CHECK(s.arena_untouched());
  CHECK(s.p.b.qp->state() == hw::QpState::err);
}

TEST_CASE("a SEND larger than the receive buffer: LOC_LEN_ERR there, REM_INV_REQ here") {
  Scenario s;
  // The receive buffer is 100 bytes of the target region; the message is 3000.
  Sge r{s.target_addr(), 100, s.target->lkey()};
  RecvWr rwr{2, &r, 1};
  REQUIRE(s.p.b.post_recv(rwr) == Errc::ok);
  Sge sge{s.local.addr(), 3000, s.local.lkey()};
  auto [first, second] = s.run(make_wr(WrOpcode::send, &sge, 1));
  CHECK(first.status == IBV_WC_REM_INV_REQ_ERR);
  Completion rc = s.p.wait_recv(s.p.b);
  CHECK(rc.status == IBV_WC_LOC_LEN_ERR);
  // Nothing beyond the 100-byte receive buffer was written.
  CHECK(std::all_of(s.arena.begin() + 4096 + 100, s.arena.end(),
                    [](uint8_t b) { return b == kCanary; }));
}
