// SPDX-License-Identifier: BSD-3-Clause
#include "bandwidth_loops.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <string>
#include <vector>

#include "typed_post.h"

namespace rnicperf {

using rnicdv::Completion;
using rnicdv::Errc;
using rnicdv::Status;
using rnicdv::WrOpcode;
namespace send_flags = rnicdv::send_flags;

namespace {

constexpr int kPollBatch = 16;
constexpr unsigned kQpShift = 40;  // wr_id = qp << 40 | 1-based WR number within the QP
constexpr uint64_t kWrMask = (uint64_t{1} << kQpShift) - 1;

const char* test_of(const Options& o) {
  return test_name(o.test);
}

WrOpcode opcode_of(Verb v) {
  switch (v) {
    case Verb::send:
      return WrOpcode::send;
    case Verb::write:
      return WrOpcode::rdma_write;
    case Verb::read:
      return WrOpcode::rdma_read;
    case Verb::atomic:
      return WrOpcode::atomic_fetch_add;
  }
  return WrOpcode::rdma_write;
}

// Per-QP sender state, prepared before the loop.
struct QpTx {
  uint64_t posted = 0;              // WRs posted
  uint64_t completed = 0;           // WRs credited by completions
  uint64_t last_signaled = 0;       // number of the last signaled WR posted
  uint32_t until_signal = 0;        // WRs left before the next signaled one
  bool second_port = false;         // -O: the QP is in the second half, on port 2
  std::vector<rnicdv::SendWr> wrs;  // one post list
  std::vector<rnicdv::Sge> sges;
};

// An endless run's end: the peer's count (its DONE), or why it did not come.
Status peer_end(RunContext& c, uint64_t* count) {
  Status st = c.oob.recv_done(count, 0);
  if (!st) st.prepend(std::string(test_of(c.o)) + ": the peer's count at the endless run's end");
  return st;
}

}  // namespace

Status run_bandwidth(RunContext& c, bool sender, bool receiver, BandwidthRun* out) {
  const char* test = test_of(c.o);
  const Options& o = c.o;
  // --run_infinitely: no window and no count; posting ends when c.stop is set.
  const bool infinite = o.run_infinitely && c.stop != nullptr;
  if (infinite && receiver && !c.peer_stop)
    return Status::error(Errc::invalid_argument,
                         "%s: an endless receiver needs its peer's count to end (no peer loop)",
                         test);
  const bool duration = o.duration_s > 0 && !infinite;
  const size_t nqp = c.ep.num_lanes();
  const uint64_t per_qp = (duration || infinite) ? UINT64_MAX : c.iterations;
  // SENDs come from the peer's lanes: one per receive queue, or with -c XRC all into its SRQ.
  const uint64_t expected_rx = duration ? UINT64_MAX : c.iterations * c.ep.peer_lanes();
  const bool stamp = !o.no_peak && !duration;
  const uint32_t post_list = o.post_list;
  const uint32_t cq_mod = o.cq_mod;
  const uint32_t tx_depth = o.tx_depth;
  const bool peer_receives = o.test.verb == Verb::send;
  const bool wr_lists = o.post_send_lists();

  // Everything the loop touches is built here.
  std::vector<QpTx> tx(sender ? nqp : 0);
  for (size_t q = 0; q < tx.size(); ++q) {
    const PeerRecord& peer = c.ep.remote(q);
    tx[q].sges.assign(post_list, rnicdv::Sge{reinterpret_cast<uint64_t>(c.ep.send_buf(q)),
                                             static_cast<uint32_t>(c.size), c.ep.lkey(q)});
    tx[q].wrs.resize(post_list);
    for (uint32_t k = 0; k < post_list; ++k) {
      rnicdv::SendWr& wr = tx[q].wrs[k];
      wr.opcode = opcode_of(o.test.verb);
      wr.sg_list = &tx[q].sges[k];
      wr.num_sge = 1;
      wr.remote_addr = peer.vaddr;
      wr.rkey = peer.rkey;
      wr.compare_add = 1;
      c.ep.address(q, &wr);  // -c UD: the datagram's destination; -c XRC: the peer's SRQ
      wr.flags = (c.size <= c.ep.inline_size() &&
                  (o.test.verb == Verb::send || o.test.verb == Verb::write))
                     ? send_flags::inline_data
                     : 0;
    }
    tx[q].until_signal = cq_mod;
    tx[q].second_port = c.ep.on_second_port(q);
  }
  // Each run (size) starts with receives_at_start() posted per receive queue
  // (refill_receives), each taking the SENDs of senders_per_recv_queue() peer lanes.
  const uint64_t per_recv_queue =
      per_qp == UINT64_MAX ? UINT64_MAX : per_qp * c.ep.senders_per_recv_queue();
  std::vector<RecvRefill> refill(
      receiver ? c.ep.num_recv_queues() : 0,
      RecvRefill(c.ep.recv_list(), c.ep.receives_at_start(), per_recv_queue));

  // --rate_limit_type=SW (perftest's limiter): bursts of burst_size WRs across the QPs, each
  // starting a gap after the one before; a late burst is sent at once, to catch up.
  const bool sw_rate = sender && o.rate_limit_type == Options::RateLimitType::sw;
  uint64_t gap_ticks = 0, gap_deadline = 0;
  uint64_t burst_left = 0;
  if (sw_rate) {
    const double bursts_per_s = o.sw_rate_pps(c.size) / o.burst_size;
    gap_ticks = static_cast<uint64_t>(c.clock.ticks_per_sec() / bursts_per_s);
    gap_deadline = c.clock.now();
  }

  StallGuard guard(c.clock, c.stall_ticks);
  DurationWindow window =
      duration ? DurationWindow::from(c.clock, c.clock.now(), o.duration_s, o.margin_s)
               : DurationWindow{};
  // A receiver of a perftest sender times its window from the first message, as perftest's
  // receiver does (set_on_first_rx_packet), and ends by its own clock: perftest tells no count.
  const bool window_from_first_recv = duration && receiver && !sender && c.perftest_peer;
  uint64_t tot_posted = 0, tot_completed = 0, tot_received = 0;
  // -O: the completions and receives of the QPs on port 2 (--report-per-port's shares).
  const bool count_ports = o.dual_port;
  uint64_t second_port_completed = 0, second_port_received = 0;
  // SENDs the peer will make: known at the start, or from its DONE (-D, --run_infinitely).
  uint64_t peer_count = (duration || infinite) ? UINT64_MAX : expected_rx;
  bool posting = sender;
  bool told_peer = false;
  // -c UD, and SENDs over -c UC (RunContext::datagram_done): once the peer's count is known, however it came (its
  // DONE when it has posted an iteration run, after -D's window, or at an endless run's end),
  // a receiver stops kUdQuietMs after the last datagram instead of waiting for datagrams that
  // UD lost. ud_done: the DONE of an iteration run, which the loop itself watches for.
  const bool ud = c.datagram_done;
  const bool ud_done = ud && !duration && !infinite;
  bool heard_done = false;
  bool gave_up = false;  // UD: the peer is done and nothing more arrived for kUdQuietMs
  uint64_t quiet_since = 0;
  bool stopping = false;  // --run_infinitely: a stop flag was seen
  std::array<Completion, kPollBatch> wc;

  auto tx_done = [&] {
    if (!sender) return true;
    if (posting) return false;
    for (const auto& t : tx)
      if (t.completed < t.last_signaled) return false;
    return true;
  };
  auto rx_done = [&] { return !receiver || tot_received >= peer_count || gave_up; };
  auto count_known = [&](uint64_t count) {
    peer_count = count;
    heard_done = true;
    quiet_since = std::max(c.clock.now(), out->t_last_recv);
  };

  while (!(tx_done() && rx_done())) {
    bool progressed = false;
    if (infinite && !stopping &&
        (c.stop->load(std::memory_order_relaxed) ||
         (c.peer_stop && c.peer_stop->load(std::memory_order_relaxed)))) [[unlikely]] {
      stopping = true;
      posting = false;
      if (c.peer_stop && c.peer_tells_count) {
        // The peer's loop runs too: it stops on this (if it has not already) and, as a
        // receiver, takes every SEND posted here before it ends.
        if (Status st = c.oob.send_done(tot_posted); !st)
          return st.prepend(std::string(test) + ": telling the peer of the endless run's end");
      } else if (c.peer_stop) {
        count_known(tot_received);  // a perftest sender is gone, or sends on regardless
      }
    }
    if (posting) {
      uint64_t now = 0;
      if (duration) [[unlikely]] {
        now = c.clock.now();
        out->tx_window.observe(window, now, tot_completed, second_port_completed);
        if (now >= window.end) {
          posting = false;
          if (peer_receives && !told_peer && !c.perftest_peer) {
            // Outside the measured window: the peer's receive loop needs the final count.
            RNICDV_TRY(c.oob.send_done(tot_posted));
            told_peer = true;
          }
        }
      }
      for (size_t q = 0; q < tx.size() && posting; ++q) {
        QpTx& t = tx[q];
        while (t.posted < per_qp && t.posted + post_list <= t.completed + tx_depth) {
          if (sw_rate && burst_left == 0) [[unlikely]] {
            // Waiting for the next burst is not a stall.
            progressed = true;
            if (c.clock.now() < gap_deadline) break;
            gap_deadline += gap_ticks;
            burst_left = o.burst_size;
          }
          for (uint32_t k = 0; k < post_list; ++k) {
            const uint64_t number = t.posted + k + 1;
            rnicdv::SendWr& wr = t.wrs[k];
            wr.wr_id = (uint64_t{q} << kQpShift) | number;
            if (--t.until_signal == 0 || number == per_qp) {
              wr.flags |= send_flags::signaled;
              t.until_signal = cq_mod;
              t.last_signaled = number;
            } else {
              wr.flags &= ~send_flags::signaled;
            }
          }
          const uint64_t t_post = c.clock.now();
          if (tot_posted == 0) out->t_first_post = t_post;
          if (stamp)
            for (uint32_t k = 0; k < post_list; ++k) c.tposted[tot_posted + k] = t_post;
          // The list as one doorbell.
          rnicdv::QueuePair& qp = c.ep.qp(q);
          if (Errc e = post_wr_list(qp, t.wrs, wr_lists, &out->post_send_calls); e != Errc::ok)
              [[unlikely]]
            return post_error(test, "post send", qp.qpn(), e);
          t.posted += post_list;
          tot_posted += post_list;
          if (sw_rate) burst_left -= post_list;
          progressed = true;
        }
        if (!duration && t.posted >= per_qp && q + 1 == tx.size()) {
          bool all = true;
          for (const auto& x : tx) all &= x.posted >= per_qp;
          if (all) posting = false;
          if (all && ud_done && peer_receives && !told_peer) {
            RNICDV_TRY(c.oob.send_done(tot_posted));
            told_peer = true;
          }
        }
      }
    }

    if (sender && !tx_done()) {
      const int n = c.ep.poll_send(wc.data(), kPollBatch);
      if (n > 0) {
        const uint64_t now = c.clock.now();
        for (int i = 0; i < n; ++i) {
          if (wc[i].status != IBV_WC_SUCCESS) [[unlikely]]
            return completion_error(test, wc[i]);
          QpTx& t = tx[wc[i].wr_id >> kQpShift];
          const uint64_t number = wc[i].wr_id & kWrMask;
          tot_completed += number - t.completed;
          if (t.second_port) second_port_completed += number - t.completed;
          t.completed = number;
          if (stamp) c.tcompleted[tot_completed - 1] = now;
        }
        out->t_last_completion = now;
        if (c.progress) c.progress->store(tot_completed, std::memory_order_relaxed);
        progressed = true;
      }
    }

    if (receiver && !rx_done()) {
      const int n = c.ep.poll_recv(wc.data(), kPollBatch);
      if (n > 0) {
        const uint64_t now = c.clock.now();
        if (tot_received == 0) {
          out->t_first_recv = now;
          if (window_from_first_recv)
            window = DurationWindow::from(c.clock, now, o.duration_s, o.margin_s);
        }
        for (int i = 0; i < n; ++i) {
          if (wc[i].status != IBV_WC_SUCCESS) [[unlikely]]
            return completion_error(test, wc[i]);
          const size_t r = wc[i].wr_id;  // the receive queue
          if (count_ports && c.ep.recv_on_second_port(wc[i])) ++second_port_received;
          c.ep.recv_completed(r);
          if (refill[r].completed()) {
            if (Errc e = c.ep.post_recv_list(r); e != Errc::ok) [[unlikely]]
              return recv_post_error(test, c.ep, r, e);
          }
        }
        tot_received += static_cast<uint64_t>(n);
        out->t_last_recv = now;
        if (duration) {
          out->rx_window.observe(window, now, tot_received, second_port_received);
          if (window_from_first_recv && now >= window.end) count_known(tot_received);
        }
        if (!sender && c.progress) c.progress->store(tot_received, std::memory_order_relaxed);
        progressed = true;
      }
    }

    if (progressed) {
      guard.progressed();
      continue;
    }
    // UD: once the peer has said how many it sent, a receiver waits kUdQuietMs past the
    // last datagram, then reports what came.
    if (ud && receiver && !rx_done() && guard.checkpoint()) [[unlikely]] {
      const uint64_t now = c.clock.now();
      if (!heard_done) {
        if (ud_done) {
          RNICDV_ASSIGN_OR_RETURN(const bool ready, c.oob.channel().readable(0));
          if (ready) {
            uint64_t count = 0;
            RNICDV_TRY(c.oob.recv_done(&count, 0));
            count_known(count);
          }
        }
      } else if (out->t_last_recv > quiet_since) {
        quiet_since = out->t_last_recv;
      } else if (now - quiet_since > c.clock.from_us(kUdQuietMs * 1000.0)) {
        gave_up = true;
        continue;
      }
    }
    if (!guard.idle()) [[unlikely]]
      return stall_error(test, receiver && !rx_done() ? "message from the peer" : "completion",
                         o.timeout_s);
    // An endless run that is stopping: a receiver learns how many SENDs to expect from the
    // peer's DONE, which comes once the peer stopped posting.
    if (stopping && receiver && peer_count == UINT64_MAX && guard.checkpoint()) [[unlikely]] {
      RNICDV_ASSIGN_OR_RETURN(const bool ready, c.oob.channel().readable(0));
      if (ready) {
        uint64_t count = 0;
        RNICDV_TRY(peer_end(c, &count));
        count_known(count);
      }
    }
    // Duration mode: a receiver learns how many SENDs to expect from the peer's DONE (or, with
    // a perftest sender, ends once its window from the first message has passed).
    if (duration && receiver && peer_count == UINT64_MAX && guard.checkpoint()) [[unlikely]] {
      const uint64_t now = c.clock.now();
      if (window_from_first_recv) {
        // No window before the first message.
        if (tot_received > 0) {
          out->rx_window.observe(window, now, tot_received, second_port_received);
          if (now >= window.end) count_known(tot_received);
        }
      } else {
        out->rx_window.observe(window, now, tot_received, second_port_received);
        if (now >= window.end) {
          RNICDV_ASSIGN_OR_RETURN(const bool ready, c.oob.channel().readable(0));
          if (ready) {
            uint64_t count = 0;
            RNICDV_TRY(c.oob.recv_done(&count, 0));
            count_known(count);
          }
        }
      }
    }
  }
  // UD: the peer's DONE is read once whatever happened (the next control message is the
  // run's report).
  if (ud_done && receiver && !heard_done) {
    uint64_t count = 0;
    RNICDV_TRY(c.oob.recv_done(&count, o.timeout_s * 1000u));
    count_known(count);
  }
  if (ud && receiver && heard_done && tot_received < peer_count)
    std::fprintf(stderr,
                 "rnicperf: %s: %llu of %llu %s arrived (%s does not retransmit what a full "
                 "receive queue or the wire dropped)\n",
                 test, static_cast<unsigned long long>(tot_received),
                 static_cast<unsigned long long>(peer_count), o.uc ? "messages" : "datagrams",
                 o.uc ? "UC" : "UD");
  // A peer that runs a loop too tells its count once it stops: a sender reads it here.
  if (stopping && c.peer_stop && c.peer_tells_count && peer_count == UINT64_MAX)
    RNICDV_TRY(peer_end(c, &peer_count));
  out->sent = tot_completed;
  out->received = tot_received;
  return Status::ok();
}

}  // namespace rnicperf
