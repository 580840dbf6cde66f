// SPDX-License-Identifier: BSD-3-Clause
// Shared receive queues: one pool of receives serving several QPs, each receive completion
// naming the QP it arrived on; the queue's capacity; the limit event; a failing QP flushing
// only the receive it was filling; RNR while the pool is empty.
#include "sim_env.h"

using namespace rnicdv;
using namespace rnicdv::test;

namespace {

// Node a sends on two QPs; node b receives both through one SRQ into one receive CQ.
struct SrqPair {
  std::shared_ptr<sim::Fabric> fabric;
  std::vector<uint8_t> amem, bmem;
  std::shared_ptr<sim::Device> asim, bsim;
  std::optional<Device> adev, bdev;
  std::optional<ProtectionDomain> apd, bpd;
  std::optional<CompletionQueue> acq, bscq, brcq;
  std::optional<MemoryRegion> amr, bmr;
  std::optional<SharedReceiveQueue> srq;
  std::optional<QueuePair> a[2], b[2];
};

constexpr uint32_t kSlot = 256;  // bytes per posted receive in b's memory

SrqPair make_srq_pair(uint32_t srq_wr = 16) {
  SrqPair p;
  p.fabric = make_fabric();
  p.asim = take(p.fabric->add_device({}));
  p.bsim = take(p.fabric->add_device({}));
  p.adev.emplace(take(Device::wrap(p.asim)));
  p.bdev.emplace(take(Device::wrap(p.bsim)));
  p.apd.emplace(take(p.adev->alloc_pd()));
  p.bpd.emplace(take(p.bdev->alloc_pd()));
  p.acq.emplace(take(p.adev->create_cq(64)));
  p.bscq.emplace(take(p.bdev->create_cq(64)));
  p.brcq.emplace(take(p.bdev->create_cq(64)));
  p.amem.assign(1 << 14, 0);
  p.bmem.assign(1 << 14, 0);
  p.amr.emplace(take(p.apd->reg_mr(p.amem.data(), p.amem.size(), hw::access::local_write)));
  p.bmr.emplace(take(p.bpd->reg_mr(p.bmem.data(), p.bmem.size(), hw::access::local_write)));
  p.srq.emplace(take(p.bdev->create_srq(*p.bpd, srq_wr, 2)));
  QpConfig ac = default_qp_config();
  QpConfig bc = default_qp_config();
  bc.srq = &*p.srq;
  for (int i = 0; i < 2; ++i) {
    p.a[i].emplace(take(p.adev->create_qp(*p.apd, *p.acq, *p.acq, ac)));
    p.b[i].emplace(take(p.bdev->create_qp(*p.bpd, *p.bscq, *p.brcq, bc)));
    check(p.a[i]->to_init());
    check(p.b[i]->to_init());
    check(p.a[i]->to_rtr(p.b[i]->local_endpoint(kPsnB), hw::Mtu::mtu1024));
    check(p.b[i]->to_rtr(p.a[i]->local_endpoint(kPsnA), hw::Mtu::mtu1024));
    check(p.b[i]->to_rts(kPsnB));
    check(p.a[i]->to_rts(kPsnA));
  }
  return p;
}

Errc post_srq(SrqPair& p, uint64_t wr_id, uint32_t slot) {
  Sge sge = p.bmr->sge(size_t{slot} * kSlot, kSlot);
  RecvWr wr;
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  return p.srq->post_recv(wr);
}

void send_from(SrqPair& p, int qp, uint8_t fill, uint32_t len = 32) {
  std::memset(p.amem.data(), fill, len);
  Sge sge = p.amr->sge(0, len);
  REQUIRE(p.a[qp]->post_send(send_wr(fill, &sge, 1)) == Errc::ok);
}

}  // namespace

TEST_CASE("one SRQ serves two QPs; each receive names the QP it arrived on", "[srq]") {
  SrqPair p = make_srq_pair();
  for (uint32_t i = 0; i < 4; ++i) REQUIRE(post_srq(p, 100 + i, i) == Errc::ok);
  send_from(p, 0, 0xa0);
  CHECK(poll_n(*p.fabric, *p.acq, 1).size() == 1);
  send_from(p, 1, 0xb1);
  CHECK(poll_n(*p.fabric, *p.acq, 1).size() == 1);
  send_from(p, 0, 0xa2);
  CHECK(poll_n(*p.fabric, *p.acq, 1).size() == 1);
  const std::vector<Completion> got = poll_n(*p.fabric, *p.brcq, 3);
  REQUIRE(got.size() == 3);
  // The SRQ hands out its receives in posting order, whichever QP takes them.
  const uint32_t qpns[3] = {p.b[0]->qpn(), p.b[1]->qpn(), p.b[0]->qpn()};
  const uint8_t fills[3] = {0xa0, 0xb1, 0xa2};
  for (int i = 0; i < 3; ++i) {
    INFO("completion " << i);
    CHECK(got[i].status == IBV_WC_SUCCESS);
    CHECK(got[i].opcode == IBV_WC_RECV);
    CHECK(got[i].wr_id == 100u + i);
    CHECK(got[i].qp_num == qpns[i]);
    CHECK(got[i].byte_len == 32);
    CHECK(p.bmem[static_cast<size_t>(i) * kSlot] == fills[i]);
    CHECK(p.bmem[static_cast<size_t>(i) * kSlot + 31] == fills[i]);
  }
}

TEST_CASE("an SRQ holds max_wr receives; the ones completed can be posted again", "[srq]") {
  SrqPair p = make_srq_pair(3);
  const uint32_t cap = p.srq->max_wr();
  REQUIRE(cap >= 3);
  for (uint32_t i = 0; i < cap; ++i) REQUIRE(post_srq(p, i, i) == Errc::ok);
  CHECK(post_srq(p, 99, 0) == Errc::queue_full);
  send_from(p, 1, 0x11);
  REQUIRE(poll_n(*p.fabric, *p.brcq, 1).size() == 1);
  CHECK(post_srq(p, 50, cap) == Errc::ok);  // the completed one's WQE is free again
  CHECK(post_srq(p, 51, 0) == Errc::queue_full);
  // Every posted receive is used exactly once, the reposted one last.
  for (uint32_t i = 0; i < cap; ++i) send_from(p, static_cast<int>(i % 2), static_cast<uint8_t>(i));
  const std::vector<Completion> got = poll_n(*p.fabric, *p.brcq, cap);
  REQUIRE(got.size() == cap);
  CHECK(got.back().wr_id == 50);
  // Too many SGEs for the SRQ.
  Sge sges[4] = {p.bmr->sge(0, 8), p.bmr->sge(8, 8), p.bmr->sge(16, 8), p.bmr->sge(24, 8)};
  RecvWr wide;
  wide.wr_id = 7;
  wide.sg_list = sges;
  wide.num_sge = 4;
  size_t bad = 99;
  CHECK(p.srq->post_recv(std::span(&wide, 1), &bad) != Errc::ok);
  CHECK(bad == 0);
}

TEST_CASE("a QP on an SRQ refuses receives of its own", "[srq][errors]") {
  SrqPair p = make_srq_pair();
  Sge sge = p.bmr->sge(0, 8);
  RecvWr wr;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  CHECK(p.b[0]->post_recv(wr) == Errc::invalid_argument);
}

TEST_CASE("the SRQ limit event fires once when fewer than the limit remain posted", "[srq]") {
  SrqPair p = make_srq_pair();
  for (uint32_t i = 0; i < 4; ++i) REQUIRE(post_srq(p, i, i) == Errc::ok);
  check(p.srq->arm_limit(2));
  send_from(p, 0, 1);  // 3 left
  REQUIRE(poll_n(*p.fabric, *p.brcq, 1).size() == 1);
  p.bdev->process_events();
  CHECK(p.srq->limit_events() == 0);
  send_from(p, 1, 2);  // 2 left
  send_from(p, 0, 3);  // 1 left: below the limit
  REQUIRE(poll_n(*p.fabric, *p.brcq, 2).size() == 2);
  p.bdev->process_events();
  CHECK(p.srq->limit_events() == 1);
  send_from(p, 1, 4);  // 0 left: the arm is spent
  REQUIRE(poll_n(*p.fabric, *p.brcq, 1).size() == 1);
  p.bdev->process_events();
  CHECK(p.srq->limit_events() == 1);
  CHECK_FALSE(p.srq->arm_limit(p.srq->max_wr() + 1).is_ok());
}

TEST_CASE("a QP that fails flushes only its own receive; the other QP keeps receiving",
          "[srq]") {
  SrqPair p = make_srq_pair();
  for (uint32_t i = 0; i < 3; ++i) REQUIRE(post_srq(p, 10 + i, i) == Errc::ok);
  check(p.b[0]->to_error());
  const std::vector<Completion> flushed = poll_for(*p.fabric, *p.brcq);
  CHECK(flushed.empty());  // nothing of the SRQ was in progress on that QP
  send_from(p, 1, 0x5a);
  const std::vector<Completion> got = poll_n(*p.fabric, *p.brcq, 1);
  REQUIRE(got.size() == 1);
  CHECK(got[0].status == IBV_WC_SUCCESS);
  CHECK(got[0].qp_num == p.b[1]->qpn());
  CHECK(got[0].wr_id == 10);
}

TEST_CASE("a SEND to an empty SRQ waits (RNR) and lands once a receive is posted", "[srq]") {
  SrqPair p = make_srq_pair();
  send_from(p, 0, 0x77);
  CHECK(poll_for(*p.fabric, *p.brcq, 5'000'000).empty());
  CHECK(p.bsim->counters().rnr_naks_tx >= 1);
  REQUIRE(post_srq(p, 5, 0) == Errc::ok);
  const std::vector<Completion> got = poll_n(*p.fabric, *p.brcq, 1);
  REQUIRE(got.size() == 1);
  CHECK(got[0].wr_id == 5);
  CHECK(p.bmem[0] == 0x77);
  const std::vector<Completion> sent = poll_n(*p.fabric, *p.acq, 1);
  REQUIRE(sent.size() == 1);
  CHECK(sent[0].status == IBV_WC_SUCCESS);
}
