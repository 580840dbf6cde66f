// SPDX-License-Identifier: BSD-3-Clause
// The model executes WQEs built by rdma-core's own mlx5dv.h helpers (mlx5dv_set_ctrl_seg,
// mlx5dv_set_data_seg and their x86 variants), an oracle this project did not write.
#include <catch2/catch.hpp>

#include <cstring>

#include "sim_harness.h"

using namespace simtest;

namespace {

// Writes a WQE by hand at the host's producer index and returns its ctrl segment.
mlx5_wqe_ctrl_seg* begin_wqe(Host& h) {
  return reinterpret_cast<mlx5_wqe_ctrl_seg*>(h.sq().bb(h.sq_pi));
}

void finish_wqe(Host& h, mlx5_wqe_ctrl_seg* ctrl, uint8_t ds) {
  h.last_ctrl = ctrl;
  h.last_bbs = static_cast<uint8_t>((ds + 3) / 4);
  h.posted_.push_back({h.sq_pi, h.last_bbs});
  h.sq_pi += h.last_bbs;
}

}  // namespace

TEST_CASE("a SEND_IMM built with mlx5dv_set_ctrl_seg and mlx5dv_set_data_seg") {
  Pair p;
  p.connect();
  Buffer a = p.a.reg(300, all_remote(), 0x5c);
  Buffer b = p.b.reg(300);
  REQUIRE(p.b.post_recv(b, 0, 300) == Errc::ok);
  mlx5_wqe_ctrl_seg* ctrl = begin_wqe(p.a);
  auto* data = reinterpret_cast<mlx5_wqe_data_seg*>(ctrl + 1);
  mlx5dv_set_data_seg(data, 300, a.lkey(), a.addr());
  // As libmlx5 does for IBV_WR_SEND_WITH_IMM: imm is the caller's __be32, assigned as is.
  mlx5dv_set_ctrl_seg(ctrl, static_cast<uint16_t>(p.a.sq_pi), MLX5_OPCODE_SEND_IMM, 0, p.a.qpn(),
                      MLX5_WQE_CTRL_CQ_UPDATE, 2, 0, htobe32(0x12345678));
  finish_wqe(p.a, ctrl, 2);
  p.a.ring();
  Completion r = p.wait_recv(p.b);
  CHECK(r.status == IBV_WC_SUCCESS);
  CHECK(r.byte_len == 300);
  CHECK(r.imm_data == 0x12345678);
  CHECK(p.wait_send(p.a).status == IBV_WC_SUCCESS);
  CHECK(std::memcmp(a.data(), b.data(), 300) == 0);
}

TEST_CASE("an RDMA WRITE built with the x86 helpers and a hand-written raddr segment") {
  Pair p;
  p.connect();
  Buffer a = p.a.reg(5000, all_remote(), 0);
  fill_pattern(a.data(), 5000, 3);
  Buffer b = p.b.reg(5000);
  mlx5_wqe_ctrl_seg* ctrl = begin_wqe(p.a);
  auto* raddr = reinterpret_cast<mlx5_wqe_raddr_seg*>(ctrl + 1);
  raddr->raddr = htobe64(b.addr());
  raddr->rkey = htobe32(b.rkey());
  raddr->reserved = 0;
  auto* data = reinterpret_cast<mlx5_wqe_data_seg*>(raddr + 1);
#if defined(__SSE3__)
  mlx5dv_x86_set_data_seg(data, 2000, a.lkey(), a.addr());
  mlx5dv_x86_set_data_seg(data + 1, 3000, a.lkey(), a.addr(2000));
  mlx5dv_x86_set_ctrl_seg(ctrl, static_cast<uint16_t>(p.a.sq_pi), MLX5_OPCODE_RDMA_WRITE, 0,
                          p.a.qpn(), MLX5_WQE_CTRL_CQ_UPDATE, 4, 0, 0);
#else
  mlx5dv_set_data_seg(data, 2000, a.lkey(), a.addr());
  mlx5dv_set_data_seg(data + 1, 3000, a.lkey(), a.addr(2000));
  mlx5dv_set_ctrl_seg(ctrl, static_cast<uint16_t>(p.a.sq_pi), MLX5_OPCODE_RDMA_WRITE, 0, p.a.qpn(),
                      MLX5_WQE_CTRL_CQ_UPDATE, 4, 0, 0);
#endif
  finish_wqe(p.a, ctrl, 4);
  p.a.ring();
  wqe::CqeFields f;
  CHECK(p.wait_send(p.a, &f).status == IBV_WC_SUCCESS);
  CHECK(f.send_opcode == MLX5_OPCODE_RDMA_WRITE);
  CHECK(std::memcmp(a.data(), b.data(), 5000) == 0);
}

TEST_CASE("a fetch-and-add built with the rdma-core helpers and mlx5_wqe_atomic_seg") {
  Pair p;
  p.connect();
  Buffer a = p.a.reg(64);
  Buffer b = p.b.reg(64);
  *reinterpret_cast<uint64_t*>(b.data()) = 7;
  mlx5_wqe_ctrl_seg* ctrl = begin_wqe(p.a);
  auto* raddr = reinterpret_cast<mlx5_wqe_raddr_seg*>(ctrl + 1);
  raddr->raddr = htobe64(b.addr());
  raddr->rkey = htobe32(b.rkey());
  raddr->reserved = 0;
  auto* atomic = reinterpret_cast<mlx5_wqe_atomic_seg*>(raddr + 1);
  atomic->swap_add = htobe64(5);
  atomic->compare = 0;
  mlx5dv_set_data_seg(reinterpret_cast<mlx5_wqe_data_seg*>(atomic + 1), 8, a.lkey(), a.addr());
  mlx5dv_set_ctrl_seg(ctrl, static_cast<uint16_t>(p.a.sq_pi), MLX5_OPCODE_ATOMIC_FA, 0, p.a.qpn(),
                      MLX5_WQE_CTRL_CQ_UPDATE, 4, 0, 0);
  finish_wqe(p.a, ctrl, 4);
  p.a.ring();
  CHECK(p.wait_send(p.a).status == IBV_WC_SUCCESS);
  CHECK(*reinterpret_cast<uint64_t*>(a.data()) == 7);
  CHECK(*reinterpret_cast<uint64_t*>(b.data()) == 12);
}
