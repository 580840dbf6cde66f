// SPDX-License-Identifier: BSD-3-Clause
// Scatter/gather lists on both sides, inline data, and WQEs that wrap around the end of the
// send ring.
#include <catch2/catch.hpp>

#include <cstring>

#include "sim_harness.h"

using namespace simtest;

TEST_CASE("a SEND gathered from 4 SGEs scatters into a receive WQE of 3 SGEs") {
  Pair p;
  ConnectOptions o;
  o.mtu = hw::Mtu::mtu256;
  p.connect(o, o);
  Buffer a = p.a.reg(4096);
  fill_pattern(a.data(), 4096, 9);
  Buffer b = p.b.reg(4096);
  const uint32_t parts[4] = {1, 700, 13, 333};
  Sge gather[4];
  uint64_t off = 0;
  std::vector<uint8_t> expected;
  for (int i = 0; i < 4; ++i) {
    gather[i] = Sge{a.addr(off), parts[i], a.lkey()};
    expected.insert(expected.end(), a.mem.begin() + off, a.mem.begin() + off + parts[i]);
    off += parts[i] + 17;
  }
  Sge scatter[3] = {{b.addr(0), 100, b.lkey()},
                    {b.addr(1000), 0, b.lkey()},  // zero-length elements are skipped
                    {b.addr(2000), 1000, b.lkey()}};
  RecvWr rwr{0, scatter, 3};
  REQUIRE(p.b.post_recv(rwr) == Errc::ok);
  REQUIRE(p.a.post_and_ring(make_wr(WrOpcode::send, gather, 4)) == Errc::ok);
  Completion r = p.wait_recv(p.b);
  REQUIRE(r.status == IBV_WC_SUCCESS);
  CHECK(r.byte_len == 1047);
  CHECK(std::memcmp(b.data(), expected.data(), 100) == 0);
  CHECK(std::memcmp(b.data() + 2000, expected.data() + 100, 947) == 0);
  CHECK(b.mem[100] == 0);
  CHECK(b.mem[2947] == 0);
}

TEST_CASE("a WRITE gathers 8 SGEs and a READ scatters into 5") {
  Pair p;
  p.connect();
  Buffer a = p.a.reg(16384);
  Buffer b = p.b.reg(16384);
  fill_pattern(a.data(), 16384, 4);
  Sge gather[8];
  for (int i = 0; i < 8; ++i) gather[i] = Sge{a.addr(i * 2000), 1000u + i, a.lkey()};
  SendWr wr = make_wr(WrOpcode::rdma_write, gather, 8);
  wr.remote_addr = b.addr();
  wr.rkey = b.rkey();
  REQUIRE(p.a.post_and_ring(wr) == Errc::ok);
  REQUIRE(p.wait_send(p.a).status == IBV_WC_SUCCESS);
  uint64_t at = 0;
  for (int i = 0; i < 8; ++i) {
    CHECK(std::memcmp(b.data() + at, a.data() + i * 2000, 1000 + i) == 0);
    at += 1000 + i;
  }

  Buffer c = p.a.reg(16384);
  Sge scatter[5];
  for (int i = 0; i < 5; ++i) scatter[i] = Sge{c.addr(i * 3000), 1500, c.lkey()};
  SendWr rd = make_wr(WrOpcode::rdma_read, scatter, 5);
  rd.remote_addr = b.addr();
  rd.rkey = b.rkey();
  REQUIRE(p.a.post_and_ring(rd) == Errc::ok);
  Completion done = p.wait_send(p.a);
  REQUIRE(done.status == IBV_WC_SUCCESS);
  CHECK(done.byte_len == 7500);
  for (int i = 0; i < 5; ++i)
    CHECK(std::memcmp(c.data() + i * 3000, b.data() + i * 1500, 1500) == 0);
  CHECK(c.mem[1500] == 0);
}

TEST_CASE("inline SEND and WRITE carry the bytes in the WQE, up to max_inline_data") {
  Pair p;
  p.connect();
  Buffer b = p.b.reg(1024);
  for (uint32_t len : {1u, 12u, 60u, 61u, 200u, 256u}) {
    INFO("len " << len);
    std::vector<uint8_t> bytes(len);
    fill_pattern(bytes.data(), len, len);
    Sge sge{reinterpret_cast<uintptr_t>(bytes.data()), len, 0};  // no MR needed: inline
    REQUIRE(p.b.post_recv(b, 0, 1024) == Errc::ok);
    SendWr wr = make_wr(WrOpcode::send, &sge, 1, 0, send_flags::signaled | send_flags::inline_data);
    REQUIRE(p.a.post_and_ring(wr) == Errc::ok);
    std::memset(bytes.data(), 0, len);  // the device must use the copy in the WQE
    CHECK(p.wait_recv(p.b).byte_len == len);
    REQUIRE(p.wait_send(p.a).status == IBV_WC_SUCCESS);
    std::vector<uint8_t> expect(len);
    fill_pattern(expect.data(), len, len);
    CHECK(std::memcmp(b.data(), expect.data(), len) == 0);

    fill_pattern(bytes.data(), len, len + 1);
    SendWr w =
        make_wr(WrOpcode::rdma_write, &sge, 1, 0, send_flags::signaled | send_flags::inline_data);
    w.remote_addr = b.addr(512);
    w.rkey = b.rkey();
    REQUIRE(p.a.post_and_ring(w) == Errc::ok);
    REQUIRE(p.wait_send(p.a).status == IBV_WC_SUCCESS);
    CHECK(std::memcmp(b.data() + 512, bytes.data(), len) == 0);
  }
}

TEST_CASE("multi-block WQEs that wrap around the end of a small send ring") {
  HostOptions o = Pair::default_host();
  o.caps.max_send_wr = 4;
  o.caps.max_send_sge = 6;  // 2 + 6 = 8 units: two basic blocks per WQE
  o.caps.max_inline_data = 60;
  Pair p(FabricOptions{}, o, o);
  p.connect();
  REQUIRE(p.a.view().dv.sq.wqe_cnt == 8);
  Buffer a = p.a.reg(8192);
  Buffer b = p.b.reg(8192);
  for (int round = 0; round < 25; ++round) {
    INFO("round " << round << " pi " << p.a.sq_pi);
    fill_pattern(a.data(), 8192, round);
    SendWr wr;
    Sge sges[6];
    std::vector<uint8_t> inl(55);
    if (round % 3 == 2) {
      fill_pattern(inl.data(), inl.size(), round + 100);
      sges[0] = Sge{reinterpret_cast<uintptr_t>(inl.data()), 55, 0};
      wr =
          make_wr(WrOpcode::rdma_write, sges, 1, 0, send_flags::signaled | send_flags::inline_data);
    } else {
      for (int i = 0; i < 6; ++i) sges[i] = Sge{a.addr(i * 1000), 900, a.lkey()};
      wr = make_wr(WrOpcode::rdma_write, sges, 6);
    }
    wr.remote_addr = b.addr();
    wr.rkey = b.rkey();
    REQUIRE(p.a.post_and_ring(wr) == Errc::ok);
    REQUIRE(p.wait_send(p.a).status == IBV_WC_SUCCESS);
    if (round % 3 == 2) {
      CHECK(std::memcmp(b.data(), inl.data(), 55) == 0);
    } else {
      for (int i = 0; i < 6; ++i)
        CHECK(std::memcmp(b.data() + i * 900, a.data() + i * 1000, 900) == 0);
    }
  }
  CHECK(p.a.sq_pi > 3 * 8);  // went around the ring several times
}
