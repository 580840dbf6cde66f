// SPDX-License-Identifier: BSD-3-Clause
#include "latency_loops.h"

#include "typed_post.h"

namespace rnicperf {

using rnicdv::Completion;
using rnicdv::Errc;
using rnicdv::Status;
using rnicdv::WrOpcode;
namespace send_flags = rnicdv::send_flags;

namespace {

// Waits for one send completion; every latency WR is signaled.
Status wait_send_completion(RunContext& c, const char* test, StallGuard& guard) {
  Completion wc;
  for (;;) {
    int n = c.ep.poll_send(&wc, 1);
    if (n > 0) [[likely]] {
      if (wc.status != IBV_WC_SUCCESS) [[unlikely]]
        return completion_error(test, wc);
      guard.progressed();
      return Status::ok();
    }
    if (!guard.idle()) [[unlikely]]
      return stall_error(test, "send completion", c.o.timeout_s);
  }
}

// In duration mode the responder learns the end from the initiator's DONE message, which it
// looks for only after its own end time and only while idle (a rare syscall, outside the
// measured window).
bool peer_done(RunContext& c, const DurationWindow& w, const StallGuard& guard) {
  if (!guard.checkpoint()) return false;
  if (c.clock.now() < w.end) return false;
  auto r = c.oob.channel().readable(0);
  return !r.is_ok() || *r;
}

}  // namespace

Status run_write_pingpong(RunContext& c, bool initiator, LatencyRun* out) {
  const char* test = "write_lat";
  const bool duration = c.o.duration_s > 0;
  const uint64_t iters = duration ? UINT64_MAX : c.iterations;
  rnicdv::QueuePair& qp = c.ep.qp(0);
  const PeerRecord& peer = c.ep.remote(0);
  uint8_t* send_buf = c.ep.send_buf(0);
  const uint8_t* poll_byte = c.ep.recv_buf(0) + c.size - 1;
  uint8_t* post_byte = send_buf + c.size - 1;

  rnicdv::Sge sge{reinterpret_cast<uint64_t>(send_buf), static_cast<uint32_t>(c.size),
                  c.ep.lkey(0)};
  rnicdv::SendWr wr;
  wr.opcode = WrOpcode::rdma_write;
  wr.flags = send_flags::signaled | (c.size <= c.ep.inline_size() ? send_flags::inline_data : 0);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.remote_addr = peer.vaddr;
  wr.rkey = peer.rkey;
  c.ep.address(0, &wr);  // -c XRC: the peer's SRQ
  const bool wr_lists = c.o.post_send_lists();

  StallGuard guard(c.clock, c.stall_ticks);
  const DurationWindow window =
      duration ? DurationWindow::from(c.clock, c.clock.now(), c.o.duration_s, c.o.margin_s)
               : DurationWindow{};
  uint64_t scnt = 0, rcnt = 0;
  while (scnt < iters || rcnt < iters) {
    if (rcnt < iters && !(scnt < 1 && initiator)) {
      ++rcnt;
      const auto expected = static_cast<uint8_t>(rcnt);
      while (__atomic_load_n(poll_byte, __ATOMIC_ACQUIRE) != expected) {
        c.ep.device().progress();  // the simulator advances on this thread too
        if (!guard.idle()) [[unlikely]]
          return stall_error(test, "message from the peer", c.o.timeout_s);
        if (duration && !initiator && peer_done(c, window, guard)) [[unlikely]] {
          out->posts = scnt;
          return Status::ok();
        }
      }
      guard.progressed();
    }
    if (scnt < iters) {
      const uint64_t now = c.clock.now();
      if (duration) [[unlikely]] {
        out->window.observe(window, now, scnt);
        if (initiator && now >= window.end) break;  // every post so far has been answered
      } else {
        c.tposted[scnt] = now;
      }
      ++scnt;
      *post_byte = static_cast<uint8_t>(scnt);
      if (Errc e = post_wr_list(qp, {&wr, 1}, wr_lists, &out->post_send_calls); e != Errc::ok)
          [[unlikely]]
        return post_error(test, "post RDMA write", qp.qpn(), e);
      if (Status s = wait_send_completion(c, test, guard); !s) [[unlikely]]
        return s;
      if (c.progress) c.progress->store(scnt, std::memory_order_relaxed);
    }
  }
  out->posts = scnt;
  return Status::ok();
}

Status run_send_pingpong(RunContext& c, bool initiator, LatencyRun* out) {
  const char* test = "send_lat";
  const bool duration = c.o.duration_s > 0;
  const uint64_t iters = duration ? UINT64_MAX : c.iterations;
  rnicdv::QueuePair& qp = c.ep.qp(0);
  uint8_t* send_buf = c.ep.send_buf(0);
  rnicdv::Sge sge{reinterpret_cast<uint64_t>(send_buf), static_cast<uint32_t>(c.size),
                  c.ep.lkey(0)};
  rnicdv::SendWr wr;
  wr.opcode = WrOpcode::send;
  wr.flags = send_flags::signaled | (c.size <= c.ep.inline_size() ? send_flags::inline_data : 0);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  c.ep.address(0, &wr);  // -c UD: the datagram's destination; -c XRC: the peer's SRQ
  const bool wr_lists = c.o.post_send_lists();

  // Receives were pre-posted (rx depth); each one consumed is replaced while more will come.
  uint64_t recvs_posted = c.ep.rx_depth();
  StallGuard guard(c.clock, c.stall_ticks);
  const DurationWindow window =
      duration ? DurationWindow::from(c.clock, c.clock.now(), c.o.duration_s, c.o.margin_s)
               : DurationWindow{};
  uint64_t scnt = 0, rcnt = 0;
  Completion wc;
  while (scnt < iters || rcnt < iters) {
    if (rcnt < iters && !(scnt < 1 && initiator)) {
      for (;;) {
        int n = c.ep.poll_recv(&wc, 1);
        if (n > 0) break;
        if (!guard.idle()) [[unlikely]]
          return stall_error(test, "message from the peer", c.o.timeout_s);
        if (duration && !initiator && peer_done(c, window, guard)) [[unlikely]] {
          out->posts = scnt;
          return Status::ok();
        }
      }
      if (wc.status != IBV_WC_SUCCESS) [[unlikely]]
        return completion_error(test, wc);
      guard.progressed();
      ++rcnt;
      c.ep.recv_completed(0);
      if (recvs_posted < iters) {
        if (Errc e = c.ep.post_recv(0); e != Errc::ok) [[unlikely]]
          return recv_post_error(test, c.ep, 0, e);
        ++recvs_posted;
      }
    }
    if (scnt < iters) {
      const uint64_t now = c.clock.now();
      if (duration) [[unlikely]] {
        out->window.observe(window, now, scnt);
        if (initiator && now >= window.end) break;
      } else {
        c.tposted[scnt] = now;
      }
      ++scnt;
      if (Errc e = post_wr_list(qp, {&wr, 1}, wr_lists, &out->post_send_calls); e != Errc::ok)
          [[unlikely]]
        return post_error(test, "post send", qp.qpn(), e);
      if (Status s = wait_send_completion(c, test, guard); !s) [[unlikely]]
        return s;
      if (c.progress) c.progress->store(scnt, std::memory_order_relaxed);
    }
  }
  out->posts = scnt;
  return Status::ok();
}

Status run_one_sided_latency(RunContext& c, LatencyRun* out) {
  const bool atomic = c.o.test.verb == Verb::atomic;
  const char* test = atomic ? "atomic_lat" : "read_lat";
  const bool duration = c.o.duration_s > 0;
  rnicdv::QueuePair& qp = c.ep.qp(0);
  const PeerRecord& peer = c.ep.remote(0);
  rnicdv::Sge sge{reinterpret_cast<uint64_t>(c.ep.send_buf(0)), static_cast<uint32_t>(c.size),
                  c.ep.lkey(0)};
  rnicdv::SendWr wr;
  wr.opcode = atomic ? WrOpcode::atomic_fetch_add : WrOpcode::rdma_read;
  wr.flags = send_flags::signaled;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.remote_addr = peer.vaddr;
  wr.rkey = peer.rkey;
  wr.compare_add = 1;
  c.ep.address(0, &wr);  // -c XRC: the peer's SRQ
  const bool wr_lists = c.o.post_send_lists();

  StallGuard guard(c.clock, c.stall_ticks);
  const DurationWindow window =
      duration ? DurationWindow::from(c.clock, c.clock.now(), c.o.duration_s, c.o.margin_s)
               : DurationWindow{};
  uint64_t scnt = 0;
  for (;;) {
    const uint64_t now = c.clock.now();
    if (duration) [[unlikely]] {
      out->window.observe(window, now, scnt);
      if (now >= window.end) break;
    } else {
      if (scnt >= c.iterations) break;
      c.tposted[scnt] = now;
    }
    ++scnt;
    if (Errc e = post_wr_list(qp, {&wr, 1}, wr_lists, &out->post_send_calls); e != Errc::ok)
        [[unlikely]]
      return post_error(test, atomic ? "post atomic" : "post RDMA read", qp.qpn(), e);
    if (Status s = wait_send_completion(c, test, guard); !s) [[unlikely]]
      return s;
    if (c.progress) c.progress->store(scnt, std::memory_order_relaxed);
  }
  out->posts = scnt;
  return Status::ok();
}

}  // namespace rnicperf
