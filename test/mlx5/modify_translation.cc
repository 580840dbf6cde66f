// SPDX-License-Identifier: BSD-3-Clause
// QpAttr + qp_attr mask -> ibv_qp_attr + ibv mask, per transition, without hardware.
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "mlx5_modify.h"

using namespace rnicdv;
using namespace rnicdv::hw;
using namespace rnicdv::hw::mlx5;

namespace {

constexpr uint32_t kQpn = 0x1c;

Gid roce_gid() {
  return Gid::from_ipv4(0x0a000001);
}  // ::ffff:10.0.0.1
Gid peer_gid() {
  return Gid::from_ipv4(0x0a000002);
}  // ::ffff:10.0.0.2

Gid ib_port_gid() {
  Gid g;
  g.raw[0] = 0xfe;
  g.raw[1] = 0x80;
  for (int i = 8; i < 16; ++i) g.raw[i] = static_cast<uint8_t>(0x10 + i);
  return g;
}

// Port 1: RoCE v2, source GID at index 3. Port 2: InfiniBand, LID 0x11.
std::vector<PortAddressing> test_ports() {
  PortAddressing roce;
  roce.port_num = 1;
  roce.link_layer = LinkLayer::ethernet;
  roce.state = IBV_PORT_ACTIVE;
  roce.pkey_table_len = 128;
  roce.source_gid = GidCandidate{3, roce_gid(), IBV_GID_TYPE_ROCE_V2};
  roce.max_mtu = Mtu::mtu4096;
  roce.active_mtu = Mtu::mtu1024;

  PortAddressing ib;
  ib.port_num = 2;
  ib.link_layer = LinkLayer::infiniband;
  ib.state = IBV_PORT_ACTIVE;
  ib.lid = 0x11;
  ib.pkey_table_len = 64;
  ib.source_gid = GidCandidate{0, ib_port_gid(), IBV_GID_TYPE_IB};
  ib.max_mtu = Mtu::mtu2048;
  ib.active_mtu = Mtu::mtu2048;
  return {roce, ib};
}

struct Fixture {
  std::vector<PortAddressing> ports = test_ports();

  ModifyContext ctx(QpState current, uint8_t port = 1) const {
    ModifyContext c;
    c.qpn = kQpn;
    c.current = current;
    c.current_port = port;
    c.ports = ports;
    c.max_rd_atomic = 16;
    c.max_dest_rd_atomic = 16;
    return c;
  }
};

QpAttr rtr_attr() {
  QpAttr a;
  a.state = QpState::rtr;
  a.path_mtu = Mtu::mtu1024;
  a.dest_qpn = 0x2a;
  a.rq_psn = 0x123456;
  a.max_dest_rd_atomic = 4;
  a.min_rnr_timer = 12;
  a.remote_gid = peer_gid();
  return a;
}

constexpr uint32_t kRtrMask = qp_attr::state | qp_attr::av | qp_attr::path_mtu | qp_attr::dest_qpn |
                              qp_attr::rq_psn | qp_attr::max_dest_rd_atomic |
                              qp_attr::min_rnr_timer;

QpAttr rts_attr() {
  QpAttr a;
  a.state = QpState::rts;
  a.sq_psn = 0x654321;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 4;
  return a;
}

constexpr uint32_t kRtsMask = qp_attr::state | qp_attr::sq_psn | qp_attr::timeout |
                              qp_attr::retry_cnt | qp_attr::rnr_retry | qp_attr::max_rd_atomic;

}  // namespace

TEST_CASE("RESET->INIT sets state, port, P_Key index and access flags", "[modify]") {
  Fixture f;
  QpAttr a;
  a.state = QpState::init;
  a.port_num = 1;
  a.pkey_index = 5;
  a.access_flags = access::remote_write | access::remote_read | access::remote_atomic;
  auto r = translate_modify(a, qp_attr::state | qp_attr::port | qp_attr::access_flags,
                            f.ctx(QpState::reset, 0));
  REQUIRE(r.is_ok());
  CHECK(r->mask == (IBV_QP_STATE | IBV_QP_PORT | IBV_QP_PKEY_INDEX | IBV_QP_ACCESS_FLAGS));
  CHECK(r->attr.qp_state == IBV_QPS_INIT);
  CHECK(r->attr.port_num == 1);
  CHECK(r->attr.pkey_index == 5);
  CHECK(r->attr.qp_access_flags ==
        (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC));
  CHECK(r->target == QpState::init);
  CHECK(r->port == 1);
}

TEST_CASE("RESET->INIT without a port names the missing attribute", "[modify]") {
  Fixture f;
  QpAttr a;
  a.state = QpState::init;
  auto r = translate_modify(a, qp_attr::state | qp_attr::access_flags, f.ctx(QpState::reset, 0));
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().code() == Errc::invalid_argument);
  CHECK(r.status().message() == "qp 0x1c: modify RESET->INIT: port not set");
}

TEST_CASE("INIT->RTR on RoCE builds a GRH to the remote GID from the chosen source GID",
          "[modify]") {
  Fixture f;
  auto r = translate_modify(rtr_attr(), kRtrMask, f.ctx(QpState::init));
  REQUIRE(r.is_ok());
  CHECK(r->mask == (IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                    IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER));
  CHECK(r->attr.qp_state == IBV_QPS_RTR);
  CHECK(r->attr.path_mtu == IBV_MTU_1024);
  CHECK(r->attr.dest_qp_num == 0x2a);
  CHECK(r->attr.rq_psn == 0x123456);
  CHECK(r->attr.max_dest_rd_atomic == 4);
  CHECK(r->attr.min_rnr_timer == 12);
  const ibv_ah_attr& ah = r->attr.ah_attr;
  CHECK(ah.is_global == 1);
  CHECK(ah.port_num == 1);
  CHECK(ah.dlid == 0);
  CHECK(ah.sl == 0);
  CHECK(ah.grh.sgid_index == 3);
  CHECK(ah.grh.hop_limit == 64);
  CHECK(ah.grh.traffic_class == 0);
  CHECK(ah.grh.flow_label == 0);
  CHECK(std::memcmp(ah.grh.dgid.raw, peer_gid().raw, 16) == 0);
}

TEST_CASE("INIT->RTR maps every path MTU code to the same ibv_mtu", "[modify]") {
  Fixture f;
  for (Mtu mtu : {Mtu::mtu256, Mtu::mtu512, Mtu::mtu1024, Mtu::mtu2048, Mtu::mtu4096}) {
    QpAttr a = rtr_attr();
    a.path_mtu = mtu;
    auto r = translate_modify(a, kRtrMask, f.ctx(QpState::init));
    REQUIRE(r.is_ok());
    CHECK(static_cast<int>(r->attr.path_mtu) == static_cast<int>(mtu));
  }
}

TEST_CASE("INIT->RTR lists every missing required attribute", "[modify]") {
  Fixture f;
  auto r = translate_modify(rtr_attr(), kRtrMask & ~(qp_attr::dest_qpn | qp_attr::rq_psn),
                            f.ctx(QpState::init));
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().message() == "qp 0x1c: modify INIT->RTR: dest_qpn, rq_psn not set");
}

TEST_CASE("INIT->RTR refuses the port attribute, which IB does not accept there", "[modify]") {
  Fixture f;
  QpAttr a = rtr_attr();
  a.port_num = 1;
  auto r = translate_modify(a, kRtrMask | qp_attr::port, f.ctx(QpState::init));
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().message() == "qp 0x1c: modify INIT->RTR: port not accepted by this transition");
}

TEST_CASE("INIT->RTR takes optional access flags", "[modify]") {
  Fixture f;
  QpAttr a = rtr_attr();
  a.access_flags = access::remote_read;
  auto r = translate_modify(a, kRtrMask | qp_attr::access_flags, f.ctx(QpState::init));
  REQUIRE(r.is_ok());
  CHECK((r->mask & IBV_QP_ACCESS_FLAGS) != 0);
  CHECK(r->attr.qp_access_flags == IBV_ACCESS_REMOTE_READ);
}

TEST_CASE("RTR->RTS sets send PSN, ACK timeout, retry counts and initiator depth", "[modify]") {
  Fixture f;
  auto r = translate_modify(rts_attr(), kRtsMask, f.ctx(QpState::rtr));
  REQUIRE(r.is_ok());
  CHECK(r->mask == (IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                    IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC));
  CHECK(r->attr.qp_state == IBV_QPS_RTS);
  CHECK(r->attr.sq_psn == 0x654321);
  CHECK(r->attr.timeout == 14);
  CHECK(r->attr.retry_cnt == 7);
  CHECK(r->attr.rnr_retry == 7);
  CHECK(r->attr.max_rd_atomic == 4);
}

TEST_CASE("RTR->RTS without sq_psn fails with the documented message", "[modify]") {
  Fixture f;
  auto r = translate_modify(rts_attr(), kRtsMask & ~qp_attr::sq_psn, f.ctx(QpState::rtr));
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().code() == Errc::invalid_argument);
  CHECK(r.status().message() == "qp 0x1c: modify RTR->RTS: sq_psn not set");
}

TEST_CASE("RTR->RTS refuses receive-side attributes", "[modify]") {
  Fixture f;
  auto r = translate_modify(rts_attr(), kRtsMask | qp_attr::dest_qpn, f.ctx(QpState::rtr));
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().message() ==
        "qp 0x1c: modify RTR->RTS: dest_qpn not accepted by this transition");
}

TEST_CASE("RTR->RTS may also change the RNR timer", "[modify]") {
  Fixture f;
  QpAttr a = rts_attr();
  a.min_rnr_timer = 20;
  auto r = translate_modify(a, kRtsMask | qp_attr::min_rnr_timer, f.ctx(QpState::rtr));
  REQUIRE(r.is_ok());
  CHECK((r->mask & IBV_QP_MIN_RNR_TIMER) != 0);
  CHECK(r->attr.min_rnr_timer == 20);
}

TEST_CASE("a modify without the state bit stays in the current state", "[modify]") {
  Fixture f;
  QpAttr a;
  a.min_rnr_timer = 3;
  auto r = translate_modify(a, qp_attr::min_rnr_timer, f.ctx(QpState::rts));
  REQUIRE(r.is_ok());
  CHECK(r->mask == IBV_QP_MIN_RNR_TIMER);
  CHECK(r->target == QpState::rts);
}

TEST_CASE("ERR and RESET take no attributes and are reachable from every state", "[modify]") {
  Fixture f;
  for (QpState from :
       {QpState::init, QpState::rtr, QpState::rts, QpState::sqd, QpState::sqe, QpState::err}) {
    QpAttr a;
    a.state = QpState::err;
    auto r = translate_modify(a, qp_attr::state, f.ctx(from));
    REQUIRE(r.is_ok());
    CHECK(r->mask == IBV_QP_STATE);
    CHECK(r->attr.qp_state == IBV_QPS_ERR);
  }
  for (QpState from : {QpState::reset, QpState::init, QpState::rtr, QpState::rts, QpState::sqd,
                       QpState::sqe, QpState::err}) {
    QpAttr a;
    a.state = QpState::reset;
    auto r = translate_modify(a, qp_attr::state, f.ctx(from));
    REQUIRE(r.is_ok());
    CHECK(r->mask == IBV_QP_STATE);
    CHECK(r->attr.qp_state == IBV_QPS_RESET);
  }
}

TEST_CASE("ERR refuses attributes", "[modify]") {
  Fixture f;
  QpAttr a;
  a.state = QpState::err;
  auto r = translate_modify(a, qp_attr::state | qp_attr::timeout, f.ctx(QpState::rts));
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().message() ==
        "qp 0x1c: modify RTS->ERR: timeout not accepted by this transition");
}

TEST_CASE("transitions IB does not define are a state error", "[modify]") {
  Fixture f;
  struct Case {
    QpState from, to;
    const char* text;
  };
  for (const Case& c :
       {Case{QpState::reset, QpState::rts, "RESET->RTS"},
        Case{QpState::reset, QpState::err, "RESET->ERR"},
        Case{QpState::init, QpState::rts, "INIT->RTS"},
        Case{QpState::rtr, QpState::rtr, "RTR->RTR"}, Case{QpState::err, QpState::rts, "ERR->RTS"},
        Case{QpState::sqe, QpState::rts, "SQE->RTS"},
        Case{QpState::rts, QpState::init, "RTS->INIT"}}) {
    QpAttr a;
    a.state = c.to;
    auto r = translate_modify(a, qp_attr::state, f.ctx(c.from));
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().code() == Errc::bad_state);
    CHECK(r.status().message() == std::string("qp 0x1c: modify ") + c.text +
                                      ": not a valid transition for an RC QP (IBA 10.3.1)");
  }
}

TEST_CASE("RTS->SQD asks for the SQ-drained event", "[modify]") {
  Fixture f;
  QpAttr a;
  a.state = QpState::sqd;
  auto r = translate_modify(a, qp_attr::state, f.ctx(QpState::rts));
  REQUIRE(r.is_ok());
  CHECK(r->mask == (IBV_QP_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY));
  CHECK(r->attr.qp_state == IBV_QPS_SQD);
  CHECK(r->attr.en_sqd_async_notify == 1);
}

TEST_CASE("SQD->SQD may change the path and the retry parameters", "[modify]") {
  Fixture f;
  QpAttr a = rtr_attr();
  a.state = QpState::sqd;
  a.timeout = 18;
  a.retry_cnt = 3;
  auto r = translate_modify(a, qp_attr::state | qp_attr::av | qp_attr::timeout | qp_attr::retry_cnt,
                            f.ctx(QpState::sqd));
  REQUIRE(r.is_ok());
  CHECK(r->mask == (IBV_QP_STATE | IBV_QP_AV | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT));
  CHECK(r->attr.timeout == 18);
  CHECK(r->attr.retry_cnt == 3);
}

TEST_CASE("out-of-range values are rejected with the attribute's name", "[modify]") {
  Fixture f;
  SECTION("retry_cnt above 7") {
    QpAttr a = rts_attr();
    a.retry_cnt = 8;
    auto r = translate_modify(a, kRtsMask, f.ctx(QpState::rtr));
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().message() == "qp 0x1c: modify RTR->RTS: retry_cnt 8 out of range (0..7)");
  }
  SECTION("rnr_retry above 7") {
    QpAttr a = rts_attr();
    a.rnr_retry = 9;
    auto r = translate_modify(a, kRtsMask, f.ctx(QpState::rtr));
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().message() == "qp 0x1c: modify RTR->RTS: rnr_retry 9 out of range (0..7)");
  }
  SECTION("timeout above 31") {
    QpAttr a = rts_attr();
    a.timeout = 32;
    auto r = translate_modify(a, kRtsMask, f.ctx(QpState::rtr));
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().message() == "qp 0x1c: modify RTR->RTS: timeout 32 out of range (0..31)");
  }
  SECTION("min_rnr_timer above 31") {
    QpAttr a = rtr_attr();
    a.min_rnr_timer = 40;
    auto r = translate_modify(a, kRtrMask, f.ctx(QpState::init));
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().message() ==
          "qp 0x1c: modify INIT->RTR: min_rnr_timer 40 out of range (0..31)");
  }
  SECTION("dest_qpn wider than 24 bits") {
    QpAttr a = rtr_attr();
    a.dest_qpn = 0x1000000;
    auto r = translate_modify(a, kRtrMask, f.ctx(QpState::init));
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().message() ==
          "qp 0x1c: modify INIT->RTR: dest_qpn 16777216 out of range (24 bits)");
  }
  SECTION("PSNs wider than 24 bits") {
    QpAttr a = rts_attr();
    a.sq_psn = 0x1000000;
    auto r = translate_modify(a, kRtsMask, f.ctx(QpState::rtr));
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().code() == Errc::invalid_argument);
    QpAttr b = rtr_attr();
    b.rq_psn = 0xffffffff;
    auto s = translate_modify(b, kRtrMask, f.ctx(QpState::init));
    REQUIRE_FALSE(s.is_ok());
    CHECK(s.status().code() == Errc::invalid_argument);
  }
  SECTION("an undefined path MTU code") {
    QpAttr a = rtr_attr();
    a.path_mtu = static_cast<Mtu>(6);
    auto r = translate_modify(a, kRtrMask, f.ctx(QpState::init));
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().message() == "qp 0x1c: modify INIT->RTR: path_mtu code 6 out of range (1..5)");
  }
  SECTION("a path MTU above the port's maximum") {
    QpAttr a = rtr_attr();
    a.path_mtu = Mtu::mtu4096;
    auto r = translate_modify(a, kRtrMask, f.ctx(QpState::init, 2));  // IB port: max 2048
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().message() ==
          "qp 0x1c: modify INIT->RTR: path_mtu 4096 above port 2's maximum 2048");
  }
  SECTION("read/atomic depths above the device's") {
    QpAttr a = rts_attr();
    a.max_rd_atomic = 17;
    auto r = translate_modify(a, kRtsMask, f.ctx(QpState::rtr));
    REQUIRE_FALSE(r.is_ok());
    CHECK(
        r.status().message() ==
        "qp 0x1c: modify RTR->RTS: max_rd_atomic 17 out of range (device max_qp_init_rd_atom 16)");
    QpAttr b = rtr_attr();
    b.max_dest_rd_atomic = 200;
    auto s = translate_modify(b, kRtrMask, f.ctx(QpState::init));
    REQUIRE_FALSE(s.is_ok());
    CHECK(s.status().code() == Errc::invalid_argument);
  }
  SECTION("unknown access bits") {
    QpAttr a;
    a.state = QpState::init;
    a.access_flags = 0x100;
    auto r = translate_modify(a, qp_attr::state | qp_attr::port | qp_attr::access_flags,
                              f.ctx(QpState::reset, 0));
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().message() ==
          "qp 0x1c: modify RESET->INIT: access_flags 0x100 has unknown bits");
  }
  SECTION("a port the device does not have") {
    QpAttr a;
    a.state = QpState::init;
    a.port_num = 3;
    auto r = translate_modify(a, qp_attr::state | qp_attr::port | qp_attr::access_flags,
                              f.ctx(QpState::reset, 0));
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().message() ==
          "qp 0x1c: modify RESET->INIT: port 3 does not exist (device has 2)");
  }
  SECTION("a P_Key index beyond the port's table") {
    QpAttr a;
    a.state = QpState::init;
    a.port_num = 2;
    a.pkey_index = 64;
    auto r = translate_modify(a, qp_attr::state | qp_attr::port | qp_attr::access_flags,
                              f.ctx(QpState::reset, 0));
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().message() ==
          "qp 0x1c: modify RESET->INIT: pkey_index 64 beyond port 2's P_Key table (64 entries)");
  }
  SECTION("mask bits this backend does not know") {
    auto r = translate_modify(rts_attr(), kRtsMask | (1u << 20), f.ctx(QpState::rtr));
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().message() == "qp 0x1c: modify RTR->RTS: unknown attribute bits 0x100000");
  }
}

TEST_CASE("the address vector needs a remote GID and a port", "[modify]") {
  Fixture f;
  SECTION("all-zero remote GID") {
    QpAttr a = rtr_attr();
    a.remote_gid = Gid{};
    auto r = translate_modify(a, kRtrMask, f.ctx(QpState::init));
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().message() == "qp 0x1c: modify INIT->RTR: remote_gid not set (all zero)");
  }
  SECTION("a QP that never got a port") {
    auto r = translate_modify(rtr_attr(), kRtrMask, f.ctx(QpState::init, 0));
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().code() == Errc::bad_state);
  }
  SECTION("a RoCE port without a usable source GID") {
    f.ports[0].source_gid.reset();
    auto r = translate_modify(rtr_attr(), kRtrMask, f.ctx(QpState::init));
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().code() == Errc::unsupported);
    CHECK(r.status().message().find("port 1 has no usable source GID") != std::string::npos);
  }
}

TEST_CASE("on an InfiniBand port, loopback uses the port LID without a GRH", "[modify]") {
  Fixture f;
  QpAttr a = rtr_attr();
  a.path_mtu = Mtu::mtu2048;
  a.remote_gid = ib_port_gid();
  auto r = translate_modify(a, kRtrMask, f.ctx(QpState::init, 2));
  REQUIRE(r.is_ok());
  CHECK(r->attr.ah_attr.is_global == 0);
  CHECK(r->attr.ah_attr.dlid == 0x11);
  CHECK(r->attr.ah_attr.port_num == 2);
}

TEST_CASE("on an InfiniBand port, a remote peer is unsupported because QpAttr has no LID",
          "[modify]") {
  Fixture f;
  QpAttr a = rtr_attr();
  a.path_mtu = Mtu::mtu2048;
  auto r = translate_modify(a, kRtrMask, f.ctx(QpState::init, 2));
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().code() == Errc::unsupported);
  CHECK(r.status().message().find("needs its LID") != std::string::npos);
}

TEST_CASE("the RESET->INIT port is the one later address vectors use", "[modify]") {
  Fixture f;
  QpAttr init;
  init.state = QpState::init;
  init.port_num = 2;
  auto r = translate_modify(init, qp_attr::state | qp_attr::port | qp_attr::access_flags,
                            f.ctx(QpState::reset, 0));
  REQUIRE(r.is_ok());
  CHECK(r->port == 2);
  QpAttr rtr = rtr_attr();
  rtr.path_mtu = Mtu::mtu2048;
  rtr.remote_gid = ib_port_gid();
  auto s = translate_modify(rtr, kRtrMask, f.ctx(QpState::init, r->port));
  REQUIRE(s.is_ok());
  CHECK(s->attr.ah_attr.port_num == 2);
  CHECK(s->port == 2);
}

TEST_CASE("QP states map to and from ibv_qp_state one to one", "[modify]") {
  for (QpState s : {QpState::reset, QpState::init, QpState::rtr, QpState::rts, QpState::sqd,
                    QpState::sqe, QpState::err}) {
    CHECK(from_ibv_state(to_ibv_state(s)) == s);
  }
  CHECK(to_ibv_state(QpState::rtr) == IBV_QPS_RTR);
  CHECK(from_ibv_state(IBV_QPS_UNKNOWN) == QpState::err);
}

TEST_CASE("the transition table requires exactly the IB attributes", "[modify]") {
  namespace a = qp_attr;
  CHECK(rc_transition_rule(QpState::reset, QpState::init).required == (a::port | a::access_flags));
  CHECK(rc_transition_rule(QpState::init, QpState::rtr).required ==
        (a::av | a::path_mtu | a::dest_qpn | a::rq_psn | a::max_dest_rd_atomic | a::min_rnr_timer));
  CHECK(rc_transition_rule(QpState::rtr, QpState::rts).required ==
        (a::sq_psn | a::timeout | a::retry_cnt | a::rnr_retry | a::max_rd_atomic));
  CHECK(rc_transition_rule(QpState::init, QpState::init).valid);
  CHECK(rc_transition_rule(QpState::rts, QpState::rts).valid);
  CHECK(rc_transition_rule(QpState::sqd, QpState::rts).valid);
  CHECK_FALSE(rc_transition_rule(QpState::rtr, QpState::init).valid);
}

TEST_CASE("a UD QP's transitions take the Q_Key, no address vector or connection attributes, "
          "as IBA 10.3.1's UD column has them",
          "[modify][ud]") {
  Fixture f;
  auto ud = [&](QpState current, uint8_t port = 1) {
    ModifyContext c = f.ctx(current, port);
    c.type = QpType::ud;
    return c;
  };
  QpAttr a;
  a.state = QpState::init;
  a.port_num = 1;
  a.qkey = 0x11111111;
  auto init = translate_modify(a, qp_attr::state | qp_attr::port | qp_attr::qkey,
                               ud(QpState::reset, 0));
  REQUIRE(init.is_ok());
  CHECK(init->mask == (IBV_QP_STATE | IBV_QP_PORT | IBV_QP_PKEY_INDEX | IBV_QP_QKEY));
  CHECK(init->attr.qkey == 0x11111111);

  auto no_qkey = translate_modify(a, qp_attr::state | qp_attr::port, ud(QpState::reset, 0));
  REQUIRE_FALSE(no_qkey.is_ok());
  CHECK(no_qkey.status().message() == "qp 0x1c: modify RESET->INIT: qkey not set");
  auto access = translate_modify(a, qp_attr::state | qp_attr::port | qp_attr::qkey |
                                        qp_attr::access_flags,
                                 ud(QpState::reset, 0));
  REQUIRE_FALSE(access.is_ok());
  CHECK(access.status().message() ==
        "qp 0x1c: modify RESET->INIT: access_flags not accepted by this transition");

  QpAttr rtr;
  rtr.state = QpState::rtr;
  auto to_rtr = translate_modify(rtr, qp_attr::state, ud(QpState::init));
  REQUIRE(to_rtr.is_ok());
  CHECK(to_rtr->mask == IBV_QP_STATE);
  auto rc_like = translate_modify(rtr_attr(), kRtrMask, ud(QpState::init));
  REQUIRE_FALSE(rc_like.is_ok());
  CHECK(rc_like.status().message().find("not accepted by this transition") != std::string::npos);

  QpAttr rts;
  rts.state = QpState::rts;
  rts.sq_psn = 7;
  auto to_rts = translate_modify(rts, qp_attr::state | qp_attr::sq_psn, ud(QpState::rtr));
  REQUIRE(to_rts.is_ok());
  CHECK(to_rts->mask == (IBV_QP_STATE | IBV_QP_SQ_PSN));
  // SQE->RTS exists for UD (not for RC).
  CHECK(translate_modify(rts, qp_attr::state, ud(QpState::sqe)).is_ok());
  auto rc_sqe = translate_modify(rts, qp_attr::state, f.ctx(QpState::sqe));
  REQUIRE_FALSE(rc_sqe.is_ok());
  CHECK(rc_sqe.status().message() ==
        "qp 0x1c: modify SQE->RTS: not a valid transition for an RC QP (IBA 10.3.1)");
  // An RC QP refuses the Q_Key.
  QpAttr rc_init = a;
  rc_init.access_flags = access::remote_write;
  auto rc_qkey = translate_modify(rc_init, qp_attr::state | qp_attr::port | qp_attr::access_flags |
                                               qp_attr::qkey,
                                  f.ctx(QpState::reset, 0));
  REQUIRE_FALSE(rc_qkey.is_ok());
  CHECK(rc_qkey.status().message() ==
        "qp 0x1c: modify RESET->INIT: qkey not accepted by this transition");
}

TEST_CASE("a UC QP's transitions take RC's path and peer without the reliability attributes, "
          "and SQE->RTS, as ibv_modify_qp(3) has them for IBV_QPT_UC",
          "[modify][uc]") {
  Fixture f;
  auto uc = [&](QpState current, uint8_t port = 1) {
    ModifyContext c = f.ctx(current, port);
    c.type = QpType::uc;
    return c;
  };
  namespace a = qp_attr;
  CHECK(uc_transition_rule(QpState::reset, QpState::init).required == (a::port | a::access_flags));
  CHECK(uc_transition_rule(QpState::init, QpState::rtr).required ==
        (a::av | a::path_mtu | a::dest_qpn | a::rq_psn));
  CHECK(uc_transition_rule(QpState::rtr, QpState::rts).required == a::sq_psn);
  CHECK(uc_transition_rule(QpState::sqe, QpState::rts).valid);
  CHECK_FALSE(uc_transition_rule(QpState::rtr, QpState::init).valid);

  // RC's INIT->RTR attributes: the responder resources and the RNR timer are not UC's.
  auto rc_like = translate_modify(rtr_attr(), kRtrMask, uc(QpState::init));
  REQUIRE_FALSE(rc_like.is_ok());
  CHECK(rc_like.status().message() ==
        "qp 0x1c: modify INIT->RTR: max_dest_rd_atomic, min_rnr_timer not accepted by this "
        "transition");
  auto rtr = translate_modify(rtr_attr(), kRtrMask & ~(a::max_dest_rd_atomic | a::min_rnr_timer),
                              uc(QpState::init));
  INFO(rtr.status().message());
  REQUIRE(rtr.is_ok());
  CHECK(rtr->mask == (IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                      IBV_QP_RQ_PSN));
  QpAttr rts;
  rts.state = QpState::rts;
  rts.sq_psn = 9;
  rts.timeout = 14;
  auto timeout = translate_modify(rts, a::state | a::sq_psn | a::timeout, uc(QpState::rtr));
  REQUIRE_FALSE(timeout.is_ok());
  CHECK(timeout.status().message() ==
        "qp 0x1c: modify RTR->RTS: timeout not accepted by this transition");
  auto to_rts = translate_modify(rts, a::state | a::sq_psn, uc(QpState::rtr));
  REQUIRE(to_rts.is_ok());
  CHECK(to_rts->mask == (IBV_QP_STATE | IBV_QP_SQ_PSN));
  CHECK(translate_modify(rts, a::state, uc(QpState::sqe)).is_ok());
  auto back = translate_modify(rts, a::state, uc(QpState::init));
  REQUIRE_FALSE(back.is_ok());
  CHECK(back.status().message() ==
        "qp 0x1c: modify INIT->RTS: not a valid transition for a UC QP (IBA 10.3.1)");
}
