// SPDX-License-Identifier: BSD-3-Clause
// What a measurement loop works with, prepared before it starts so that the loop itself
// allocates nothing, logs nothing and makes no syscall per iteration.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "clock.h"
#include "cpu_util.h"
#include "endpoint.h"
#include "oob_protocol.h"
#include "options.h"

namespace rnicperf {

struct RunContext {
  TestEndpoint& ep;
  const Options& o;
  const Clock& clock;
  OobSession& oob;
  uint64_t size = 0;
  uint64_t iterations = 0;                    // per QP; unused in duration mode
  std::vector<uint64_t>& tposted;             // sized before the loop
  std::vector<uint64_t>& tcompleted;          // sized before the loop (bandwidth peak)
  uint64_t stall_ticks = 0;                   // --timeout in clock ticks
  std::atomic<uint64_t>* progress = nullptr;  // completed operations, for the reporter thread
  // --run_infinitely: the loop posts until this is set (by a signal or the interval printer).
  const std::atomic<bool>* stop = nullptr;
  // -c UD against an rnicperf peer: a datagram may be lost (a full receive queue or wire
  // drops it), so a sender of SENDs tells its peer its count (DONE) once it has posted
  // everything, and a receiver that has that count stops when nothing more arrives for
  // kUdQuietMs instead of waiting for datagrams that will never come.
  bool datagram_done = false;
  // --run_infinitely when the peer runs a loop too (send_bw, -b): set when the peer said it
  // stopped. Either flag ends this side's loop, which then tells the peer its posted count
  // (DONE) and, as a SEND receiver, receives until the peer's own count has arrived.
  const std::atomic<bool>* peer_stop = nullptr;
  // With peer_stop: the peer tells its count when it stops (rnicperf). perftest's endless
  // run says nothing and never ends by itself: its control connection closing is its stop,
  // and a receiver then ends with what has arrived.
  bool peer_tells_count = true;
  // The peer is perftest, which says nothing during a -D run either: a sender does not tell
  // it its count, and a receiver's window starts at its first message and ends by its own
  // clock (perftest's set_on_first_rx_packet and alarm), not at the peer's count.
  bool perftest_peer = false;
};

inline constexpr uint32_t kUdQuietMs = 200;

// Duration mode (-D): warm-up margin, measured window, closing margin (perftest's states).
struct DurationWindow {
  uint64_t start = 0, sample_from = 0, sample_to = 0, end = 0;
  static DurationWindow from(const Clock& c, uint64_t now, uint32_t duration_s, uint32_t margin_s) {
    DurationWindow w;
    w.start = now;
    w.sample_from = now + static_cast<uint64_t>(c.ticks_per_sec() * margin_s);
    w.sample_to = now + static_cast<uint64_t>(c.ticks_per_sec() * (duration_s - margin_s));
    w.end = now + static_cast<uint64_t>(c.ticks_per_sec() * duration_s);
    return w;
  }
};

// Tracks the operations that fall inside the measured window, and with -O how many of them
// were on the QPs of port 2 (--report-per-port).
struct WindowCount {
  enum class Phase : uint8_t { warmup, sampling, closing };
  Phase phase = Phase::warmup;
  uint64_t count_at_start = 0, count_at_end = 0;
  uint64_t second_port_at_start = 0, second_port_at_end = 0;
  uint64_t t_start = 0, t_end = 0;
  // --cpu_util: /proc/stat read at the window's two edges (two reads a run, as perftest's
  // alarm handler does), never in between.
  bool sample_cpu = false;
  CpuTimes cpu_start, cpu_end;
  // Called with each timestamp the loop takes anyway and the running counts (all, and those
  // of port 2's QPs).
  void observe(const DurationWindow& w, uint64_t now, uint64_t count,
               uint64_t second_port_count = 0) noexcept {
    if (phase == Phase::warmup && now >= w.sample_from) [[unlikely]] {
      phase = Phase::sampling;
      count_at_start = count;
      second_port_at_start = second_port_count;
      t_start = now;
      if (sample_cpu) cpu_start = read_cpu_times();
    } else if (phase == Phase::sampling && now >= w.sample_to) [[unlikely]] {
      phase = Phase::closing;
      count_at_end = count;
      second_port_at_end = second_port_count;
      t_end = now;
      if (sample_cpu) cpu_end = read_cpu_times();
    }
  }
  double cpu_util() const noexcept { return cpu_util_percent(cpu_start, cpu_end); }
  uint64_t iterations() const noexcept { return count_at_end - count_at_start; }
  uint64_t second_port_iterations() const noexcept {
    return second_port_at_end - second_port_at_start;
  }
  uint64_t ticks() const noexcept { return t_end - t_start; }
};

// Bounds a busy wait: no clock read while work arrives; once idle, a clock read every 1024
// empty polls, and false after `stall_ticks` without progress.
class StallGuard {
 public:
  StallGuard(const Clock& clock, uint64_t stall_ticks) : clock_(clock), stall_(stall_ticks) {}
  bool idle() noexcept {
    if ((++spins_ & 1023) != 0) [[likely]]
      return true;
    uint64_t t = clock_.now();
    if (since_ == 0) {
      since_ = t;
      return true;
    }
    return t - since_ < stall_;
  }
  void progressed() noexcept {
    spins_ = 0;
    since_ = 0;
  }
  // True roughly every 1024 empty polls: a chance for rare checks (end of -D, peer DONE).
  bool checkpoint() const noexcept { return (spins_ & 1023) == 0; }

 private:
  const Clock& clock_;
  uint64_t stall_;
  uint64_t spins_ = 0;
  uint64_t since_ = 0;
};

// A receiving QP's refill in a bandwidth run (perftest's run_iter_bw_server): receives are
// posted in lists of `list` WRs, one post call each (--recv_post_list; 1 by default). Each
// receive completion leaves one more slot unused; once `list` are unused, and the run still
// expects that many receives beyond those posted, one list is posted.
class RecvRefill {
 public:
  // `posted`: receives posted for this run so far (those outstanding at its start);
  // `expected`: receives the run consumes in all (UINT64_MAX in duration mode).
  RecvRefill(uint32_t list, uint64_t posted, uint64_t expected) noexcept
      : list_(list), posted_(posted), expected_(expected) {}
  // One receive completed; true when a list of list() WRs is to be posted now (counted as
  // posted: a failed post ends the run).
  bool completed() noexcept {
    ++unused_;
    if (unused_ < list_ || posted_ > expected_ || expected_ - posted_ < list_) return false;
    unused_ -= list_;
    posted_ += list_;
    return true;
  }
  uint32_t list() const noexcept { return list_; }
  uint64_t posted() const noexcept { return posted_; }

 private:
  uint32_t list_;
  uint64_t posted_;
  uint64_t expected_;
  uint64_t unused_ = 0;
};

// Cold-path errors.
rnicdv::Status completion_error(const char* test, const rnicdv::Completion& wc);
rnicdv::Status post_error(const char* test, const char* what, uint32_t qpn, rnicdv::Errc e);
// A receive post on the endpoint's receive queue r (a QP's, or -c XRC's SRQ).
rnicdv::Status recv_post_error(const char* test, const TestEndpoint& ep, size_t r, rnicdv::Errc e);
rnicdv::Status stall_error(const char* test, const char* what, uint32_t timeout_s);

}  // namespace rnicperf
