// SPDX-License-Identifier: BSD-3-Clause
// XRC (rnicdv/xrc.h) between two simulated HCAs: one initiator QP reaches several SRQs of the
// responder's XRC domain through one target QP; each receive completes on its own SRQ's CQ
// under the target's QPN; RDMA and atomics are checked against the named SRQ's PD; a request
// naming an SRQ outside the target's domain is refused; early posting on an initiator; and
// the API's refusals.
#include <unistd.h>

#include <cstdio>

#include "sim_env.h"
#include "tshark.h"

using namespace rnicdv;
using namespace rnicdv::test;

namespace {

constexpr uint32_t kSlot = 4096;

// a: one initiator. b: an XRC domain with two SRQs (each with its CQ), one target, and a
// second domain with an SRQ of its own; and a plain SRQ outside XRC.
struct XrcPair {
  std::shared_ptr<sim::Fabric> fabric;
  std::vector<uint8_t> amem, bmem, bmem2;
  std::shared_ptr<sim::Device> asim, bsim;
  std::optional<Device> adev, bdev;
  std::optional<ProtectionDomain> apd, bpd, bpd2;
  std::optional<CompletionQueue> acq, bcq[2], bcq_other;
  std::optional<MemoryRegion> amr, bmr, bmr2;
  std::optional<XrcDomain> domain, other_domain;
  std::optional<SharedReceiveQueue> srq[2], other_srq, plain_srq;
  std::optional<QueuePair> ini, tgt;
};

QpConfig initiator_config() {
  QpConfig c = default_qp_config();
  c.type = hw::QpType::xrc_send;
  return c;
}

XrcPair make_xrc_pair(bool bring_up = true, const std::string& pcap = {}) {
  XrcPair p;
  sim::FabricConfig config;
  config.mode = sim::ExecMode::deterministic;
  config.wire = sim::WireKind::inproc;
  config.seed = 7;
  config.pcap_path = pcap;
  p.fabric = take(sim::Fabric::create(config));
  p.asim = take(p.fabric->add_device({}));
  p.bsim = take(p.fabric->add_device({}));
  p.adev.emplace(take(Device::wrap(p.asim)));
  p.bdev.emplace(take(Device::wrap(p.bsim)));
  p.apd.emplace(take(p.adev->alloc_pd()));
  p.bpd.emplace(take(p.bdev->alloc_pd()));
  p.bpd2.emplace(take(p.bdev->alloc_pd()));
  p.acq.emplace(take(p.adev->create_cq(64)));
  for (auto& cq : p.bcq) cq.emplace(take(p.bdev->create_cq(64)));
  p.bcq_other.emplace(take(p.bdev->create_cq(64)));
  p.amem.assign(1 << 16, 0);
  p.bmem.assign(1 << 16, 0);
  p.bmem2.assign(1 << 12, 0);
  constexpr uint32_t kAll = hw::access::local_write | hw::access::remote_write |
                            hw::access::remote_read | hw::access::remote_atomic;
  p.amr.emplace(take(p.apd->reg_mr(p.amem.data(), p.amem.size(), kAll)));
  p.bmr.emplace(take(p.bpd->reg_mr(p.bmem.data(), p.bmem.size(), kAll)));
  p.bmr2.emplace(take(p.bpd2->reg_mr(p.bmem2.data(), p.bmem2.size(), kAll)));
  p.domain.emplace(take(p.bdev->open_xrc_domain()));
  p.other_domain.emplace(take(p.bdev->open_xrc_domain()));
  for (int i = 0; i < 2; ++i)
    p.srq[i].emplace(take(p.bdev->create_xrc_srq(*p.domain, *p.bpd, *p.bcq[i], 16, 2)));
  p.other_srq.emplace(take(p.bdev->create_xrc_srq(*p.other_domain, *p.bpd, *p.bcq_other, 16, 2)));
  p.plain_srq.emplace(take(p.bdev->create_srq(*p.bpd, 16, 2)));
  p.ini.emplace(take(p.adev->create_qp(*p.apd, *p.acq, *p.acq, initiator_config())));
  p.tgt.emplace(take(p.bdev->create_xrc_target(*p.domain)));
  if (bring_up) {
    check(p.ini->to_init());
    check(p.tgt->to_init());
    check(p.tgt->to_rtr(p.ini->local_endpoint(kPsnA), hw::Mtu::mtu1024));
    check(p.ini->to_rtr(p.tgt->local_endpoint(kPsnB), hw::Mtu::mtu1024));
    check(p.ini->to_rts(kPsnA));
  }
  return p;
}

void post_to(SharedReceiveQueue& srq, MemoryRegion& mr, uint64_t wr_id, size_t offset,
             uint32_t len = kSlot) {
  const Sge sge = mr.sge(offset, len);
  RecvWr wr;
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  REQUIRE(srq.post_recv(wr) == Errc::ok);
}

SendWr xrc_send(uint64_t wr_id, const Sge* sge, uint32_t srqn) {
  SendWr wr = send_wr(wr_id, sge, 1);
  wr.remote_srqn = srqn;
  return wr;
}

}  // namespace

TEST_CASE("one XRC initiator reaches two SRQs through one target; each receive completes on "
          "its SRQ's CQ under the target's QPN", "[xrc]") {
  XrcPair p = make_xrc_pair();
  post_to(*p.srq[0], *p.bmr, 100, 0);
  post_to(*p.srq[1], *p.bmr, 200, kSlot);
  std::memset(p.amem.data(), 0x5a, 64);
  std::memset(p.amem.data() + 64, 0xa5, 3000);  // three packets at MTU 1024
  const Sge one = p.amr->sge(0, 64);
  const Sge two = p.amr->sge(64, 3000);
  const SendWr wrs[2] = {xrc_send(1, &two, p.srq[1]->srqn()), xrc_send(2, &one, p.srq[0]->srqn())};
  REQUIRE(p.ini->post_send(std::span(wrs)) == Errc::ok);
  const std::vector<Completion> sent = poll_n(*p.fabric, *p.acq, 2);
  REQUIRE(sent.size() == 2);
  CHECK(sent[0].status == IBV_WC_SUCCESS);
  CHECK(sent[0].wr_id == 1);
  CHECK(sent[1].status == IBV_WC_SUCCESS);
  CHECK(sent[1].wr_id == 2);

  const std::vector<Completion> first = poll_n(*p.fabric, *p.bcq[0], 1);
  const std::vector<Completion> second = poll_n(*p.fabric, *p.bcq[1], 1);
  REQUIRE(first.size() == 1);
  REQUIRE(second.size() == 1);
  CHECK(first[0].status == IBV_WC_SUCCESS);
  CHECK(first[0].opcode == IBV_WC_RECV);
  CHECK(first[0].wr_id == 100);
  CHECK(first[0].byte_len == 64);
  CHECK(first[0].qp_num == p.tgt->qpn());
  CHECK(first[0].src_qp == p.ini->qpn());
  CHECK(second[0].wr_id == 200);
  CHECK(second[0].byte_len == 3000);
  CHECK(second[0].qp_num == p.tgt->qpn());
  CHECK(p.bmem[0] == 0x5a);
  CHECK(p.bmem[63] == 0x5a);
  CHECK(p.bmem[64] == 0);
  CHECK(p.bmem[kSlot] == 0xa5);
  CHECK(p.bmem[kSlot + 2999] == 0xa5);
  // Nothing reached the other domain's SRQ or CQ.
  CHECK(poll_for(*p.fabric, *p.bcq_other).empty());
}

TEST_CASE("XRC RDMA WRITE, READ and atomics are checked against the named SRQ's PD", "[xrc]") {
  XrcPair p = make_xrc_pair();
  std::memset(p.amem.data(), 0x33, 256);
  const Sge src = p.amr->sge(0, 256);
  SendWr write = write_wr(1, &src, 1, p.bmr->addr() + 0x2000, p.bmr->rkey());
  write.remote_srqn = p.srq[0]->srqn();
  REQUIRE(p.ini->post_send(write) == Errc::ok);
  const Sge dst = p.amr->sge(0x1000, 256);
  SendWr read = write_wr(2, &dst, 1, p.bmr->addr() + 0x2000, p.bmr->rkey());
  read.opcode = WrOpcode::rdma_read;
  read.remote_srqn = p.srq[1]->srqn();
  REQUIRE(p.ini->post_send(read) == Errc::ok);
  uint64_t operand = 40;
  std::memcpy(p.bmem.data() + 0x3000, &operand, sizeof operand);
  const Sge result = p.amr->sge(0x2000, 8);
  SendWr fadd = write_wr(3, &result, 1, p.bmr->addr() + 0x3000, p.bmr->rkey());
  fadd.opcode = WrOpcode::atomic_fetch_add;
  fadd.compare_add = 2;
  fadd.remote_srqn = p.srq[0]->srqn();
  REQUIRE(p.ini->post_send(fadd) == Errc::ok);
  const std::vector<Completion> done = poll_n(*p.fabric, *p.acq, 3);
  REQUIRE(done.size() == 3);
  for (const Completion& c : done) {
    INFO("wr " << c.wr_id);
    CHECK(c.status == IBV_WC_SUCCESS);
  }
  CHECK(p.bmem[0x2000] == 0x33);
  CHECK(p.bmem[0x20ff] == 0x33);
  CHECK(p.amem[0x1000] == 0x33);
  CHECK(p.amem[0x10ff] == 0x33);
  uint64_t original = 0;
  std::memcpy(&original, p.amem.data() + 0x2000, sizeof original);
  CHECK(original == 40);
  std::memcpy(&operand, p.bmem.data() + 0x3000, sizeof operand);
  CHECK(operand == 42);
  // No receive was consumed: WRITE without immediate, READ and atomics take none.
  CHECK(poll_for(*p.fabric, *p.bcq[0]).empty());

  // Memory of another PD than the named SRQ's: a remote access error, and the QPs stop.
  SendWr foreign = write_wr(4, &src, 1, p.bmr2->addr(), p.bmr2->rkey());
  foreign.remote_srqn = p.srq[0]->srqn();
  REQUIRE(p.ini->post_send(foreign) == Errc::ok);
  const std::vector<Completion> refused = poll_n(*p.fabric, *p.acq, 1);
  REQUIRE(refused.size() == 1);
  CHECK(refused[0].wr_id == 4);
  CHECK(refused[0].status == IBV_WC_REM_ACCESS_ERR);
  CHECK(p.bmem2[0] == 0);
}

TEST_CASE("an XRC READ is answered from the PD of the SRQ it named, though the next message "
          "names an SRQ of another PD", "[xrc]") {
  XrcPair p = make_xrc_pair();
  // A third SRQ of the same domain, on the second PD: messages that name it switch the
  // target to that PD, while the READ before them still streams its response.
  SharedReceiveQueue srq_pd2 =
      take(p.bdev->create_xrc_srq(*p.domain, *p.bpd2, *p.bcq_other, 16, 2));
  post_to(srq_pd2, *p.bmr2, 300, 0, 1024);
  for (size_t i = 0; i < 3000; ++i) p.bmem[0x4000 + i] = static_cast<uint8_t>(i * 7 + 1);
  std::memset(p.amem.data() + 0x8000, 0x77, 512);
  const Sge read_into = p.amr->sge(0, 3000);  // three response packets at MTU 1024
  SendWr read = write_wr(1, &read_into, 1, p.bmr->addr() + 0x4000, p.bmr->rkey());
  read.opcode = WrOpcode::rdma_read;
  read.remote_srqn = p.srq[0]->srqn();
  const Sge payload = p.amr->sge(0x8000, 512);
  const SendWr send = xrc_send(2, &payload, srq_pd2.srqn());
  // Both in one ring, so that the SEND arrives before the READ's response has left.
  const SendWr wrs[2] = {read, send};
  REQUIRE(p.ini->post_send(std::span(wrs)) == Errc::ok);
  const std::vector<Completion> done = poll_n(*p.fabric, *p.acq, 2);
  REQUIRE(done.size() == 2);
  for (const Completion& c : done) {
    INFO("wr " << c.wr_id);
    CHECK(c.status == IBV_WC_SUCCESS);
  }
  CHECK(std::memcmp(p.amem.data(), p.bmem.data() + 0x4000, 3000) == 0);
  const std::vector<Completion> got = poll_n(*p.fabric, *p.bcq_other, 1);
  REQUIRE(got.size() == 1);
  CHECK(got[0].status == IBV_WC_SUCCESS);
  CHECK(got[0].wr_id == 300);
  CHECK(got[0].byte_len == 512);
  CHECK(p.bmem2[0] == 0x77);
  CHECK(p.bmem2[511] == 0x77);
}

TEST_CASE("an XRC target destroyed before its receives are polled: each is still reported, "
          "through the SRQ its CQE names, and the SRQ's entries come back", "[xrc]") {
  XrcPair p = make_xrc_pair();
  const uint32_t srqn = p.srq[0]->srqn();
  const uint32_t capacity = p.srq[0]->max_wr();
  post_to(*p.srq[0], *p.bmr, 100, 0, 256);
  post_to(*p.srq[0], *p.bmr, 101, 256, 256);
  std::memset(p.amem.data(), 0x42, 64);
  const Sge sge = p.amr->sge(0, 64);
  const SendWr wrs[2] = {xrc_send(1, &sge, srqn), xrc_send(2, &sge, srqn)};
  REQUIRE(p.ini->post_send(std::span(wrs)) == Errc::ok);
  // Both acknowledged: both receives are in the SRQ's CQ, not yet polled.
  REQUIRE(poll_n(*p.fabric, *p.acq, 2).size() == 2);
  const uint32_t target_qpn = p.tgt->qpn();
  p.tgt.reset();

  LeanCompletion lean[4];
  REQUIRE(p.bcq[0]->poll_lean(lean, 1) == 1);
  CHECK(lean[0].wr_id == 100);
  CHECK(lean[0].status == IBV_WC_SUCCESS);
  CHECK(lean[0].opcode == IBV_WC_RECV);
  CHECK(lean[0].byte_len == 64);
  Completion full[4];
  REQUIRE(p.bcq[0]->poll(full, 4) == 1);
  CHECK(full[0].wr_id == 101);
  CHECK(full[0].status == IBV_WC_SUCCESS);
  CHECK(full[0].qp_num == target_qpn);
  CHECK(p.bmem[0] == 0x42);
  CHECK(p.bmem[256] == 0x42);
  // Both entries are free again: the SRQ takes its whole capacity, and no more.
  for (uint32_t i = 0; i < capacity; ++i) post_to(*p.srq[0], *p.bmr, 200 + i, 0, 64);
  const Sge extra = p.bmr->sge(0, 64);
  RecvWr one_more;
  one_more.sg_list = &extra;
  one_more.num_sge = 1;
  CHECK(p.srq[0]->post_recv(one_more) == Errc::queue_full);
}

TEST_CASE("an XRC SRQ's CQ overrun takes the targets that complete into it to ERR", "[xrc]") {
  XrcPair p = make_xrc_pair();
  CompletionQueue small = take(p.bdev->create_cq(2));
  const uint32_t entries = small.entries();
  REQUIRE(entries < 12);
  SharedReceiveQueue srq = take(p.bdev->create_xrc_srq(*p.domain, *p.bpd, small, 16, 1));
  for (uint32_t i = 0; i < 16; ++i) post_to(srq, *p.bmr, 500 + i, 64 * i, 64);
  std::memset(p.amem.data(), 0x6b, 64);
  const Sge sge = p.amr->sge(0, 64);
  // One message more than the CQ holds, nothing polled: the last receive overruns it.
  for (uint32_t i = 0; i <= entries; ++i) {
    REQUIRE(p.ini->post_send(xrc_send(i, &sge, srq.srqn())) == Errc::ok);
    REQUIRE(poll_n(*p.fabric, *p.acq, 1).size() == 1);
  }
  // The target went to ERR with the CQ: the next message is never answered.
  REQUIRE(p.ini->post_send(xrc_send(99, &sge, srq.srqn())) == Errc::ok);
  const std::vector<Completion> last = poll_n(*p.fabric, *p.acq, 1, 30'000'000'000ull);
  REQUIRE(last.size() == 1);
  CHECK(last[0].wr_id == 99);
  CHECK(last[0].status == IBV_WC_RETRY_EXC_ERR);
  CHECK(p.bmem[64 * (entries + 1)] == 0);  // its receive buffer untouched

  // A target made after the overrun goes to ERR as it turns to that SRQ.
  QueuePair ini2 = take(p.adev->create_qp(*p.apd, *p.acq, *p.acq, initiator_config()));
  QueuePair tgt2 = take(p.bdev->create_xrc_target(*p.domain));
  check(ini2.to_init());
  check(tgt2.to_init());
  check(tgt2.to_rtr(ini2.local_endpoint(kPsnA), hw::Mtu::mtu1024));
  check(ini2.to_rtr(tgt2.local_endpoint(kPsnB), hw::Mtu::mtu1024));
  check(ini2.to_rts(kPsnA));
  REQUIRE(ini2.post_send(xrc_send(100, &sge, srq.srqn())) == Errc::ok);
  const std::vector<Completion> late = poll_n(*p.fabric, *p.acq, 1, 30'000'000'000ull);
  REQUIRE(late.size() == 1);
  CHECK(late[0].wr_id == 100);
  CHECK(late[0].status == IBV_WC_RETRY_EXC_ERR);
}

TEST_CASE("an XRC request naming an SRQ outside the target's domain is refused: invalid "
          "request, and nothing is received", "[xrc][errors]") {
  enum class Target { other_domain, plain_srq, no_such_srq };
  const Target target = GENERATE(Target::other_domain, Target::plain_srq, Target::no_such_srq);
  XrcPair p = make_xrc_pair();
  post_to(*p.other_srq, *p.bmr, 7, 0);
  post_to(*p.plain_srq, *p.bmr, 8, kSlot);
  const uint32_t srqn = target == Target::other_domain ? p.other_srq->srqn()
                        : target == Target::plain_srq  ? p.plain_srq->srqn()
                                                       : 0xabcde;
  INFO("srqn " << srqn);
  std::memset(p.amem.data(), 0x77, 32);
  const Sge sge = p.amr->sge(0, 32);
  REQUIRE(p.ini->post_send(xrc_send(1, &sge, srqn)) == Errc::ok);
  const std::vector<Completion> got = poll_n(*p.fabric, *p.acq, 1);
  REQUIRE(got.size() == 1);
  CHECK(got[0].status == IBV_WC_REM_INV_REQ_ERR);
  CHECK(p.ini->state() == hw::QpState::err);
  CHECK(take(p.bsim->qp_snapshot(p.tgt->qpn())).state == hw::QpState::err);
  CHECK(p.bmem[0] == 0);
  CHECK(p.bmem[kSlot] == 0);
  CHECK(poll_for(*p.fabric, *p.bcq_other).empty());
}

TEST_CASE("an XRC initiator posts in RTR; the batch runs once at RTS and lands in its SRQs",
          "[xrc][early_post]") {
  XrcPair p = make_xrc_pair(false);
  check(p.ini->to_init());
  check(p.tgt->to_init());
  check(p.tgt->to_rtr(p.ini->local_endpoint(kPsnA), hw::Mtu::mtu1024));
  check(p.ini->to_rtr(p.tgt->local_endpoint(kPsnB), hw::Mtu::mtu1024));
  for (uint32_t i = 0; i < 4; ++i) post_to(*p.srq[i % 2], *p.bmr, 10 + i, size_t{i} * kSlot);
  Sge sges[4];
  for (uint32_t i = 0; i < 4; ++i) {
    std::memset(p.amem.data() + i * 64, static_cast<int>(0x10 + i), 64);
    sges[i] = p.amr->sge(i * 64, 64);
    REQUIRE(p.ini->post_send(xrc_send(i, &sges[i], p.srq[i % 2]->srqn())) == Errc::ok);
  }
  CHECK(p.ini->withheld() == 4);
  CHECK(poll_for(*p.fabric, *p.acq).empty());
  CHECK(poll_for(*p.fabric, *p.bcq[0]).empty());
  check(p.ini->to_rts(kPsnA));
  CHECK(p.ini->withheld() == 0);
  const std::vector<Completion> sent = poll_n(*p.fabric, *p.acq, 4);
  REQUIRE(sent.size() == 4);
  const std::vector<Completion> even = poll_n(*p.fabric, *p.bcq[0], 2);
  const std::vector<Completion> odd = poll_n(*p.fabric, *p.bcq[1], 2);
  REQUIRE(even.size() == 2);
  REQUIRE(odd.size() == 2);
  CHECK(even[0].wr_id == 10);
  CHECK(even[1].wr_id == 12);
  CHECK(odd[0].wr_id == 11);
  CHECK(odd[1].wr_id == 13);
  for (uint32_t i = 0; i < 4; ++i) CHECK(p.bmem[size_t{i} * kSlot] == 0x10 + i);
  // Each exactly once.
  CHECK(poll_for(*p.fabric, *p.bcq[0]).empty());
  CHECK(poll_for(*p.fabric, *p.bcq[1]).empty());
  CHECK(poll_for(*p.fabric, *p.acq).empty());
}

TEST_CASE("XRC refusals: typed posts and receives on an initiator, posts on a target, a "
          "target through create_qp, objects of another device", "[xrc][errors]") {
  XrcPair p = make_xrc_pair();
  const Sge sge = p.amr->sge(0, 8);
  CHECK(p.ini->post_message(1, sge, send_flags::signaled) == Errc::invalid_argument);
  CHECK(p.ini->post_write(1, sge, p.bmr->addr(), p.bmr->rkey(), send_flags::signaled) ==
        Errc::invalid_argument);
  RecvWr rwr;
  rwr.sg_list = &sge;
  rwr.num_sge = 1;
  CHECK(p.ini->post_recv(rwr) == Errc::invalid_argument);
  CHECK(p.tgt->post_recv(rwr) == Errc::invalid_argument);
  size_t bad = 9;
  const SendWr one = xrc_send(1, &sge, p.srq[0]->srqn());
  CHECK(p.tgt->post_send(std::span(&one, 1), &bad) == Errc::invalid_argument);
  CHECK(bad == 0);
  // An SRQ number above 24 bits, and a datagram, on an initiator.
  SendWr wide = xrc_send(2, &sge, 0x1000000);
  CHECK(p.ini->post_send(wide) == Errc::invalid_argument);

  QpConfig target = default_qp_config();
  target.type = hw::QpType::xrc_recv;
  Result<QueuePair> direct = p.bdev->create_qp(*p.bpd, *p.bcq[0], *p.bcq[0], target);
  REQUIRE_FALSE(direct);
  CHECK_THAT(direct.status().message(), Catch::Matchers::Contains("create_xrc_target"));

  // An XRC SRQ is no RC or UC QP's, in the driver and in the device beneath it.
  for (hw::QpType type : {hw::QpType::rc, hw::QpType::uc}) {
    QpConfig on_xrc_srq = default_qp_config();
    on_xrc_srq.type = type;
    on_xrc_srq.srq = &*p.srq[0];
    Result<QueuePair> rc = p.bdev->create_qp(*p.bpd, *p.bcq[0], *p.bcq[0], on_xrc_srq);
    REQUIRE_FALSE(rc);
    CHECK(rc.status().code() == Errc::invalid_argument);
    CHECK_THAT(rc.status().message(), Catch::Matchers::Contains("is an XRC SRQ"));
  }
  hw::Cq& hw_cq = *p.bcq[0]->core()->hw_cq;
  auto on_device = p.bsim->create_qp_on_srq(p.bpd->hw(), hw_cq, hw_cq, *p.srq[0]->core()->hw_srq,
                                            default_qp_config().caps);
  REQUIRE_FALSE(on_device);
  CHECK(on_device.status().code() == Errc::invalid_argument);
  CHECK_THAT(on_device.status().message(), Catch::Matchers::Contains("is an XRC SRQ"));

  Result<SharedReceiveQueue> foreign_domain =
      p.adev->create_xrc_srq(*p.domain, *p.apd, *p.acq, 4, 1);
  REQUIRE_FALSE(foreign_domain);
  CHECK_THAT(foreign_domain.status().message(),
             Catch::Matchers::Contains("belongs to another device"));
  Result<QueuePair> foreign_target = p.adev->create_xrc_target(*p.domain);
  REQUIRE_FALSE(foreign_target);
  CHECK(foreign_target.status().code() == Errc::invalid_argument);
}

TEST_CASE("an XRC initiator moved to ERR flushes what it holds; the target's domain stays "
          "usable for a new target", "[xrc][flush]") {
  XrcPair p = make_xrc_pair(false);
  check(p.ini->to_init());
  check(p.tgt->to_init());
  check(p.ini->to_rtr(p.tgt->local_endpoint(kPsnB), hw::Mtu::mtu1024));
  const Sge sge = p.amr->sge(0, 16);
  for (uint64_t i = 0; i < 3; ++i)
    REQUIRE(p.ini->post_send(xrc_send(i, &sge, p.srq[0]->srqn())) == Errc::ok);
  check(p.ini->to_error());
  const std::vector<Completion> flushed = poll_n(*p.fabric, *p.acq, 3);
  REQUIRE(flushed.size() == 3);
  for (uint64_t i = 0; i < 3; ++i) {
    CHECK(flushed[i].wr_id == i);
    CHECK(flushed[i].status == IBV_WC_WR_FLUSH_ERR);
  }
  // Targets come and go; the domain and its SRQs stay.
  p.tgt.reset();
  QueuePair again = take(p.bdev->create_xrc_target(*p.domain));
  CHECK(again.qpn() != 0);
  CHECK(again.state() == hw::QpState::reset);
}

// tshark (Debian's 4.0) names the XRC opcodes (IBA Annex A14) but has no XRCETH dissector: it
// shows the header as the first 4 bytes of "Unknown/Vendor Specific Data" (infiniband.vendor).
TEST_CASE("XRC on the wire, decoded by tshark: XRC opcodes, an XRCETH naming the SRQ first in "
          "every request, none in the acknowledgments",
          "[xrc][pcap]") {
  rnicdv::test::skip_without_tshark();
  char dir[] = "/tmp/rnicdv-xrc-pcap-XXXXXX";
  REQUIRE(::mkdtemp(dir) != nullptr);
  const std::string pcap = std::string(dir) + "/xrc.pcap";
  uint32_t srqn[2] = {};
  {
    XrcPair p = make_xrc_pair(true, pcap);
    srqn[0] = p.srq[0]->srqn();
    srqn[1] = p.srq[1]->srqn();
    post_to(*p.srq[1], *p.bmr, 1, 0);
    std::memset(p.amem.data(), 0xa5, 2500);
    const Sge big = p.amr->sge(0, 2500);  // SEND FIRST, MIDDLE, LAST at MTU 1024
    REQUIRE(p.ini->post_send(xrc_send(1, &big, srqn[1])) == Errc::ok);
    const Sge src = p.amr->sge(0, 64);
    SendWr write = write_wr(2, &src, 1, p.bmr->addr() + 0x8000, p.bmr->rkey());
    write.remote_srqn = srqn[0];
    REQUIRE(p.ini->post_send(write) == Errc::ok);
    REQUIRE(poll_n(*p.fabric, *p.acq, 2).size() == 2);
    REQUIRE(poll_n(*p.fabric, *p.bcq[1], 1).size() == 1);
  }
  const auto rows = rnicdv::test::tshark_rows(
      rnicdv::test::tshark(pcap, "-T fields -E separator=/t -e infiniband.bth.opcode "
                                 "-e infiniband.vendor -e _ws.malformed"));
  const auto hex = [](uint32_t v) {
    char b[9];
    std::snprintf(b, sizeof b, "%08x", v);
    return std::string(b);
  };
  std::vector<int> opcodes;
  for (const auto& r : rows) {
    INFO(r[0] << " " << (r.size() > 1 ? r[1] : ""));
    REQUIRE(r.size() >= 2);
    const int op = std::stoi(r[0]);
    opcodes.push_back(op);
    CHECK(op >= 0xa0);
    CHECK(op <= 0xb4);
    const std::string first = r[1].substr(0, 8);
    if (op == 0xa0 || op == 0xa1 || op == 0xa2) CHECK(first == hex(srqn[1]));
    if (op == 0xaa) CHECK(first == hex(srqn[0]));  // XRCETH, then the RETH
    if (op == 0xb1) CHECK(first.substr(0, 2) == "1f");  // an ACK's AETH: syndrome first
    if (r.size() > 2) CHECK(r[2].empty());
  }
  // SEND FIRST, MIDDLE, LAST; WRITE ONLY; and acknowledgments.
  for (int op : {0xa0, 0xa1, 0xa2, 0xaa, 0xb1}) {
    INFO("opcode " << op);
    CHECK(std::count(opcodes.begin(), opcodes.end(), op) >= 1);
  }
  std::remove(pcap.c_str());
  ::rmdir(dir);
}
