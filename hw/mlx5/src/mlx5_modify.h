// SPDX-License-Identifier: BSD-3-Clause
// QpAttr + qp_attr mask -> ibv_qp_attr + ibv_qp_attr_mask, for an RC QP. Pure: no verbs call.
//
// The attributes each transition requires and allows are those of the IBA Modify QP verb for
// an RC QP, as restated by ibv_modify_qp(3) and by the IB_QPT_RC column of the kernel's
// ib_modify_qp_is_ok() table (drivers/infiniband/core/verbs.c). A missing required attribute, an
// attribute the transition does not take, or an out-of-range value is rejected here with a message
// naming it, before the kernel sees the request and answers a bare EINVAL.
//
// qp_attr::port carries both the port and the P_Key index (IBV_QP_PORT | IBV_QP_PKEY_INDEX),
// so it is accepted only where IB allows both: RESET->INIT and INIT->INIT.
//
// Address vector. QpAttr names the peer by GID only.
// - Ethernet (RoCE): a GRH with dgid = remote_gid, sgid_index = the port's chosen GID,
//   hop_limit 64 (the IPv4 TTL for RoCE v2; rdma_cm's default), traffic class and flow label 0.
// - InfiniBand: routing inside a subnet needs the peer's LID, which QpAttr does not carry.
//   Only a peer on this very port (remote_gid == the port GID: loopback between two QPs of
//   this HCA) can be addressed, with dlid = the port's LID and no GRH. Any other peer is
//   rejected with Errc::unsupported. Reaching remote IB peers needs a path record (from the SA
//   or librdmacm's route resolution) and belongs to the connection manager.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <span>
#include <string>

#include "mlx5_port.h"
#include "rnicdv/hw/device.h"
#include "rnicdv/status.h"

namespace rnicdv::hw::mlx5 {

inline constexpr uint8_t kRoceHopLimit = 64;

// What the translation needs to know besides the request.
struct ModifyContext {
  uint32_t qpn = 0;                       // for messages
  QpState current = QpState::reset;       // the QP's state before the call
  uint8_t current_port = 0;               // the port set at INIT (0: none yet)
  std::span<const PortAddressing> ports;  // index i describes port i + 1
  uint8_t max_rd_atomic = 0;              // device max_qp_init_rd_atom
  uint8_t max_dest_rd_atomic = 0;         // device max_qp_rd_atom
  QpType type = QpType::rc;               // which table of transitions applies
};

struct VerbsModify {
  ibv_qp_attr attr;
  int mask = 0;  // ibv_qp_attr_mask bits
  QpState target = QpState::reset;
  uint8_t port = 0;  // the QP's port after the call
};

// All qp_attr::* bits this backend understands.
inline constexpr uint32_t kKnownQpAttrBits = (qp_attr::qkey << 1) - 1;

// The qp_attr bits a transition requires / accepts besides `state` (RC rows of the table above).
// valid == false: IB defines no such transition.
struct TransitionRule {
  bool valid = false;
  uint32_t required = 0;
  uint32_t optional = 0;
};
TransitionRule rc_transition_rule(QpState from, QpState to) noexcept;
// The same for a UD QP (IBA 10.3.1, table 91's UD column): the Q_Key where an RC QP takes
// its connection attributes, no address vector (each send carries one), and SQE->RTS.
TransitionRule ud_transition_rule(QpState from, QpState to) noexcept;
// The same for a UC QP (ibv_modify_qp(3), IBV_QPT_UC): RC's path without the reliability
// attributes (no timers, retry counts or RDMA READ/atomic depth), and SQE->RTS.
TransitionRule uc_transition_rule(QpState from, QpState to) noexcept;

// "sq_psn", "timeout", ... for one qp_attr bit; "?" for an unknown one.
const char* qp_attr_bit_name(uint32_t bit) noexcept;

// Translates one modify. Errors read "qp 0x1c: modify RTR->RTS: sq_psn not set".
Result<VerbsModify> translate_modify(const QpAttr& attr, uint32_t mask, const ModifyContext& ctx);

ibv_qp_state to_ibv_state(QpState s) noexcept;
QpState from_ibv_state(ibv_qp_state s) noexcept;  // IBV_QPS_UNKNOWN maps to err

}  // namespace rnicdv::hw::mlx5
