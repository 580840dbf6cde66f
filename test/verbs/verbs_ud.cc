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
void send_datagram(UdEndpoint& from, ibv_ah* ah, uint32_t qpn, uint32_t qkey, const Buffer& b,
                   size_t off, uint32_t len, uint32_t imm) {
  ibv_sge sge{b.addr(off), len, b.mr->lkey};
  ibv_send_wr wr = make_wr(IBV_WR_SEND_WITH_IMM, &sge, 1, imm);
  wr.imm_data = htobe32(imm);
  wr.wr.ud.ah = ah;
  wr.wr.ud.remote_qpn = qpn;
  wr.wr.ud.remote_qkey = qkey;
  ibv_send_wr* bad = nullptr;
  REQUIRE(ibv_post_send(from.qp, &wr, &bad) == 0);
}

void send_datagram(UdEndpoint& from, const Ah& ah, uint32_t qpn, uint32_t qkey, const Buffer& b,
                   size_t off, uint32_t len, uint32_t imm) {
  send_datagram(from, ah.ah, qpn, qkey, b, off, len, imm);
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

namespace {

// The RoCE v2 GID of IPv4 group a.b.c.d: its IPv4-mapped address.
ibv_gid group_gid(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
  ibv_gid g{};
  g.raw[10] = g.raw[11] = 0xff;
  g.raw[12] = a;
  g.raw[13] = b;
  g.raw[14] = c;
  g.raw[15] = d;
  return g;
}

// An address handle on `from`'s PD towards group `g`.
ibv_ah* group_ah(const UdEndpoint& from, const ibv_gid& g) {
  ibv_ah_attr a{};
  a.is_global = 1;
  a.grh.dgid = g;
  a.grh.sgid_index = kGidIndex;
  a.grh.hop_limit = 1;
  a.port_num = 1;
  ibv_ah* ah = ibv_create_ah(from.dev.pd, &a);
  REQUIRE(ah);
  return ah;
}

// Polls `cq` for a while; the completions that came.
std::vector<ibv_wc> drain(ibv_cq* cq, int ms = 200) {
  std::vector<ibv_wc> out;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < until) {
    ibv_wc wc;
    if (ibv_poll_cq(cq, 1, &wc) == 1) out.push_back(wc);
  }
  return out;
}

}  // namespace

TEST_CASE("ibv_attach_mcast: a datagram to a group reaches each attached QP on both devices once, "
          "behind a GRH addressed to the group; detached, a QP hears no more") {
  UdPair p;
  UdEndpoint b2{p.db};
  const ibv_gid g = group_gid(239, 9, 8, 7);
  REQUIRE(ibv_attach_mcast(p.a.qp, &g, 0) == 0);  // the sender's own QP (loopback)
  REQUIRE(ibv_attach_mcast(p.b.qp, &g, 0) == 0);
  REQUIRE(ibv_attach_mcast(b2.qp, &g, 0) == 0);
  REQUIRE(ibv_attach_mcast(b2.qp, &g, 0) == 0);  // again: done already, as the kernel says
  Buffer b2buf{p.db.pd, 8192, IBV_ACCESS_LOCAL_WRITE};
  p.a.post_recv(p.abuf, 4096, kGrh + 512, 1);
  p.b.post_recv(p.bbuf, 0, kGrh + 512, 2);
  b2.post_recv(b2buf, 0, kGrh + 512, 3);
  fill(p.abuf.bytes, 9);
  ibv_ah* ah = group_ah(p.a, g);
  struct AhGuard {
    ibv_ah* ah;
    ~AhGuard() { CHECK(ibv_destroy_ah(ah) == 0); }
  } guard{ah};
  send_datagram(p.a, ah, 0xFFFFFF, kQkey, p.abuf, 0, 300, 0x51);

  std::vector<ibv_wc> at_a;
  at_a.push_back(p.a.wait());
  at_a.push_back(p.a.wait());
  const ibv_wc rb = p.b.wait(), rb2 = b2.wait();
  for (const ibv_wc& r : {rb, rb2}) {
    REQUIRE(r.status == IBV_WC_SUCCESS);
    CHECK(r.opcode == IBV_WC_RECV);
    CHECK(r.byte_len == kGrh + 300);
    CHECK(r.src_qp == p.a.qp->qp_num);
    CHECK((r.wc_flags & IBV_WC_GRH) != 0);
  }
  CHECK(std::equal(p.bbuf.bytes.begin() + kGrh, p.bbuf.bytes.begin() + kGrh + 300,
                   p.abuf.bytes.begin()));
  // The IPv4 header in the GRH's last 20 bytes: from a's address to the group.
  CHECK(be32_at(&p.bbuf.bytes[20 + 16]) == 0xEF090807u);
  CHECK(be32_at(&p.bbuf.bytes[20 + 12]) == ipv4_of(p.a.gid()));
  int sends = 0, recvs = 0;
  for (const ibv_wc& wc : at_a) {
    CHECK(wc.status == IBV_WC_SUCCESS);
    sends += wc.opcode == IBV_WC_SEND;
    recvs += wc.opcode == IBV_WC_RECV;
  }
  CHECK(sends == 1);
  CHECK(recvs == 1);  // multicast loopback to the sender's own QP
  CHECK(drain(p.b.cq).empty());
  CHECK(drain(b2.cq).empty());

  REQUIRE(ibv_detach_mcast(b2.qp, &g, 0) == 0);
  p.b.post_recv(p.bbuf, 0, kGrh + 512, 4);
  b2.post_recv(b2buf, 0, kGrh + 512, 5);
  send_datagram(p.a, ah, 0xFFFFFF, kQkey, p.abuf, 0, 64, 0x52);
  CHECK(p.b.wait().wr_id == 4);
  CHECK(drain(b2.cq).empty());
  CHECK(p.a.wait().opcode == IBV_WC_SEND);
}

TEST_CASE("ibv_attach_mcast refuses a QP that is not UD, a GID that is not a group's, and a "
          "detach of a group not attached, each with EINVAL; the device states its limits") {
  UdPair p;
  const ibv_gid g = group_gid(239, 9, 8, 6);
  const ibv_gid unicast = p.b.gid();
  CHECK(ibv_attach_mcast(p.a.qp, &unicast, 0) == EINVAL);  // a unicast address
  CHECK(ibv_detach_mcast(p.a.qp, &g, 0) == EINVAL);
  ibv_cq* cq = ibv_create_cq(p.da.ctx, 8, nullptr, nullptr, 0);
  REQUIRE(cq);
  ibv_qp_init_attr init = qp_init(cq, cq, IBV_QPT_RC, 4, 1);
  ibv_qp* rc = ibv_create_qp(p.da.pd, &init);
  REQUIRE(rc);
  CHECK(ibv_attach_mcast(rc, &g, 0) == EINVAL);
  CHECK(ibv_destroy_qp(rc) == 0);
  CHECK(ibv_destroy_cq(cq) == 0);
  ibv_device_attr attr{};
  REQUIRE(ibv_query_device(p.da.ctx, &attr) == 0);
  CHECK(attr.max_mcast_grp > 0);
  CHECK(attr.max_mcast_qp_attach > 0);
  CHECK(attr.max_total_mcast_qp_attach >= attr.max_mcast_qp_attach);
}

TEST_CASE("a UD QP created with IBV_QP_CREATE_BLOCK_SELF_MCAST_LB does not receive what it sends "
          "to its group; another QP of its device does") {
  UdPair p;
  ibv_qp_init_attr_ex x{};
  x.qp_type = IBV_QPT_UD;
  x.send_cq = p.a.cq;
  x.recv_cq = p.a.cq;
  x.cap.max_send_wr = x.cap.max_recv_wr = 8;
  x.cap.max_send_sge = x.cap.max_recv_sge = 1;
  x.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
  x.pd = p.da.pd;
  x.create_flags = IBV_QP_CREATE_BLOCK_SELF_MCAST_LB;
  ibv_qp* blocking = ibv_create_qp_ex(p.da.ctx, &x);
  REQUIRE(blocking);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qkey = kQkey;
  REQUIRE(ibv_modify_qp(blocking, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                          IBV_QP_QKEY) == 0);
  a = {};
  a.qp_state = IBV_QPS_RTR;
  REQUIRE(ibv_modify_qp(blocking, &a, IBV_QP_STATE) == 0);
  a.qp_state = IBV_QPS_RTS;
  REQUIRE(ibv_modify_qp(blocking, &a, IBV_QP_STATE | IBV_QP_SQ_PSN) == 0);
  const ibv_gid g = group_gid(239, 9, 8, 5);
  REQUIRE(ibv_attach_mcast(blocking, &g, 0) == 0);
  REQUIRE(ibv_attach_mcast(p.a.qp, &g, 0) == 0);
  post_one_recv(blocking, p.abuf, 0, kGrh + 256, 100);
  p.a.post_recv(p.abuf, 4096, kGrh + 256, 200);

  ibv_ah* ah = group_ah(p.a, g);
  ibv_sge sge{p.abuf.addr(2048), 64, p.abuf.mr->lkey};
  ibv_send_wr wr = make_wr(IBV_WR_SEND, &sge, 1, 7);
  wr.wr.ud.ah = ah;
  wr.wr.ud.remote_qpn = 0xFFFFFF;
  wr.wr.ud.remote_qkey = kQkey;
  ibv_send_wr* bad = nullptr;
  REQUIRE(ibv_post_send(blocking, &wr, &bad) == 0);
  std::vector<ibv_wc> got;
  got.push_back(p.a.wait());
  got.push_back(p.a.wait());
  for (const ibv_wc& wc : got) {
    CHECK(wc.status == IBV_WC_SUCCESS);
    CHECK(wc.wr_id != 100);  // never the sender's own receive
    if (wc.opcode == IBV_WC_RECV) CHECK(wc.src_qp == blocking->qp_num);
  }
  CHECK(drain(p.a.cq).empty());
  CHECK(ibv_detach_mcast(blocking, &g, 0) == 0);
  CHECK(ibv_destroy_qp(blocking) == 0);
  CHECK(ibv_destroy_ah(ah) == 0);
}
