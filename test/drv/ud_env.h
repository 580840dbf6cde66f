// SPDX-License-Identifier: BSD-3-Clause
// UD QPs for the drv tests: their configuration, and their way from where they are to RTS.
#pragma once

#include <cstring>
#include <initializer_list>

#include "sim_env.h"

namespace rnicdv::test {

// The GRH area at the start of every UD receive (IBA 11.4.1.1).
inline constexpr size_t kGrh = 40;

// A UD QP with the default test queues.
inline QpConfig ud_config() {
  QpConfig c = default_qp_config();
  c.type = hw::QpType::ud;
  return c;
}

// From the QP's state on through INIT (port, Q_Key), RTR and RTS (SQ PSN 0), as IBA 10.3.1
// moves a UD QP, up to `to`.
inline void ud_move_to(QueuePair& qp, hw::QpState to, uint32_t qkey) {
  hw::QpAttr a;
  a.qkey = qkey;
  a.sq_psn = 0;
  const hw::QpState from = qp.state();
  for (hw::QpState s : {hw::QpState::init, hw::QpState::rtr, hw::QpState::rts}) {
    if (static_cast<int>(s) <= static_cast<int>(from)) continue;  // RESET < INIT < RTR < RTS
    a.state = s;
    uint32_t mask = hw::qp_attr::state;
    if (s == hw::QpState::init) mask |= hw::qp_attr::port | hw::qp_attr::qkey;
    if (s == hw::QpState::rts) mask |= hw::qp_attr::sq_psn;
    check(qp.modify(a, mask));
    if (s == to) return;
  }
}

// A receive of up to 512 bytes behind the GRH, at `offset` of `n`'s memory.
inline void post_grh_recv(QueuePair& qp, Node& n, uint64_t wr_id, size_t offset) {
  const Sge s = n.sge(offset, 512 + kGrh);
  RecvWr r;
  r.wr_id = wr_id;
  r.sg_list = &s;
  r.num_sge = 1;
  REQUIRE(qp.post_recv(r) == Errc::ok);
}

// `pub` sends 8 datagrams of 200 bytes to `group` (Q_Key `qkey`), whose QPs in `subs` are
// attached and receive each once, in order, with its bytes; `check_grh(grh)` looks at each
// copy's GRH. The publisher's 8 sends complete too.
template <class CheckGrh>
void check_group_fanout(sim::Fabric& fabric, Node& pub, std::initializer_list<Node*> subs,
                        const hw::Gid& group, uint32_t qkey, CheckGrh check_grh) {
  for (Node* n : subs)
    for (int i = 0; i < 8; ++i) post_grh_recv(*n->qp, *n, 100 + i, kDst + i * 0x800);
  hw::AhAttr attr;
  attr.remote_gid = group;
  AddressHandle ah = take(pub.pd->create_ah(attr));
  for (uint32_t i = 0; i < 8; ++i) {
    fill(pub.bytes(kSrc + i * 256), 200, static_cast<uint8_t>(0x30 + i));
    REQUIRE(pub.qp->post_datagram(i, pub.sge(kSrc + i * 256, 200), ah, kMulticastQpn, qkey,
                                  send_flags::signaled) == Errc::ok);
  }
  for (Node* n : subs) {
    auto got = poll_n(fabric, *n->cq, 8, 10'000'000'000ull);
    REQUIRE(got.size() == 8);
    for (uint32_t i = 0; i < 8; ++i) {
      CHECK(got[i].status == IBV_WC_SUCCESS);
      CHECK(got[i].wr_id == 100 + i);
      CHECK(got[i].byte_len == 200 + kGrh);
      CHECK(std::memcmp(n->bytes(kDst + i * 0x800 + kGrh), pub.bytes(kSrc + i * 256), 200) == 0);
      check_grh(n->bytes(kDst + i * 0x800));
    }
  }
  CHECK(poll_n(fabric, *pub.cq, 8, 10'000'000'000ull).size() == 8);
}

}  // namespace rnicdv::test
