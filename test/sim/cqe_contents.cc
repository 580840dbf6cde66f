// SPDX-License-Identifier: BSD-3-Clause
// CQEs as an mlx5 device writes them, checked field by field in the raw mlx5_cqe64.
#include <catch2/catch.hpp>

#include <cstring>

#include "handles.h"
#include "sim_harness.h"

using namespace simtest;

namespace {

uint8_t cqe_opcode(const mlx5_cqe64* c) {
  return c->op_own >> 4;
}

const mlx5_cqe64* wait_raw(Pair& p, TestCq& cq) {
  const mlx5_cqe64* out = nullptr;
  REQUIRE(p.run_until([&] { return (out = cq.next()) != nullptr; }));
  return out;
}

}  // namespace

TEST_CASE("requester CQE: opcode, QPN, WQE counter of the first basic block, READ length") {
  Pair p;
  p.connect();
  Buffer a = p.a.reg(4096);
  Buffer b = p.b.reg(4096);
  // Move the producer index so the WQE counter is not trivially 0.
  for (int i = 0; i < 3; ++i) {
    SendWr nop = make_wr(WrOpcode::nop, nullptr, 0, 0, 0);
    REQUIRE(p.a.post(nop) == Errc::ok);
  }
  Sge sge{a.addr(), 1000, a.lkey()};
  SendWr rd = make_wr(WrOpcode::rdma_read, &sge, 1);
  rd.remote_addr = b.addr();
  rd.rkey = b.rkey();
  const uint32_t pi = p.a.sq_pi;
  REQUIRE(p.a.post_and_ring(rd) == Errc::ok);
  const mlx5_cqe64* c = wait_raw(p, *p.a.scq);
  CHECK(cqe_opcode(c) == MLX5_CQE_REQ);
  CHECK(be32toh(c->sop_drop_qpn) == (uint32_t{MLX5_OPCODE_RDMA_READ} << 24 | p.a.qpn()));
  CHECK(be16toh(c->wqe_counter) == (pi & 0xffff));
  CHECK(be32toh(c->byte_cnt) == 1000);
  CHECK((c->op_own & 1) == 0);        // first lap
  CHECK(p.a.scq->next() == nullptr);  // the unsignaled NOPs wrote nothing

  Sge w{a.addr(), 10, a.lkey()};
  SendWr wr = make_wr(WrOpcode::rdma_write, &w, 1);
  wr.remote_addr = b.addr();
  wr.rkey = b.rkey();
  const uint32_t pi2 = p.a.sq_pi;
  REQUIRE(p.a.post_and_ring(wr) == Errc::ok);
  c = wait_raw(p, *p.a.scq);
  CHECK(be32toh(c->sop_drop_qpn) == (uint32_t{MLX5_OPCODE_RDMA_WRITE} << 24 | p.a.qpn()));
  CHECK(be16toh(c->wqe_counter) == (pi2 & 0xffff));
  CHECK(be32toh(c->byte_cnt) == 0);
}

TEST_CASE("responder CQE: byte count, immediate, source QPN, RQ counter, user index, SE") {
  Pair p;
  p.connect();
  rnicdv::sim::set_qp_user_index(*p.b.qp, 0x1234);
  Buffer a = p.a.reg(4096, all_remote(), 0x5a);
  Buffer b = p.b.reg(4096);
  for (int i = 0; i < 2; ++i) REQUIRE(p.b.post_recv(b, 0, 4096) == Errc::ok);

  Sge sge{a.addr(), 777, a.lkey()};
  SendWr wr = make_wr(WrOpcode::send_imm, &sge, 1, 0, send_flags::signaled | send_flags::solicited);
  wr.imm_data = 0x11223344;
  REQUIRE(p.a.post_and_ring(wr) == Errc::ok);
  const mlx5_cqe64* c = wait_raw(p, *p.b.rcq);
  CHECK(cqe_opcode(c) == MLX5_CQE_RESP_SEND_IMM);
  CHECK(be32toh(c->byte_cnt) == 777);
  CHECK(be32toh(c->imm_inval_pkey) == 0x11223344);  // kept big-endian, as libmlx5 reads it
  CHECK((be32toh(c->flags_rqpn) & 0xffffff) == p.a.qpn());
  CHECK((be32toh(c->sop_drop_qpn) & 0xffffff) == p.b.qpn());
  CHECK(be16toh(c->wqe_counter) == 0);
  CHECK((be32toh(c->srqn_uidx) & 0xffffff) == 0x1234);
  CHECK((c->op_own & 0x2) != 0);  // solicited

  SendWr plain = make_wr(WrOpcode::send, &sge, 1);
  REQUIRE(p.a.post_and_ring(plain) == Errc::ok);
  c = wait_raw(p, *p.b.rcq);
  CHECK(cqe_opcode(c) == MLX5_CQE_RESP_SEND);
  CHECK(be16toh(c->wqe_counter) == 1);
  CHECK((c->op_own & 0x2) == 0);

  Buffer target = p.b.reg(64);
  REQUIRE(p.b.post_recv(b, 0, 0) == Errc::ok);
  SendWr wi = make_wr(WrOpcode::rdma_write_imm, &sge, 1);
  wi.remote_addr = target.addr();
  wi.rkey = target.rkey();
  wi.imm_data = 0xcafe;
  Sge small{a.addr(), 64, a.lkey()};
  wi.sg_list = &small;
  REQUIRE(p.a.post_and_ring(wi) == Errc::ok);
  c = wait_raw(p, *p.b.rcq);
  CHECK(cqe_opcode(c) == MLX5_CQE_RESP_WR_IMM);
  CHECK(be32toh(c->byte_cnt) == 64);
  CHECK(be32toh(c->imm_inval_pkey) == 0xcafe);
  CHECK(be16toh(c->wqe_counter) == 2);
}

TEST_CASE("a signaled WQE retires the unsignaled ones before it with one CQE") {
  Pair p;
  p.connect();
  Buffer a = p.a.reg(64);
  Buffer b = p.b.reg(64);
  Sge sge{a.addr(), 8, a.lkey()};
  SendWr wr = make_wr(WrOpcode::rdma_write, &sge, 1, 0, 0);
  wr.remote_addr = b.addr();
  wr.rkey = b.rkey();
  for (int i = 0; i < 4; ++i) REQUIRE(p.a.post(wr) == Errc::ok);
  wr.flags = send_flags::signaled;
  const uint32_t last = p.a.sq_pi;
  REQUIRE(p.a.post(wr) == Errc::ok);
  p.a.ring();
  const mlx5_cqe64* c = wait_raw(p, *p.a.scq);
  CHECK(be16toh(c->wqe_counter) == last);
  p.settle();
  CHECK(p.a.scq->next() == nullptr);
  CHECK(p.a.snapshot().wqes_executed == 5);
}

TEST_CASE("error CQE: mlx5_err_cqe with syndrome, WQE opcode and QPN, and WQE counter") {
  Pair p;
  p.connect();
  Buffer a = p.a.reg(64);
  Sge sge{a.addr(), 8, a.lkey() ^ 0x55};               // bad lkey
  SendWr wr = make_wr(WrOpcode::send, &sge, 1, 0, 0);  // unsignaled: errors still complete
  const uint32_t pi = p.a.sq_pi;
  REQUIRE(p.a.post_and_ring(wr) == Errc::ok);
  const mlx5_cqe64* c = wait_raw(p, *p.a.scq);
  const auto* e = reinterpret_cast<const mlx5_err_cqe*>(c);
  CHECK(cqe_opcode(c) == MLX5_CQE_REQ_ERR);
  CHECK(e->syndrome == MLX5_CQE_SYNDROME_LOCAL_PROT_ERR);
  CHECK(be32toh(e->s_wqe_opcode_qpn) == (uint32_t{MLX5_OPCODE_SEND} << 24 | p.a.qpn()));
  CHECK(be16toh(e->wqe_counter) == pi);
  Completion done;
  wqe::cqe_to_completion(c, &done);
  CHECK(done.status == IBV_WC_LOC_PROT_ERR);
  CHECK(p.a.qp->state() == hw::QpState::err);
}
