// SPDX-License-Identifier: BSD-3-Clause
#include "early_post.h"

#include <algorithm>

namespace rnicperf {

using rnicdv::Completion;
using rnicdv::Errc;
using rnicdv::Status;
using rnicdv::WrOpcode;
namespace send_flags = rnicdv::send_flags;

namespace {

constexpr uint32_t kEarlyReady = 10;
constexpr uint32_t kEarlyDone = 11;
constexpr uint32_t kAfterRtsReady = 12;

// Polls `cq` for `n` successful completions (never more, so a later row's are left alone).
// With `row`, times the first and the last from `t0`.
Status await_completions(RunContext& c, rnicdv::CompletionQueue& cq, uint32_t n, const char* what,
                         uint64_t t0, EarlyPostRow* row) {
  StallGuard guard(c.clock, c.stall_ticks);
  Completion wc[16];
  uint32_t got = 0;
  while (got < n) {
    int k = cq.poll(wc, static_cast<int>(std::min<uint32_t>(16, n - got)));
    if (k == 0) {
      if (!guard.idle()) return stall_error("early post", what, c.o.timeout_s);
      continue;
    }
    const uint64_t now = c.clock.now();
    const bool receives = &cq == &c.ep.recv_cq();
    for (int i = 0; i < k; ++i) {
      if (wc[i].status != IBV_WC_SUCCESS) return completion_error("early post", wc[i]);
      if (receives) c.ep.recv_completed(wc[i].wr_id);
    }
    if (row) {
      if (got == 0) row->t_first_us = c.clock.to_us(now - t0);
      row->t_last_us = c.clock.to_us(now - t0);
    }
    got += static_cast<uint32_t>(k);
    guard.progressed();
  }
  return Status::ok();
}

Status collect(RunContext& c, uint32_t n, uint64_t t0, EarlyPostRow* row) {
  return await_completions(c, c.ep.send_cq(), n, "completion", t0, row);
}

Status await_receives(RunContext& c, uint32_t n) {
  return await_completions(c, c.ep.recv_cq(), n, "SEND from the client", 0, nullptr);
}

}  // namespace

Status run_early_post_client(RunContext& c, uint32_t n, EarlyPostResult* out) {
  rnicdv::QueuePair& qp = c.ep.qp(0);
  const PeerRecord& peer = c.ep.remote(0);
  const bool send = c.o.test.verb == Verb::send;
  out->operation = send ? "send" : "write";
  rnicdv::Sge sge{reinterpret_cast<uint64_t>(c.ep.send_buf(0)), static_cast<uint32_t>(c.size),
                  c.ep.lkey(0)};
  rnicdv::SendWr wr;
  wr.opcode = send ? WrOpcode::send : WrOpcode::rdma_write;
  wr.flags = send_flags::signaled;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.remote_addr = peer.vaddr;
  wr.rkey = peer.rkey;
  c.ep.address(0, &wr);  // -c XRC: the peer's SRQ

  // In RTR: accepted and withheld by the driver.
  for (uint32_t k = 0; k < n; ++k) {
    wr.wr_id = k;
    if (Errc e = qp.post_send(wr); e != Errc::ok)
      return post_error("early post", "post in RTR", qp.qpn(), e);
  }
  out->in_rtr.posts = n;
  out->in_rtr.in_rtr = true;
  out->in_rtr.withheld = qp.withheld();
  RNICDV_TRY(c.oob.barrier(kEarlyReady));

  const uint64_t established = c.clock.now();
  RNICDV_TRY(c.ep.to_rts(0));
  RNICDV_TRY(collect(c, n, established, &out->in_rtr));
  for (size_t q = 1; q < c.ep.num_lanes(); ++q) RNICDV_TRY(c.ep.to_rts(q));

  // The same batch once established, for comparison. Both rows start right after a barrier,
  // so both find the two devices in the same (idle) state: the row after RTS must not gain
  // from devices still warm from the first batch.
  out->after_rts.posts = n;
  RNICDV_TRY(c.oob.barrier(kAfterRtsReady));
  const uint64_t t0 = c.clock.now();
  for (uint32_t k = 0; k < n; ++k) {
    wr.wr_id = n + k;
    if (Errc e = qp.post_send(wr); e != Errc::ok)
      return post_error("early post", "post in RTS", qp.qpn(), e);
  }
  RNICDV_TRY(collect(c, n, t0, &out->after_rts));
  return c.oob.barrier(kEarlyDone);
}

Status run_early_post_server(RunContext& c, uint32_t n) {
  // For SENDs, N receives per row were posted on top of the test's own.
  const bool send = c.o.test.verb == Verb::send;
  RNICDV_TRY(c.oob.barrier(kEarlyReady));
  if (send) RNICDV_TRY(await_receives(c, n));
  RNICDV_TRY(c.oob.barrier(kAfterRtsReady, c.o.timeout_s * 1000u));
  if (send) RNICDV_TRY(await_receives(c, n));
  return c.oob.barrier(kEarlyDone, c.o.timeout_s * 1000u);
}

}  // namespace rnicperf
