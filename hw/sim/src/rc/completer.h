// SPDX-License-Identifier: BSD-3-Clause
// The completer: ACKs, NAKs, READ responses and atomic acknowledgments coming back to the
// requester (IBA 9.7.5.2), and the send completions they produce, in SQ order. Writes the
// QP's acknowledged PSN and the fetched WQEs' progress; scatters READ and atomic results;
// writes send CQEs through the context.
#pragma once

#include <cstdint>

#include "../packet/packet.h"
#include "context.h"

namespace rnicdv::sim::rc {

class Flush;
class Retransmit;

class Completer {
 public:
  Completer(Context& ctx, Flush& flush, Retransmit& retransmit)
      : ctx_(ctx), flush_(flush), retransmit_(retransmit) {}

  // An inbound response packet for this QP (the engine checked state and peer).
  void on_response(QpObj& qp, const pkt::Packet& p);
  // Retires finished WQEs from the head, writing their CQEs; an error WQE completes with its
  // syndrome and moves the QP to ERR. In SQD, raises SQ_DRAINED once nothing is in flight.
  void complete_wqes(QpObj& qp);
  // Everything up to and including `psn` reached the responder. True if that was progress.
  bool acknowledge_through(QpObj& qp, uint32_t psn);
  // The started WQE whose PSN range holds `psn` (and its ring index), or null.
  SendWqe* find_wqe_by_psn(QpObj& qp, uint32_t psn, uint32_t* index);
  // The CQE of one finished send WQE, if it is signaled (the datagram service's too).
  void complete_send_wqe(QpObj& qp, SendWqe& w);

 private:
  void on_ack(QpObj& qp, const pkt::Packet& p);
  void on_read_response(QpObj& qp, const pkt::Packet& p);
  void on_atomic_ack(QpObj& qp, const pkt::Packet& p);

  Context& ctx_;
  Flush& flush_;
  Retransmit& retransmit_;
};

}  // namespace rnicdv::sim::rc
