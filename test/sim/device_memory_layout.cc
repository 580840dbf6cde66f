// SPDX-License-Identifier: BSD-3-Clause
// Device memory in the real mlx5 layouts: UAR pages with BlueFlame registers at
// 0x800 + k * 512 used as two 256-byte halves, a QP buffer with the RQ first and the SQ after
// it, strides and counts as libmlx5 computes them, CQEs initialised to op_own 0xF0, doorbell
// records zeroed, and the device capabilities.
#include <catch2/catch.hpp>

#include <cstdint>

#include "sim_harness.h"

using namespace simtest;

TEST_CASE("QP buffer: RQ first, SQ right after it; strides and counts are powers of two") {
  auto fabric = make_fabric();
  HostOptions o;
  o.caps.max_send_wr = 100;
  o.caps.max_recv_wr = 50;
  o.caps.max_send_sge = 3;
  o.caps.max_recv_sge = 3;
  Host h(fabric, o);
  const mlx5dv_qp& dv = h.view().dv;
  CHECK(dv.sq.stride == 64);
  CHECK(dv.rq.stride == 64);  // next power of two of 16 * 3
  CHECK(dv.rq.wqe_cnt == 64);
  // ctrl + raddr + 3 data = 5 units -> 2 BBs per WQE; 100 WQEs -> 200 -> 256 BBs.
  CHECK(dv.sq.wqe_cnt == 256);
  CHECK(h.view().granted.max_send_wr == 128);
  CHECK(h.view().granted.max_recv_wr == 64);
  CHECK(static_cast<uint8_t*>(dv.sq.buf) ==
        static_cast<uint8_t*>(dv.rq.buf) + size_t{dv.rq.wqe_cnt} * dv.rq.stride);
  CHECK(reinterpret_cast<uintptr_t>(dv.rq.buf) % 4096 == 0);
  CHECK(dv.dbrec[MLX5_RCV_DBR] == 0);
  CHECK(dv.dbrec[MLX5_SND_DBR] == 0);
  CHECK(h.view().qpn == h.qpn());
  CHECK(h.view().qpn >= 2);  // QP0 and QP1 are special
}

TEST_CASE("a QP asked for with max_send_wr 0 has no send queue, and receives") {
  HostOptions sender = Pair::default_host();
  HostOptions receiver = Pair::default_host();
  receiver.caps.max_send_wr = 0;
  Pair p({}, sender, receiver);
  const mlx5dv_qp& dv = p.b.view().dv;
  CHECK(dv.sq.wqe_cnt == 0);
  CHECK(dv.sq.buf == nullptr);
  CHECK(p.b.view().granted.max_send_wr == 0);
  CHECK(p.b.view().granted.max_send_sge == 0);
  CHECK(p.b.view().granted.max_inline_data == 0);
  CHECK(p.b.view().granted.max_recv_wr == 256);
  p.connect();
  Buffer src = p.a.reg(4096, all_remote(), 0x21);
  Buffer dst = p.b.reg(4096);
  REQUIRE(p.b.post_recv(dst, 0, 4096) == Errc::ok);
  Sge sge{src.addr(), 3000, src.lkey()};
  REQUIRE(p.a.post_and_ring(make_wr(WrOpcode::send, &sge, 1)) == Errc::ok);
  CHECK(p.wait_send(p.a).status == IBV_WC_SUCCESS);
  const Completion r = p.wait_recv(p.b);
  CHECK(r.status == IBV_WC_SUCCESS);
  CHECK(r.byte_len == 3000);
  CHECK(dst.data()[2999] == 0x21);
  // A record and a register write naming it fetch nothing.
  __atomic_store_n(&dv.dbrec[MLX5_SND_DBR], htobe32(3), __ATOMIC_RELEASE);
  p.settle();
  CHECK(p.b.dev->counters().wqes_fetched == 0);
  Completion c{};
  CHECK_FALSE(p.b.poll_send(&c));
}

TEST_CASE("BlueFlame registers: 0x800 + k * 512 in page-aligned UAR pages, 256-byte halves") {
  auto fabric = make_fabric();
  HostOptions o;
  o.device.dedicated_bf_regs = 4;
  Host first(fabric, o);
  std::vector<std::unique_ptr<Host>> more;
  std::vector<uintptr_t> regs = {reinterpret_cast<uintptr_t>(first.view().dv.bf.reg)};
  std::vector<bool> shared = {first.view().bf_shared};
  for (int i = 0; i < 5; ++i) {
    more.push_back(std::make_unique<Host>());
    more.back()->init_on(first.dev, o);
    regs.push_back(reinterpret_cast<uintptr_t>(more.back()->view().dv.bf.reg));
    shared.push_back(more.back()->view().bf_shared);
  }
  for (size_t i = 0; i < regs.size(); ++i) {
    const uintptr_t off = regs[i] & 4095;
    CHECK(off >= 0x800);
    CHECK((off - 0x800) % 512 == 0);
  }
  CHECK(first.view().dv.bf.size == 256);
  // The first four QPs own a register each; the fifth and sixth share one.
  for (size_t i = 0; i < 4; ++i) {
    CHECK_FALSE(shared[i]);
    for (size_t j = 0; j < i; ++j) CHECK(regs[i] != regs[j]);
  }
  CHECK(shared[4]);
  CHECK(shared[5]);
  CHECK(regs[4] == regs[5]);
  // A register freed by a destroyed QP goes to the next QP.
  const uintptr_t freed = regs[1];
  more[0].reset();
  Host again;
  again.init_on(first.dev, o);
  CHECK(reinterpret_cast<uintptr_t>(again.view().dv.bf.reg) == freed);
  CHECK_FALSE(again.view().bf_shared);
}

TEST_CASE("CQ: a power-of-two ring of 64-byte CQEs at op_own 0xF0, a zeroed doorbell record") {
  auto fabric = make_fabric();
  auto dev = must(fabric->add_device());
  auto cq = must(dev->create_cq(100));
  const mlx5dv_cq& dv = cq->view().dv;
  CHECK(dv.cqe_cnt == 128);
  CHECK(dv.cqe_size == 64);
  CHECK(reinterpret_cast<uintptr_t>(dv.buf) % 4096 == 0);
  const auto* bytes = static_cast<const uint8_t*>(dv.buf);
  for (uint32_t i = 0; i < dv.cqe_cnt; ++i) REQUIRE(bytes[i * 64 + 63] == 0xF0);
  CHECK(dv.dbrec[0] == 0);
  CHECK(dv.dbrec[1] == 0);
  CHECK(dv.cq_uar != nullptr);
  CHECK(reinterpret_cast<uintptr_t>(dv.cq_uar) % 4096 == 0);
  CHECK_FALSE(dev->create_cq(0));
}

TEST_CASE("device info: name, RoCEv2 GID of the device's IPv4, ConnectX-like caps") {
  auto fabric = make_fabric();
  auto dev = must(fabric->add_device());
  const hw::DeviceInfo& info = dev->info();
  CHECK(info.kind == "sim");
  CHECK(info.name.rfind("sim", 0) == 0);
  CHECK(info.gid.is_ipv4_mapped());
  CHECK(info.gid.ipv4() == dev->ipv4());
  CHECK((dev->ipv4() >> 24) == 127);
  CHECK(info.caps.max_qp == 1024);
  CHECK(info.caps.max_qp_wr == 16384);
  CHECK(info.caps.max_send_sge == 30);
  CHECK(info.caps.max_recv_sge == 32);
  CHECK(info.caps.max_inline_data == 256);
  CHECK(info.caps.max_cqe == 4194304);
  CHECK(info.caps.max_mr == 65536);
  CHECK(info.caps.max_msg_size == (1u << 31));
  CHECK(info.caps.max_qp_rd_atom == 16);
  CHECK(info.caps.max_mtu == hw::Mtu::mtu4096);
  CHECK(info.profile.keeps_rtr_doorbell);
  CHECK_FALSE(info.profile.fetches_beyond_dbr);
  // The WQE format's limits: a 63-unit WQE holds ctrl + raddr + 61 data segments, or 972
  // bytes of inline data.
  sim::DeviceConfig too_many;
  too_many.caps.max_send_sge = 62;
  CHECK_FALSE(fabric->add_device(too_many));
  sim::DeviceConfig most;
  most.caps.max_send_sge = 61;
  most.caps.max_inline_data = 972;
  auto big = must(fabric->add_device(most));
  HostOptions o;
  o.caps.max_send_sge = 61;
  o.caps.max_inline_data = 972;
  Host h;
  h.init_on(big, o);
  CHECK(h.view().granted.max_send_sge == 61);
  CHECK(h.view().granted.max_inline_data == 972);
}

TEST_CASE("requests above the device's caps are refused with the reason") {
  auto fabric = make_fabric();
  auto dev = must(fabric->add_device());
  auto pd = must(dev->alloc_pd());
  auto cq = must(dev->create_cq(16));
  hw::QpCaps caps;
  caps.max_send_sge = 31;
  auto r = dev->create_qp(*pd, *cq, *cq, caps);
  REQUIRE_FALSE(r);
  CHECK(r.status().message().find("max_send_sge 31") != std::string::npos);
  caps.max_send_sge = 1;
  caps.max_inline_data = 257;
  CHECK_FALSE(dev->create_qp(*pd, *cq, *cq, caps));
  std::vector<uint8_t> mem(64);
  CHECK_FALSE(dev->reg_mr(*pd, mem.data(), 64, hw::access::remote_write));  // no local write
  CHECK_FALSE(dev->reg_mr(*pd, mem.data(), 0, 0));
}
