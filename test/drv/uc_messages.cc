// SPDX-License-Identifier: BSD-3-Clause
// UC QPs in rnicdv's API on the simulated HCA: SEND and RDMA WRITE to one connected peer with
// nothing acknowledged or retried. A sender's WQE completes once its packets are on the wire;
// a message that loses a packet is dropped whole and the next one is received (into the same
// receive WQE); a message with no receive WQE, or a WRITE the responder refuses, is lost
// without stopping either QP; READ and atomics are refused at post; early posting withholds
// and releases UC work as it does RC's.
#include <catch2/catch.hpp>

#include <cstring>

#include "sim_env.h"

using namespace rnicdv;
using namespace rnicdv::test;

namespace {

QpConfig uc_config() {
  QpConfig c = default_qp_config();
  c.type = hw::QpType::uc;
  return c;
}

// Two UC QPs facing each other, on a fabric with `faults` (docs/faults.md). Not yet connected.
Pair make_uc_pair(const std::string& faults = "",
                  const hw::DeviceProfile& profile = mlx5_profile(), size_t mem_bytes = 1 << 16) {
  sim::FabricConfig config;
  config.mode = sim::ExecMode::deterministic;
  config.wire = sim::WireKind::inproc;
  config.seed = 7;
  config.fault_spec = faults.empty() ? "seed=7" : faults;
  Pair p;
  p.fabric = take(sim::Fabric::create(config));
  p.a = make_node(p.fabric, profile, uc_config(), mem_bytes);
  p.b = make_node(p.fabric, profile, uc_config(), mem_bytes);
  return p;
}

void connect(Pair& p) {
  to_rtr(p);
  to_rts(p.b, kPsnB);
  to_rts(p.a, kPsnA);
}

}  // namespace

TEST_CASE("UC SENDs and WRITEs of several packets arrive, and the sender completes them with no "
          "acknowledgment on the wire",
          "[drv][uc]") {
  Pair p = make_uc_pair();
  connect(p);
  post_receive(p.b, 7, kDst, 4096);
  post_receive(p.b, 8, kDst + 0x2000, 64);
  fill(p.a.bytes(kSrc), 3000, 0x21);
  const Sge s = p.a.sge(kSrc, 3000);  // three packets at a 1024-byte path MTU
  REQUIRE(p.a.qp->post_message_imm(1, s, 0xabcd0001, send_flags::signaled) == Errc::ok);
  const Sge w = p.a.sge(kSrc, 2500);
  REQUIRE(p.a.qp->post_write_imm(2, w, p.b.addr(0x6000), p.b.rkey(), 0xabcd0002,
                                 send_flags::signaled) == Errc::ok);

  auto sent = poll_n(*p.fabric, *p.a.cq, 2);
  REQUIRE(sent.size() == 2);
  CHECK(sent[0].wr_id == 1);
  CHECK(sent[0].status == IBV_WC_SUCCESS);
  CHECK(sent[1].wr_id == 2);
  CHECK(sent[1].status == IBV_WC_SUCCESS);
  auto got = poll_n(*p.fabric, *p.b.cq, 2);
  REQUIRE(got.size() == 2);
  CHECK(got[0].wr_id == 7);
  CHECK(got[0].status == IBV_WC_SUCCESS);
  CHECK(got[0].opcode == IBV_WC_RECV);
  CHECK(got[0].byte_len == 3000);
  CHECK(got[0].imm_data == 0xabcd0001);
  CHECK(got[0].src_qp == p.a.qp->qpn());
  CHECK((got[0].flags & wc_flags::grh) == 0);
  CHECK(got[1].wr_id == 8);
  CHECK(got[1].opcode == IBV_WC_RECV_RDMA_WITH_IMM);
  CHECK(got[1].byte_len == 2500);
  CHECK(got[1].imm_data == 0xabcd0002);
  CHECK(std::memcmp(p.b.bytes(kDst), p.a.bytes(kSrc), 3000) == 0);
  CHECK(std::memcmp(p.b.bytes(0x6000), p.a.bytes(kSrc), 2500) == 0);

  // Six request packets went one way and nothing came back.
  CHECK(p.a.counters().packets_tx == 6);
  CHECK(p.b.counters().packets_tx == 0);
  CHECK(p.b.counters().acks_tx == 0);
  CHECK(p.a.counters().retransmits == 0);
}

TEST_CASE("a UC message that loses a packet is dropped whole, and its receive WQE takes the "
          "next message",
          "[drv][uc]") {
  // The second packet of the first SEND is lost on the wire.
  Pair p = make_uc_pair("seed=7; drop nth=2 opcode=send dir=request");
  connect(p);
  post_receive(p.b, 7, kDst, 4096);
  fill(p.a.bytes(kSrc), 3000, 0x40);
  fill(p.a.bytes(kSrc + 0x1000), 1500, 0x90);
  const Sge first = p.a.sge(kSrc, 3000);
  const Sge second = p.a.sge(kSrc + 0x1000, 1500);
  REQUIRE(p.a.qp->post_message(1, first, send_flags::signaled) == Errc::ok);
  REQUIRE(p.a.qp->post_message(2, second, send_flags::signaled) == Errc::ok);

  // The sender cannot know: both complete successfully.
  auto sent = poll_n(*p.fabric, *p.a.cq, 2);
  REQUIRE(sent.size() == 2);
  CHECK(sent[0].status == IBV_WC_SUCCESS);
  CHECK(sent[1].status == IBV_WC_SUCCESS);
  // The one receive WQE holds the second message, complete and only it.
  auto got = poll_n(*p.fabric, *p.b.cq, 1);
  REQUIRE(got.size() == 1);
  CHECK(got[0].wr_id == 7);
  CHECK(got[0].status == IBV_WC_SUCCESS);
  CHECK(got[0].byte_len == 1500);
  CHECK(std::memcmp(p.b.bytes(kDst), p.a.bytes(kSrc + 0x1000), 1500) == 0);
  CHECK(poll_for(*p.fabric, *p.b.cq).empty());
  const sim::DeviceCounters c = p.b.counters();
  CHECK(c.uc_messages_dropped == 1);
  CHECK(c.rx_dropped == 1);  // the third packet of the first message
  CHECK(c.naks_tx == 0);
  CHECK(p.b.snapshot().state == hw::QpState::rts);
  CHECK(p.a.counters().retransmits == 0);
}

TEST_CASE("a UC message that loses its last packet is abandoned for the next one, whatever PSN "
          "it starts at",
          "[drv][uc]") {
  // The last packet of the first WRITE is lost: the responder sees FIRST and MIDDLE, then the
  // next message's ONLY two PSNs later.
  Pair p = make_uc_pair("seed=7; drop nth=3 opcode=write dir=request");
  connect(p);
  post_receive(p.b, 9, kDst, 256);
  fill(p.a.bytes(kSrc), 3000, 0x55);
  const Sge big = p.a.sge(kSrc, 3000);
  REQUIRE(p.a.qp->post_write(1, big, p.b.addr(0x6000), p.b.rkey(), send_flags::signaled) ==
          Errc::ok);
  const Sge small = p.a.sge(kSrc + 0x2000, 100);
  fill(p.a.bytes(kSrc + 0x2000), 100, 0x66);
  REQUIRE(p.a.qp->post_write_imm(2, small, p.b.addr(0x9000), p.b.rkey(), 0x77,
                                 send_flags::signaled) == Errc::ok);
  REQUIRE(poll_n(*p.fabric, *p.a.cq, 2).size() == 2);
  auto got = poll_n(*p.fabric, *p.b.cq, 1);
  REQUIRE(got.size() == 1);
  CHECK(got[0].wr_id == 9);
  CHECK(got[0].opcode == IBV_WC_RECV_RDMA_WITH_IMM);
  CHECK(got[0].imm_data == 0x77);
  CHECK(std::memcmp(p.b.bytes(0x9000), p.a.bytes(kSrc + 0x2000), 100) == 0);
  CHECK(p.b.counters().uc_messages_dropped == 1);
  CHECK(p.b.snapshot().state == hw::QpState::rts);
}

TEST_CASE("a UC SEND that finds no receive WQE is lost, not retried, and the QP runs on",
          "[drv][uc]") {
  Pair p = make_uc_pair();
  connect(p);
  const Sge s = p.a.sge(kSrc, 64);
  REQUIRE(p.a.qp->post_message(1, s, send_flags::signaled) == Errc::ok);
  auto sent = poll_n(*p.fabric, *p.a.cq, 1);
  REQUIRE(sent.size() == 1);
  CHECK(sent[0].status == IBV_WC_SUCCESS);
  CHECK(poll_for(*p.fabric, *p.b.cq).empty());
  sim::DeviceCounters c = p.b.counters();
  CHECK(c.uc_no_recv_drops == 1);
  CHECK(c.uc_messages_dropped == 1);
  CHECK(c.rnr_naks_tx == 0);
  CHECK(take(p.b.dev->read_port_counter(1, "hw_counters/out_of_buffer")) == 1);

  post_receive(p.b, 5, kDst, 64);
  REQUIRE(p.a.qp->post_message(2, s, send_flags::signaled) == Errc::ok);
  auto got = poll_n(*p.fabric, *p.b.cq, 1);
  REQUIRE(got.size() == 1);
  CHECK(got[0].wr_id == 5);
  CHECK(got[0].status == IBV_WC_SUCCESS);
  CHECK(p.a.counters().rnr_naks_rx == 0);
}

TEST_CASE("a UC WRITE with a bad R_Key or without remote write rights is dropped silently; "
          "memory is untouched and both QPs run on",
          "[drv][uc][errors]") {
  Pair p = make_uc_pair();
  connect(p);
  fill(p.a.bytes(kSrc), 128, 0x12);
  const Sge s = p.a.sge(kSrc, 128);
  REQUIRE(p.a.qp->post_write(1, s, p.b.addr(kDst), p.b.rkey() + 1, send_flags::signaled) ==
          Errc::ok);
  // Beyond the region: refused by the MR check too.
  REQUIRE(p.a.qp->post_write(2, s, p.b.addr(p.b.mem.size() - 64), p.b.rkey(),
                             send_flags::signaled) == Errc::ok);
  auto sent = poll_n(*p.fabric, *p.a.cq, 2);
  REQUIRE(sent.size() == 2);
  CHECK(sent[0].status == IBV_WC_SUCCESS);
  CHECK(sent[1].status == IBV_WC_SUCCESS);
  step(*p.fabric, 64);
  const std::vector<uint8_t> zero(128, 0);
  CHECK(std::memcmp(p.b.bytes(kDst), zero.data(), 128) == 0);
  CHECK(p.b.counters().uc_messages_dropped == 2);
  CHECK(p.b.counters().naks_tx == 0);
  CHECK(p.b.snapshot().state == hw::QpState::rts);
  CHECK(p.a.snapshot().state == hw::QpState::rts);

  // A good one lands.
  REQUIRE(p.a.qp->post_write(3, s, p.b.addr(kDst), p.b.rkey(), send_flags::signaled) ==
          Errc::ok);
  REQUIRE(poll_n(*p.fabric, *p.a.cq, 1).size() == 1);
  step(*p.fabric, 64);
  CHECK(std::memcmp(p.b.bytes(kDst), p.a.bytes(kSrc), 128) == 0);

  // The responder's QP without remote write: dropped too.
  Pair q = make_uc_pair();
  check(q.a.qp->to_init());
  check(q.b.qp->to_init(0));
  check(q.a.qp->to_rtr(q.b.qp->local_endpoint(kPsnB), hw::Mtu::mtu1024));
  check(q.b.qp->to_rtr(q.a.qp->local_endpoint(kPsnA), hw::Mtu::mtu1024));
  to_rts(q.b, kPsnB);
  to_rts(q.a, kPsnA);
  fill(q.a.bytes(kSrc), 64, 0x3c);
  const Sge qs = q.a.sge(kSrc, 64);
  REQUIRE(q.a.qp->post_write(4, qs, q.b.addr(kDst), q.b.rkey(), send_flags::signaled) ==
          Errc::ok);
  REQUIRE(poll_n(*q.fabric, *q.a.cq, 1).size() == 1);
  step(*q.fabric, 64);
  CHECK(std::memcmp(q.b.bytes(kDst), zero.data(), 64) == 0);
  CHECK(q.b.counters().uc_messages_dropped == 1);
}

TEST_CASE("a UC receive too small for its message completes with a local length error and the "
          "receiver's QP goes to ERR",
          "[drv][uc][errors]") {
  Pair p = make_uc_pair();
  connect(p);
  post_receive(p.b, 4, kDst, 100);
  const Sge s = p.a.sge(kSrc, 200);
  REQUIRE(p.a.qp->post_message(1, s, send_flags::signaled) == Errc::ok);
  auto got = poll_n(*p.fabric, *p.b.cq, 1);
  REQUIRE(got.size() == 1);
  CHECK(got[0].wr_id == 4);
  CHECK(got[0].status == IBV_WC_LOC_LEN_ERR);
  CHECK(p.b.snapshot().state == hw::QpState::err);
  CHECK(p.b.counters().naks_tx == 0);
  // The sender knows nothing of it.
  auto sent = poll_n(*p.fabric, *p.a.cq, 1);
  REQUIRE(sent.size() == 1);
  CHECK(sent[0].status == IBV_WC_SUCCESS);
}

TEST_CASE("a UC QP refuses READ and atomics at post, and posts the work requests before the "
          "refused one",
          "[drv][uc][errors]") {
  Pair p = make_uc_pair();
  connect(p);
  post_receive(p.b, 1, kDst, 64);
  const Sge s = p.a.sge(kSrc, 64);
  const Sge result = p.a.sge(kLocal, 8);
  CHECK(p.a.qp->post_read(1, s, p.b.addr(kDst), p.b.rkey(), send_flags::signaled) ==
        Errc::invalid_argument);
  CHECK(p.a.qp->post_fetch_add(2, result, p.b.addr(kAtomic), p.b.rkey(), 1,
                               send_flags::signaled) == Errc::invalid_argument);
  CHECK(p.a.qp->post_compare_swap(3, result, p.b.addr(kAtomic), p.b.rkey(), 0, 1,
                                  send_flags::signaled) == Errc::invalid_argument);

  SendWr list[2] = {send_wr(4, &s, 1), write_wr(5, &s, 1, p.b.addr(kDst), p.b.rkey())};
  list[1].opcode = WrOpcode::rdma_read;
  size_t bad = 99;
  CHECK(p.a.qp->post_send(std::span<const SendWr>(list, 2), &bad) == Errc::invalid_argument);
  CHECK(bad == 1);
  auto sent = poll_n(*p.fabric, *p.a.cq, 1);
  REQUIRE(sent.size() == 1);
  CHECK(sent[0].wr_id == 4);
  CHECK(sent[0].status == IBV_WC_SUCCESS);
  CHECK(poll_n(*p.fabric, *p.b.cq, 1).size() == 1);
  CHECK(poll_for(*p.fabric, *p.a.cq).empty());  // the READ was never built
}

TEST_CASE("UC sends posted in RTR are withheld and run once at RTS, for both early-post "
          "strategies",
          "[drv][uc]") {
  for (const auto& profile : {mlx5_profile(), scanning_profile()}) {
    INFO(profile_label(profile));
    Pair p = make_uc_pair("", profile);
    to_rtr(p);
    to_rts(p.b, kPsnB);
    for (int i = 0; i < 3; ++i) post_receive(p.b, 10 + i, kDst + i * 512, 256);
    Sge s[3];
    for (int i = 0; i < 3; ++i) {
      fill(p.a.bytes(kSrc + i * 256), 100, static_cast<uint8_t>(i + 1));
      s[i] = p.a.sge(kSrc + i * 256, 100);
      REQUIRE(p.a.qp->post_message(i + 1, s[i], send_flags::signaled) == Errc::ok);
    }
    CHECK(p.a.qp->withheld() == 3);
    CHECK(poll_for(*p.fabric, *p.b.cq).empty());
    CHECK(p.a.counters().packets_tx == 0);
    to_rts(p.a, kPsnA);
    auto got = poll_n(*p.fabric, *p.b.cq, 3);
    REQUIRE(got.size() == 3);
    for (int i = 0; i < 3; ++i) {
      CHECK(got[i].wr_id == static_cast<uint64_t>(10 + i));
      CHECK(std::memcmp(p.b.bytes(kDst + i * 512), p.a.bytes(kSrc + i * 256), 100) == 0);
    }
    CHECK(poll_n(*p.fabric, *p.a.cq, 3).size() == 3);
    CHECK(poll_for(*p.fabric, *p.b.cq).empty());  // nothing twice
    CHECK(p.a.counters().packets_tx == 3);
  }
}

TEST_CASE("a UC QP's transitions take UC's attributes: the reliability ones are refused, and the "
          "connection manager refuses a UC QP",
          "[drv][uc][errors]") {
  Pair p = make_uc_pair();
  check(p.a.qp->to_init());
  hw::QpAttr a;
  a.state = hw::QpState::rtr;
  a.path_mtu = hw::Mtu::mtu1024;
  a.dest_qpn = p.b.qp->qpn();
  a.rq_psn = kPsnB;
  a.remote_gid = p.b.dev->info().gid;
  a.min_rnr_timer = 12;
  namespace q = hw::qp_attr;
  const uint32_t uc_rtr = q::state | q::path_mtu | q::dest_qpn | q::rq_psn | q::av;
  Status st = p.a.qp->modify(a, uc_rtr | q::min_rnr_timer);
  CHECK(st.code() == Errc::invalid_argument);
  CHECK(st.message().find("min_rnr_timer is not an attribute of this transition") !=
        std::string::npos);
  st = p.a.qp->modify(a, q::state | q::path_mtu | q::dest_qpn | q::av);
  CHECK(st.code() == Errc::invalid_argument);
  CHECK(st.message().find("rq_psn not set") != std::string::npos);
  check(p.a.qp->modify(a, uc_rtr));
  a.state = hw::QpState::rts;
  a.sq_psn = kPsnA;
  a.timeout = 14;
  st = p.a.qp->modify(a, q::state | q::sq_psn | q::timeout);
  CHECK(st.code() == Errc::invalid_argument);
  CHECK(st.message().find("timeout is not an attribute of this transition") != std::string::npos);
  check(p.a.qp->modify(a, q::state | q::sq_psn));
  CHECK(p.a.qp->state() == hw::QpState::rts);

  Result<Connection> c = Connection::connect(*p.b.qp, "127.0.0.1", 18515);
  REQUIRE(!c.is_ok());
  CHECK(c.status().code() == Errc::unsupported);
  CHECK(c.status().message().find("a UC QP is brought up with modify_qp") != std::string::npos);
}

TEST_CASE("under random loss, reordering and copies every UC receive holds one whole message, "
          "in order, and none arrives twice",
          "[drv][uc][faults]") {
  constexpr int kMessages = 60;
  constexpr size_t kSlot = 4096;
  for (const char* faults : {"seed=11; drop p=0.08 opcode=send dir=request",
                             "seed=12; reorder p=0.1 hold=20us opcode=send",
                             "seed=13; drop p=0.05 opcode=send; reorder p=0.05 hold=10us",
                             "seed=14; duplicate p=0.1 opcode=send; drop p=0.03 opcode=send"}) {
    INFO(faults);
    Pair p = make_uc_pair(faults, mlx5_profile(), size_t{kMessages + 2} * kSlot);
    connect(p);
    // Message i: 200..2999 bytes (one to three packets), a pattern of its own.
    auto length_of = [](int i) { return static_cast<uint32_t>(200 + (i * 397) % 2800); };
    for (int i = 0; i < kMessages; ++i) fill(p.a.bytes(size_t(i) * kSlot), length_of(i), uint8_t(i));
    for (int i = 0; i < kMessages; ++i) post_receive(p.b, uint64_t(i), size_t(i) * kSlot, kSlot);
    std::vector<Completion> got;
    int sent = 0;
    for (int i = 0; i < kMessages; ++i) {
      const Sge s = p.a.sge(size_t(i) * kSlot, length_of(i));
      REQUIRE(p.a.qp->post_message(uint64_t(i), s, send_flags::signaled) == Errc::ok);
      if (i % 16 == 15 || i + 1 == kMessages) {
        // The sender's completions free its queue; the receiver's are gathered as they come.
        const auto done = poll_n(*p.fabric, *p.a.cq, size_t(i + 1 - sent));
        REQUIRE(done.size() == size_t(i + 1 - sent));
        for (const Completion& c : done) CHECK(c.status == IBV_WC_SUCCESS);
        sent = i + 1;
      }
    }
    for (const Completion& c : poll_for(*p.fabric, *p.b.cq)) got.push_back(c);
    // Each receive holds one message whole: its length and its bytes, found by the receive's
    // slot; the messages come in sending order, none twice.
    int last = -1;
    for (const Completion& c : got) {
      REQUIRE(c.status == IBV_WC_SUCCESS);
      int which = -1;
      for (int j = last + 1; j < kMessages && which < 0; ++j)
        if (length_of(j) == c.byte_len &&
            std::memcmp(p.b.bytes(c.wr_id * kSlot), p.a.bytes(size_t(j) * kSlot), c.byte_len) ==
                0)
          which = j;
      INFO("receive " << c.wr_id << " of " << c.byte_len << " bytes");
      REQUIRE(which > last);
      last = which;
    }
    const sim::DeviceCounters b = p.b.counters();
    const size_t lost = kMessages - got.size();
    INFO(got.size() << " of " << kMessages << " arrived; " << b.uc_messages_dropped
                    << " dropped at the responder");
    CHECK(got.size() < size_t(kMessages));  // the faults did reach the stream
    CHECK(got.size() > size_t(kMessages) / 2);
    // A message the responder dropped part-way is one of those lost; one lost whole on the
    // wire is not counted there.
    CHECK(b.uc_messages_dropped <= lost);
    CHECK(p.b.snapshot().state == hw::QpState::rts);
  }
}

TEST_CASE("a UC QP on a shared receive queue: a dropped message's receive takes the next one, "
          "and a SEND that finds the queue empty is lost",
          "[drv][uc][srq]") {
  sim::FabricConfig config;
  config.mode = sim::ExecMode::deterministic;
  config.wire = sim::WireKind::inproc;
  config.seed = 7;
  config.fault_spec = "seed=7; drop nth=2 opcode=send dir=request";  // the first SEND's MIDDLE
  Pair p;
  p.fabric = take(sim::Fabric::create(config));
  p.a = make_node(p.fabric, mlx5_profile(), uc_config());
  p.b = make_node(p.fabric, mlx5_profile(), uc_config());
  SharedReceiveQueue srq = take(p.b.dev->create_srq(*p.b.pd, 8, 1));
  QpConfig on_srq = uc_config();
  on_srq.srq = &srq;
  p.b.qp.emplace(take(p.b.dev->create_qp(*p.b.pd, *p.b.cq, *p.b.cq, on_srq)));
  connect(p);
  auto post_srq = [&](uint64_t wr_id, size_t offset) {
    const Sge s = p.b.sge(offset, 4096);
    RecvWr r;
    r.wr_id = wr_id;
    r.sg_list = &s;
    r.num_sge = 1;
    REQUIRE(srq.post_recv(r) == Errc::ok);
  };
  post_srq(21, kDst);
  fill(p.a.bytes(kSrc), 3000, 0x11);
  fill(p.a.bytes(kSrc + 0x2000), 700, 0x22);
  REQUIRE(p.a.qp->post_message(1, p.a.sge(kSrc, 3000), send_flags::signaled) == Errc::ok);
  REQUIRE(p.a.qp->post_message(2, p.a.sge(kSrc + 0x2000, 700), send_flags::signaled) ==
          Errc::ok);
  REQUIRE(poll_n(*p.fabric, *p.a.cq, 2).size() == 2);
  auto got = poll_n(*p.fabric, *p.b.cq, 1);
  REQUIRE(got.size() == 1);
  CHECK(got[0].wr_id == 21);  // the SRQ's one receive, taken by the first and kept
  CHECK(got[0].byte_len == 700);
  CHECK(std::memcmp(p.b.bytes(kDst), p.a.bytes(kSrc + 0x2000), 700) == 0);
  CHECK(p.b.counters().uc_messages_dropped == 1);

  // The queue is empty: the next SEND is lost, and the QP runs on.
  REQUIRE(p.a.qp->post_message(3, p.a.sge(kSrc, 64), send_flags::signaled) == Errc::ok);
  REQUIRE(poll_n(*p.fabric, *p.a.cq, 1).size() == 1);
  CHECK(poll_for(*p.fabric, *p.b.cq).empty());
  CHECK(p.b.counters().uc_no_recv_drops == 1);
  post_srq(22, kDst + 0x2000);
  REQUIRE(p.a.qp->post_message(4, p.a.sge(kSrc, 64), send_flags::signaled) == Errc::ok);
  got = poll_n(*p.fabric, *p.b.cq, 1);
  REQUIRE(got.size() == 1);
  CHECK(got[0].wr_id == 22);
  CHECK(got[0].byte_len == 64);
}
