// SPDX-License-Identifier: BSD-3-Clause
// UD QPs in rnicdv's API on the simulated HCA: datagrams sent with an address handle, the
// destination QP and its Q_Key; received behind the packet's 40-byte GRH with the sender's QPN;
// dropped on a wrong Q_Key; withheld in RTR and released at RTS like RC work; and the refusals
// (an RC operation on a UD QP, a datagram on an RC QP, a datagram above the MTU, an address the
// fabric cannot reach).
#include <catch2/catch.hpp>

#include <cstring>

#include "ud_env.h"

using namespace rnicdv;
using namespace rnicdv::test;

namespace {

constexpr uint32_t kQkey = 0x11111111;

void ud_to_rtr(QueuePair& qp, uint32_t qkey = kQkey) { ud_move_to(qp, hw::QpState::rtr, qkey); }
void ud_to_rts(QueuePair& qp) { ud_move_to(qp, hw::QpState::rts, kQkey); }

struct UdPair {
  Pair p;
  std::optional<AddressHandle> to_b;  // a's handle towards b

  explicit UdPair(const hw::DeviceProfile& profile = mlx5_profile())
      : p(make_pair(profile, ud_config())) {
    hw::AhAttr attr;
    attr.remote_gid = p.b.dev->info().gid;
    to_b.emplace(take(p.a.pd->create_ah(attr)));
  }
  // Both QPs to RTS (a: the sender, b: the receiver).
  void bring_up() {
    ud_to_rtr(*p.a.qp);
    ud_to_rtr(*p.b.qp);
    ud_to_rts(*p.a.qp);
    ud_to_rts(*p.b.qp);
  }
  SendWr datagram(uint64_t wr_id, const Sge* sge, uint32_t qkey = kQkey) const {
    SendWr wr = send_wr(wr_id, sge, 1);
    wr.av = to_b->av();
    wr.remote_qpn = p.b.qp->qpn();
    wr.remote_qkey = qkey;
    return wr;
  }
  void post_recv(uint64_t wr_id, size_t offset, uint32_t len) {
    const Sge s = p.b.sge(offset, len);
    RecvWr r;
    r.wr_id = wr_id;
    r.sg_list = &s;
    r.num_sge = 1;
    REQUIRE(p.b.qp->post_recv(r) == Errc::ok);
  }
};

}  // namespace

TEST_CASE("a UD datagram arrives behind its GRH, with its length, immediate and the sender's QPN",
          "[drv][ud]") {
  UdPair u;
  u.bring_up();
  u.post_recv(7, kDst, 1024 + kGrh);
  fill(u.p.a.bytes(kSrc), 1000, 0x31);
  const Sge s = u.p.a.sge(kSrc, 1000);
  SendWr wr = u.datagram(1, &s);
  wr.opcode = WrOpcode::send_imm;
  wr.imm_data = 0x5a5a0001;
  REQUIRE(u.p.a.qp->post_send(wr) == Errc::ok);

  auto sent = poll_n(*u.p.fabric, *u.p.a.cq, 1);
  REQUIRE(sent.size() == 1);
  CHECK(sent[0].status == IBV_WC_SUCCESS);
  CHECK(sent[0].opcode == IBV_WC_SEND);
  auto got = poll_n(*u.p.fabric, *u.p.b.cq, 1);
  REQUIRE(got.size() == 1);
  CHECK(got[0].status == IBV_WC_SUCCESS);
  CHECK(got[0].wr_id == 7);
  CHECK(got[0].byte_len == 1000 + kGrh);
  CHECK(got[0].src_qp == u.p.a.qp->qpn());
  CHECK((got[0].flags & wc_flags::grh) != 0);
  CHECK((got[0].flags & wc_flags::with_imm) != 0);
  CHECK(got[0].imm_data == 0x5a5a0001);
  CHECK(std::memcmp(u.p.b.bytes(kDst + kGrh), u.p.a.bytes(kSrc), 1000) == 0);
  // RoCE v2 over IPv4: the IPv4 header sits in the GRH's last 20 bytes (version 4).
  CHECK((u.p.b.bytes(kDst + 20)[0] >> 4) == 4);

  // An inline datagram too.
  u.post_recv(8, kDst, 1024 + kGrh);
  const char text[] = "inline datagram";
  const Sge inl{reinterpret_cast<uint64_t>(text), sizeof text, 0};
  SendWr iw = u.datagram(2, &inl);
  iw.flags = send_flags::signaled | send_flags::inline_data;
  REQUIRE(u.p.a.qp->post_send(iw) == Errc::ok);
  got = poll_n(*u.p.fabric, *u.p.b.cq, 1);
  REQUIRE(got.size() == 1);
  CHECK(got[0].byte_len == sizeof text + kGrh);
  CHECK(std::memcmp(u.p.b.bytes(kDst + kGrh), text, sizeof text) == 0);
}

TEST_CASE("a datagram with the wrong Q_Key is dropped by the receiver, and the sender still "
          "completes",
          "[drv][ud]") {
  UdPair u;
  u.bring_up();
  u.post_recv(1, kDst, 256 + kGrh);
  const Sge s = u.p.a.sge(kSrc, 64);
  REQUIRE(u.p.a.qp->post_send(u.datagram(1, &s, kQkey + 1)) == Errc::ok);
  auto sent = poll_n(*u.p.fabric, *u.p.a.cq, 1);
  REQUIRE(sent.size() == 1);
  CHECK(sent[0].status == IBV_WC_SUCCESS);  // unreliable: nothing comes back
  CHECK(poll_for(*u.p.fabric, *u.p.b.cq).empty());
  CHECK(u.p.b.counters().ud_qkey_drops == 1);
}

TEST_CASE("datagrams posted in RTR are withheld and sent once at RTS, for both early-post "
          "strategies",
          "[drv][ud]") {
  for (const auto& profile : {mlx5_profile(), scanning_profile()}) {
    INFO(profile_label(profile));
    UdPair u(profile);
    ud_to_rtr(*u.p.a.qp);
    ud_to_rtr(*u.p.b.qp);
    ud_to_rts(*u.p.b.qp);
    for (int i = 0; i < 3; ++i) u.post_recv(10 + i, kDst + i * 512, 256 + kGrh);
    Sge s[3];
    for (int i = 0; i < 3; ++i) {
      fill(u.p.a.bytes(kSrc + i * 256), 100, static_cast<uint8_t>(i));
      s[i] = u.p.a.sge(kSrc + i * 256, 100);
      REQUIRE(u.p.a.qp->post_send(u.datagram(i + 1, &s[i])) == Errc::ok);
    }
    CHECK(u.p.a.qp->withheld() == 3);
    CHECK(poll_for(*u.p.fabric, *u.p.b.cq).empty());
    ud_to_rts(*u.p.a.qp);
    auto got = poll_n(*u.p.fabric, *u.p.b.cq, 3);
    REQUIRE(got.size() == 3);
    for (int i = 0; i < 3; ++i) {
      CHECK(got[i].wr_id == static_cast<uint64_t>(10 + i));
      CHECK(std::memcmp(u.p.b.bytes(kDst + i * 512 + kGrh), u.p.a.bytes(kSrc + i * 256), 100) ==
            0);
    }
    CHECK(poll_n(*u.p.fabric, *u.p.a.cq, 3).size() == 3);
    CHECK(poll_for(*u.p.fabric, *u.p.b.cq).empty());  // nothing twice
  }
}

TEST_CASE("a UD QP refuses RC operations and typed calls, an RC QP refuses datagrams, and a "
          "datagram above the MTU completes with a local length error",
          "[drv][ud][errors]") {
  UdPair u;
  u.bring_up();
  const Sge s = u.p.a.sge(kSrc, 64);
  SendWr write = u.datagram(1, &s);
  write.opcode = WrOpcode::rdma_write;
  write.remote_addr = 0x1000;
  CHECK(u.p.a.qp->post_send(write) == Errc::invalid_argument);
  SendWr no_address = send_wr(2, &s, 1);  // no av on a UD QP
  CHECK(u.p.a.qp->post_send(no_address) == Errc::invalid_argument);
  CHECK(u.p.a.qp->post_message(3, s, send_flags::signaled) == Errc::invalid_argument);
  CHECK(u.p.a.qp->post_write(4, s, 0x1000, 1, send_flags::signaled) == Errc::invalid_argument);

  // Above the port's MTU: one datagram is one packet.
  const uint32_t mtu = hw::mtu_bytes(u.p.a.dev->info().caps.active_mtu);
  const Sge big = u.p.a.sge(kSrc, mtu + 1);
  REQUIRE(u.p.a.qp->post_send(u.datagram(5, &big)) == Errc::ok);
  auto got = poll_n(*u.p.fabric, *u.p.a.cq, 1);
  REQUIRE(got.size() == 1);
  CHECK(got[0].wr_id == 5);
  CHECK(got[0].status == IBV_WC_LOC_LEN_ERR);

  // A datagram on an RC QP.
  Pair rc = make_connected_pair(mlx5_profile());
  hw::AhAttr attr;
  attr.remote_gid = rc.b.dev->info().gid;
  AddressHandle ah = take(rc.a.pd->create_ah(attr));
  const Sge rs = rc.a.sge(kSrc, 64);
  SendWr dg = send_wr(6, &rs, 1);
  dg.av = ah.av();
  dg.remote_qpn = rc.b.qp->qpn();
  CHECK(rc.a.qp->post_send(dg) == Errc::invalid_argument);
}

TEST_CASE("an address handle towards an address the fabric cannot reach is refused by name",
          "[drv][ud][errors]") {
  UdPair u;
  hw::AhAttr attr;
  attr.remote_gid.raw[0] = 0xfe;  // fe80::1, link-local IPv6
  attr.remote_gid.raw[1] = 0x80;
  attr.remote_gid.raw[15] = 1;
  auto ah = u.p.a.pd->create_ah(attr);
  REQUIRE_FALSE(ah.is_ok());
  CHECK(ah.status().code() == Errc::unsupported);
  CHECK(ah.status().message().find("create_ah: destination GID fe80") != std::string::npos);
  CHECK(ah.status().message().find("are of different IP versions") != std::string::npos);

  attr = {};
  attr.remote_gid = u.p.b.dev->info().gid;
  attr.sl = 8;
  auto bad_sl = u.p.a.pd->create_ah(attr);
  REQUIRE_FALSE(bad_sl.is_ok());
  CHECK(bad_sl.status().code() == Errc::invalid_argument);
}

TEST_CASE("a UD QP on a shared receive queue is refused", "[drv][ud][errors]") {
  UdPair u;
  SharedReceiveQueue srq = take(u.p.a.dev->create_srq(*u.p.a.pd, 16, 1));
  QpConfig c = ud_config();
  c.srq = &srq;
  auto qp = u.p.a.dev->create_qp(*u.p.a.pd, *u.p.a.cq, *u.p.a.cq, c);
  REQUIRE_FALSE(qp.is_ok());
  CHECK(qp.status().code() == Errc::unsupported);
  CHECK(qp.status().message().find("a UD QP takes its receives from its own queue") !=
        std::string::npos);
}

TEST_CASE("a UD QP destroyed right after datagrams were posted to it sends them first, once each",
          "[drv][ud]") {
  UdPair u;
  u.bring_up();
  for (int i = 0; i < 5; ++i) u.post_recv(10 + i, kDst + i * 512, 256 + kGrh);
  Sge s[5];
  for (int i = 0; i < 5; ++i) {
    fill(u.p.a.bytes(kSrc + i * 256), 100, static_cast<uint8_t>(0x70 + i));
    s[i] = u.p.a.sge(kSrc + i * 256, 100);
    SendWr wr = u.datagram(i + 1, &s[i]);
    wr.flags = 0;  // unsignaled, as a program that tears down at once posts them
    REQUIRE(u.p.a.qp->post_send(wr) == Errc::ok);
  }
  // The deterministic fabric has not run since: the device has not seen the doorbells yet.
  CHECK(u.p.a.counters().packets_tx == 0);
  u.p.a.qp.reset();
  auto got = poll_n(*u.p.fabric, *u.p.b.cq, 5);
  REQUIRE(got.size() == 5);
  for (int i = 0; i < 5; ++i) {
    CHECK(got[i].wr_id == static_cast<uint64_t>(10 + i));
    CHECK(std::memcmp(u.p.b.bytes(kDst + i * 512 + kGrh), u.p.a.bytes(kSrc + i * 256), 100) == 0);
  }
  CHECK(poll_for(*u.p.fabric, *u.p.b.cq).empty());
  CHECK(u.p.a.counters().packets_tx == 5);
}
