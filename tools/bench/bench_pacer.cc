// SPDX-License-Identifier: BSD-3-Clause
// rnicdv-bench-pacer: the rate the simulated HCA's packet pacer (hw/sim/src/rc/pacer.h)
// achieves in real time on this machine, beside the limit it was given (docs/performance.md,
// "Packet pacing in real time").
//
//   rnicdv-bench-pacer [--smoke] [--seconds S] [--poll busy|sleep] [--burst BYTES]
//
// Two threaded simulated HCAs on the in-process wire, one RC QP pair in RTS at MTU 1024. For
// no limit and for 10 Mb/s, 100 Mb/s, 1 Gb/s and 10 Gb/s (QueuePair::set_rate_limit with a
// burst allowance of BYTES, by default none: the device's default of one packet), the
// sender streams signaled 4 KiB RDMA WRITEs, keeping 32 of them (the requester's window of
// 128 packets) posted, for a warm-up and then S seconds (4; 0.15 with --smoke). The achieved
// rate is the Ethernet frame bytes of the WRITEs completed between the first completion
// after the warm-up and the first one S seconds later, over the steady_clock time between
// the two, in Mb/s (10^6 bits per second). Frame bytes are what the pacer counts: per packet
// Ethernet 14, IPv4 20, UDP 8, BTH 12 and ICRC 4 bytes (no FCS,
// preamble or gap) around the payload, and a RETH of 16 on a WRITE's first packet.
//
// Then the burst: with a burst allowance of 64 KiB at 10 Mb/s, 90 signaled 1 KiB WRITEs (one
// frame each) are posted at once on a QP whose credit is full. Every completion's time is
// taken as it is polled; the figure is the largest excess of frame bytes completed over what
// the rate alone allows since the posts, max_i (bytes completed by t_i - rate * t_i): the
// bytes that left back to back beyond the rate. A completion follows its frame's departure
// (by the peer's ACK), so this measure can only fall short of the true excess, by the rate
// times that delay (125 bytes per 100 us at 10 Mb/s). The median of 3 trials (1 with
// --smoke).
//
// --poll busy (the default) polls the CQ without pause, as perftest and rnicperf do; each poll
// also lets the simulated HCAs run a pass on this thread (their progress hook). --poll sleep
// sleeps 100 us after every empty poll, leaving the pacing to the devices' own threads.
// Prints JSON records on stdout (bench_util.h). Every wait gives up after 20 s without a
// completion.
#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "bench_sim.h"

namespace {

using namespace rnicdv;
using rnicdv::bench::fail;
using rnicdv::bench::must;
using Clock = std::chrono::steady_clock;

constexpr uint32_t kMtu = 1024;
// What the pacer counts per packet beyond its payload: Ethernet 14, IPv4 20, UDP 8, BTH 12,
// ICRC 4 (pacer.h: kFrameOverhead plus the BTH of the datagram it is given).
constexpr uint32_t kPacketOverhead = 14 + 20 + 8 + 12 + 4;
constexpr uint32_t kRethBytes = 16;  // on the first packet of a WRITE
constexpr uint32_t kStreamMsgBytes = 4096;
constexpr uint32_t kBurstMsgBytes = kMtu;  // one frame per WRITE: a completion per frame
constexpr uint32_t kInFlight = 32;         // 128 packets of 4 KiB WRITEs: the PSN window
constexpr uint32_t kBurstMsgs = 90;
constexpr auto kGiveUp = std::chrono::seconds(20);

// Ethernet frame bytes (header to ICRC) of one RDMA WRITE of `len` bytes at MTU 1024. The
// payloads here are multiples of 4, so no packet carries pad bytes.
constexpr uint64_t write_frame_bytes(uint32_t len) {
  const uint32_t packets = (len + kMtu - 1) / kMtu;
  return uint64_t{len} + uint64_t{packets} * kPacketOverhead + kRethBytes;
}
static_assert(write_frame_bytes(4096) == 4344);
static_assert(write_frame_bytes(1024) == 1098);

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::string limit_label(uint32_t kbps) {
  if (kbps % 1'000'000 == 0) return std::to_string(kbps / 1'000'000) + "G";
  if (kbps % 1000 == 0) return std::to_string(kbps / 1000) + "M";
  return std::to_string(kbps) + "K";
}

// Two threaded simulated HCAs, an RC QP pair in RTS, and the WRITE stream between them.
class Stream {
 public:
  explicit Stream(bool sleep_when_empty)
      : pair_(sim::ExecMode::threaded), sleep_when_empty_(sleep_when_empty) {
    QpConfig config;
    config.caps.max_send_wr = 128;
    conn_ = rnicdv::bench::connect(pair_, config, 256, false);
  }

  void set_limit(uint32_t kbps, uint32_t burst_bytes) {
    const Status st = conn_.qp->set_rate_limit(kbps, burst_bytes, 0);
    if (!st)
      fail("set_rate_limit(" + std::to_string(kbps) + " kb/s, burst " +
           std::to_string(burst_bytes) + "): " + st.message());
  }

  // Achieved Mb/s of frame bytes with the limit `kbps` (0: none) and a burst allowance of
  // `burst_bytes`, measured for `measure_s`
  // seconds after `warm_s` seconds of the same stream.
  double rate_mbps(uint32_t kbps, uint32_t burst_bytes, double warm_s, double measure_s) {
    set_limit(kbps, burst_bytes);
    const Clock::time_point start = Clock::now();
    bool counting = false;
    Clock::time_point t0{}, t1{};
    uint64_t c0 = 0, c1 = 0;
    for (;;) {
      while (outstanding_ < kInFlight) post(kStreamMsgBytes);
      const uint32_t n = reap();
      if (n == 0) continue;
      const Clock::time_point now = Clock::now();
      if (!counting && seconds_between(start, now) >= warm_s) {
        counting = true;
        t0 = now;
        c0 = completed_;
      } else if (counting && seconds_between(t0, now) >= measure_s) {
        t1 = now;
        c1 = completed_;
        break;
      }
    }
    // Lift the limit so that what is still queued leaves at once, and let it complete.
    set_limit(0, 0);
    while (outstanding_ != 0) reap();
    const double bits = static_cast<double>(c1 - c0) * write_frame_bytes(kStreamMsgBytes) * 8;
    return bits / seconds_between(t0, t1) / 1e6;
  }

  // The largest excess, in frame bytes, of what completed over what `kbps` alone allows since
  // `kBurstMsgs` one-frame WRITEs were posted at once, with a burst allowance of `burst_bytes`.
  double burst_excess_bytes(uint32_t kbps, uint32_t burst_bytes) {
    set_limit(kbps, burst_bytes);
    // Setting the limit fills the credit; idle for as long again as the allowance takes to
    // earn, so that it would be full either way.
    std::this_thread::sleep_for(std::chrono::microseconds(
        uint64_t{burst_bytes} * 8'000 / kbps + 10'000));
    const Clock::time_point t0 = Clock::now();
    for (uint32_t i = 0; i < kBurstMsgs; ++i) post(kBurstMsgBytes);
    const double bytes_per_s = kbps * 1000.0 / 8;
    double excess = 0;
    uint64_t done = 0;
    while (outstanding_ != 0) {
      const uint32_t n = reap();
      if (n == 0) continue;
      done += n;
      const double allowed = bytes_per_s * seconds_between(t0, Clock::now());
      excess = std::max(excess, static_cast<double>(done * write_frame_bytes(kBurstMsgBytes)) -
                                    allowed);
    }
    set_limit(0, 0);
    return excess;
  }

 private:
  void post(uint32_t len) {
    const uint64_t offset = (posted_ % (pair_.buf_a.size() / kStreamMsgBytes)) * kStreamMsgBytes;
    const Sge sge{reinterpret_cast<uint64_t>(pair_.buf_a.data() + offset), len,
                  pair_.mr_a->lkey()};
    const uint64_t remote = reinterpret_cast<uint64_t>(pair_.buf_b.data() + offset);
    if (Errc e = conn_.qp->post_write(posted_, sge, remote, pair_.mr_b->rkey(),
                                      send_flags::signaled);
        e != Errc::ok)
      fail(std::string("post_write of ") + std::to_string(len) + " bytes: " + errc_name(e));
    ++posted_;
    ++outstanding_;
  }

  // Polls once; the number of WRITEs completed (all must have succeeded). Gives up when no
  // completion came for kGiveUp.
  uint32_t reap() {
    Completion wc[32];
    const int n = conn_.cq->poll(wc, 32);
    if (n < 0) fail("poll: error " + std::to_string(n));
    for (int i = 0; i < n; ++i)
      if (wc[i].status != IBV_WC_SUCCESS)
        fail("WRITE " + std::to_string(wc[i].wr_id) + " completed with status " +
             std::to_string(wc[i].status));
    const Clock::time_point now = Clock::now();
    if (n > 0) {
      last_progress_ = now;
      outstanding_ -= static_cast<uint32_t>(n);
      completed_ += static_cast<uint64_t>(n);
      return static_cast<uint32_t>(n);
    }
    if (now - last_progress_ > kGiveUp)
      fail("no completion for 20 s with " + std::to_string(outstanding_) + " WRITEs posted");
    if (sleep_when_empty_) std::this_thread::sleep_for(std::chrono::microseconds(100));
    return 0;
  }

  rnicdv::bench::SimPair pair_;
  rnicdv::bench::Conn conn_;
  bool sleep_when_empty_;
  uint64_t posted_ = 0;
  uint64_t completed_ = 0;
  uint32_t outstanding_ = 0;
  Clock::time_point last_progress_ = Clock::now();
};

}  // namespace

int main(int argc, char** argv) {
  bool smoke = false;
  bool sleep_when_empty = false;
  uint32_t seconds = 4;
  uint32_t burst = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string opt = argv[i];
    if (opt == "--smoke") {
      smoke = true;
    } else if (opt == "--seconds" && i + 1 < argc) {
      seconds = rnicdv::bench::parse_count(argv[i], argv[i + 1], 3600);
      ++i;
    } else if (opt == "--burst" && i + 1 < argc) {
      burst = rnicdv::bench::parse_count(argv[i], argv[i + 1], 1u << 20);
      ++i;
    } else if (opt == "--poll" && i + 1 < argc) {
      const std::string how = argv[++i];
      if (how != "busy" && how != "sleep")
        fail("--poll: expected busy or sleep, got '" + how + "'");
      sleep_when_empty = how == "sleep";
    } else {
      fail("usage: rnicdv-bench-pacer [--smoke] [--seconds S] [--poll busy|sleep] "
           "[--burst BYTES] (unknown or incomplete option '" + opt + "')");
    }
  }
  const double warm_s = smoke ? 0.05 : 0.5;
  const double measure_s = smoke ? 0.15 : seconds;

  Stream stream(sleep_when_empty);
  std::vector<rnicdv::bench::Record> out;
  const double unpaced = stream.rate_mbps(0, 0, warm_s, measure_s);
  out.push_back({"sim_pacer_rate_unpaced", unpaced, "Mb/s", "", 0});
  double at_10g = 0;
  for (uint32_t kbps : {10'000u, 100'000u, 1'000'000u, 10'000'000u}) {
    const std::string label = limit_label(kbps);
    const double mbps = stream.rate_mbps(kbps, burst, warm_s, measure_s);
    out.push_back({"sim_pacer_rate_" + label, mbps, "Mb/s", "sim_pacer_limit_" + label,
                   kbps / 1000.0});
    at_10g = mbps;
  }
  // The highest limit beside what the stream achieves with none: where a limit lies above
  // what the simulated HCA can do on this machine, this ratio is near 1 and the rate record's
  // says how far the machine falls short, not the pacer.
  out.push_back({"sim_pacer_rate_10G_vs_unpaced", at_10g, "Mb/s", "sim_pacer_rate_unpaced",
                 unpaced});

  constexpr uint32_t kBurstKbps = 10'000;
  constexpr uint32_t kBurstBytes = 64 * 1024;
  std::vector<double> trials;
  for (int i = 0; i < (smoke ? 1 : 3); ++i)
    trials.push_back(stream.burst_excess_bytes(kBurstKbps, kBurstBytes));
  out.push_back({"sim_pacer_burst_64K_at_10M", rnicdv::bench::median(trials), "B",
                 "sim_pacer_burst_allowance_64K", static_cast<double>(kBurstBytes)});
  rnicdv::bench::print_records(out, stdout);
  return 0;
}
