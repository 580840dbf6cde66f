// SPDX-License-Identifier: BSD-3-Clause
// Unreliable datagram QPs through the unmodified libibverbs and libmlx5 (the uverbs shim
// preloaded), between two simulated HCAs on the UDP wire: address handles, the GRH area and
// the CQE fields a datagram's receiver reads, Q_Key checks, datagrams nobody posted a receive
// for, and the errors that stop the send queue (SQE) or the whole QP (ERR).
#include <catch2/catch.hpp>

#include <infiniband/verbs.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "verbs_fixtures.h"

using namespace verbs_test;

namespace {

constexpr uint32_t kQkey = 0x11111111;
constexpr uint32_t kGrh = 40;

struct UdEndpoint {
  Device& dev;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  explicit UdEndpoint(Device& d, uint32_t qkey = kQkey) : dev(d) {
    cq = ibv_create_cq(d.ctx, 64, nullptr, nullptr, 0);
    REQUIRE(cq);
    ibv_qp_init_attr init = qp_init(cq, cq, IBV_QPT_UD, 16, 1);
    init.cap.max_inline_data = 64;
    qp = ibv_create_qp(d.pd, &init);
    REQUIRE(qp);
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.pkey_index = 0;
    a.qkey = qkey;
    REQUIRE(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY) ==
            0);
    a = {};
    a.qp_state = IBV_QPS_RTR;
    REQUIRE(ibv_modify_qp(qp, &a, IBV_QP_STATE) == 0);
    to_rts();
  }
  ~UdEndpoint() {
    CHECK(ibv_destroy_qp(qp) == 0);
    CHECK(ibv_destroy_cq(cq) == 0);
  }
  void to_rts() {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = 7;
    REQUIRE(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN) == 0);
  }
  ibv_gid gid() const {
    ibv_gid g{};
    REQUIRE(ibv_query_gid(dev.ctx, 1, kGidIndex, &g) == 0);
    return g;
  }
  ibv_qp_state state() const {
    ibv_qp_attr a{};
    ibv_qp_init_attr init{};
    REQUIRE(ibv_query_qp(qp, &a, IBV_QP_STATE, &init) == 0);
    return a.qp_state;
  }
  void post_recv(const Buffer& b, size_t off, uint32_t len, uint64_t wr_id) {
    post_one_recv(qp, b, off, len, wr_id);
  }
  ibv_wc wait() { return wait_one(cq); }
};

// An address handle on `from`'s PD towards `to`'s GID.
struct Ah {
  ibv_ah* ah = nullptr;
  Ah(const UdEndpoint& from, const UdEndpoint& to) {
    ibv_ah_attr a{};
    a.is_global = 1;
    a.grh.dgid = to.gid();
    a.grh.sgid_index = kGidIndex;
    a.grh.hop_limit = 64;
    a.port_num = 1;
    ah = ibv_create_ah(from.dev.pd, &a);
    REQUIRE(ah);
  }
  ~Ah() { CHECK(ibv_destroy_ah(ah) == 0); }
};

// Sends `len` bytes at `off` of `b` as one datagram to `qpn` with immediate `imm`.
void send_datagram(UdEndpoint& from, const Ah& ah, uint32_t qpn, uint32_t qkey, const Buffer& b,
                   size_t off, uint32_t len, uint32_t imm) {
  ibv_sge sge{b.addr(off), len, b.mr->lkey};
  ibv_send_wr wr = make_wr(IBV_WR_SEND_WITH_IMM, &sge, 1, imm);
  wr.imm_data = htobe32(imm);
  wr.wr.ud.ah = ah.ah;
  wr.wr.ud.remote_qpn = qpn;
  wr.wr.ud.remote_qkey = qkey;
  ibv_send_wr* bad = nullptr;
  REQUIRE(ibv_post_send(from.qp, &wr, &bad) == 0);
}

uint32_t ipv4_of(const ibv_gid& g) {
  return static_cast<uint32_t>(g.raw[12]) << 24 | static_cast<uint32_t>(g.raw[13]) << 16 |
         static_cast<uint32_t>(g.raw[14]) << 8 | g.raw[15];
}

uint32_t be32_at(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) << 24 | static_cast<uint32_t>(p[1]) << 16 |
         static_cast<uint32_t>(p[2]) << 8 | p[3];
}

struct UdPair {
  Device da{"rnicsim0"}, db{"rnicsim1"};
  UdEndpoint a{da}, b{db};
  Ah a_to_b{a, b}, b_to_a{b, a};
  Buffer abuf{da.pd, 8192, IBV_ACCESS_LOCAL_WRITE};
  Buffer bbuf{db.pd, 8192, IBV_ACCESS_LOCAL_WRITE};
};

}  // namespace

TEST_CASE("a UD datagram lands behind a GRH area holding the IPv4 header it came in") {
  UdPair p;
  fill(p.abuf.bytes, 3);
  std::fill(p.bbuf.bytes.begin(), p.bbuf.bytes.end(), 0xaa);  // the device must write the GRH
  const uint32_t len = 1000;
  p.b.post_recv(p.bbuf, 0, kGrh + len, 77);
  send_datagram(p.a, p.a_to_b, p.b.qp->qp_num, kQkey, p.abuf, 0, len, 0xfeed);

  const ibv_wc s = p.a.wait();
  CHECK(s.status == IBV_WC_SUCCESS);
  CHECK(s.opcode == IBV_WC_SEND);
  CHECK(s.wr_id == 0xfeed);
  const ibv_wc r = p.b.wait();
  REQUIRE(r.status == IBV_WC_SUCCESS);
  CHECK(r.opcode == IBV_WC_RECV);
  CHECK(r.wr_id == 77);
  CHECK(r.byte_len == kGrh + len);
  CHECK(r.src_qp == p.a.qp->qp_num);
  CHECK((r.wc_flags & IBV_WC_GRH) != 0);
  CHECK((r.wc_flags & IBV_WC_WITH_IMM) != 0);
  CHECK(be32toh(r.imm_data) == 0xfeed);
  // On RoCE the SL field carries the packet type: UDP (bit 3), IPv4 (2).
  CHECK(r.sl == 0xa);
  CHECK(std::equal(p.abuf.bytes.begin(), p.abuf.bytes.begin() + len, p.bbuf.bytes.begin() + kGrh));

  const uint8_t* grh = p.bbuf.bytes.data();
  CHECK(std::all_of(grh, grh + 20, [](uint8_t v) { return v == 0; }));
  const uint8_t* ip = grh + 20;
  CHECK(ip[0] == 0x45);
  CHECK(ip[9] == 17);  // UDP
  // IPv4 + UDP + BTH (12) + DETH (8) + ImmDt (4) + payload + ICRC (4); 1000 needs no pad.
  CHECK((ip[2] << 8 | ip[3]) == 20 + 8 + 12 + 8 + 4 + len + 4);
  CHECK(be32_at(ip + 12) == ipv4_of(p.a.gid()));
  CHECK(be32_at(ip + 16) == ipv4_of(p.b.gid()));
  uint32_t sum = 0;
  for (int i = 0; i < 20; i += 2) sum += static_cast<uint32_t>(ip[i] << 8 | ip[i + 1]);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  CHECK(sum == 0xffff);  // the header checksum verifies
}

TEST_CASE("a datagram with another Q_Key is dropped, and a Q_Key with its high bit set is the "
          "sender QP's own") {
  UdPair p;
  p.b.post_recv(p.bbuf, 0, 256, 1);
  p.b.post_recv(p.bbuf, 256, 256, 2);
  send_datagram(p.a, p.a_to_b, p.b.qp->qp_num, kQkey + 1, p.abuf, 0, 8, 10);
  send_datagram(p.a, p.a_to_b, p.b.qp->qp_num, 0x80000000u, p.abuf, 0, 8, 11);
  send_datagram(p.a, p.a_to_b, p.b.qp->qp_num, kQkey, p.abuf, 0, 8, 12);
  for (uint64_t id : {10, 11, 12}) {
    const ibv_wc s = p.a.wait();
    CHECK(s.status == IBV_WC_SUCCESS);  // nothing acknowledges a datagram
    CHECK(s.wr_id == id);
  }
  // The first datagram took no receive: the two receives hold the second and third.
  const ibv_wc r1 = p.b.wait();
  const ibv_wc r2 = p.b.wait();
  CHECK(r1.wr_id == 1);
  CHECK(be32toh(r1.imm_data) == 11);
  CHECK(r2.wr_id == 2);
  CHECK(be32toh(r2.imm_data) == 12);
}

TEST_CASE("a datagram that finds no receive posted is lost, not retried") {
  UdPair p;
  UdEndpoint b2{p.db};
  // To b's QP with nothing posted, then to b2: the wire keeps their order, so once b2 has its
  // datagram, b has seen (and dropped) the first.
  b2.post_recv(p.bbuf, 4096, 256, 20);
  send_datagram(p.a, p.a_to_b, p.b.qp->qp_num, kQkey, p.abuf, 0, 8, 1);
  send_datagram(p.a, p.a_to_b, b2.qp->qp_num, kQkey, p.abuf, 0, 8, 2);
  CHECK(p.a.wait().status == IBV_WC_SUCCESS);
  CHECK(p.a.wait().status == IBV_WC_SUCCESS);
  const ibv_wc r = b2.wait();
  CHECK(r.wr_id == 20);
  CHECK(be32toh(r.imm_data) == 2);
  p.b.post_recv(p.bbuf, 0, 256, 30);
  send_datagram(p.a, p.a_to_b, p.b.qp->qp_num, kQkey, p.abuf, 0, 8, 3);
  CHECK(p.a.wait().status == IBV_WC_SUCCESS);
  const ibv_wc late = p.b.wait();
  CHECK(late.wr_id == 30);
  CHECK(be32toh(late.imm_data) == 3);  // not the first datagram, delivered late
  ibv_wc none{};
  CHECK(ibv_poll_cq(p.b.cq, 1, &none) == 0);
}

TEST_CASE("a UD send longer than the port MTU fails alone: the QP goes to SQE and still "
          "receives, and RTS sends again") {
  UdPair p;
  send_datagram(p.a, p.a_to_b, p.b.qp->qp_num, kQkey, p.abuf, 0, 4097, 1);
  const ibv_wc s = p.a.wait();
  CHECK(s.status == IBV_WC_LOC_LEN_ERR);
  CHECK(s.wr_id == 1);
  CHECK(p.a.state() == IBV_QPS_SQE);
  // Receives go on in SQE.
  p.a.post_recv(p.abuf, 4096, 256, 5);
  send_datagram(p.b, p.b_to_a, p.a.qp->qp_num, kQkey, p.bbuf, 0, 16, 6);
  CHECK(p.b.wait().status == IBV_WC_SUCCESS);
  const ibv_wc r = p.a.wait();
  CHECK(r.status == IBV_WC_SUCCESS);
  CHECK(r.wr_id == 5);
  CHECK(r.byte_len == kGrh + 16);
  // SQE -> RTS, and the next send goes out.
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTS;
  REQUIRE(ibv_modify_qp(p.a.qp, &a, IBV_QP_STATE) == 0);
  p.b.post_recv(p.bbuf, 4096, 256, 7);
  send_datagram(p.a, p.a_to_b, p.b.qp->qp_num, kQkey, p.abuf, 0, 4096 - 64, 8);
  CHECK(p.a.wait().status == IBV_WC_SUCCESS);
  const ibv_wc r2 = p.b.wait();
  CHECK(r2.status == IBV_WC_LOC_LEN_ERR);  // 256 bytes cannot hold it
  CHECK(r2.wr_id == 7);
  CHECK(p.b.state() == IBV_QPS_ERR);
}

TEST_CASE("a receive with no room for the GRH area completes with a local length error") {
  UdPair p;
  p.b.post_recv(p.bbuf, 0, kGrh, 1);  // room for the GRH area, none for the 8 bytes
  p.b.post_recv(p.bbuf, 64, 256, 2);
  send_datagram(p.a, p.a_to_b, p.b.qp->qp_num, kQkey, p.abuf, 0, 8, 3);
  CHECK(p.a.wait().status == IBV_WC_SUCCESS);
  const ibv_wc r = p.b.wait();
  CHECK(r.status == IBV_WC_LOC_LEN_ERR);
  CHECK(r.wr_id == 1);
  // The QP is in ERR: the other receive is flushed, and the owner hears of it.
  const ibv_wc f = p.b.wait();
  CHECK(f.status == IBV_WC_WR_FLUSH_ERR);
  CHECK(f.wr_id == 2);
  CHECK(p.b.state() == IBV_QPS_ERR);
  pollfd pfd{p.db.ctx->async_fd, POLLIN, 0};
  REQUIRE(poll(&pfd, 1, 10000) == 1);
  ibv_async_event ev{};
  REQUIRE(ibv_get_async_event(p.db.ctx, &ev) == 0);
  CHECK(ev.event_type == IBV_EVENT_QP_REQ_ERR);
  CHECK(ev.element.qp == p.b.qp);
  ibv_ack_async_event(&ev);
}

TEST_CASE("UD QPs refuse the attributes of connected QPs, RC QPs refuse a Q_Key, both by name") {
  Device d("rnicsim0");
  UdEndpoint u{d, 0x1234};
  ibv_qp_attr a{};
  ibv_qp_init_attr init{};
  REQUIRE(ibv_query_qp(u.qp, &a, IBV_QP_QKEY | IBV_QP_STATE | IBV_QP_CAP, &init) == 0);
  CHECK(a.qkey == 0x1234);
  CHECK(a.qp_state == IBV_QPS_RTS);
  CHECK(a.cap.max_recv_wr >= 16);

  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.dest_qp_num = 5;
  errno = 0;
  std::string said = capture_stderr(
      [&] { CHECK(ibv_modify_qp(u.qp, &a, IBV_QP_STATE | IBV_QP_DEST_QPN) == EINVAL); });
  CHECK(said.find("IBV_QP_DEST_QPN: attributes of connected QPs, not UD") != std::string::npos);

  // A Q_Key change in RTS is allowed, and QUERY_QP reports it.
  a = {};
  a.qkey = 0x5678;
  REQUIRE(ibv_modify_qp(u.qp, &a, IBV_QP_QKEY) == 0);
  REQUIRE(ibv_query_qp(u.qp, &a, IBV_QP_QKEY, &init) == 0);
  CHECK(a.qkey == 0x5678);

  Endpoint rc{d};
  a = {};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qkey = 1;
  said = capture_stderr([&] {
    CHECK(ibv_modify_qp(rc.qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY) ==
          EINVAL);
  });
  CHECK(said.find("a Q_Key on a connected (RC) QP") != std::string::npos);

  // RESET -> INIT without a Q_Key: the model names what is missing.
  ibv_cq* cq = ibv_create_cq(d.ctx, 8, nullptr, nullptr, 0);
  REQUIRE(cq);
  ibv_qp_init_attr ui = qp_init(cq, cq, IBV_QPT_UD, 4, 1);
  ibv_qp* q = ibv_create_qp(d.pd, &ui);
  REQUIRE(q);
  a = {};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  said = capture_stderr(
      [&] { CHECK(ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT) != 0); });
  CHECK(said.find("qkey not set") != std::string::npos);
  CHECK(ibv_destroy_qp(q) == 0);
  CHECK(ibv_destroy_cq(cq) == 0);
}

// Run by the test verbs_ud_chosen_local_protection, under
// RNICDV_SIM_FAULTS='wr status=local_protection nth=2 device=0' (docs/faults.md): the second
// WR rnicsim0 fetches fails as a genuine bad lkey would, alone.
TEST_CASE("a UD send chosen by wr status=local_protection fails alone with LOC_PROT_ERR, the "
          "QP goes to SQE", "[.chosen]") {
  UdPair p;
  p.b.post_recv(p.bbuf, 0, 256, 1);
  p.b.post_recv(p.bbuf, 256, 256, 2);
  send_datagram(p.a, p.a_to_b, p.b.qp->qp_num, kQkey, p.abuf, 0, 16, 10);
  ibv_wc s = p.a.wait();
  CHECK(s.status == IBV_WC_SUCCESS);
  CHECK(s.wr_id == 10);
  CHECK(p.b.wait().wr_id == 1);
  send_datagram(p.a, p.a_to_b, p.b.qp->qp_num, kQkey, p.abuf, 0, 16, 11);
  s = p.a.wait();
  CHECK(s.status == IBV_WC_LOC_PROT_ERR);
  CHECK(s.wr_id == 11);
  CHECK(p.a.state() == IBV_QPS_SQE);
  // Nothing of it was sent; after SQE -> RTS the next send goes out (the rule fires once).
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTS;
  REQUIRE(ibv_modify_qp(p.a.qp, &a, IBV_QP_STATE) == 0);
  send_datagram(p.a, p.a_to_b, p.b.qp->qp_num, kQkey, p.abuf, 0, 16, 12);
  CHECK(p.a.wait().status == IBV_WC_SUCCESS);
  const ibv_wc r = p.b.wait();
  CHECK(r.status == IBV_WC_SUCCESS);
  CHECK(r.wr_id == 2);
  CHECK(r.imm_data == htobe32(12));
}
