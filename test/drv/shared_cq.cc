// SPDX-License-Identifier: BSD-3-Clause
// One CQ serving several QPs: each completion is mapped to its own QP's wr_id table by QPN,
// and the QPs' send queues retire independently.
#include <catch2/catch.hpp>

#include <map>

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
