// SPDX-License-Identifier: BSD-3-Clause
// UD QPs for the drv tests: their configuration, and their way from where they are to RTS.
#pragma once

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

}  // namespace rnicdv::test
