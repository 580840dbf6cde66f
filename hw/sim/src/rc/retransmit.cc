// SPDX-License-Identifier: BSD-3-Clause
// Reliability on the requester side: go-back-N from a PSN, the local ACK timeout with
// retry_cnt, and RNR NAK waits with rnr_retry (IBA 9.7.5.1, 9.7.6.1).
#include "retransmit.h"

#include "../packet/psn.h"
#include "completer.h"

namespace rnicdv::sim::rc {

namespace {

// RNR NAK timer field -> nanoseconds (IBA 9.7.5.2.8, Table 45). Code 0 is 655.36 ms.
constexpr uint32_t kRnrTimer10us[32] = {65536, 1,    2,    3,     4,     6,     8,     12,
                                        16,    24,   32,   48,    64,    96,    128,   192,
                                        256,   384,  512,  768,   1024,  1536,  2048,  3072,
                                        4096,  6144, 8192, 12288, 16384, 24576, 32768, 49152};

uint64_t rnr_timer_ns(uint8_t code) {
  return uint64_t{kRnrTimer10us[code & 31]} * 10'000;
}

}  // namespace

// The local ACK timer: started when a request goes out with none running.
void Retransmit::arm(QpObj& qp) {
  if (qp.attr.timeout == 0 || qp.comp.retx_deadline != 0) return;
  // Local ACK timeout: 4.096 us * 2^timeout (IBA 9.7.6.1.3).
  qp.comp.retx_deadline = ctx_.now() + (uint64_t{4096} << qp.attr.timeout);
}

// Resends everything from `psn` on: the WQE that holds it resumes there (a partly
// acknowledged SEND/WRITE skips the packets already acknowledged; a partly answered READ is
// reissued for the rest), and every WQE after it starts over.
void Retransmit::rewind(QpObj& qp, uint32_t psn) {
  ++ctx_.counters().retransmits;
  ++qp.counters.retransmits;
  qp.req.pkts_since_ack_req = 0;
  uint32_t i = qp.comp.wq_head;
  for (; i != qp.wq_tail; ++i) {
    const SendWqe& w = qp.wqe_at(i);
    if (!w.started || w.error) break;
    if (w.span != 0 && psn_cmp(psn, psn_add(w.first_psn, w.span)) < 0) break;
  }
  if (static_cast<int32_t>(qp.req.wq_send - i) < 0) return;  // nothing sent from there yet
  for (uint32_t j = i; j != qp.wq_tail; ++j) {
    SendWqe& w = qp.wqe_at(j);
    if (!w.started || w.error) break;
    switch (w.kind) {
      case WqeKind::send:
      case WqeKind::write:
        w.pkts_sent = (j == i && psn_cmp(psn, w.first_psn) > 0) ? psn_diff(psn, w.first_psn) : 0;
        break;
      case WqeKind::read:
        if (w.resp_pkts < w.span) w.pkts_sent = 0;
        break;
      case WqeKind::atomic:
        if (!w.atomic_done) w.pkts_sent = 0;
        break;
      case WqeKind::nop:
        break;
    }
  }
  qp.req.wq_send = i;
}

void Retransmit::on_timeout(QpObj& qp) {
  qp.comp.retx_deadline = 0;
  if (qp.comp.wq_head == qp.wq_tail || psn_cmp(qp.comp.comp_psn, qp.req.next_psn) == 0) return;
  ++ctx_.counters().timeouts;
  ++qp.counters.timeouts;
  if (qp.comp.retry_left == 0) {
    // Retries exhausted (IBA 9.7.6.1.3 C9-140): the oldest outstanding WQE completes with
    // RETRY_EXC_ERR and the QP goes to ERR.
    qp.wqe_at(qp.comp.wq_head).error = MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR;
    qp.req.wq_send = qp.comp.wq_head;
    completer_.complete_wqes(qp);
    return;
  }
  --qp.comp.retry_left;
  qp.comp.gap_retry_armed = false;
  rewind(qp, qp.comp.comp_psn);
}

void Retransmit::on_rnr_nak(QpObj& qp, const pkt::Packet& p) {
  const uint32_t psn = p.bth.psn;
  completer_.acknowledge_through(qp, psn_add(psn, kPsnMask));
  uint32_t index = 0;
  SendWqe* w = completer_.find_wqe_by_psn(qp, psn, &index);
  if (!w) return;
  if (qp.attr.rnr_retry != 7) {  // 7 means retry forever (IBA 9.7.5.2.8)
    if (qp.comp.rnr_left == 0) {
      w->error = MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR;
      if (static_cast<int32_t>(qp.req.wq_send - index) > 0) qp.req.wq_send = index;
      return;
    }
    --qp.comp.rnr_left;
  }
  qp.comp.retx_deadline = 0;
  qp.req.rnr_deadline = ctx_.now() + rnr_timer_ns(p.aeth.syndrome & 0x1f);
  rewind(qp, psn);
}

bool Retransmit::run_timers(QpObj& qp, uint64_t now_ns) {
  bool did = false;
  if (qp.req.rnr_deadline != 0 && now_ns >= qp.req.rnr_deadline) {
    // The send position was rewound when the NAK arrived; sending resumes now.
    qp.req.rnr_deadline = 0;
    did = true;
  }
  if (qp.req.pace_deadline != 0 && now_ns >= qp.req.pace_deadline) {
    qp.req.pace_deadline = 0;  // the rate limit lets the next frame go
    did = true;
  }
  if (qp.comp.retx_deadline != 0 && now_ns >= qp.comp.retx_deadline) {
    on_timeout(qp);
    did = true;
  }
  return did;
}

}  // namespace rnicdv::sim::rc
