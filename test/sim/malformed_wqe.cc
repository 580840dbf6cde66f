// SPDX-License-Identifier: BSD-3-Clause
// Malformed WQEs in the send queue: each completes with the matching mlx5 syndrome (after
// every WQE before it), the QP goes to ERR, the WQEs after it are flushed, and nothing is
// sent or touched.
#include <catch2/catch.hpp>

#include <functional>

#include "sim_harness.h"

using namespace simtest;

namespace {

struct Case {
  const char* name;
  std::function<void(mlx5_wqe_ctrl_seg*, uint32_t qpn)> corrupt;
  ibv_wc_status status;
};

void set_opcode(mlx5_wqe_ctrl_seg* c, uint8_t op) {
  c->opmod_idx_opcode = htobe32((be32toh(c->opmod_idx_opcode) & ~0xffu) | op);
}
void set_ds(mlx5_wqe_ctrl_seg* c, uint32_t qpn, uint32_t ds) {
  c->qpn_ds = htobe32(qpn << 8 | ds);
}

void run_case(const Case& k) {
  INFO(k.name);
  Pair p;
  p.connect();
  Buffer a = p.a.reg(4096, all_remote(), 0x42);
  Buffer b = p.b.reg(4096, all_remote(), 0x00);
  Sge sge{a.addr(), 64, a.lkey()};
  SendWr good = make_wr(WrOpcode::rdma_write, &sge, 1);
  good.remote_addr = b.addr();
  good.rkey = b.rkey();
  REQUIRE(p.a.post(good) == Errc::ok);  // completes normally, before the error
  SendWr victim = good;
  victim.remote_addr = b.addr(1024);
  REQUIRE(p.a.post(victim) == Errc::ok);
  k.corrupt(p.a.last_ctrl, p.a.qpn());
  const uint32_t victim_pi = p.a.sq_pi - p.a.last_bbs;
  good.remote_addr = b.addr(2048);
  REQUIRE(p.a.post(good) == Errc::ok);
  p.a.ring();

  wqe::CqeFields f;
  Completion c1 = p.wait_send(p.a);
  CHECK(c1.status == IBV_WC_SUCCESS);
  Completion c2 = p.wait_send(p.a, &f);
  CHECK(c2.status == k.status);
  CHECK(f.wqe_counter == (victim_pi & 0xffff));
  Completion c3 = p.wait_send(p.a);
  CHECK(c3.status == IBV_WC_WR_FLUSH_ERR);
  CHECK(p.a.qp->state() == hw::QpState::err);
  p.settle();
  CHECK(b.mem[1024] == 0);  // neither the victim nor what followed reached the peer
  CHECK(b.mem[2048] == 0);
  CHECK(b.mem[0] == 0x42);
}

}  // namespace

TEST_CASE("malformed WQEs complete with the mlx5 syndrome and move the QP to ERR") {
  const Case cases[] = {
      {"unknown opcode", [](mlx5_wqe_ctrl_seg* c, uint32_t) { set_opcode(c, 0x3f); },
       IBV_WC_LOC_QP_OP_ERR},
      {"DS of 0", [](mlx5_wqe_ctrl_seg* c, uint32_t qpn) { set_ds(c, qpn, 0); },
       IBV_WC_LOC_QP_OP_ERR},
      {"DS too small for a WRITE", [](mlx5_wqe_ctrl_seg* c, uint32_t qpn) { set_ds(c, qpn, 1); },
       IBV_WC_LOC_QP_OP_ERR},
      {"QPN of another QP in the ctrl segment",
       [](mlx5_wqe_ctrl_seg* c, uint32_t qpn) { set_ds(c, qpn + 1, 3); }, IBV_WC_LOC_QP_OP_ERR},
      {"inline length past the WQE",
       [](mlx5_wqe_ctrl_seg* c, uint32_t) {
         auto* seg = reinterpret_cast<uint8_t*>(c) + 32;
         const uint32_t inl = htobe32(MLX5_INLINE_SEG | 500);
         std::memcpy(seg, &inl, 4);
       },
       IBV_WC_LOC_LEN_ERR},
  };
  for (const Case& k : cases) run_case(k);
}

TEST_CASE("a DS larger than the whole ring is malformed") {
  Pair p(FabricOptions{}, [] {
    HostOptions o;
    o.caps.max_send_wr = 1;
    o.caps.max_send_sge = 1;
    return o;
  }());
  p.connect();
  REQUIRE(p.a.view().dv.sq.wqe_cnt == 1);  // one 64-byte basic block
  Buffer a = p.a.reg(64);
  Sge sge{a.addr(), 8, a.lkey()};
  REQUIRE(p.a.post(make_wr(WrOpcode::send, &sge, 1)) == Errc::ok);
  set_ds(p.a.last_ctrl, p.a.qpn(), 63);
  p.a.ring();
  Completion c = p.wait_send(p.a);
  CHECK(c.status == IBV_WC_LOC_QP_OP_ERR);
  CHECK(p.a.qp->state() == hw::QpState::err);
}

TEST_CASE("an atomic whose local segment is not 8 bytes is a length error") {
  Pair p;
  p.connect();
  Buffer a = p.a.reg(64);
  Buffer b = p.b.reg(64);
  Sge sge{a.addr(), 8, a.lkey()};
  SendWr wr = make_wr(WrOpcode::atomic_fetch_add, &sge, 1);
  wr.remote_addr = b.addr();
  wr.rkey = b.rkey();
  REQUIRE(p.a.post(wr) == Errc::ok);
  // ctrl + raddr + atomic + data: make the data segment 16 bytes long.
  auto* data = reinterpret_cast<mlx5_wqe_data_seg*>(reinterpret_cast<uint8_t*>(p.a.last_ctrl) + 48);
  data->byte_count = htobe32(16);
  p.a.ring();
  Completion c = p.wait_send(p.a);
  CHECK(c.status == IBV_WC_LOC_LEN_ERR);
  CHECK(*reinterpret_cast<uint64_t*>(b.data()) == 0);
}

TEST_CASE("random bytes in the send queue never crash the device") {
  Pair p;
  p.connect();
  uint32_t seed = 1;
  for (int round = 0; round < 40; ++round) {
    if (p.a.qp->state() != hw::QpState::rts) {
      to_state(p.a, hw::QpState::reset);
      to_state(p.b, hw::QpState::reset);
      std::memset(p.a.view().dv.dbrec, 0, 8);
      std::memset(p.b.view().dv.dbrec, 0, 8);
      p.a.sq_pi = 0;
      p.a.posted_.clear();
      p.a.retired_bbs = 0;
      connect(p.a, p.b);
    }
    const wqe::SqRing sq = p.a.sq();
    uint8_t* slot = sq.bb(p.a.sq_pi);
    fill_pattern(slot, 64, seed++);
    // Keep the index and QPN right half the time so deeper paths are reached.
    if (round & 1) {
      auto* c = reinterpret_cast<mlx5_wqe_ctrl_seg*>(slot);
      c->opmod_idx_opcode = htobe32(((p.a.sq_pi & 0xffff) << 8) | (seed % 0x14));
      c->qpn_ds = htobe32(p.a.qpn() << 8 | (seed % 5));
    }
    p.a.last_ctrl = reinterpret_cast<mlx5_wqe_ctrl_seg*>(slot);
    p.a.last_bbs = 1;
    p.a.sq_pi += 1;
    p.a.ring();
    p.settle(100'000'000);
    Completion c;
    while (p.a.poll_send(&c)) {
    }
    while (p.a.rcq->poll(&c)) {
    }
    while (p.b.scq->poll(&c)) {
    }
    while (p.b.rcq->poll(&c)) {
    }
  }
  SUCCEED("the device survived");
}
