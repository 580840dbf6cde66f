// SPDX-License-Identifier: BSD-3-Clause
// Shared receive queues through the unmodified libibverbs and libmlx5 (the uverbs shim
// preloaded): libmlx5 lays the SRQ out and posts into it without a command; the simulated HCA
// follows its free list, names the QP in each receive completion, raises the limit event, and
// flushes only the failing QP's work.
#include <catch2/catch.hpp>

#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <vector>

#include "verbs_fixtures.h"

using namespace verbs_test;

namespace {

struct Srq {
  ibv_srq* srq = nullptr;
  Srq(ibv_pd* pd, uint32_t max_wr, uint32_t max_sge, uint32_t limit = 0) {
    ibv_srq_init_attr a{};
    a.attr.max_wr = max_wr;
    a.attr.max_sge = max_sge;
    a.attr.srq_limit = limit;
    srq = ibv_create_srq(pd, &a);
    REQUIRE(srq);
  }
  ~Srq() { CHECK(ibv_destroy_srq(srq) == 0); }
  void post(const Buffer& b, size_t off, uint32_t len, uint64_t wr_id) {
    ibv_sge sge;
    ibv_recv_wr wr;
    ibv_recv_wr* bad = nullptr;
    REQUIRE(ibv_post_srq_recv(srq, one_recv(sge, wr, b, off, len, wr_id), &bad) == 0);
  }
};

void connect(Endpoint& a, Endpoint& b) {
  a.to_rtr(b);
  b.to_rtr(a);
  a.to_rts();
  b.to_rts();
}

void send(Endpoint& from, const Buffer& src, size_t off, uint32_t len, uint64_t wr_id) {
  ibv_sge sge{src.addr(off), len, src.mr->lkey};
  ibv_send_wr wr = make_wr(IBV_WR_SEND, &sge, 1, wr_id);
  from.post(wr);
  const ibv_wc wc = from.wait();
  REQUIRE(wc.status == IBV_WC_SUCCESS);
  CHECK(wc.wr_id == wr_id);
}

// The next async event of `dev`, waiting up to 30 s.
ibv_async_event next_async_event(Device& dev) {
  pollfd pfd{dev.ctx->async_fd, POLLIN, 0};
  REQUIRE(poll(&pfd, 1, 30000) == 1);
  ibv_async_event ev{};
  REQUIRE(ibv_get_async_event(dev.ctx, &ev) == 0);
  return ev;
}

}  // namespace

TEST_CASE("an SRQ is created with the size asked for and reports it back") {
  Device d("rnicsim1");
  Srq s(d.pd, 100, 3);
  ibv_srq_attr a{};
  REQUIRE(ibv_query_srq(s.srq, &a) == 0);
  CHECK(a.max_wr >= 100);
  CHECK(a.max_sge >= 3);
  CHECK(a.srq_limit == 0);
  ibv_device_attr dev{};
  REQUIRE(ibv_query_device(d.ctx, &dev) == 0);
  CHECK(dev.max_srq > 0);
  CHECK(dev.max_srq_wr > 0);
  CHECK(dev.max_srq_sge > 0);
  // Resizing is refused, as by mlx5; too many SGEs are refused at creation.
  ibv_srq_attr grow{};
  grow.max_wr = 500;
  CHECK(ibv_modify_srq(s.srq, &grow, IBV_SRQ_MAX_WR) == EINVAL);
  ibv_srq_init_attr big{};
  big.attr.max_wr = 4;
  big.attr.max_sge = dev.max_srq_sge + 1;
  errno = 0;
  CHECK(ibv_create_srq(d.pd, &big) == nullptr);
  CHECK(errno == EINVAL);
}

TEST_CASE("receives posted to one SRQ serve several QPs, and each completion names its QP") {
  Device da("rnicsim0"), db("rnicsim1");
  Srq s(db.pd, 16, 1);
  Endpoint s0(da), s1(da);
  Endpoint r0(db, false, false, s.srq), r1(db, false, false, s.srq);
  connect(s0, r0);
  connect(s1, r1);
  constexpr int kMessages = 12;
  Buffer src(da.pd, 64 * kMessages, kAllAccess), dst(db.pd, 64 * kMessages, kAllAccess);
  fill(src.bytes, 11);
  for (int i = 0; i < kMessages; ++i) s.post(dst, 64 * i, 64, 1000 + i);
  // Alternating senders; message i carries src[64 i, 64 i + 40).
  for (int i = 0; i < kMessages; ++i) send(i % 2 ? s1 : s0, src, 64 * i, 40, i);
  std::set<uint64_t> seen;
  for (int i = 0; i < kMessages; ++i) {
    Endpoint& r = i % 2 ? r1 : r0;
    const ibv_wc wc = r.wait();
    REQUIRE(wc.status == IBV_WC_SUCCESS);
    CHECK(wc.opcode == IBV_WC_RECV);
    CHECK(wc.qp_num == r.qp->qp_num);
    CHECK(wc.byte_len == 40);
    // The SRQ hands WQEs out in the order they were posted, whichever QP takes them.
    CHECK(wc.wr_id == static_cast<uint64_t>(1000 + i));
    const size_t off = 64 * (wc.wr_id - 1000);
    CHECK(std::equal(src.bytes.begin() + 64 * i, src.bytes.begin() + 64 * i + 40,
                     dst.bytes.begin() + static_cast<long>(off)));
    seen.insert(wc.wr_id);
  }
  CHECK(seen.size() == kMessages);
  // Every WQE went back to libmlx5's free list: the SRQ takes a full load again.
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < 16; ++i) s.post(dst, 0, 64, i);
    for (int i = 0; i < 16; ++i) send(s0, src, 0, 8, i);
    for (int i = 0; i < 16; ++i) CHECK(r0.wait().status == IBV_WC_SUCCESS);
  }
}

TEST_CASE("the SRQ limit event fires once when fewer WQEs than the limit remain") {
  Device da("rnicsim0"), db("rnicsim1");
  Srq s(db.pd, 16, 1);
  Endpoint a(da), b(db, false, false, s.srq);
  connect(a, b);
  Buffer src(da.pd, 64, kAllAccess), dst(db.pd, 64 * 5, kAllAccess);
  for (int i = 0; i < 5; ++i) s.post(dst, 64 * i, 64, i);
  ibv_srq_attr arm{};
  arm.srq_limit = 3;
  REQUIRE(ibv_modify_srq(s.srq, &arm, IBV_SRQ_LIMIT) == 0);
  ibv_srq_attr q{};
  REQUIRE(ibv_query_srq(s.srq, &q) == 0);
  CHECK(q.srq_limit == 3);
  // 5 posted: after the second receive 3 remain (not below 3), after the third 2 do.
  for (int i = 0; i < 3; ++i) {
    send(a, src, 0, 8, i);
    REQUIRE(b.wait().status == IBV_WC_SUCCESS);
  }
  ibv_async_event ev = next_async_event(db);
  CHECK(ev.event_type == IBV_EVENT_SRQ_LIMIT_REACHED);
  CHECK(ev.element.srq == s.srq);
  ibv_ack_async_event(&ev);
  // The event disarmed the limit; the remaining receives raise no second one.
  REQUIRE(ibv_query_srq(s.srq, &q) == 0);
  CHECK(q.srq_limit == 0);
  for (int i = 3; i < 5; ++i) {
    send(a, src, 0, 8, i);
    REQUIRE(b.wait().status == IBV_WC_SUCCESS);
  }
  pollfd pfd{db.ctx->async_fd, POLLIN, 0};
  CHECK(poll(&pfd, 1, 0) == 0);
  // A limit at or above the queue's size is refused.
  arm.srq_limit = 100000;
  CHECK(ibv_modify_srq(s.srq, &arm, IBV_SRQ_LIMIT) == EINVAL);
}

TEST_CASE("a QP in error leaves the SRQ's receives to the other QPs, and a busy SRQ stays") {
  Device da("rnicsim0"), db("rnicsim1");
  Srq s(db.pd, 8, 1);
  Endpoint s0(da), s1(da);
  Endpoint r0(db, false, false, s.srq), r1(db, false, false, s.srq);
  connect(s0, r0);
  connect(s1, r1);
  Buffer src(da.pd, 64, kAllAccess), dst(db.pd, 64 * 4, kAllAccess);
  fill(src.bytes, 3);
  for (int i = 0; i < 4; ++i) s.post(dst, 64 * i, 64, i);
  // r0 fails: nothing of the SRQ is its own, so nothing is flushed to its CQ.
  ibv_qp_attr err{};
  err.qp_state = IBV_QPS_ERR;
  REQUIRE(ibv_modify_qp(r0.qp, &err, IBV_QP_STATE) == 0);
  // The SRQ is in use by two QPs: destroying it is refused.
  CHECK(ibv_destroy_srq(s.srq) == EBUSY);
  // All four receives still serve r1.
  for (int i = 0; i < 4; ++i) {
    send(s1, src, 0, 16, i);
    const ibv_wc wc = r1.wait();
    REQUIRE(wc.status == IBV_WC_SUCCESS);
    CHECK(wc.wr_id == static_cast<uint64_t>(i));
    CHECK(wc.qp_num == r1.qp->qp_num);
  }
  ibv_wc wc{};
  CHECK(ibv_poll_cq(r0.cq, 1, &wc) == 0);
}

TEST_CASE("an SRQ ring the application takes away fails the QP that needed it, not the process") {
  Device da("rnicsim0"), db("rnicsim1");
  Srq s(db.pd, 64, 1);
  Endpoint a(da), b(db, false, false, s.srq);
  connect(a, b);
  Buffer src(da.pd, 64, kAllAccess), dst(db.pd, 64, kAllAccess);
  s.post(dst, 0, 64, 1);
  // libmlx5's SRQ ring, as mlx5dv describes it: page-aligned; 64 WQEs and a wait queue of as
  // many again, 32 bytes each, fill whole pages.
  mlx5dv_srq dv{};
  mlx5dv_obj obj{};
  obj.srq.in = s.srq;
  obj.srq.out = &dv;
  REQUIRE(mlx5dv_init_obj(&obj, MLX5DV_OBJ_SRQ) == 0);
  REQUIRE(reinterpret_cast<uintptr_t>(dv.buf) % 4096 == 0);
  const size_t bytes = 4096;
  REQUIRE(mprotect(dv.buf, bytes, PROT_NONE) == 0);

  ibv_sge sge{src.addr(), 16, src.mr->lkey};
  ibv_send_wr wr = make_wr(IBV_WR_SEND, &sge, 1, 7);
  a.post(wr);
  // The sender is told (a NAK: remote operation error), the receiver's QP goes to ERR with
  // QP_FATAL on its async fd.
  const ibv_wc wc = a.wait();
  CHECK(wc.status == IBV_WC_REM_OP_ERR);
  ibv_async_event ev = next_async_event(db);
  CHECK(ev.event_type == IBV_EVENT_QP_FATAL);
  CHECK(ev.element.qp == b.qp);
  ibv_ack_async_event(&ev);
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  REQUIRE(ibv_query_qp(b.qp, &attr, IBV_QP_STATE, &init) == 0);
  CHECK(attr.qp_state == IBV_QPS_ERR);
  REQUIRE(mprotect(dv.buf, bytes, PROT_READ | PROT_WRITE) == 0);
}

// The counts ibv_query_device reports are the counts the device keeps: past max_cq CQs and
// max_srq SRQs, creation fails with ENOMEM, as the kernel's resource exhaustion does, and a
// freed object's place can be taken again.
TEST_CASE("CQs and SRQs beyond max_cq and max_srq fail with ENOMEM; a freed one is created again") {
  Device d("rnicsim1");
  ibv_device_attr dev{};
  REQUIRE(ibv_query_device(d.ctx, &dev) == 0);
  REQUIRE(dev.max_cq > 0);
  REQUIRE(dev.max_cq <= 65536);  // the model's, not a format's
  REQUIRE(dev.max_srq > 0);
  REQUIRE(dev.max_srq <= 65536);

  std::vector<ibv_cq*> cqs;
  errno = 0;
  for (int i = 0; i <= dev.max_cq; ++i) {
    ibv_cq* cq = ibv_create_cq(d.ctx, 1, nullptr, nullptr, 0);
    if (!cq) break;
    cqs.push_back(cq);
  }
  CHECK(errno == ENOMEM);
  CHECK(cqs.size() <= static_cast<size_t>(dev.max_cq));
  CHECK(cqs.size() + 8 >= static_cast<size_t>(dev.max_cq));  // the other tests' CQs are gone
  REQUIRE_FALSE(cqs.empty());
  REQUIRE(ibv_destroy_cq(cqs.back()) == 0);
  cqs.back() = ibv_create_cq(d.ctx, 1, nullptr, nullptr, 0);
  CHECK(cqs.back() != nullptr);
  for (ibv_cq* cq : cqs)
    if (cq) CHECK(ibv_destroy_cq(cq) == 0);

  std::vector<ibv_srq*> srqs;
  ibv_srq_init_attr a{};
  a.attr.max_wr = 2;
  a.attr.max_sge = 1;
  errno = 0;
  for (int i = 0; i <= dev.max_srq; ++i) {
    ibv_srq_init_attr attr = a;
    ibv_srq* srq = ibv_create_srq(d.pd, &attr);
    if (!srq) break;
    srqs.push_back(srq);
  }
  CHECK(errno == ENOMEM);
  CHECK(srqs.size() == static_cast<size_t>(dev.max_srq));
  REQUIRE_FALSE(srqs.empty());
  REQUIRE(ibv_destroy_srq(srqs.back()) == 0);
  ibv_srq_init_attr attr = a;
  srqs.back() = ibv_create_srq(d.pd, &attr);
  CHECK(srqs.back() != nullptr);
  for (ibv_srq* srq : srqs)
    if (srq) CHECK(ibv_destroy_srq(srq) == 0);

  // Deeper than max_srq_wr: refused (libmlx5 checks it against what the device told it).
  ibv_srq_init_attr deep{};
  deep.attr.max_wr = static_cast<uint32_t>(dev.max_srq_wr) + 1;
  deep.attr.max_sge = 1;
  errno = 0;
  CHECK(ibv_create_srq(d.pd, &deep) == nullptr);
  CHECK(errno == EINVAL);
}
