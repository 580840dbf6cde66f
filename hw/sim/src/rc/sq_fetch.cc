// SPDX-License-Identifier: BSD-3-Clause
// Fetching SQ WQEs: how far the device may read (the DBR, or beyond it for a scanning
// device), decoding the untrusted ring, and resolving every local buffer against the MR
// table before anything is sent. A defect completes the WQE with the mlx5 syndrome and
// moves the QP to ERR when the WQE reaches the head of the queue. A fault specification's
// local statuses (wr status=local_protection / local_length) fail a chosen WQE the same way.
#include <algorithm>
#include <cstring>

#include "sq_fetch.h"

#include "../faults/schedule.h"
#include "../packet/psn.h"
#include "queues.h"

namespace rnicdv::sim {

uint32_t SendWqe::last_psn() const {
  return psn_add(first_psn, span == 0 ? 0 : span - 1);
}

namespace rc {

namespace {

uint8_t syndrome_for(wqe::WqeDefect defect) {
  switch (defect) {
    case wqe::WqeDefect::bad_opcode:
    case wqe::WqeDefect::bad_ds:
    case wqe::WqeDefect::bad_qpn:
    case wqe::WqeDefect::bad_av:
      return MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
    case wqe::WqeDefect::bad_inline:
    case wqe::WqeDefect::too_many_segments:
    case wqe::WqeDefect::bad_atomic:
      return MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR;
    case wqe::WqeDefect::none:
      break;
  }
  return 0;
}

WqeKind kind_of(uint8_t opcode, bool* known) {
  *known = true;
  switch (opcode) {
    case MLX5_OPCODE_NOP:
      return WqeKind::nop;
    case MLX5_OPCODE_SEND:
    case MLX5_OPCODE_SEND_IMM:
      return WqeKind::send;
    case MLX5_OPCODE_RDMA_WRITE:
    case MLX5_OPCODE_RDMA_WRITE_IMM:
      return WqeKind::write;
    case MLX5_OPCODE_RDMA_READ:
      return WqeKind::read;
    case MLX5_OPCODE_ATOMIC_CS:
    case MLX5_OPCODE_ATOMIC_FA:
      return WqeKind::atomic;
    default:
      *known = false;
      return WqeKind::nop;
  }
}

uint32_t fault_op(WqeKind kind) {
  switch (kind) {
    case WqeKind::send:
      return faults::op::send;
    case WqeKind::write:
      return faults::op::write;
    case WqeKind::read:
      return faults::op::read;
    case WqeKind::atomic:
      return faults::op::atomic;
    case WqeKind::nop:
      break;
  }
  return 0;
}

// The syndrome of a chosen local status, as the genuine defect of that kind gives it: an
// lkey or access violation in the gather/scatter list, or a length the device refuses.
uint8_t chosen_syndrome(faults::ChosenStatus s) {
  return s == faults::ChosenStatus::local_length ? MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR
                                                 : MLX5_CQE_SYNDROME_LOCAL_PROT_ERR;
}

}  // namespace

SqFetcher::SqFetcher(Context& ctx)
    : ctx_(ctx),
      decoded_(std::make_unique<wqe::DecodedSendWqe>()),
      inline_scratch_(wqe::kMaxWqeDs * wqe::kDsBytes) {}

// True when the WQE at sq_consumed may be fetched: the DBR (as last read) is ahead, or the
// device scans and the WQE looks valid. A scanning device re-reads the DBR first, so only
// WQEs really beyond it count as fetched beyond the DBR.
bool SqFetcher::has_fetchable(QpObj& qp, bool* beyond_dbr) {
  *beyond_dbr = false;
  if (!qp.has_sq()) return false;  // nothing to fetch, whatever the record says
  if (static_cast<int32_t>(qp.sq_limit - qp.sq_consumed) > 0) return true;
  if (!ctx_.profile().fetches_beyond_dbr) return false;
  const uint16_t ahead = static_cast<uint16_t>(load_sq_dbr(qp) - qp.sq_consumed);
  if (ahead != 0 && ahead <= qp.sq.bb_count) {
    qp.sq_limit = qp.sq_consumed + ahead;
    return true;
  }
  if (!mirror_sq_beyond(qp, qp.sq_consumed) ||
      !wqe::looks_valid_send_wqe(qp.sq, qp.sq_consumed, qp.qpn, qp.transport()))
    return false;
  *beyond_dbr = true;
  return true;
}

bool SqFetcher::fetch_next(QpObj& qp) {
  bool beyond = false;
  if (!has_fetchable(qp, &beyond)) return false;
  if (qp.in_flight() == qp.wqes.size()) {
    // Grow the record ring (power of two) up to one record per basic block.
    if (qp.wqes.size() >= qp.sq.bb_count) return false;
    std::vector<SendWqe> bigger(qp.wqes.size() * 2);
    for (uint32_t i = qp.comp.wq_head; i != qp.wq_tail; ++i)
      bigger[i & (bigger.size() - 1)] = std::move(qp.wqe_at(i));
    qp.wqes = std::move(bigger);
  }

  wqe::DecodedSendWqe& d = *decoded_;
  const uint32_t pi = qp.sq_consumed;
  wqe::WqeDefect defect = wqe::WqeDefect::none;
  // A WQE in memory the application took away is not fetched; the QP goes to ERR. One
  // beyond the doorbell record was copied by has_fetchable().
  if (!beyond && !mirror_sq(qp, pi, qp.sq_limit)) return false;
  defect = wqe::decode_send_wqe(qp.sq, pi, qp.qpn, &d, inline_scratch_.data(),
                                static_cast<uint32_t>(inline_scratch_.size()), qp.transport());
  SendWqe& w = qp.wqe_at(qp.wq_tail);
  std::vector<LocalSeg> segs = std::move(w.segs);
  std::vector<uint8_t> inline_data = std::move(w.inline_data);
  w = SendWqe{};
  w.segs = std::move(segs);
  w.segs.clear();
  w.inline_data = std::move(inline_data);
  w.inline_data.clear();
  w.pi = pi;
  w.mlx5_opcode = d.opcode;
  w.signaled = d.signaled();
  if (defect != wqe::WqeDefect::none) {
    const uint32_t ds = d.ds & 0x3f;
    w.bbs = static_cast<uint8_t>(ds == 0 ? 1 : (ds + 3) / 4);
    w.error = syndrome_for(defect);
  } else {
    w.bbs = d.bbs;
    resolve(qp, d, w);
    if (w.error == 0 && w.kind != WqeKind::nop) choose_fault(qp, w);
  }
  ++qp.wq_tail;
  qp.sq_consumed += w.bbs;
  if (static_cast<int32_t>(qp.sq_limit - qp.sq_consumed) < 0) qp.sq_limit = qp.sq_consumed;
  ++ctx_.counters().wqes_fetched;
  if (beyond) ++ctx_.counters().wqes_beyond_dbr;
  return true;
}

// wr status=local_*: a WQE is fetched once, so each is counted once. The PSN logged is the one
// the WQE will start at (every WQE fetched before it has started: the requester fetches only
// when it has nothing left to start).
void SqFetcher::choose_fault(QpObj& qp, SendWqe& w) {
  faults::FaultSchedule* schedule = ctx_.wr_faults();
  if (schedule == nullptr) return;
  const std::optional<faults::ChosenStatus> s =
      schedule->take_wr_fault(faults::WrSite::requester, ctx_.device_index(), qp.qpn,
                              fault_op(w.kind), qp.req.next_psn);
  if (!s) return;
  // The buffers stay unused: the WQE completes with the error when it reaches the head.
  w.segs.clear();
  w.error = chosen_syndrome(*s);
}

void SqFetcher::resolve(QpObj& qp, const wqe::DecodedSendWqe& d, SendWqe& w) {
  bool known = false;
  w.kind = kind_of(d.opcode, &known);
  if (!known) {
    w.error = MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
    return;
  }
  w.solicited = d.solicited();
  w.fenced = d.fenced();
  w.with_imm = d.opcode == MLX5_OPCODE_SEND_IMM || d.opcode == MLX5_OPCODE_RDMA_WRITE_IMM;
  w.imm = d.imm;
  w.remote_addr = d.remote_addr;
  w.rkey = d.rkey;
  w.swap_add = d.swap_add;
  w.compare = d.compare;
  w.xrc_srqn = d.xrc_srqn;
  w.length = d.total_length;
  if (w.kind == WqeKind::nop) return;
  if (w.length > ctx_.caps().max_msg_size) {
    w.error = MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR;
    return;
  }
  if (w.kind == WqeKind::atomic) w.length = 8;
  if (qp.type == hw::QpType::uc && w.is_rd_atomic()) {
    // UC carries SEND and RDMA WRITE only (IBA 9.8.1, Table 40): a READ or an atomic is an
    // operation the QP cannot perform.
    w.error = MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
    return;
  }
  if (qp.type == hw::QpType::ud) {
    // One packet per datagram (IBA 9.8.2): no larger than the port's MTU. A RoCE v2 frame
    // carries one IP version, the device's: the destination GID must be of its family.
    const IpAddress dest = IpAddress::from_bytes(d.av.rgid);
    if (dest.is_v4() != ctx_.local_address().is_v4()) {
      w.error = MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
      return;
    }
    if (w.length > qp.mtu) {
      w.error = MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR;
      return;
    }
    w.ud_dest_qpn = d.av.dest_qpn;
    w.ud_qkey = d.av.qkey;
    w.ud_dest = dest;
    w.ud_tclass = d.av.tclass;
    w.ud_hop_limit = d.av.hop_limit ? d.av.hop_limit : 64;
    w.ud_flow_label = d.av.flow_label;
  }

  // READ and atomic results are written into the local list: it needs LOCAL_WRITE.
  const uint32_t required = w.is_rd_atomic() ? hw::access::local_write : 0;
  w.inline_data.assign(inline_scratch_.data(), inline_scratch_.data() + d.inline_bytes);
  for (uint32_t i = 0; i < d.num_entries; ++i) {
    const wqe::GatherEntry& e = d.entries[i];
    if (e.length == 0) continue;
    if (e.is_inline) {
      w.segs.push_back(LocalSeg{w.inline_data.data() + e.addr, e.length, PinRef{}});
      continue;
    }
    uint8_t* host = nullptr;
    PinRef pin;
    if (ctx_.mrs().check(e.lkey, qp.pdn, e.addr, e.length, required, &host, &pin) !=
        AccessResult::ok) {
      w.error = MLX5_CQE_SYNDROME_LOCAL_PROT_ERR;
      return;
    }
    w.segs.push_back(LocalSeg{host, e.length, pin});
  }
  const uint32_t mtu = qp.mtu;
  switch (w.kind) {
    case WqeKind::send:
    case WqeKind::write:
    case WqeKind::read:
      w.span = static_cast<uint32_t>(std::max<uint64_t>(1, (w.length + mtu - 1) >> qp.mtu_shift));
      break;
    case WqeKind::atomic:
      w.span = 1;
      break;
    case WqeKind::nop:
      break;
  }
}

}  // namespace rc
}  // namespace rnicdv::sim
