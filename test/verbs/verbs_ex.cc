// SPDX-License-Identifier: BSD-3-Clause
// rdma-core's extended verbs through the unmodified libibverbs and libmlx5 (the uverbs shim
// preloaded): QPs from ibv_create_qp_ex posting through libmlx5's ibv_wr_* path, extended
// CQs read through ibv_start_poll/ibv_next_poll, and ibv_rereg_mr.
#include <catch2/catch.hpp>

#include <infiniband/verbs.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "verbs_fixtures.h"

using namespace verbs_test;

namespace {

void connect(Endpoint& a, Endpoint& b) {
  a.to_rtr(b);
  b.to_rtr(a);
  a.to_rts();
  b.to_rts();
}

// Every completion of an extended CQ until `n` arrived: (wr_id, status, opcode, byte_len).
struct ExCompletion {
  uint64_t wr_id;
  ibv_wc_status status;
  ibv_wc_opcode opcode;
  uint32_t byte_len;
};

std::vector<ExCompletion> poll_ex(ibv_cq_ex* cqx, size_t n) {
  REQUIRE(cqx);
  std::vector<ExCompletion> got;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (got.size() < n) {
    ibv_poll_cq_attr attr{};
    int rc = ibv_start_poll(cqx, &attr);
    if (rc == ENOENT) {
      REQUIRE(std::chrono::steady_clock::now() < deadline);
      std::this_thread::yield();
      continue;
    }
    REQUIRE(rc == 0);
    do {
      got.push_back({cqx->wr_id, cqx->status, ibv_wc_read_opcode(cqx), ibv_wc_read_byte_len(cqx)});
    } while (got.size() < n && (rc = ibv_next_poll(cqx)) == 0);
    ibv_end_poll(cqx);
    if (rc != 0) REQUIRE(rc == ENOENT);
  }
  return got;
}

}  // namespace

TEST_CASE("QPs from ibv_create_qp_ex post through ibv_wr_rdma_write, ibv_wr_send and "
          "ibv_wr_complete, and an extended CQ reports them") {
  Device da("rnicsim0"), db("rnicsim1");
  Endpoint a(da, false, false, nullptr, /*extended=*/true);
  Endpoint b(db, false, false, nullptr, /*extended=*/true);
  connect(a, b);
  Buffer src(da.pd, 4096, kAllAccess), dst(db.pd, 4096, kAllAccess);
  fill(src.bytes, 9);
  b.post_recv(dst, 2048, 1024, 77);

  ibv_qp_ex* qpx = ibv_qp_to_qp_ex(a.qp);
  REQUIRE(qpx);
  ibv_wr_start(qpx);
  qpx->wr_id = 1;
  qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_rdma_write(qpx, dst.mr->rkey, dst.addr(0));
  ibv_wr_set_sge(qpx, src.mr->lkey, src.addr(0), 1000);
  qpx->wr_id = 2;
  qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send_imm(qpx, htobe32(0xabcd));
  ibv_wr_set_sge(qpx, src.mr->lkey, src.addr(1000), 300);
  REQUIRE(ibv_wr_complete(qpx) == 0);

  const std::vector<ExCompletion> sent = poll_ex(a.cq_ex, 2);
  CHECK(sent[0].wr_id == 1);
  CHECK(sent[0].status == IBV_WC_SUCCESS);
  CHECK(sent[0].opcode == IBV_WC_RDMA_WRITE);
  CHECK(sent[1].wr_id == 2);
  CHECK(sent[1].status == IBV_WC_SUCCESS);
  CHECK(sent[1].opcode == IBV_WC_SEND);
  const std::vector<ExCompletion> recv = poll_ex(b.cq_ex, 1);
  CHECK(recv[0].wr_id == 77);
  CHECK(recv[0].status == IBV_WC_SUCCESS);
  CHECK(recv[0].opcode == IBV_WC_RECV);
  CHECK(recv[0].byte_len == 300);
  CHECK(std::equal(src.bytes.begin(), src.bytes.begin() + 1000, dst.bytes.begin()));
  CHECK(std::equal(src.bytes.begin() + 1000, src.bytes.begin() + 1300, dst.bytes.begin() + 2048));

  // An aborted batch posts nothing: the next one completes alone.
  ibv_wr_start(qpx);
  qpx->wr_id = 3;
  qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_rdma_write(qpx, dst.mr->rkey, dst.addr(3000));
  ibv_wr_set_sge(qpx, src.mr->lkey, src.addr(0), 8);
  ibv_wr_abort(qpx);
  ibv_wr_start(qpx);
  qpx->wr_id = 4;
  qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_rdma_read(qpx, dst.mr->rkey, dst.addr(2048));
  ibv_wr_set_sge(qpx, src.mr->lkey, src.addr(2048), 300);
  REQUIRE(ibv_wr_complete(qpx) == 0);
  const std::vector<ExCompletion> read = poll_ex(a.cq_ex, 1);
  CHECK(read[0].wr_id == 4);
  CHECK(read[0].opcode == IBV_WC_RDMA_READ);
  CHECK(read[0].byte_len == 300);
  CHECK(std::equal(src.bytes.begin() + 2048, src.bytes.begin() + 2348, src.bytes.begin() + 1000));
  CHECK(std::all_of(dst.bytes.begin() + 3000, dst.bytes.begin() + 3008,
                    [](uint8_t x) { return x == 0; }));
}

TEST_CASE("an extended CQ gives each completion the device's timestamp, on a 1 GHz core clock") {
  Device da("rnicsim0"), db("rnicsim1");
  ibv_device_attr_ex attr{};
  REQUIRE(ibv_query_device_ex(da.ctx, nullptr, &attr) == 0);
  CHECK(attr.hca_core_clock == 1000000);  // kHz: one tick per nanosecond
  CHECK(attr.completion_timestamp_mask == ~uint64_t{0});
  ibv_cq_init_attr_ex ca{};
  ca.cqe = 16;
  ca.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
  ibv_cq_ex* cqx = ibv_create_cq_ex(da.ctx, &ca);
  REQUIRE(cqx);
  Endpoint b(db);
  ibv_qp_init_attr init = qp_init(ibv_cq_ex_to_cq(cqx), ibv_cq_ex_to_cq(cqx), IBV_QPT_RC, 8, 1);
  ibv_qp* qp = ibv_create_qp(da.pd, &init);
  REQUIRE(qp);
  // An endpoint around the QP for the moves: Endpoint's own QP is replaced.
  Endpoint a(da);
  ibv_qp* own = a.qp;
  a.qp = qp;
  connect(a, b);
  Buffer src(da.pd, 64, kAllAccess), dst(db.pd, 64, kAllAccess);
  std::vector<uint64_t> stamps;
  for (int i = 0; i < 3; ++i) {
    ibv_sge sge{src.addr(), 8, src.mr->lkey};
    ibv_send_wr wr = make_wr(IBV_WR_RDMA_WRITE, &sge, 1, i);
    wr.wr.rdma.remote_addr = dst.addr();
    wr.wr.rdma.rkey = dst.mr->rkey;
    a.post(wr);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    ibv_poll_cq_attr pa{};
    int rc;
    while ((rc = ibv_start_poll(cqx, &pa)) == ENOENT) {
      REQUIRE(std::chrono::steady_clock::now() < deadline);
      std::this_thread::yield();
    }
    REQUIRE(rc == 0);
    CHECK(cqx->status == IBV_WC_SUCCESS);
    stamps.push_back(ibv_wc_read_completion_ts(cqx));
    ibv_end_poll(cqx);
  }
  CHECK(stamps[0] > 0);
  CHECK(stamps[1] > stamps[0]);
  CHECK(stamps[2] > stamps[1]);
  // `a` destroys its own QP and CQ; this QP and the extended CQ go here, the QP first.
  a.qp = own;
  CHECK(ibv_destroy_qp(qp) == 0);
  CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(cqx)) == 0);
}

TEST_CASE("ibv_rereg_mr moves a region to another buffer and changes its access under the "
          "same keys; a refused change leaves the region as it was") {
  Pair p;
  Buffer src(p.da.pd, 256, kAllAccess);
  fill(src.bytes, 5);
  std::vector<uint8_t> first(256, 0), second(256, 0);
  ibv_mr* mr = ibv_reg_mr(p.db.pd, first.data(), first.size(),
                          IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  REQUIRE(mr);
  // The peer keeps the rkey it was given: mlx5 changes the region in place (the same mkey).
  const uint32_t lkey = mr->lkey, rkey = mr->rkey;
  const auto write_to = [&](uint64_t addr, uint32_t key, uint64_t id) {
    ibv_sge sge{src.addr(), 64, src.mr->lkey};
    ibv_send_wr wr = make_wr(IBV_WR_RDMA_WRITE, &sge, 1, id);
    wr.wr.rdma.remote_addr = addr;
    wr.wr.rdma.rkey = key;
    p.a.post(wr);
    return p.a.wait();
  };

  // A new translation: the writes land in the second buffer.
  REQUIRE(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, second.data(),
                       second.size(), 0) == 0);
  CHECK(mr->addr == second.data());
  CHECK(mr->lkey == lkey);
  CHECK(mr->rkey == rkey);
  ibv_wc wc = write_to(reinterpret_cast<uint64_t>(second.data()), rkey, 1);
  REQUIRE(wc.status == IBV_WC_SUCCESS);
  CHECK(std::equal(src.bytes.begin(), src.bytes.begin() + 64, second.begin()));
  CHECK(std::all_of(first.begin(), first.end(), [](uint8_t x) { return x == 0; }));

  // A refused change (a range that is not mapped) leaves the region as it was.
  errno = 0;
  CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, nullptr, 4096, 0) != 0);
  wc = write_to(reinterpret_cast<uint64_t>(second.data()) + 64, rkey, 2);
  REQUIRE(wc.status == IBV_WC_SUCCESS);
  // The first buffer is no longer the region's: a write there under the key is refused.
  wc = write_to(reinterpret_cast<uint64_t>(first.data()), rkey, 4);
  CHECK(wc.status == IBV_WC_REM_ACCESS_ERR);
  CHECK(std::all_of(first.begin(), first.end(), [](uint8_t x) { return x == 0; }));
  p.restart();

  // Local write only: the peer's next WRITE is refused.
  REQUIRE(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0,
                       IBV_ACCESS_LOCAL_WRITE) == 0);
  CHECK(mr->rkey == rkey);
  wc = write_to(reinterpret_cast<uint64_t>(second.data()), rkey, 3);
  CHECK(wc.status == IBV_WC_REM_ACCESS_ERR);
  p.restart();

  // Remote write again, on the same key: the peer's write is taken.
  REQUIRE(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0,
                       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) == 0);
  CHECK(mr->rkey == rkey);
  wc = write_to(reinterpret_cast<uint64_t>(second.data()) + 128, rkey, 5);
  CHECK(wc.status == IBV_WC_SUCCESS);
  CHECK(ibv_dereg_mr(mr) == 0);
}

TEST_CASE("ibv_create_qp_ex with create flags goes through the extended CREATE_QP: no flags "
          "makes a working RC QP, a flag the device lacks is refused with EOPNOTSUPP") {
  Device d{"rnicsim0"};
  ibv_cq* cq = ibv_create_cq(d.ctx, 16, nullptr, nullptr, 0);
  REQUIRE(cq);
  ibv_qp_init_attr_ex x{};
  x.send_cq = cq;
  x.recv_cq = cq;
  x.qp_type = IBV_QPT_RC;
  x.cap = qp_init(cq, cq, IBV_QPT_RC, 8, 1).cap;
  x.pd = d.pd;
  // IBV_QP_INIT_ATTR_CREATE_FLAGS is what makes libmlx5 send the extended command.
  x.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
  x.create_flags = 0;
  ibv_qp* qp = ibv_create_qp_ex(d.ctx, &x);
  REQUIRE(qp);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
  CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                  IBV_QP_ACCESS_FLAGS) == 0);
  ibv_qp_init_attr got{};
  CHECK(ibv_query_qp(qp, &a, IBV_QP_STATE | IBV_QP_CAP, &got) == 0);
  CHECK(a.qp_state == IBV_QPS_INIT);
  CHECK(got.cap.max_send_wr >= 8);
  CHECK(ibv_destroy_qp(qp) == 0);

  x.create_flags = IBV_QP_CREATE_SCATTER_FCS;
  errno = 0;
  CHECK(ibv_create_qp_ex(d.ctx, &x) == nullptr);
  CHECK(errno == EOPNOTSUPP);
  CHECK(ibv_destroy_cq(cq) == 0);
}

TEST_CASE("the address vector's traffic class, hop limit, flow label and SL reach the QP, and "
          "ibv_query_qp reads them back; the flow label is cut to its 20 bits") {
  Device da("rnicsim0"), db("rnicsim1");
  Endpoint a(da), b(db);
  ibv_qp_attr x{};
  x.qp_state = IBV_QPS_INIT;
  x.port_num = 1;
  x.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
  REQUIRE(ibv_modify_qp(a.qp, &x, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                      IBV_QP_ACCESS_FLAGS) == 0);
  x = {};
  x.qp_state = IBV_QPS_RTR;
  x.path_mtu = IBV_MTU_1024;
  x.dest_qp_num = b.qp->qp_num;
  x.max_dest_rd_atomic = 1;
  x.min_rnr_timer = 12;
  x.ah_attr.is_global = 1;
  x.ah_attr.grh.dgid = port_gid(db.ctx);
  x.ah_attr.grh.sgid_index = kGidIndex;
  x.ah_attr.grh.traffic_class = 0x62;  // DSCP 24, ECN 10 (ECT(0))
  x.ah_attr.grh.hop_limit = 9;
  x.ah_attr.grh.flow_label = 0xFFF12345;  // UCX passes ~0; mlx5 keeps 20 bits
  x.ah_attr.sl = 3;
  x.ah_attr.port_num = 1;
  const int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                   IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  REQUIRE(ibv_modify_qp(a.qp, &x, mask) == 0);
  ibv_qp_attr q{};
  ibv_qp_init_attr init{};
  REQUIRE(ibv_query_qp(a.qp, &q, IBV_QP_AV, &init) == 0);
  CHECK(q.ah_attr.grh.traffic_class == 0x62);
  CHECK(q.ah_attr.grh.hop_limit == 9);
  CHECK(q.ah_attr.grh.flow_label == 0x12345);
  CHECK(q.ah_attr.sl == 3);
}

TEST_CASE("ibv_query_device_ex states packet pacing for RC QPs, and ibv_modify_qp_rate_limit "
          "sets, refuses and lifts a QP's rate") {
  Device da("rnicsim0");
  ibv_device_attr_ex attr{};
  REQUIRE(ibv_query_device_ex(da.ctx, nullptr, &attr) == 0);
  CHECK(attr.packet_pacing_caps.qp_rate_limit_min == 1000);
  CHECK(attr.packet_pacing_caps.qp_rate_limit_max == 100000000);
  CHECK((attr.packet_pacing_caps.supported_qpts & (1u << IBV_QPT_RC)) != 0);
  Endpoint a(da);
  ibv_qp_rate_limit_attr r{};
  r.rate_limit = 25000;  // kb/s
  r.max_burst_sz = 8192;
  r.typical_pkt_sz = 1024;
  CHECK(ibv_modify_qp_rate_limit(a.qp, &r) == 0);
  r.rate_limit = 500;  // below the device's range
  r.max_burst_sz = 0;
  r.typical_pkt_sz = 0;
  CHECK(ibv_modify_qp_rate_limit(a.qp, &r) == EINVAL);
  r.rate_limit = 0;  // no limit
  CHECK(ibv_modify_qp_rate_limit(a.qp, &r) == 0);
}
