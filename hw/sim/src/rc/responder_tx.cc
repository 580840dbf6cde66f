// SPDX-License-Identifier: BSD-3-Clause
// What the responder puts on the wire: ACKs, NAKs, READ response streams and atomic
// acknowledgments, strictly in PSN order from one queue, so a coalesced ACK never overtakes
// the READ responses before it (the requester would take them for lost).
#include <algorithm>

#include "../host_access.h"
#include "../packet/psn.h"
#include "responder.h"

namespace rnicdv::sim::rc {

void Responder::queue_ack(QpObj& qp, uint8_t syndrome, uint32_t psn) {
  const bool plain_ack = (syndrome & pkt::aeth::kTypeMask) == pkt::aeth::kAck;
  if (plain_ack && !qp.resp.resp_queue.empty()) {
    RespJob& back = qp.resp.resp_queue.back();
    // ACK coalescing: a later ACK replaces a queued one that has not gone out.
    if (back.kind == RespJob::Kind::ack &&
        (back.syndrome & pkt::aeth::kTypeMask) == pkt::aeth::kAck) {
      if (psn_cmp(psn, back.psn) > 0) back.psn = psn;
      back.msn = qp.resp.msn;
      return;
    }
  }
  RespJob job;
  job.kind = RespJob::Kind::ack;
  job.syndrome = syndrome;
  job.psn = psn;
  job.msn = qp.resp.msn;
  qp.resp.resp_queue.push_back(job);
}

bool Responder::transmit(QpObj& qp, uint32_t budget) {
  if (qp.resp.resp_queue.empty()) return false;
  if (qp.state == hw::QpState::reset || qp.state == hw::QpState::init ||
      qp.state == hw::QpState::err) {
    qp.resp.resp_queue.clear();
    return false;
  }
  bool did = false;
  uint8_t* frame = ctx_.frame();
  while (budget != 0 && !qp.resp.resp_queue.empty()) {
    RespJob& job = qp.resp.resp_queue.front();
    if (job.kind == RespJob::Kind::read) {
      if (!send_read_response(qp, job)) return true;  // the QP went to ERR
      did = true;
      --budget;
      if (job.next_pkt == job.npkts) qp.resp.resp_queue.pop_front();
      continue;
    }
    pkt::Packet p;
    p.bth.dest_qp = qp.attr.dest_qpn;
    p.bth.psn = job.psn;
    if (job.kind == RespJob::Kind::ack) {
      p.bth.opcode = answer_opcode(qp, pkt::opcode::rc_acknowledge);
      p.aeth = pkt::Aeth{job.syndrome, job.msn};
      const uint8_t type = job.syndrome & pkt::aeth::kTypeMask;
      if (type == pkt::aeth::kAck) {
        ++ctx_.counters().acks_tx;
      } else if (type == pkt::aeth::kNak) {
        ++ctx_.counters().naks_tx;
        ++qp.counters.naks_tx;
      }
    } else {
      p.bth.opcode = answer_opcode(qp, pkt::opcode::rc_atomic_acknowledge);
      p.aeth = pkt::Aeth{pkt::aeth::kAck | pkt::aeth::kCreditInvalid, job.msn};
      p.atomic_orig = job.atomic_orig;
    }
    const size_t len = pkt::build_packet(p, frame, ctx_.frame_size());
    qp.resp.resp_queue.pop_front();
    ctx_.transmit(qp, frame, len);
    did = true;
    --budget;
  }
  return did;
}

// One packet of a READ response stream (IBA 9.7.5.1.4): FIRST/MIDDLE/LAST or ONLY, PSNs
// request PSN + i, an AETH on FIRST, LAST and ONLY. The region is checked again for every
// packet, against the PD it was checked against when the READ executed: memory deregistered
// meanwhile is never read.
bool Responder::send_read_response(QpObj& qp, RespJob& job) {
  const uint32_t k = job.next_pkt;
  const uint64_t offset = uint64_t{k} << qp.mtu_shift;
  const uint32_t len = static_cast<uint32_t>(std::min<uint64_t>(qp.mtu, job.length - offset));
  uint8_t* host = nullptr;
  PinRef pin;
  if (ctx_.mrs().check(job.rkey, job.pdn, job.va + offset, len, hw::access::remote_read, &host,
                       &pin) != AccessResult::ok) {
    const uint32_t psn = psn_add(job.psn, k);
    qp.resp.resp_queue.pop_front();
    fail(qp, pkt::aeth::kNakRemoteAccessError, psn, 0, hw::AsyncEventType::qp_access_err);
    return false;
  }
  pkt::Packet p;
  p.bth.dest_qp = qp.attr.dest_qpn;
  p.bth.psn = psn_add(job.psn, k);
  if (job.npkts == 1)
    p.bth.opcode = answer_opcode(qp, pkt::opcode::rc_read_response_only);
  else if (k == 0)
    p.bth.opcode = answer_opcode(qp, pkt::opcode::rc_read_response_first);
  else if (k + 1 == job.npkts)
    p.bth.opcode = answer_opcode(qp, pkt::opcode::rc_read_response_last);
  else
    p.bth.opcode = answer_opcode(qp, pkt::opcode::rc_read_response_middle);
  p.aeth = pkt::Aeth{pkt::aeth::kAck | pkt::aeth::kCreditInvalid, job.msn};
  if (len > payload_.size() || !host_read(pin, payload_.data(), host, len)) {
    // The region's pages were taken away after registration: nothing of them is sent.
    ++ctx_.counters().host_memory_faults;
    qp.resp.resp_queue.pop_front();
    fail(qp, pkt::aeth::kNakRemoteAccessError, p.bth.psn, 0, hw::AsyncEventType::qp_access_err);
    return false;
  }
  p.payload = payload_.data();
  p.payload_len = len;
  const size_t n = pkt::build_packet(p, ctx_.frame(), ctx_.frame_size());
  ++job.next_pkt;
  ctx_.transmit(qp, ctx_.frame(), n);
  return true;
}

}  // namespace rnicdv::sim::rc
