// SPDX-License-Identifier: BSD-3-Clause
// Every opcode at the sizes where segmentation changes (0, 1, MTU-1, MTU, MTU+1, many MTUs)
// and at every path MTU, end to end between two devices, with the data checked byte by byte.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>

#include "sim_harness.h"

using namespace simtest;

namespace {

constexpr hw::Mtu kMtus[] = {hw::Mtu::mtu256, hw::Mtu::mtu512, hw::Mtu::mtu1024, hw::Mtu::mtu2048,
                             hw::Mtu::mtu4096};

std::vector<uint32_t> sizes_for(uint32_t mtu) {
  return {0, 1, mtu - 1, mtu, mtu + 1, 3 * mtu + 7, 16 * mtu};
}

struct Fixture {
  Pair p;
  Buffer src, dst;
  uint32_t mtu;

  explicit Fixture(hw::Mtu m) : mtu(hw::mtu_bytes(m)) {
    ConnectOptions o;
    o.mtu = m;
    p.connect(o, o);
    src = p.a.reg(16 * mtu + 64);
    dst = p.b.reg(16 * mtu + 64);
  }

  void prepare(uint32_t len, uint32_t seed) {
    fill_pattern(src.data(), src.size(), seed);
    std::memset(dst.data(), 0xee, dst.size());
    (void)len;
  }

  void check_dst(uint32_t len) {
    CHECK(std::memcmp(dst.data(), src.data(), len) == 0);
    for (size_t i = len; i < dst.size(); ++i) {
      if (dst.mem[i] != 0xee) {
        FAIL("byte " << i << " past the message was written");
        break;
      }
    }
  }
};

}  // namespace

TEST_CASE("SEND and SEND_IMM at boundary sizes on every MTU") {
  for (hw::Mtu m : kMtus) {
    Fixture f(m);
    for (uint32_t len : sizes_for(f.mtu)) {
      for (bool imm : {false, true}) {
        INFO("mtu " << f.mtu << " len " << len << (imm ? " imm" : ""));
        f.prepare(len, len + imm);
        REQUIRE(f.p.b.post_recv(f.dst, 0, static_cast<uint32_t>(f.dst.size()), 55) == Errc::ok);
        Sge sge{f.src.addr(), len, f.src.lkey()};
        SendWr wr = make_wr(imm ? WrOpcode::send_imm : WrOpcode::send, &sge, len ? 1 : 0, 9);
        wr.imm_data = 0x01020304 + len;
        REQUIRE(f.p.a.post_and_ring(wr) == Errc::ok);
        Completion r = f.p.wait_recv(f.p.b);
        CHECK(r.status == IBV_WC_SUCCESS);
        CHECK(r.opcode == IBV_WC_RECV);
        CHECK(r.byte_len == len);
        CHECK(r.wr_id == 0);  // the harness does not map wr_ids; wqe_counter identifies it
        CHECK(((r.flags & wc_flags::with_imm) != 0) == imm);
        if (imm) CHECK(r.imm_data == 0x01020304 + len);
        Completion s = f.p.wait_send(f.p.a);
        CHECK(s.status == IBV_WC_SUCCESS);
        CHECK(s.opcode == IBV_WC_SEND);
        f.check_dst(len);
      }
    }
  }
}

TEST_CASE("RDMA WRITE and WRITE_IMM at boundary sizes on every MTU") {
  for (hw::Mtu m : kMtus) {
    Fixture f(m);
    for (uint32_t len : sizes_for(f.mtu)) {
      for (bool imm : {false, true}) {
        INFO("mtu " << f.mtu << " len " << len << (imm ? " imm" : ""));
        f.prepare(len, len * 3 + imm);
        if (imm) REQUIRE(f.p.b.post_recv(f.dst, 0, 0) == Errc::ok);
        Sge sge{f.src.addr(), len, f.src.lkey()};
        SendWr wr =
            make_wr(imm ? WrOpcode::rdma_write_imm : WrOpcode::rdma_write, &sge, len ? 1 : 0);
        wr.remote_addr = f.dst.addr();
        wr.rkey = f.dst.rkey();
        wr.imm_data = 0xa0b0c0d0;
        REQUIRE(f.p.a.post_and_ring(wr) == Errc::ok);
        Completion s = f.p.wait_send(f.p.a);
        CHECK(s.status == IBV_WC_SUCCESS);
        CHECK(s.opcode == IBV_WC_RDMA_WRITE);
        if (imm) {
          Completion r = f.p.wait_recv(f.p.b);
          CHECK(r.status == IBV_WC_SUCCESS);
          CHECK(r.opcode == IBV_WC_RECV_RDMA_WITH_IMM);
          CHECK(r.byte_len == len);
          CHECK(r.imm_data == 0xa0b0c0d0);
        }
        f.check_dst(len);
      }
    }
  }
}

TEST_CASE("RDMA READ at boundary sizes on every MTU") {
  for (hw::Mtu m : kMtus) {
    Fixture f(m);
    for (uint32_t len : sizes_for(f.mtu)) {
      INFO("mtu " << f.mtu << " len " << len);
      // Read from b's buffer (src of the check is b's memory) into a's.
      fill_pattern(f.dst.data(), f.dst.size(), len + 11);
      std::memset(f.src.data(), 0xee, f.src.size());
      Sge sge{f.src.addr(), len, f.src.lkey()};
      SendWr wr = make_wr(WrOpcode::rdma_read, &sge, len ? 1 : 0);
      wr.remote_addr = f.dst.addr();
      wr.rkey = f.dst.rkey();
      const uint64_t tx_before = f.p.b.counters().packets_tx;
      REQUIRE(f.p.a.post_and_ring(wr) == Errc::ok);
      Completion s = f.p.wait_send(f.p.a);
      CHECK(s.status == IBV_WC_SUCCESS);
      CHECK(s.opcode == IBV_WC_RDMA_READ);
      CHECK(s.byte_len == len);
      CHECK(std::memcmp(f.src.data(), f.dst.data(), len) == 0);
      CHECK(std::all_of(f.src.mem.begin() + len, f.src.mem.end(),
                        [](uint8_t b) { return b == 0xee; }));
      // One response packet per MTU, at least one (IBA 9.7.5.1.4).
      const uint64_t responses = std::max<uint64_t>(1, (len + f.mtu - 1) / f.mtu);
      CHECK(f.p.b.counters().packets_tx - tx_before == responses);
    }
  }
}

TEST_CASE("compare-and-swap and fetch-and-add return the original value") {
  for (hw::Mtu m : {hw::Mtu::mtu256, hw::Mtu::mtu4096}) {
    Fixture f(m);
    uint64_t* target = reinterpret_cast<uint64_t*>(f.dst.data() + 64);
    *target = 100;
    uint64_t* result = reinterpret_cast<uint64_t*>(f.src.data());
    Sge sge{f.src.addr(), 8, f.src.lkey()};

    SendWr fa = make_wr(WrOpcode::atomic_fetch_add, &sge, 1);
    fa.remote_addr = f.dst.addr(64);
    fa.rkey = f.dst.rkey();
    fa.compare_add = 23;
    REQUIRE(f.p.a.post_and_ring(fa) == Errc::ok);
    Completion c = f.p.wait_send(f.p.a);
    CHECK(c.status == IBV_WC_SUCCESS);
    CHECK(c.opcode == IBV_WC_FETCH_ADD);
    CHECK(c.byte_len == 8);
    CHECK(*result == 100);
    CHECK(*target == 123);

    SendWr cs = make_wr(WrOpcode::atomic_cmp_swap, &sge, 1);
    cs.remote_addr = f.dst.addr(64);
    cs.rkey = f.dst.rkey();
    cs.compare_add = 123;
    cs.swap = 0xfeedface;
    REQUIRE(f.p.a.post_and_ring(cs) == Errc::ok);
    c = f.p.wait_send(f.p.a);
    CHECK(c.status == IBV_WC_SUCCESS);
    CHECK(c.opcode == IBV_WC_COMP_SWAP);
    CHECK(*result == 123);
    CHECK(*target == 0xfeedface);

    // A failed compare leaves memory alone and still returns the value found.
    cs.compare_add = 1;
    cs.swap = 2;
    REQUIRE(f.p.a.post_and_ring(cs) == Errc::ok);
    c = f.p.wait_send(f.p.a);
    CHECK(c.status == IBV_WC_SUCCESS);
    CHECK(*result == 0xfeedface);
    CHECK(*target == 0xfeedface);
  }
}

TEST_CASE("a NOP completes in order without touching the wire") {
  Pair p;
  p.connect();
  const uint64_t tx = p.a.counters().packets_tx;
  SendWr wr = make_wr(WrOpcode::nop, nullptr, 0, 0);
  REQUIRE(p.a.post_and_ring(wr) == Errc::ok);
  Completion c = p.wait_send(p.a);
  CHECK(c.status == IBV_WC_SUCCESS);
  CHECK(p.a.counters().packets_tx == tx);
}

TEST_CASE("a 16 MiB WRITE and READ arrive intact") {
  Pair p;
  ConnectOptions o;
  o.mtu = hw::Mtu::mtu4096;
  p.connect(o, o);
  const uint32_t len = 16u << 20;
  Buffer src = p.a.reg(len);
  Buffer dst = p.b.reg(len);
  fill_pattern(src.data(), len, 77);
  Sge sge{src.addr(), len, src.lkey()};
  SendWr wr = make_wr(WrOpcode::rdma_write, &sge, 1);
  wr.remote_addr = dst.addr();
  wr.rkey = dst.rkey();
  REQUIRE(p.a.post_and_ring(wr) == Errc::ok);
  CHECK(p.wait_send(p.a).status == IBV_WC_SUCCESS);
  CHECK(std::memcmp(src.data(), dst.data(), len) == 0);

  std::memset(src.data(), 0, len);
  wr.opcode = WrOpcode::rdma_read;
  REQUIRE(p.a.post_and_ring(wr) == Errc::ok);
  Completion c = p.wait_send(p.a);
  CHECK(c.status == IBV_WC_SUCCESS);
  CHECK(c.byte_len == len);
  CHECK(std::memcmp(src.data(), dst.data(), len) == 0);
}
