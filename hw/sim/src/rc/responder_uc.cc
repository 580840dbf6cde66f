// SPDX-License-Identifier: BSD-3-Clause
// The responder of a UC QP (IBA 9.8, Table 40; the UC rules of 9.7.5.1): SEND and RDMA WRITE
// in PSN order, executed by the RC responder's own paths, and never answered. There is no
// ACK, NAK, RNR or retransmission: a packet that does not continue the message in progress (a PSN
// gap, an opcode out of sequence, a bad length) drops that message whole, and the responder
// drops every packet until the next FIRST or ONLY ahead of it, whose PSN it then follows. A
// packet behind the expected PSN (up to kUcStaleWindow), a copy or one the link delayed, is
// dropped alone, so that no message is delivered twice or out of order. A message that finds
// no receive WQE, or a WRITE refused for its R_Key, rights or length, is
// dropped the same way. A receive WQE taken by a dropped message stays with the QP and takes
// the next one (data a dropped WRITE had placed stays placed: UC promises nothing for it).
// Faults in this QP's own receive WQEs complete them in error and move the QP to ERR.
#include "responder.h"

#include "../packet/psn.h"

namespace rnicdv::sim::rc {

void Responder::drop_uc_message(QpObj& qp) {
  if (!qp.resp.uc_dropping) ++ctx_.counters().uc_messages_dropped;
  qp.resp.uc_dropping = true;
  qp.resp.cur_op = 0;
  qp.resp.write.active = false;
}

void Responder::on_uc_request(QpObj& qp, const pkt::Packet& p) {
  const auto dropped = [&] {
    ++ctx_.counters().rx_dropped;
    ++qp.counters.rx_dropped;
  };
  const pkt::OpcodeInfo& info = pkt::opcode_info(p.bth.opcode);
  const bool starts = info.pos == pkt::OpPos::first || info.pos == pkt::OpPos::only;
  const int32_t order = psn_cmp(p.bth.psn, qp.resp.epsn);
  if (order < 0 && psn_diff(qp.resp.epsn, p.bth.psn) <= kUcStaleWindow) {
    // Behind the expected PSN: a copy, or a packet that the link delayed past later ones, of
    // a message already received or given up. A UC requester never sends a PSN twice, so it
    // is dropped alone: taken as a new message it would deliver one twice or out of order,
    // and as a gap it would abort the message now arriving.
    ++ctx_.counters().duplicates_rx;
    ++qp.counters.duplicates_rx;
    return dropped();
  }
  if (order != 0 || qp.resp.uc_dropping) {
    if (!starts) {
      // A packet of this message went missing, or this one came out of place.
      drop_uc_message(qp);
      return dropped();
    }
    qp.resp.uc_dropping = false;  // a new message: the responder follows its PSN
  }
  if (starts && qp.resp.cur_op != 0) {
    // The message in progress never got its last packet: it is abandoned for this one.
    ++ctx_.counters().uc_messages_dropped;
    qp.resp.cur_op = 0;
    qp.resp.write.active = false;
  }
  const bool continues = !starts;
  const bool length_ok = payload_length_ok(qp, info, p);
  const bool sequence_ok =
      !continues || (qp.resp.cur_op != 0 && static_cast<uint8_t>(info.kind) == qp.resp.cur_op);
  const bool allowed = info.kind != pkt::OpKind::write ||
                       (qp.attr.access_flags & hw::access::remote_write) != 0;
  if (!sequence_ok || !length_ok || !allowed) {
    drop_uc_message(qp);
    return dropped();
  }
  const bool done = info.kind == pkt::OpKind::send ? execute_send(qp, p, info)
                                                   : execute_write(qp, p, info);
  if (!done) {
    // Dropped (counted by drop_uc_message), or the QP failed on its own receive WQE.
    if (qp.resp.uc_dropping) dropped();
    return;
  }
  qp.resp.epsn = psn_add(p.bth.psn, 1);
}

}  // namespace rnicdv::sim::rc
