// SPDX-License-Identifier: BSD-3-Clause
// The session's state and steps, shared by its two flows: with an rnicperf peer (session.cc:
// rnicperf's exchange, with negotiation, barriers and the early-post extras) and with a
// perftest peer (perftest_peer.cc: perftest's exchange, message for message).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "clock.h"
#include "endpoint.h"
#include "oob_protocol.h"
#include "report.h"
#include "report_json.h"
#include "run_context.h"
#include "session.h"
#include "stats.h"

namespace rnicperf::detail {

using rnicdv::Errc;
using rnicdv::Result;
using rnicdv::Status;

// Barrier numbers: each step of the run has its own, so a lost step is caught.
inline constexpr uint32_t kConnected = 1;
inline constexpr uint32_t kSizeBase = 100;
inline constexpr uint32_t kFinished = 0xfffffff0;

// The run's message sizes. With -c UD (`mtu` the negotiated MTU) a message is one packet, so
// perftest sweeps -a up to the MTU and turns a larger -s into the MTU, saying so (on stderr,
// unless `quiet`: the second end of a --loopback run).
inline std::vector<uint64_t> sizes_of(const Options& o, uint32_t mtu = 0, bool quiet = false) {
  const uint64_t largest = o.ud && mtu ? mtu : UINT64_MAX;
  std::vector<uint64_t> sizes;
  if (!o.all_sizes) {
    if (o.size > largest && !quiet)
      std::fprintf(stderr, " Max msg size in UD is MTU %llu\n Changing to this MTU\n",
                   static_cast<unsigned long long>(largest));
    sizes.push_back(std::min(o.size, largest));
    return sizes;
  }
  for (uint64_t s = 2; s <= o.sweep_max && s <= largest; s *= 2) sizes.push_back(s);
  return sizes;
}

class Session {
 public:
  explicit Session(SessionSetup& setup) : s_(setup), o_(setup.options), clock_(Clock::get()) {}
  Status run();
  // Tells the peer why this side stops, so that it does not wait for a timeout.
  void abort(const std::string& why) {
    if (oob_ && !perftest_peer_) oob_->send_abort(why);
  }
  // After a successful run, before the resources go (perftest's end of main and destroy_ctx):
  // the verifier's verdict (-w, -y) and --wait_destroy's wait.
  void finish();

 private:
  // -i and -O against the device's ports (perftest's check_link queries ib_port, and ib_port2
  // with -O, and fails on a port the device lacks), naming the device and the ports it has.
  Status check_ports() const;
  Status connect_control();
  Status connect_control_rdma_cm(uint32_t timeout_ms);
  // Creates the QPs and their memory for sizes up to `max_size`, fills and prints the header.
  Status create_endpoint(uint64_t max_size, uint32_t early_recvs, uint32_t mtu);
  void print_addresses();
  RunContext base_context(uint64_t first_size);
  // The run against a perftest peer (perftest_peer.cc), after the versions.
  Status run_with_perftest();
  Status perftest_latency(const std::vector<uint64_t>& sizes, RunContext& base);
  Status perftest_write_bw(const std::vector<uint64_t>& sizes, RunContext& base);
  Status perftest_send_bw(const std::vector<uint64_t>& sizes, RunContext& base);
  // In write_lat the perftest server writes first; in send_lat perftest's client sends first
  // (run_iter_lat_send); between rnicperf ends the client does.
  bool pingpong_initiator() const {
    return (perftest_peer_ && o_.test.verb == Verb::write) ? !s_.client : s_.client;
  }
  Status run_size(RunContext& c, size_t index);
  Status latency_size(RunContext& c);
  Status bandwidth_size(RunContext& c);
  // --run_infinitely: a row every interval until the stop flag is set.
  Status bandwidth_infinitely(RunContext& c, bool sender, bool receiver);
  std::atomic<bool>* stop_flag() { return s_.stop ? s_.stop : &own_stop_; }
  void print(const std::string& text) {
    if (s_.quiet || o_.output != Options::Output::full) return;
    std::fputs(text.c_str(), s_.out);
    std::fflush(s_.out);
  }
  // -U, -H: perftest prints its sample dumps whatever --output says; the quiet loopback end
  // prints nothing. Written in parts, so a long run's dump needs no text of its full size.
  void dump_samples(std::span<const uint64_t> ticks, double ticks_per_unit) {
    if (s_.quiet) return;
    constexpr size_t kPart = 4096;
    std::fputs(sample_dump_header(o_.report_cycles ? "cycles" : "usec").c_str(), s_.out);
    for (size_t at = 0; at < ticks.size(); at += kPart) {
      const auto part = ticks.subspan(at, std::min(kPart, ticks.size() - at));
      std::fputs(format_sample_dump(part, ticks_per_unit, at + 1).c_str(), s_.out);
    }
    std::fflush(s_.out);
  }
  // --output: the one number perftest prints per size instead of the tables ("%lf").
  void print_value(Options::Output what, double value) {
    if (s_.quiet || o_.output != what) return;
    std::fprintf(s_.out, "%lf\n", value);
    std::fflush(s_.out);
  }
  // The result table's dashed line (above its column header and below its rows) and the
  // bandwidth tests' column header: perftest's per-port ones with --report-per-port, except in
  // atomic_bw, whose frame perftest 4.5 keeps (only its rows turn per-port, atomic_bw.c).
  bool per_port_frame() const {
    return o_.report_per_port && o_.test.verb != Verb::atomic;
  }
  const std::string& table_line() const {
    return per_port_frame() ? result_line_per_port() : result_line();
  }
  const std::string& bw_table_header() const {
    return per_port_frame() ? bandwidth_table_header_per_port(unit_)
                            : bandwidth_table_header(unit_);
  }
  // `cpu_percent` >= 0: with perftest's CPU_Util column (--cpu_util).
  void print_bandwidth(const BandwidthResult& r, double cpu_percent = -1) {
    const std::string row =
        o_.report_per_port ? format_bandwidth_row_per_port(r) : format_bandwidth_row(r, unit_);
    print(cpu_percent >= 0 ? with_cpu_util(row, cpu_percent) : row);
    print_value(Options::Output::bandwidth, r.bw_avg);
    print_value(Options::Output::message_rate, r.msg_rate);
    print_counters();
    // perftest's print_full_bw_report: a limit is met when any row printed reaches it.
    bw_limit_met_ |= !(o_.limit_bw > r.bw_avg);
    msgrate_limit_met_ |= !(o_.limit_msgrate > r.msg_rate);
  }
  // -W: each counter's value now, in the order given.
  Status read_counters(std::vector<uint64_t>* values);
  // -W, after a result row: each counter's change since the last reading, as perftest's
  // counters_print ("\t<name>=<change>" lines and an empty one), whatever --output says.
  void print_counters();
  std::vector<uint64_t> counter_values_;
  // This side posts the test's operations (perftest's CLIENT "machine"): the client, or the
  // server with --reversed. s_.client itself is the TCP role: who connects and who writes
  // first in each exchange.
  bool sends() const { return o_.posts_operations(s_.client); }
  bool initiator() const { return sends() || o_.bidirectional; }
  // The peer waits on the control channel while this side measures.
  bool peer_is_passive() const {
    if (!sends() || o_.bidirectional || perftest_peer_) return false;
    if (o_.test.kind == Kind::latency)
      return o_.test.verb == Verb::read || o_.test.verb == Verb::atomic;
    return o_.test.verb != Verb::send;
  }
  bool this_is_passive() const {
    if (sends() || o_.bidirectional) return false;
    if (o_.test.kind == Kind::latency)
      return o_.test.verb == Verb::read || o_.test.verb == Verb::atomic;
    return o_.test.verb != Verb::send;
  }

  SessionSetup& s_;
  Options& o_;
  const Clock& clock_;
  std::unique_ptr<TestEndpoint> ep_;
  std::unique_ptr<OobSession> oob_;
  std::optional<rnicdv::Connection> conn_;  // -R; destroyed before the endpoint's QPs
  JsonReport json_;
  HeaderInfo header_;
  BwUnit unit_ = BwUnit::mib_per_sec;
  std::vector<uint64_t> tposted_, tcompleted_, deltas_;
  std::atomic<uint64_t> progress_{0};
  std::atomic<bool> own_stop_{false};  // --run_infinitely without a SessionSetup::stop
  BandwidthResult last_bw_;     // the last row printed (what perftest's xchg_bw_reports sends)
  bool perftest_peer_ = false;  // the peer speaks perftest's exchange: no rnicperf messages
  bool bw_limit_met_ = false, msgrate_limit_met_ = false;  // by a row printed (-w, -y)
  uint64_t post_send_calls_ = 0;  // Options::post_send_lists(): over the measured loops
};

}  // namespace rnicperf::detail
