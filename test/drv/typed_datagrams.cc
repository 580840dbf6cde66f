// SPDX-License-Identifier: BSD-3-Clause
// The typed datagram calls of a UD QP (post_datagram, post_datagram_imm, post_datagram_inline
// and their stage_ forms): the bytes of the general encoder for the same SendWr, at the ring's
// wrap too; delivery; the early-post gate; every threading model; refusals on other QPs.
#include <catch2/catch.hpp>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "rnicdv/detail/qp_core.h"
#include "ud_env.h"

using namespace rnicdv;
using namespace rnicdv::test;

namespace {

constexpr uint32_t kQkey = 0x22222222;

QpConfig typed_ud_config(Threading threading = Threading::single) {
  QpConfig c = ud_config();
  c.caps.max_inline_data = 128;
  c.threading = threading;
  return c;
}

void ud_state(QueuePair& qp, hw::QpState to) { ud_move_to(qp, to, kQkey); }

struct Ud {
  Pair p;
  std::optional<AddressHandle> to_b;
  explicit Ud(Threading threading = Threading::single)
      : p(make_pair(mlx5_profile(), typed_ud_config(threading))) {
    hw::AhAttr attr;
    attr.remote_gid = p.b.dev->info().gid;
    to_b.emplace(take(p.a.pd->create_ah(attr)));
  }
  uint32_t b_qpn() const { return p.b.qp->qpn(); }
};

// The WQE at `pi`: its DS from the ctrl segment, then DS * 16 bytes, following the wrap.
std::vector<uint8_t> wqe_bytes(wqe::SqRing ring, uint32_t pi) {
  const uint8_t ds = ring.bb(pi)[7] & 0x3f;
  std::vector<uint8_t> out(size_t{ds} * wqe::kDsBytes);
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = ring.buf[((pi & (ring.bb_count - 1)) * wqe::kBbBytes + i) %
                      (size_t{ring.bb_count} * wqe::kBbBytes)];
  return out;
}

struct Request {
  std::string name;
  Sge sge;
  SendWr wr;
  std::function<Errc(QueuePair&, bool stage)> typed;
};

std::vector<Request> requests(Ud& u, SendFlags flags) {
  std::vector<Request> out;
  const AddressHandle& ah = *u.to_b;
  const uint32_t qpn = u.b_qpn();
  const Sge sge = u.p.a.sge(kSrc, 300);
  SendWr wr = send_wr(21, nullptr, 1, flags);
  wr.av = ah.av();
  wr.remote_qpn = qpn;
  wr.remote_qkey = kQkey;
  out.push_back({"DATAGRAM", sge, wr, [=, &ah](QueuePair& qp, bool stage) {
                   return stage ? qp.stage_datagram(21, sge, ah, qpn, kQkey, flags)
                                : qp.post_datagram(21, sge, ah, qpn, kQkey, flags);
                 }});
  wr.wr_id = 22;
  wr.opcode = WrOpcode::send_imm;
  wr.imm_data = 0x0badcafe;
  out.push_back({"DATAGRAM_IMM", sge, wr, [=, &ah](QueuePair& qp, bool stage) {
                   return stage ? qp.stage_datagram_imm(22, sge, ah, qpn, kQkey, 0x0badcafe, flags)
                                : qp.post_datagram_imm(22, sge, ah, qpn, kQkey, 0x0badcafe, flags);
                 }});
  static const char text[100] = "an inline datagram of one hundred bytes, spanning blocks";
  const Sge inl{reinterpret_cast<uintptr_t>(text), sizeof text, 0};
  wr.wr_id = 23;
  wr.opcode = WrOpcode::send;
  wr.imm_data = 0;
  wr.flags = flags | send_flags::inline_data;
  out.push_back({"DATAGRAM_INLINE", inl, wr, [=, &ah](QueuePair& qp, bool stage) {
                   return stage ? qp.stage_datagram_inline(23, text, sizeof text, ah, qpn, kQkey,
                                                           flags)
                                : qp.post_datagram_inline(23, text, sizeof text, ah, qpn, kQkey,
                                                          flags);
                 }});
  for (Request& r : out) r.wr.sg_list = &r.sge;
  return out;
}

}  // namespace

TEST_CASE("a typed datagram call builds the general encoder's bytes for the same SendWr, also "
          "where the WQE wraps at the ring's end",
          "[drv][typed][ud]") {
  const SendFlags flags = SendFlags::from_bits(
      GENERATE(as<uint32_t>{}, send_flags::signaled.bits(), 0u, send_flags::solicited.bits()));
  const uint32_t offset = GENERATE(0u, 1u);  // the first WQE starts in the last block, or not
  Ud u;
  ud_state(*u.p.a.qp, hw::QpState::rts);
  ud_state(*u.p.b.qp, hw::QpState::rts);
  detail::QpCore& core = *u.p.a.qp->core();
  // In RTS the typed datagram calls build in place, without the slow path.
  CHECK(core.gate.load() == detail::kGateOpenDatagram);
  std::vector<uint8_t> scratch_mem(size_t{core.sq.bb_count} * wqe::kBbBytes);
  const wqe::SqRing scratch{scratch_mem.data(), core.sq.bb_count};
  // Inline datagrams of two blocks (1 byte) or three (70 bytes), until the next WQE starts
  // `offset` blocks before the ring's end.
  static const char filler[70] = {};
  uint32_t posted = 0;
  const uint32_t target = core.sq.bb_count - 1 - offset;
  for (uint32_t dist; (dist = (target - core.sq_pi) % core.sq.bb_count) != 0;) {
    REQUIRE(u.p.a.qp->post_datagram_inline(900 + posted, filler, dist % 2 ? 70 : 1, *u.to_b,
                                           u.b_qpn(), kQkey, send_flags::signaled) == Errc::ok);
    ++posted;
    if (posted % 8 == 0) REQUIRE(poll_n(*u.p.fabric, *u.p.a.cq, 8).size() == 8);
  }
  if (posted % 8) REQUIRE(poll_n(*u.p.fabric, *u.p.a.cq, posted % 8).size() == posted % 8);

  std::vector<Request> reqs = requests(u, flags);
  for (Request& r : reqs) {
    INFO(r.name << ", flags " << flags << ", start " << core.sq_pi % core.sq.bb_count);
    const uint32_t pi = core.sq_pi;
    REQUIRE(r.typed(*u.p.a.qp, /*stage=*/true) == Errc::ok);
    wqe::EncodedWqe enc;
    std::memset(scratch_mem.data(), 0, scratch_mem.size());
    REQUIRE(wqe::encode_send_wqe(scratch, pi, scratch.bb_count, core.qpn, r.wr, core.limits,
                                 core.sig_all_bits, &enc) == Errc::ok);
    CHECK(core.sq_pi == pi + enc.bbs);
    CHECK(wqe_bytes(core.sq, pi) == wqe_bytes(scratch, pi));
    CHECK(core.sq_entries[pi & core.sq_mask].wr_id == r.wr.wr_id);
    CHECK(core.sq_entries[pi & core.sq_mask].bbs == enc.bbs);
    CHECK(core.sq_entries[pi & core.sq_mask].opcode == static_cast<uint8_t>(r.wr.opcode));
  }
  u.p.a.qp->ring_send();
  for (const Completion& c : poll_for(*u.p.fabric, *u.p.a.cq)) CHECK(c.status == IBV_WC_SUCCESS);
}

TEST_CASE("typed datagrams arrive with their payload and immediate under every threading model, "
          "are withheld in RTR and released at RTS, and are refused on an RC QP",
          "[drv][typed][ud]") {
  const Threading threading =
      GENERATE(Threading::single, Threading::single_poster, Threading::thread_safe);
  INFO(threading_name(threading));
  Ud u(threading);
  ud_state(*u.p.a.qp, hw::QpState::rtr);
  ud_state(*u.p.b.qp, hw::QpState::rts);
  for (int i = 0; i < 3; ++i)
    REQUIRE(u.p.b.qp->post_recv(40 + i, u.p.b.sge(kDst + i * 512, 256 + kGrh)) == Errc::ok);
  fill(u.p.a.bytes(kSrc), 200, 0x21);
  const Sge sge = u.p.a.sge(kSrc, 200);
  REQUIRE(u.p.a.qp->post_datagram(1, sge, *u.to_b, u.b_qpn(), kQkey, send_flags::signaled) ==
          Errc::ok);
  REQUIRE(u.p.a.qp->post_datagram_imm(2, sge, *u.to_b, u.b_qpn(), kQkey, 77,
                                      send_flags::signaled) == Errc::ok);
  const char text[] = "inline";
  REQUIRE(u.p.a.qp->post_datagram_inline(3, text, sizeof text, *u.to_b, u.b_qpn(), kQkey,
                                         send_flags::signaled) == Errc::ok);
  CHECK(u.p.a.qp->withheld() == 3);
  CHECK(poll_for(*u.p.fabric, *u.p.b.cq).empty());
  ud_state(*u.p.a.qp, hw::QpState::rts);
  auto got = poll_n(*u.p.fabric, *u.p.b.cq, 3);
  REQUIRE(got.size() == 3);
  CHECK(got[0].byte_len == 200 + kGrh);
  CHECK(std::memcmp(u.p.b.bytes(kDst + kGrh), u.p.a.bytes(kSrc), 200) == 0);
  CHECK((got[1].flags & wc_flags::with_imm) != 0);
  CHECK(got[1].imm_data == 77);
  CHECK(got[2].byte_len == sizeof text + kGrh);
  CHECK(std::memcmp(u.p.b.bytes(kDst + 1024 + kGrh), text, sizeof text) == 0);
  for (const Completion& c : got) CHECK(c.src_qp == u.p.a.qp->qpn());
  const auto sent = poll_n(*u.p.fabric, *u.p.a.cq, 3);
  REQUIRE(sent.size() == 3);
  for (int i = 0; i < 3; ++i) CHECK(sent[i].wr_id == static_cast<uint64_t>(i + 1));

  // In RTS, posted at once.
  REQUIRE(u.p.b.qp->post_recv(50, u.p.b.sge(kDst, 256 + kGrh)) == Errc::ok);
  REQUIRE(u.p.a.qp->post_datagram(4, sge, *u.to_b, u.b_qpn(), kQkey, send_flags::signaled) ==
          Errc::ok);
  REQUIRE(poll_n(*u.p.fabric, *u.p.b.cq, 1).size() == 1);

  // The RC calls stay refused on a UD QP, and the datagram calls on an RC QP.
  CHECK(u.p.a.qp->post_message(5, sge, send_flags::signaled) == Errc::invalid_argument);
  Pair rc = make_connected_pair(mlx5_profile());
  const Sge rs = rc.a.sge(kSrc, 64);
  CHECK(rc.a.qp->post_datagram(6, rs, *u.to_b, 1, kQkey, send_flags::signaled) ==
        Errc::invalid_argument);
  CHECK(rc.a.qp->post_datagram_inline(7, "x", 1, *u.to_b, 1, kQkey, send_flags::signaled) ==
        Errc::invalid_argument);
}
