// SPDX-License-Identifier: BSD-3-Clause
// Device::create_qp: validates the request, creates the device QP, and resolves once what the
// fast path will do for the QP's whole life (doorbell mode, early-posting strategy).
#include <cstring>
#include <iterator>
#include <mutex>
#include <new>
#include <utility>

#include "device_core.h"
#include "rnicdv/cq.h"
#include "rnicdv/detail/cq_core.h"
#include "rnicdv/detail/qp_core.h"
#include "rnicdv/device.h"
#include "rnicdv/pd.h"
#include "rnicdv/qp.h"
#include "rnicdv/srq.h"
#include "rnicdv/wqe/layouts.h"

namespace rnicdv {

namespace {

bool is_pow2(uint32_t v) {
  return v != 0 && (v & (v - 1)) == 0;
}

Status check_caps(const hw::DeviceInfo& info, const QpConfig& config) {
  const hw::QpCaps& want = config.caps;
  const hw::DeviceCaps& have = info.caps;
  const char* dev = info.name.c_str();
  // The devices accept a QP without a send queue (mlx5 does), but this API's QPs are for
  // posting: such a QP could never post, so it is refused here, where the caller asked.
  if (want.max_send_wr == 0)
    return Status::error(Errc::invalid_argument,
                         "%s: create_qp: max_send_wr is 0: a QP without a send queue could not "
                         "post a work request (rnicdv's QPs need one)",
                         dev);
  struct Limit {
    const char* name;
    uint32_t requested, limit;
  };
  const Limit limits[] = {{"max_send_wr", want.max_send_wr, have.max_qp_wr},
                          {"max_recv_wr", want.max_recv_wr, have.max_qp_wr},
                          {"max_send_sge", want.max_send_sge, have.max_send_sge},
                          {"max_recv_sge", want.max_recv_sge, have.max_recv_sge},
                          {"max_inline_data", want.max_inline_data, have.max_inline_data}};
  for (const Limit& l : limits)
    if (l.requested > l.limit)
      return Status::error(Errc::invalid_argument,
                           "%s: create_qp: %s %u exceeds the device limit %u", dev, l.name,
                           l.requested, l.limit);
  if (static_cast<uint8_t>(config.early_post) > static_cast<uint8_t>(EarlyPost::shadow))
    return Status::error(Errc::invalid_argument, "%s: create_qp: unknown early_post value %u", dev,
                         static_cast<unsigned>(config.early_post));
  if (static_cast<uint8_t>(config.threading) > static_cast<uint8_t>(Threading::thread_safe))
    return Status::error(Errc::invalid_argument, "%s: create_qp: unknown threading value %u", dev,
                         static_cast<unsigned>(config.threading));
  return Status::ok();
}

Status check_view(const hw::QpView& view) {
  const mlx5dv_qp& dv = view.dv;
  if (!dv.dbrec || !dv.sq.buf || dv.sq.stride != wqe::kBbBytes || !is_pow2(dv.sq.wqe_cnt) ||
      dv.sq.wqe_cnt > 0x10000)
    return Status::error(Errc::internal,
                         "qp %#x: create: unusable send queue from the device (%u blocks of %u "
                         "bytes)",
                         view.qpn, dv.sq.wqe_cnt, dv.sq.stride);
  if (dv.rq.wqe_cnt != 0 &&
      (!dv.rq.buf || !is_pow2(dv.rq.wqe_cnt) || !is_pow2(dv.rq.stride) || dv.rq.stride < 16))
    return Status::error(Errc::internal,
                         "qp %#x: create: unusable receive queue from the device (%u WQEs of %u "
                         "bytes)",
                         view.qpn, dv.rq.wqe_cnt, dv.rq.stride);
  return Status::ok();
}

EarlyPost resolve_early_post(EarlyPost requested, const hw::DeviceProfile& profile) {
  if (requested != EarlyPost::automatic) return requested;
  // A device that may fetch WQEs past the doorbell record would find withheld WQEs in the SQ:
  // keep them out of it until the flush.
  return profile.fetches_beyond_dbr ? EarlyPost::shadow : EarlyPost::in_place;
}

// Withholding in place leaves valid WQEs in the SQ with no doorbell. A device that runs
// valid-looking WQEs past the doorbell record takes them the moment its QP reaches RTS, before
// the driver has announced them, and in ERR it flushes them beside the driver's own flush
// errors: completions would be dropped or doubled. Refused rather than run unsafely.
Status check_early_post(const hw::DeviceInfo& info, EarlyPost resolved) {
  if (resolved == EarlyPost::in_place && info.profile.fetches_beyond_dbr)
    return Status::error(Errc::unsupported,
                         "%s: create_qp: early_post=in_place is unsafe on this device: its "
                         "profile '%s' fetches WQEs beyond the doorbell record, so withheld WQEs "
                         "would run unannounced (use shadow or automatic)",
                         info.name.c_str(), hw::device_profile_name(info.profile));
  return Status::ok();
}

// The typed calls' ctrl heads: everything but the WQE index, prebuilt once.
void init_ctrl_heads(detail::QpCore& qp) {
  struct Head {
    detail::TypedHead slot;
    uint8_t opcode;
    uint8_t ds;
  };
  constexpr Head kHeads[] = {
      {detail::kHeadWrite, MLX5_OPCODE_RDMA_WRITE, wqe::kRdmaDs},
      {detail::kHeadWriteImm, MLX5_OPCODE_RDMA_WRITE_IMM, wqe::kRdmaDs},
      {detail::kHeadRead, MLX5_OPCODE_RDMA_READ, wqe::kRdmaDs},
      {detail::kHeadSend, MLX5_OPCODE_SEND, wqe::kSendDs},
      {detail::kHeadSendImm, MLX5_OPCODE_SEND_IMM, wqe::kSendDs},
      {detail::kHeadFetchAdd, MLX5_OPCODE_ATOMIC_FA, wqe::kAtomicDs},
      {detail::kHeadCompareSwap, MLX5_OPCODE_ATOMIC_CS, wqe::kAtomicDs},
      {detail::kHeadWriteInline, MLX5_OPCODE_RDMA_WRITE, 0},
      {detail::kHeadSendInline, MLX5_OPCODE_SEND, 0},
      {detail::kHeadDatagram, MLX5_OPCODE_SEND, detail::kDatagramSendDs},
      {detail::kHeadDatagramImm, MLX5_OPCODE_SEND_IMM, detail::kDatagramSendDs},
      {detail::kHeadDatagramInline, MLX5_OPCODE_SEND, 0},
  };
  static_assert(std::size(kHeads) == detail::kTypedHeads);
  for (const Head& h : kHeads)
    qp.ctrl_heads[h.slot] = qp.ctrl_qpn_bits | wqe::ctrl_op_bits(h.opcode, h.ds);
}

}  // namespace

Result<QueuePair> Device::create_qp(ProtectionDomain& pd, CompletionQueue& send_cq,
                                    CompletionQueue& recv_cq, const QpConfig& config) {
  const hw::DeviceInfo& dev_info = info();
  RNICDV_TRY(check_caps(dev_info, config));
  const EarlyPost early_post = resolve_early_post(config.early_post, dev_info.profile);
  RNICDV_TRY(check_early_post(dev_info, early_post));
  if (send_cq.core()->device != core_ || recv_cq.core()->device != core_)
    return Status::error(Errc::invalid_argument,
                         "%s: create_qp: the completion queues belong to another device",
                         dev_info.name.c_str());

  detail::SrqCore* srq = config.srq ? config.srq->core() : nullptr;
  if (config.srq && (!srq || srq->device != core_))
    return Status::error(Errc::invalid_argument,
                         "%s: create_qp: the shared receive queue belongs to another device",
                         dev_info.name.c_str());
  const bool ud = config.type == hw::QpType::ud;
  const bool uc = config.type == hw::QpType::uc;
  const bool xrc = config.type == hw::QpType::xrc_send;
  if (config.type == hw::QpType::xrc_recv)
    return Status::error(Errc::invalid_argument,
                         "%s: create_qp: an XRC target belongs to an XRC domain: "
                         "create_xrc_target()",
                         dev_info.name.c_str());
  if (config.type != hw::QpType::rc && !ud && !uc && !xrc)
    return Status::error(Errc::invalid_argument, "%s: create_qp: unknown QP type %u",
                         dev_info.name.c_str(), static_cast<unsigned>(config.type));
  if (ud && srq)
    return Status::error(Errc::unsupported,
                         "%s: create_qp: a UD QP takes its receives from its own queue, not a "
                         "shared receive queue",
                         dev_info.name.c_str());
  if (xrc && srq)
    return Status::error(Errc::invalid_argument,
                         "%s: create_qp: an XRC initiator receives nothing: no shared receive "
                         "queue",
                         dev_info.name.c_str());
  if (srq && srq->xrcd)
    return Status::error(Errc::invalid_argument,
                         "%s: create_qp: SRQ %u is an XRC SRQ, which only its domain's XRC "
                         "targets take receives from",
                         dev_info.name.c_str(), srq->srqn);
  auto created = xrc  ? core_->hw->create_xrc_send_qp(pd.hw(), *send_cq.core()->hw_cq,
                                                      config.caps)
                 : uc ? core_->hw->create_uc_qp(pd.hw(), *send_cq.core()->hw_cq,
                                                *recv_cq.core()->hw_cq,
                                                srq ? srq->hw_srq.get() : nullptr, config.caps)
                 : srq ? core_->hw->create_qp_on_srq(pd.hw(), *send_cq.core()->hw_cq,
                                                    *recv_cq.core()->hw_cq, *srq->hw_srq,
                                                    config.caps)
                 : ud ? core_->hw->create_ud_qp(pd.hw(), *send_cq.core()->hw_cq,
                                                *recv_cq.core()->hw_cq, config.caps)
                      : core_->hw->create_qp(pd.hw(), *send_cq.core()->hw_cq,
                                             *recv_cq.core()->hw_cq, config.caps);
  RNICDV_ASSIGN_OR_RETURN(std::unique_ptr<hw::Qp> hw_qp, std::move(created));
  const hw::QpView& view = hw_qp->view();
  RNICDV_TRY(check_view(view));
  const mlx5dv_qp& dv = view.dv;

  auto qp = std::make_unique<detail::QpCore>();
  qp->qpn = view.qpn;
  if (srq) {
    qp->srq = srq;
    qp->srq_ref = config.srq->core_;
  }
  qp->threading = config.threading;
  qp->early_post = early_post;
  qp->scanning_device = dev_info.profile.fetches_beyond_dbr;
  qp->datagram = ud;
  qp->unreliable = uc;
  qp->xrc = xrc;
  qp->sig_all_bits = config.sq_sig_all ? MLX5_WQE_CTRL_CQ_UPDATE : 0;
  qp->granted = view.granted;
  qp->limits = wqe::SqLimits{view.granted.max_send_sge, view.granted.max_inline_data};
  qp->sq = wqe::SqRing{static_cast<uint8_t*>(dv.sq.buf), dv.sq.wqe_cnt};
  qp->sq_mask = dv.sq.wqe_cnt - 1;
  qp->room_end = dv.sq.wqe_cnt;
  qp->ctrl_qpn_bits = wqe::ctrl_qpn_bits(view.qpn);
  qp->ctrl_rest_sig_all = wqe::ctrl_rest(qp->sig_all_bits);
  init_ctrl_heads(*qp);
  qp->rts_gate = qp->gate_in_rts();
  qp->dbrec = dv.dbrec;
  qp->rq = wqe::RqRing{static_cast<uint8_t*>(dv.rq.buf), dv.rq.wqe_cnt, dv.rq.stride};
  qp->rq_mask = dv.rq.wqe_cnt ? dv.rq.wqe_cnt - 1 : 0;
  qp->rq_max_sge = dv.rq.wqe_cnt ? view.granted.max_recv_sge : 0;

  if (const Errc err = qp->doorbell.init(dv.bf.reg, dv.bf.size, view.bf_shared, config.doorbell);
      err != Errc::ok)
    return Status::error(err, "qp %#x: create: doorbell mode %s on a %s register of %u bytes",
                         view.qpn, doorbell::doorbell_mode_name(config.doorbell),
                         view.bf_shared ? "shared" : "dedicated", dv.bf.size);
  qp->doorbell.set_wake(view.wake.asleep, view.wake.kick_fd);

  qp->sq_entry_storage.reset(new (std::nothrow) detail::SqEntry[dv.sq.wqe_cnt]());
  qp->rq_wr_id_storage.reset(new (std::nothrow) uint64_t[dv.rq.wqe_cnt ? dv.rq.wqe_cnt : 1]());
  if (!qp->sq_entry_storage || !qp->rq_wr_id_storage)
    return Status::error(Errc::no_resources, "qp %#x: create: out of memory for the WQE tables",
                         view.qpn);
  qp->sq_entries = qp->sq_entry_storage.get();
  qp->rq_wr_ids = qp->rq_wr_id_storage.get();
  qp->poll_sq_entries = qp->sq_entries;
  qp->poll_sq_mask = qp->sq_mask;
  qp->poll_rq_mask = qp->rq_mask;
  qp->poll_rq_wr_ids = qp->rq_wr_ids;
  qp->poll_srq = qp->srq;
  const size_t sq_bytes = size_t{dv.sq.wqe_cnt} * wqe::kBbBytes;
  if (qp->early_post == EarlyPost::shadow) {
    qp->shadow_storage = static_cast<uint8_t*>(
        ::operator new (sq_bytes, std::align_val_t{wqe::kBbBytes}, std::nothrow));
    if (!qp->shadow_storage)
      return Status::error(Errc::no_resources, "qp %#x: create: out of memory for the shadow ring",
                           view.qpn);
    std::memset(qp->shadow_storage, 0, sq_bytes);
    qp->shadow = wqe::SqRing{qp->shadow_storage, dv.sq.wqe_cnt};
  }
  // The QP is in RESET: the device reads nothing yet. A clean ring means a scanning device
  // never mistakes stale bytes for a WQE.
  std::memset(qp->sq.buf, 0, sq_bytes);

  qp->device = core_;
  qp->pd = pd.pd_;
  qp->send_cq = send_cq.core_;
  qp->recv_cq = recv_cq.core_;
  qp->hw_qp = std::move(hw_qp);
  RNICDV_TRY(core_->register_qp(qp.get()));
  qp->send_cq->attach(qp.get());
  if (qp->recv_cq != qp->send_cq) qp->recv_cq->attach(qp.get());
  return QueuePair(std::move(qp));
}

}  // namespace rnicdv
