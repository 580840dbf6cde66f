// SPDX-License-Identifier: BSD-3-Clause
// rnicdv::XrcDomain: extended reliable connected transport (XRC, IBA Annex A14), as verbs has
// it (ibv_open_xrcd, IBV_SRQT_XRC, IBV_QPT_XRC_SEND and IBV_QPT_XRC_RECV).
//
// One initiator QP reaches every SRQ of a remote domain: each send names the SRQ it goes to
// (SendWr::remote_srqn), so a process with N peers each holding M receive pools needs N
// connections, not N x M. On the receiving device:
//  * an XRC SRQ (Device::create_xrc_srq) belongs to a domain and completes its receives on a
//    CQ of its own; its PD is the one the responder checks RDMA and atomic accesses against;
//  * a target QP (Device::create_xrc_target) of the same domain is the connection's far end.
//    It has no queues: it is brought up to RTR like an RC QP's receive side (QueuePair::
//    to_init, to_rtr) and answers the initiator. A request naming an SRQ that is not an XRC
//    SRQ of the target's domain is refused with a NAK (invalid request): the initiator's WR
//    completes with IBV_WC_REM_INV_REQ_ERR and both QPs go to ERR.
// On the sending device an initiator QP is a QueuePair created with QpConfig::type
// hw::QpType::xrc_send: RC's operations, early posting included, through post_send and
// stage_send (the typed calls, whose arguments have no SRQ, are refused), and no receive queue.
// A receive completion names the target QP (Completion::qp_num) and the initiator's QPN
// (src_qp); its wr_id is the SRQ's.
#pragma once

#include <cstdint>
#include <memory>

namespace rnicdv {

namespace detail {
struct XrcdCore;
}

class XrcDomain {
 public:
  XrcDomain(XrcDomain&&) noexcept;
  XrcDomain& operator=(XrcDomain&&) noexcept;
  // The SRQs and target QPs of the domain keep it open until they are gone.
  ~XrcDomain();

  uint32_t xrcdn() const;  // 0 for a moved-from domain

  detail::XrcdCore* core() { return core_.get(); }

 private:
  friend class Device;
  explicit XrcDomain(std::shared_ptr<detail::XrcdCore> core);
  std::shared_ptr<detail::XrcdCore> core_;
};

}  // namespace rnicdv
