// SPDX-License-Identifier: BSD-3-Clause
// One CQ serving several QPs: each completion is mapped to its own QP's wr_id table by QPN,
// and the QPs' send queues retire independently.
#include <catch2/catch.hpp>

#include <cstdint>
#include <map>
#include <set>

#include "sim_env.h"

using namespace rnicdv;
using namespace rnicdv::test;

TEST_CASE("a CQ shared by several QPs maps every completion to its QP", "[drv][cq]") {
  auto fabric = make_fabric();
  Node a = make_node(fabric, mlx5_profile(), default_qp_config());
  Node b = make_node(fabric, mlx5_profile(), default_qp_config());
  // Three more QPs on a's device, all completing into a's one CQ; peers on b.
  constexpr int kExtra = 3;
  std::vector<QueuePair> a_qps, b_qps;
  for (int i = 0; i < kExtra; ++i) {
    a_qps.push_back(take(a.dev->create_qp(*a.pd, *a.cq, *a.cq, default_qp_config())));
    b_qps.push_back(take(b.dev->create_qp(*b.pd, *b.cq, *b.cq, default_qp_config())));
  }
  a_qps.push_back(std::move(*a.qp));
  b_qps.push_back(std::move(*b.qp));
  for (size_t i = 0; i < a_qps.size(); ++i) {
    check(a_qps[i].to_init());
    check(b_qps[i].to_init());
    check(a_qps[i].to_rtr(b_qps[i].local_endpoint(kPsnB), hw::Mtu::mtu1024));
    check(b_qps[i].to_rtr(a_qps[i].local_endpoint(kPsnA), hw::Mtu::mtu1024));
    check(b_qps[i].to_rts(kPsnB));
    check(a_qps[i].to_rts(kPsnA));
  }

  const Sge sge = a.sge(0, 8);
  std::map<uint32_t, size_t> index_of;
  uint32_t expected = 0;
  for (uint32_t round = 0; round < 10; ++round) {
    for (size_t q = 0; q < a_qps.size(); ++q) {
      index_of[a_qps[q].qpn()] = q;
      // Only every other WR is signaled: retirement of the unsignaled ones is per QP.
      const SendFlags flags = round % 2 ? send_flags::signaled : send_flags::none;
      REQUIRE(a_qps[q].post_send(write_wr((uint64_t{q} << 32) | round, &sge, 1, b.addr(8 * q),
                                          b.rkey(), flags)) == Errc::ok);
      expected += flags ? 1 : 0;
    }
  }
  const auto got = poll_n(*fabric, *a.cq, expected);
  REQUIRE(got.size() == expected);
  std::vector<uint32_t> last(a_qps.size(), 0);
  for (const Completion& c : got) {
    REQUIRE(index_of.count(c.qp_num));
    const size_t q = index_of[c.qp_num];
    CHECK((c.wr_id >> 32) == q);
    const uint32_t round = static_cast<uint32_t>(c.wr_id);
    CHECK(round % 2 == 1);
    CHECK(round > last[q]);
    last[q] = round;
    CHECK(c.status == IBV_WC_SUCCESS);
  }
  CHECK(a.cq->orphaned_completions() == 0);
}

TEST_CASE("separate send and receive CQs each get their own completions", "[drv][cq]") {
  auto fabric = make_fabric();
  Node a = make_node(fabric, mlx5_profile(), default_qp_config());
  Node b = make_node(fabric, mlx5_profile(), default_qp_config());
  CompletionQueue recv_cq = take(b.dev->create_cq(64));
  QueuePair b2 = take(b.dev->create_qp(*b.pd, *b.cq, recv_cq, default_qp_config()));
  b.qp.emplace(std::move(b2));
  Pair p{fabric, std::move(a), std::move(b)};
  to_rtr(p);
  to_rts(p.b, kPsnB);
  to_rts(p.a, kPsnA);
  const Sge rsge = p.b.sge(0x100, 64);
  RecvWr rwr;
  rwr.wr_id = 11;
  rwr.sg_list = &rsge;
  rwr.num_sge = 1;
  REQUIRE(p.b.qp->post_recv(rwr) == Errc::ok);
  const Sge sge = p.a.sge(0, 32);
  REQUIRE(p.a.qp->post_send(send_wr(1, &sge, 1)) == Errc::ok);
  const Sge bsge = p.b.sge(0, 8);
  REQUIRE(p.b.qp->post_send(write_wr(2, &bsge, 1, p.a.addr(0x200), p.a.rkey())) == Errc::ok);
  const auto recv = poll_n(*fabric, recv_cq, 1);
  REQUIRE(recv.size() == 1);
  CHECK(recv[0].wr_id == 11);
  CHECK(recv[0].opcode == IBV_WC_RECV);
  const auto sent = poll_n(*fabric, *p.b.cq, 1);
  REQUIRE(sent.size() == 1);
  CHECK(sent[0].wr_id == 2);
  CHECK(sent[0].opcode == IBV_WC_RDMA_WRITE);
}

namespace {

// `n` more connected QP pairs on a's and b's CQs.
void add_pairs(Node& a, Node& b, std::vector<QueuePair>& a_qps, std::vector<QueuePair>& b_qps,
               int n) {
  for (int i = 0; i < n; ++i) {
    QueuePair qa = take(a.dev->create_qp(*a.pd, *a.cq, *a.cq, default_qp_config()));
    QueuePair qb = take(b.dev->create_qp(*b.pd, *b.cq, *b.cq, default_qp_config()));
    check(qa.to_init());
    check(qb.to_init());
    check(qa.to_rtr(qb.local_endpoint(kPsnB), hw::Mtu::mtu1024));
    check(qb.to_rtr(qa.local_endpoint(kPsnA), hw::Mtu::mtu1024));
    check(qb.to_rts(kPsnB));
    check(qa.to_rts(kPsnA));
    a_qps.push_back(std::move(qa));
    b_qps.push_back(std::move(qb));
  }
}

}  // namespace

TEST_CASE("QPs created and destroyed while their shared CQ is polled: each completion reaches "
          "its own live QP, a destroyed QP's are counted orphaned",
          "[drv][cq][scale]") {
  auto fabric = make_fabric();
  QpConfig config = default_qp_config();
  Node a = make_node(fabric, mlx5_profile(), config, 1 << 16, 1024);
  Node b = make_node(fabric, mlx5_profile(), config, 1 << 16, 1024);
  std::vector<QueuePair> a_qps, b_qps;
  add_pairs(a, b, a_qps, b_qps, 48);
  const Sge sge = a.sge(0, 8);
  uint64_t expected_orphans = 0;
  for (uint32_t round = 0; round < 12; ++round) {
    // One signaled WRITE on every QP, the wr_id naming QP and round.
    std::map<uint32_t, uint64_t> want;  // QPN -> wr_id of its WRITE
    for (QueuePair& q : a_qps) {
      const uint64_t id = (uint64_t{q.qpn()} << 32) | round;
      REQUIRE(q.post_send(write_wr(id, &sge, 1, b.addr(0), b.rkey(), send_flags::signaled)) ==
              Errc::ok);
      want[q.qpn()] = id;
    }
    const uint64_t before = a.counters().cqes_written;
    REQUIRE(fabric->run_until(
        [&] { return a.counters().cqes_written >= before + a_qps.size(); }));
    // Poll part of the batch, then destroy three QPs whose CQEs may still be in the ring and
    // make three new ones, then poll the rest: the new QPs must not be handed the old CQEs.
    Completion c[16];
    std::vector<Completion> got;
    const int first = a.cq->poll(c, 7);
    got.insert(got.end(), c, c + first);
    std::set<uint32_t> reported;
    for (int i = 0; i < first; ++i) reported.insert(c[i].qp_num);
    for (int k = 0; k < 3; ++k) {
      const size_t victim = (round * 7 + static_cast<size_t>(k) * 11) % a_qps.size();
      if (!reported.count(a_qps[victim].qpn())) ++expected_orphans;
      want.erase(a_qps[victim].qpn());
      a_qps.erase(a_qps.begin() + static_cast<ptrdiff_t>(victim));
      b_qps.erase(b_qps.begin() + static_cast<ptrdiff_t>(victim));
    }
    add_pairs(a, b, a_qps, b_qps, 3);
    for (int k; (k = a.cq->poll(c, 16)) > 0;) got.insert(got.end(), c, c + k);
    std::set<uint32_t> seen;
    for (const Completion& wc : got) {
      REQUIRE(wc.status == IBV_WC_SUCCESS);
      if (!want.count(wc.qp_num)) {
        // Reported before its QP was destroyed: then it was in the first poll.
        REQUIRE(reported.count(wc.qp_num));
        continue;
      }
      CHECK(wc.wr_id == want[wc.qp_num]);
      CHECK(seen.insert(wc.qp_num).second);
    }
    CHECK(seen.size() == want.size());
    CHECK(a.cq->orphaned_completions() == expected_orphans);
  }
}

TEST_CASE("a CQ that gains a second QP between polls, and loses it again, maps every completion",
          "[drv][cq]") {
  Pair p = make_connected_pair(mlx5_profile());
  const Sge sge = p.a.sge(0, 8);
  REQUIRE(p.a.qp->post_send(write_wr(1, &sge, 1, p.b.addr(0), p.b.rkey())) == Errc::ok);
  auto got = poll_n(*p.fabric, *p.a.cq, 1);
  REQUIRE(got.size() == 1);
  CHECK(got[0].wr_id == 1);
  std::vector<QueuePair> a_qps, b_qps;
  add_pairs(p.a, p.b, a_qps, b_qps, 1);
  REQUIRE(p.a.qp->post_send(write_wr(2, &sge, 1, p.b.addr(0), p.b.rkey())) == Errc::ok);
  REQUIRE(a_qps[0].post_send(write_wr(3, &sge, 1, p.b.addr(8), p.b.rkey())) == Errc::ok);
  got = poll_n(*p.fabric, *p.a.cq, 2);
  REQUIRE(got.size() == 2);
  std::map<uint32_t, uint64_t> by_qp;
  for (const Completion& c : got) by_qp[c.qp_num] = c.wr_id;
  CHECK(by_qp[p.a.qp->qpn()] == 2);
  CHECK(by_qp[a_qps[0].qpn()] == 3);
  a_qps.clear();
  b_qps.clear();
  REQUIRE(p.a.qp->post_send(write_wr(4, &sge, 1, p.b.addr(0), p.b.rkey())) == Errc::ok);
  got = poll_n(*p.fabric, *p.a.cq, 1);
  REQUIRE(got.size() == 1);
  CHECK(got[0].wr_id == 4);
  CHECK(got[0].qp_num == p.a.qp->qpn());
  CHECK(p.a.cq->orphaned_completions() == 0);
}

TEST_CASE("the poller's state of a QP sits in one cache line, with copies of the geometry "
          "the posters use",
          "[drv][cq]") {
  Pair p = make_connected_pair(mlx5_profile());
  const detail::QpCore& core = *p.a.qp->core();
  CHECK(core.poll_sq_entries == core.sq_entries);
  CHECK(core.poll_sq_mask == core.sq_mask);
  CHECK(core.poll_rq_wr_ids == core.rq_wr_ids);
  CHECK(core.poll_rq_mask == core.rq_mask);
  CHECK(core.poll_srq == core.srq);
  const auto at = [&core](const void* field) {
    return static_cast<const char*>(field) - reinterpret_cast<const char*>(&core.sq_tail);
  };
  CHECK(reinterpret_cast<uintptr_t>(&core.sq_tail) % 64 == 0);
  CHECK(at(&core.rq_tail) < 64);
  CHECK(at(&core.poll_sq_entries) + static_cast<ptrdiff_t>(sizeof core.poll_sq_entries) <= 64);
  CHECK(at(&core.poll_sq_mask) < 64);
  CHECK(at(&core.poll_rq_wr_ids) + static_cast<ptrdiff_t>(sizeof core.poll_rq_wr_ids) <= 64);
  CHECK(at(&core.poll_rq_mask) < 64);
  CHECK(at(&core.poll_srq) + static_cast<ptrdiff_t>(sizeof core.poll_srq) <= 64);
}
