// SPDX-License-Identifier: BSD-3-Clause
// QPs created with a send or a receive queue of zero entries, through the unmodified
// libibverbs and libmlx5 (the uverbs shim preloaded), between two simulated HCAs on the UDP
// wire. As on mlx5, max_send_wr = 0 gives a QP without a send queue (libmlx5 lays out no SQ
// and passes a ring of 0 blocks) and max_recv_wr = 0 one without a receive queue. Such a QP
// is connected like any other and is the target of RDMA and SENDs; libmlx5 refuses a post to
// the queue it lacks with ENOMEM (its overflow check, with room for 0), and the device never
// reads a send queue that is not there, whatever a doorbell says.
#include <catch2/catch.hpp>

#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "verbs_fixtures.h"

using namespace verbs_test;

namespace {

// A QP of `type` with `send` and `recv` WRs (0: no such queue), one SGE each way, on a CQ of
// its own.
struct DepthQp {
  Device& dev;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  DepthQp(Device& d, ibv_qp_type type, uint32_t send, uint32_t recv) : dev(d) {
    cq = ibv_create_cq(d.ctx, 64, nullptr, nullptr, 0);
    REQUIRE(cq);
    ibv_qp_init_attr init = qp_init(cq, cq, type, 0, 1);
    init.cap.max_send_wr = send;
    init.cap.max_recv_wr = recv;
    qp = ibv_create_qp(d.pd, &init);
    INFO("ibv_create_qp(" << (type == IBV_QPT_UD ? "UD" : "RC") << ", send " << send << ", recv "
                          << recv << "): errno " << errno << " (" << std::strerror(errno) << ")");
    REQUIRE(qp);
  }
  ~DepthQp() {
    CHECK(ibv_destroy_qp(qp) == 0);
    CHECK(ibv_destroy_cq(cq) == 0);
  }
  ibv_qp_cap cap() const {
    ibv_qp_attr a{};
    ibv_qp_init_attr init{};
    REQUIRE(ibv_query_qp(qp, &a, IBV_QP_CAP, &init) == 0);
    return init.cap;
  }
  ibv_qp_state state() const {
    ibv_qp_attr a{};
    ibv_qp_init_attr init{};
    REQUIRE(ibv_query_qp(qp, &a, IBV_QP_STATE, &init) == 0);
    return a.qp_state;
  }
  ibv_wc wait() { return wait_one(cq); }
  // True when the CQ stays empty for a while (the device runs on its own thread).
  bool stays_empty() {
    ibv_wc wc{};
    for (int i = 0; i < 20; ++i) {
      const int n = ibv_poll_cq(cq, 1, &wc);
      REQUIRE(n >= 0);
      if (n != 0) {
        UNSCOPED_INFO("unexpected completion: wr_id " << wc.wr_id << " status " << wc.status
                                                      << " opcode " << wc.opcode);
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return true;
  }
};

// Two connected RC QPs: `a` on rnicsim0 with the given depths, `b` on rnicsim1.
struct RcPair {
  Device da{"rnicsim0"}, db{"rnicsim1"};
  DepthQp a, b;
  RcPair(uint32_t a_send, uint32_t a_recv, uint32_t b_send, uint32_t b_recv)
      : a(da, IBV_QPT_RC, a_send, a_recv), b(db, IBV_QPT_RC, b_send, b_recv) {
    rc_to_rtr(a.qp, b.qp->qp_num, port_gid(db.ctx));
    rc_to_rtr(b.qp, a.qp->qp_num, port_gid(da.ctx));
    rc_to_rts(a.qp);
    rc_to_rts(b.qp);
    REQUIRE(a.state() == IBV_QPS_RTS);
    REQUIRE(b.state() == IBV_QPS_RTS);
  }
};

ibv_send_wr rdma_wr(ibv_wr_opcode op, ibv_sge* sge, uint64_t wr_id, const Buffer& remote,
                    size_t off) {
  ibv_send_wr wr = make_wr(op, sge, 1, wr_id);
  wr.wr.rdma.remote_addr = remote.addr(off);
  wr.wr.rdma.rkey = remote.mr->rkey;
  return wr;
}

void post_ok(ibv_qp* qp, ibv_send_wr& wr) {
  ibv_send_wr* bad = nullptr;
  REQUIRE(ibv_post_send(qp, &wr, &bad) == 0);
}

// A SEND of `len` bytes at `off` of `b` posted to `qp`: libmlx5's return value, and whether
// it named this WR as the bad one.
int refused_send(ibv_qp* qp, const Buffer& b, uint32_t len, bool* named_bad) {
  ibv_sge sge{b.addr(0), len, b.mr->lkey};
  ibv_send_wr wr = make_wr(IBV_WR_SEND, &sge, 1, 99);
  ibv_send_wr* bad = nullptr;
  const int rc = ibv_post_send(qp, &wr, &bad);
  *named_bad = bad == &wr;
  return rc;
}

int refused_recv(ibv_qp* qp, const Buffer& b, bool* named_bad) {
  ibv_sge sge;
  ibv_recv_wr wr;
  ibv_recv_wr* bad = nullptr;
  const int rc = ibv_post_recv(qp, one_recv(sge, wr, b, 0, 64, 98), &bad);
  *named_bad = bad == &wr;
  return rc;
}

}  // namespace

TEST_CASE(
    "an RC QP without a send queue is the target of RDMA WRITE and READ, and of SENDs "
    "when it has a receive queue") {
  const uint32_t recv = GENERATE(16u, 0u);
  INFO("passive QP: send 0, recv " << recv);
  RcPair p(16, 16, 0, recv);
  CHECK(p.b.cap().max_send_wr == 0);
  CHECK(p.b.cap().max_recv_wr == recv);
  Buffer abuf(p.da.pd, 65536, kAllAccess);
  Buffer bbuf(p.db.pd, 65536, kAllAccess);
  fill(abuf.bytes, 5);
  std::fill(abuf.bytes.begin() + 32768, abuf.bytes.end(), 0);
  std::fill(bbuf.bytes.begin(), bbuf.bytes.begin() + 32768, 0);
  for (size_t i = 32768; i < 65536; ++i) bbuf.bytes[i] = static_cast<uint8_t>(i * 13 + 1);

  // A WRITE of several packets (MTU 1024), then a READ of several response packets.
  ibv_sge wsge{abuf.addr(0), 5000, abuf.mr->lkey};
  ibv_send_wr write = rdma_wr(IBV_WR_RDMA_WRITE, &wsge, 1, bbuf, 0);
  post_ok(p.a.qp, write);
  ibv_sge rsge{abuf.addr(32768), 3000, abuf.mr->lkey};
  ibv_send_wr read = rdma_wr(IBV_WR_RDMA_READ, &rsge, 2, bbuf, 32768);
  post_ok(p.a.qp, read);
  for (uint64_t id : {1, 2}) {
    const ibv_wc wc = p.a.wait();
    CHECK(wc.status == IBV_WC_SUCCESS);
    CHECK(wc.wr_id == id);
  }
  CHECK(std::equal(abuf.bytes.begin(), abuf.bytes.begin() + 5000, bbuf.bytes.begin()));
  CHECK(std::equal(bbuf.bytes.begin() + 32768, bbuf.bytes.begin() + 32768 + 3000,
                   abuf.bytes.begin() + 32768));

  if (recv != 0) {
    // A SEND of three packets and a WRITE with immediate each take one receive.
    post_one_recv(p.b.qp, bbuf, 8192, 4096, 11);
    post_one_recv(p.b.qp, bbuf, 16384, 64, 12);
    ibv_sge ssge{abuf.addr(100), 3000, abuf.mr->lkey};
    ibv_send_wr send = make_wr(IBV_WR_SEND, &ssge, 1, 3);
    post_ok(p.a.qp, send);
    ibv_sge isge{abuf.addr(200), 64, abuf.mr->lkey};
    ibv_send_wr wimm = rdma_wr(IBV_WR_RDMA_WRITE_WITH_IMM, &isge, 4, bbuf, 24576);
    wimm.imm_data = htobe32(0xabcd);
    post_ok(p.a.qp, wimm);
    for (uint64_t id : {3, 4}) {
      const ibv_wc wc = p.a.wait();
      CHECK(wc.status == IBV_WC_SUCCESS);
      CHECK(wc.wr_id == id);
    }
    const ibv_wc r1 = p.b.wait();
    CHECK(r1.status == IBV_WC_SUCCESS);
    CHECK(r1.opcode == IBV_WC_RECV);
    CHECK(r1.wr_id == 11);
    CHECK(r1.byte_len == 3000);
    CHECK(
        std::equal(abuf.bytes.begin() + 100, abuf.bytes.begin() + 3100, bbuf.bytes.begin() + 8192));
    const ibv_wc r2 = p.b.wait();
    CHECK(r2.status == IBV_WC_SUCCESS);
    CHECK(r2.opcode == IBV_WC_RECV_RDMA_WITH_IMM);
    CHECK(r2.wr_id == 12);
    CHECK(be32toh(r2.imm_data) == 0xabcd);
    CHECK(
        std::equal(abuf.bytes.begin() + 200, abuf.bytes.begin() + 264, bbuf.bytes.begin() + 24576));
  }
  // The passive side completes nothing of its own.
  CHECK(p.b.stays_empty());
}

TEST_CASE(
    "an RC QP without a receive queue sends, writes and reads; a SEND to it waits for a "
    "receive it cannot have") {
  // a: send 16, recv 0 (the active side); b: send 16, recv 16.
  RcPair p(16, 0, 16, 16);
  CHECK(p.a.cap().max_recv_wr == 0);
  Buffer abuf(p.da.pd, 16384, kAllAccess);
  Buffer bbuf(p.db.pd, 16384, kAllAccess);
  fill(abuf.bytes, 9);
  post_one_recv(p.b.qp, bbuf, 4096, 4096, 21);
  ibv_sge ssge{abuf.addr(0), 2000, abuf.mr->lkey};
  ibv_send_wr send = make_wr(IBV_WR_SEND, &ssge, 1, 1);
  post_ok(p.a.qp, send);
  ibv_sge wsge{abuf.addr(0), 1500, abuf.mr->lkey};
  ibv_send_wr write = rdma_wr(IBV_WR_RDMA_WRITE, &wsge, 2, bbuf, 8192);
  post_ok(p.a.qp, write);
  for (uint64_t id : {1, 2}) {
    const ibv_wc wc = p.a.wait();
    CHECK(wc.status == IBV_WC_SUCCESS);
    CHECK(wc.wr_id == id);
  }
  const ibv_wc r = p.b.wait();
  CHECK(r.status == IBV_WC_SUCCESS);
  CHECK(r.wr_id == 21);
  CHECK(std::equal(abuf.bytes.begin(), abuf.bytes.begin() + 2000, bbuf.bytes.begin() + 4096));
  CHECK(std::equal(abuf.bytes.begin(), abuf.bytes.begin() + 1500, bbuf.bytes.begin() + 8192));

  bool named = false;
  CHECK(refused_recv(p.a.qp, abuf, &named) == ENOMEM);
  CHECK(named);
}

TEST_CASE(
    "a post to a queue the QP does not have fails with ENOMEM, as libmlx5 answers on "
    "mlx5, and nothing reaches the wire") {
  const uint32_t recv = GENERATE(16u, 0u);
  INFO("QP without a send queue: recv " << recv);
  RcPair p(16, 16, 0, recv);
  Buffer abuf(p.da.pd, 8192, kAllAccess);
  Buffer bbuf(p.db.pd, 8192, kAllAccess);
  post_one_recv(p.a.qp, abuf, 0, 4096, 31);
  bool named = false;
  CHECK(refused_send(p.b.qp, bbuf, 100, &named) == ENOMEM);
  CHECK(named);
  if (recv == 0) {
    CHECK(refused_recv(p.b.qp, bbuf, &named) == ENOMEM);
    CHECK(named);
  }
  // The QP is still connected and answers a WRITE from its peer, and the refused SEND never
  // arrived: the peer's receive is still posted.
  ibv_sge wsge{abuf.addr(4096), 256, abuf.mr->lkey};
  ibv_send_wr write = rdma_wr(IBV_WR_RDMA_WRITE, &wsge, 1, bbuf, 0);
  post_ok(p.a.qp, write);
  const ibv_wc wc = p.a.wait();
  CHECK(wc.status == IBV_WC_SUCCESS);
  CHECK(wc.wr_id == 1);
  CHECK(p.a.stays_empty());
  CHECK(p.b.stays_empty());
  CHECK(p.b.state() == IBV_QPS_RTS);
}

TEST_CASE(
    "a doorbell rung on a QP without a send queue fetches nothing, in RTS and in ERR, and "
    "the QP keeps receiving") {
  RcPair p(16, 16, 0, 16);
  Buffer abuf(p.da.pd, 8192, kAllAccess);
  Buffer bbuf(p.db.pd, 8192, kAllAccess);
  mlx5dv_qp dv{};
  mlx5dv_obj obj{};
  obj.qp.in = p.b.qp;
  obj.qp.out = &dv;
  REQUIRE(mlx5dv_init_obj(&obj, MLX5DV_OBJ_QP) == 0);
  CHECK(dv.sq.wqe_cnt == 0);
  REQUIRE(dv.dbrec);
  REQUIRE(dv.bf.reg);
  // What a driver that ignored the missing queue would store: a send record four blocks
  // ahead, and the first 8 bytes of a SEND's control segment in the QP's register.
  const auto ring = [&](uint16_t pi) {
    dv.dbrec[MLX5_SND_DBR] = htobe32(pi);
    std::atomic_thread_fence(std::memory_order_release);
    const uint32_t ctrl[2] = {htobe32(static_cast<uint32_t>(pi) << 8 | MLX5_OPCODE_SEND),
                              htobe32(p.b.qp->qp_num << 8 | 1)};
    uint64_t word = 0;
    std::memcpy(&word, ctrl, sizeof word);
    *static_cast<volatile uint64_t*>(dv.bf.reg) = word;
  };
  ring(4);
  post_one_recv(p.b.qp, bbuf, 0, 1024, 41);
  post_one_recv(p.b.qp, bbuf, 1024, 1024, 42);
  ibv_sge ssge{abuf.addr(0), 500, abuf.mr->lkey};
  ibv_send_wr send = make_wr(IBV_WR_SEND, &ssge, 1, 1);
  post_ok(p.a.qp, send);
  CHECK(p.a.wait().status == IBV_WC_SUCCESS);
  const ibv_wc r = p.b.wait();
  CHECK(r.status == IBV_WC_SUCCESS);
  CHECK(r.wr_id == 41);
  CHECK(p.b.stays_empty());
  CHECK(p.b.state() == IBV_QPS_RTS);

  // In ERR the device flushes what the queues hold: the one receive still posted, and no
  // send queue entry (libmlx5 has no ring to match one against).
  ibv_qp_attr e{};
  e.qp_state = IBV_QPS_ERR;
  REQUIRE(ibv_modify_qp(p.b.qp, &e, IBV_QP_STATE) == 0);
  ring(8);
  const ibv_wc f = p.b.wait();
  CHECK(f.status == IBV_WC_WR_FLUSH_ERR);
  CHECK(f.wr_id == 42);
  CHECK(p.b.stays_empty());
}

TEST_CASE(
    "a receive doorbell record stored for a QP without a receive queue takes nothing: a SEND "
    "to it is not placed, and the QP stays connected") {
  // b has a send queue and no receive queue; its first send WQE is a real SEND, so a device
  // that gave b a receive ring anyway (over the front of the send queue) would read those
  // bytes as a receive WQE.
  RcPair p(16, 16, 16, 0);
  Buffer abuf(p.da.pd, 8192, kAllAccess);
  Buffer bbuf(p.db.pd, 8192, kAllAccess);
  fill(bbuf.bytes, 5);
  post_one_recv(p.a.qp, abuf, 0, 4096, 11);
  ibv_sge bsge{bbuf.addr(0), 64, bbuf.mr->lkey};
  ibv_send_wr bsend = make_wr(IBV_WR_SEND, &bsge, 1, 12);
  post_ok(p.b.qp, bsend);
  CHECK(p.a.wait().wr_id == 11);
  CHECK(p.b.wait().status == IBV_WC_SUCCESS);

  mlx5dv_qp dv{};
  mlx5dv_obj obj{};
  obj.qp.in = p.b.qp;
  obj.qp.out = &dv;
  REQUIRE(mlx5dv_init_obj(&obj, MLX5DV_OBJ_QP) == 0);
  CHECK(dv.rq.wqe_cnt == 0);
  REQUIRE(dv.dbrec);
  // What a driver that ignored the missing queue would store: one receive posted.
  const std::vector<uint8_t> before = bbuf.bytes;
  dv.dbrec[MLX5_RCV_DBR] = htobe32(1);
  std::atomic_thread_fence(std::memory_order_release);

  fill(abuf.bytes, 7);
  ibv_sge asge{abuf.addr(4096), 300, abuf.mr->lkey};
  ibv_send_wr asend = make_wr(IBV_WR_SEND, &asge, 1, 13);
  post_ok(p.a.qp, asend);
  // The SEND finds no receive (RNR NAKs, retried without end): nothing completes on either
  // side, b's memory is untouched, and b is still in RTS.
  CHECK(p.b.stays_empty());
  CHECK(p.a.stays_empty());
  CHECK(p.b.state() == IBV_QPS_RTS);
  CHECK(bbuf.bytes == before);
}

TEST_CASE(
    "a UD QP without a send queue receives datagrams; one without either queue connects "
    "and refuses both posts") {
  Device da{"rnicsim0"}, db{"rnicsim1"};
  constexpr uint32_t kQkey = 0x1234;
  const auto to_rts = [](ibv_qp* qp) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qkey = kQkey;
    REQUIRE(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY) ==
            0);
    a = {};
    a.qp_state = IBV_QPS_RTR;
    REQUIRE(ibv_modify_qp(qp, &a, IBV_QP_STATE) == 0);
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = 1;
    REQUIRE(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN) == 0);
  };
  // The sender has no receive queue, the receiver no send queue.
  DepthQp a(da, IBV_QPT_UD, 16, 0);
  DepthQp b(db, IBV_QPT_UD, 0, 16);
  DepthQp none(db, IBV_QPT_UD, 0, 0);
  for (DepthQp* q : {&a, &b, &none}) {
    to_rts(q->qp);
    CHECK(q->state() == IBV_QPS_RTS);
  }
  CHECK(b.cap().max_send_wr == 0);
  CHECK(none.cap().max_send_wr == 0);
  CHECK(none.cap().max_recv_wr == 0);
  Buffer abuf(da.pd, 8192, IBV_ACCESS_LOCAL_WRITE);
  Buffer bbuf(db.pd, 8192, IBV_ACCESS_LOCAL_WRITE);
  fill(abuf.bytes, 17);

  ibv_ah_attr ah_attr{};
  ah_attr.is_global = 1;
  ah_attr.grh.dgid = port_gid(db.ctx);
  ah_attr.grh.sgid_index = kGidIndex;
  ah_attr.grh.hop_limit = 64;
  ah_attr.port_num = 1;
  ibv_ah* ah = ibv_create_ah(da.pd, &ah_attr);
  REQUIRE(ah);
  const uint32_t kGrh = 40;
  for (uint32_t i = 0; i < 3; ++i) post_one_recv(b.qp, bbuf, i * 1024, kGrh + 900, 50 + i);
  for (uint32_t i = 0; i < 3; ++i) {
    ibv_sge sge{abuf.addr(i * 1000), 900, abuf.mr->lkey};
    ibv_send_wr wr = make_wr(IBV_WR_SEND, &sge, 1, 60 + i);
    wr.wr.ud.ah = ah;
    wr.wr.ud.remote_qpn = b.qp->qp_num;
    wr.wr.ud.remote_qkey = kQkey;
    post_ok(a.qp, wr);
  }
  for (uint32_t i = 0; i < 3; ++i) {
    const ibv_wc s = a.wait();
    CHECK(s.status == IBV_WC_SUCCESS);
    CHECK(s.wr_id == 60 + i);
    const ibv_wc r = b.wait();
    CHECK(r.status == IBV_WC_SUCCESS);
    CHECK(r.wr_id == 50 + i);
    CHECK(r.byte_len == kGrh + 900);
    CHECK(r.src_qp == a.qp->qp_num);
    CHECK(std::equal(abuf.bytes.begin() + i * 1000, abuf.bytes.begin() + i * 1000 + 900,
                     bbuf.bytes.begin() + i * 1024 + kGrh));
  }
  // A datagram to the QP with no receive queue is dropped like one that finds no receive.
  ibv_sge sge{abuf.addr(0), 100, abuf.mr->lkey};
  ibv_send_wr wr = make_wr(IBV_WR_SEND, &sge, 1, 70);
  wr.wr.ud.ah = ah;
  wr.wr.ud.remote_qpn = none.qp->qp_num;
  wr.wr.ud.remote_qkey = kQkey;
  post_ok(a.qp, wr);
  CHECK(a.wait().status == IBV_WC_SUCCESS);

  bool named = false;
  CHECK(refused_send(b.qp, bbuf, 100, &named) == ENOMEM);
  CHECK(named);
  CHECK(refused_send(none.qp, bbuf, 100, &named) == ENOMEM);
  CHECK(named);
  CHECK(refused_recv(none.qp, bbuf, &named) == ENOMEM);
  CHECK(named);
  CHECK(refused_recv(a.qp, abuf, &named) == ENOMEM);
  CHECK(named);
  CHECK(b.stays_empty());
  CHECK(none.stays_empty());
  CHECK(ibv_destroy_ah(ah) == 0);
}
