// SPDX-License-Identifier: BSD-3-Clause
// Command-line options: perftest's names, defaults and limits (perftest_parameters.h), plus
// rnicperf's own (--early-post, --histogram, --loopback, --timeout, --wire, --dpdk-args,
// --dpdk-mem, --plot, --plot-compare).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "rnicdv/status.h"
#include "test_id.h"

namespace rnicperf {

inline constexpr uint16_t kDefaultPort = 18515;
inline constexpr uint64_t kMaxSize = 8u << 20;  // perftest MAX_SIZE: -a ends at 2^23
inline constexpr uint64_t kMinIters = 5;
inline constexpr uint64_t kMaxIters = 100'000'000;
inline constexpr uint32_t kMaxInline = 1024;
inline constexpr uint32_t kMaxQps = 16384;
inline constexpr uint32_t kMaxTxDepth = 15000;
inline constexpr uint32_t kMaxCqMod = 1024;
inline constexpr uint32_t kMaxRxDepth = 16384;
inline constexpr uint64_t kPeakMaxIters = 20000;  // perftest measures peak BW up to this
inline constexpr uint32_t kDefaultDuration = 5;
inline constexpr uint32_t kUdQkey = 0x11111111;  // perftest DEF_QKEY
inline constexpr uint32_t kUdGrhBytes = 40;      // perftest UD_ADDITION: the GRH before a receive
inline constexpr uint32_t kUdMaxRxDepth = 16000;  // perftest UC_MAX_RX
inline constexpr uint32_t kUdMaxInline = 1024;   // perftest MAX_INLINE_UD   // perftest DEF_DURATION: --run_infinitely's interval
inline constexpr uint32_t kSecondPort = 2;       // perftest DEF_IB_PORT2: -O's second port

struct Options {
  TestId test;
  std::string server;  // empty: this side is the server
  std::string device;  // empty: rnicdv::Device::default_name()
  uint16_t port = kDefaultPort;

  uint64_t size = 0;              // resolved default: 2 (lat), 65536 (bw), 8 (atomic)
  bool all_sizes = false;         // -a: 2 B .. 8 MiB
  uint64_t sweep_max = kMaxSize;  // hidden --sweep-max: caps -a (tests)
  uint64_t iterations = 0;        // resolved default: 1000, 5000 for write_bw
  uint32_t duration_s = 0;        // -D; 0: iteration mode
  uint32_t margin_s = 0;          // -f; resolved default: duration / 4
  int32_t inline_size = -1;       // -I; -1: per-test default, clamped to the device
  uint32_t num_qps = 1;
  uint32_t tx_depth = 0;  // resolved default: 128 (bw), 1 (lat); clamped to iterations
  uint32_t cq_mod = 0;    // resolved default: 100 (bw), 1 (lat)
  uint32_t post_list = 1;
  uint32_t rx_depth = 512;     // receive queue depth for SEND tests
  uint32_t mtu = 0;            // -m in bytes; 0: the device's active MTU
  uint8_t qp_timeout = 14;     // -u
  bool cpu_freq_f = false;     // -F
  bool bidirectional = false;  // -b
  bool no_peak = false;        // -N, or implied (-D, > 20000 iterations)
  bool report_gbits = false;
  bool rdma_cm = false;  // -R
  // -z: the control channel is an RC QP of the device that the CM connects on port -p
  // (perftest's "Data ex. method : rdma_cm"); the client's server name is the HCA's address.
  bool com_rdma_cm = false;
  // -c UD: unreliable datagrams (send_lat, send_bw): each SEND is one packet of at most the
  // MTU, addressed by an address handle, the peer's QPN and perftest's Q_Key; each receive
  // buffer holds the 40-byte GRH in front of the message.
  bool ud = false;
  // -c UC (send_lat, send_bw, write_lat, write_bw): the QPs are connected as RC's but nothing
  // is acknowledged or retried; a SEND that finds no receive posted is lost.
  bool uc = false;
  // -c XRC (all eight tests): each send names the peer's XRC SRQ and reaches it through one of
  // the peer's target QPs (rnicdv/xrc.h). As perftest: a latency test or -b makes twice -q
  // QPs on each side, initiators first and as many targets after them; a one-way bandwidth
  // test makes -q initiators on the posting side and -q targets on the other; each side has
  // one XRC SRQ, whose receives complete on the receive CQ in SEND tests.
  bool xrc = false;
  bool out_json = false;
  std::string json_path = "perftest_out.json";
  uint32_t early_post = 0;  // --early-post=N
  uint32_t first_reply = 0;   // --first-reply=N: fresh connections per way (first_reply.h)
  uint32_t cm_poll_us = 0;    // --cm-poll-us: the first-reply server reads CM events this often
  bool histogram = false;
  bool loopback = false;
  uint32_t timeout_s = 20;  // --timeout: every blocking wait is bounded by this
  // --retry-connect: a client whose server refuses the connection (not listening yet) tries
  // again until --timeout instead of failing at once, as perftest does.
  bool retry_connect = false;
  // --ipv6: the device's GID must be an IPv6 one (perftest: prefer IPv6 GIDs). --ipv6-addr:
  // the control channel over IPv6 only. --bind_source_ip: the control channel's address on
  // this side (the client's source, the server's listening address), and with -R the CM's.
  bool ipv6 = false;
  bool ipv6_addr = false;
  std::string bind_source_ip;
  std::string wire;         // --wire: "inproc", "udp", "dpdk"; empty: the default fabric's
  std::string dpdk_args;    // --dpdk-args: EAL and DPDK wire arguments (with --wire dpdk)
  bool dpdk_mem = false;    // --dpdk-mem: buffers from DPDK's heap (hugepages if any)
  bool use_hugepages = false;  // --use_hugepages: buffers on 2 MiB huge pages (MAP_HUGETLB)
  bool warm_up = false;        // --perform_warm_up: one TX depth of unmeasured posts first
  bool use_event = false;      // -e: sleep on completion events instead of polling
  int32_t gid_index = -1;   // -x: must be the device's own (checked at open); -1: not given
  // --output: perftest's reduced output, one number per size on stdout (full: the tables).
  enum class Output : uint8_t { full, bandwidth, message_rate, latency };
  Output output = Output::full;
  // --plot: after a latency run, draw its histogram and CDF to this .svg or .png file.
  std::string plot;
  // --plot-compare: draw these JSON reports laid over each other to --plot's file, and run
  // no test (no test name is given then).
  std::vector<std::string> plot_compare;
  // --run_infinitely: post until stopped, a row every duration_s seconds (default 5).
  bool run_infinitely = false;
  uint32_t stop_after = 0;  // hidden --stop-after: stop after this many intervals (tests)
  bool cpu_util = false;     // --cpu_util: CPU_Util[%] column (duration mode)
  bool report_both = false;  // --report-both: with -b, the local and remote rows as well
  // --reversed: the server sends and the client receives (bandwidth tests). The side that
  // posts the test's operations is then the one without a server address (perftest swaps its
  // "machine"); the TCP roles, and the CM's with -R, stay as they are.
  bool reversed = false;
  uint32_t recv_post_list = 1;  // --recv_post_list: receives posted in lists of n (send_bw)
  // -H, -U, -C (latency tests): perftest's raw sample dumps, sorted and unsorted, and every
  // latency figure of the run in TSC cycles instead of usec.
  bool report_histogram = false;
  bool report_unsorted = false;
  bool report_cycles = false;

  // QP attributes (perftest's -S, --tclass, -T, -L, --flow_label, --pkey_index, --retry_count):
  // what this side's QPs carry, set at INIT (P_Key index), RTR (the address vector) and RTS
  // (retry count), or through the connection manager with -R.
  uint8_t sl = 0;              // -S: service level 0..15
  uint8_t traffic_class = 0;   // --tclass: the GRH traffic class (the IP header's TOS byte)
  int32_t tos = -1;            // -T: rdma_cm's TOS (with -R only, as perftest); -1: not given
  // -L: the hop limit (TTL). -1: perftest's own, 255 in a connection it sets up itself (its
  // GRH's hop_limit) and 64 through the CM (the kernel's IPv4 default).
  int32_t hop_limit = -1;
  std::vector<uint32_t> flow_labels;  // --flow_label: one per QP, round robin (20 bits)
  uint16_t pkey_index = 0;     // --pkey_index
  uint8_t retry_count = 7;     // --retry_count: transport retries 0..7
  // The rate limiter (perftest's --rate_limit family). SW: this side's loop sends bursts of
  // burst_size messages spaced to the rate (bandwidth tests). HW: the device paces each QP
  // (QueuePair::set_rate_limit; mlx5's packet pacing), at a rate in Gb/s or MiB/s. PP: the
  // same with perftest's packet-pacing parameters: MiB/s (times 8 * 1024 kb/s, as perftest
  // converts), a burst in bytes and a typical packet size.
  enum class RateLimitType : uint8_t { disabled, sw, hw, pp };
  enum class RateUnits : uint8_t { gbps, mibps, pps };
  RateLimitType rate_limit_type = RateLimitType::disabled;
  bool rate_limit_type_set = false;
  double rate_limit = 0;  // in rate_units; 0: not given
  RateUnits rate_units = RateUnits::gbps;
  uint32_t burst_size = 0;        // SW: messages (default tx_depth); PP: bytes (0: device's)
  uint32_t typical_pkt_size = 0;  // PP only

  // perftest's verifier (-w, -y): after a bandwidth run, the exit status is 1 when no result
  // row reached the limit (-w in the report's unit, MB/sec or Gb/sec; -y in Mpps). <0: off.
  double limit_bw = -1;
  double limit_msgrate = -1;
  // -W: port counters (sysfs names under ports/<port>/) whose change is printed after each
  // result row, as perftest prints them.
  std::vector<std::string> counters;
  // --use_old_post_send: the loops post through QueuePair::post_send with SendWr lists (one
  // call per post list, perftest's ibv_post_send) instead of the typed calls (its ibv_wr_*).
  bool old_post_send = false;
  uint32_t wait_destroy_s = 0;  // --wait_destroy: seconds to wait before releasing resources
  uint32_t ib_port = 1;         // -i: the device's port the QPs are on
  // -O (perftest's --dualport): twice -q QPs, the first half on port 1 and the second half on
  // port 2 (perftest's ib_port2, which no option sets); bandwidth tests only. num_qps holds
  // the doubled count once resolve_defaults has run, as perftest's num_of_qps does.
  bool dual_port = false;
  // --report-per-port (with -O and -D): beside the totals, the bandwidth and message rate of
  // the QPs on each port over the same window (perftest's bw_avg_p1 ... msgRate_avg_p2).
  bool report_per_port = false;
  // --mmap, --mmap-offset: every QP's buffers from a shared mapping of this file, QP i's at
  // offset + i * its region's size (perftest's mmap memory).
  std::string mmap_file;
  uint64_t mmap_offset = 0;
  bool mmap_offset_set = false;
  enum class Link : uint8_t { unset, ethernet, infiniband };
  Link force_link = Link::unset;  // --force-link
  uint16_t dlid = 0;              // --dlid: printed as the remote LID (RoCE addresses by GID)

  // What the user set explicitly (a default may depend on it).
  bool size_set = false, iters_set = false, tx_depth_set = false, cq_mod_set = false;
  bool margin_set = false;
  bool rx_depth_set = false;

  bool help = false;
  bool version = false;

  bool is_server() const { return server.empty() && !loopback; }
  // The hop limit this side's packets carry (-L, or perftest's default for the path).
  uint8_t resolved_hop_limit() const {
    return static_cast<uint8_t>(hop_limit >= 0 ? hop_limit : (rdma_cm ? 64 : 255));
  }
  // The traffic class: -T's TOS with -R, else --tclass.
  uint8_t resolved_traffic_class() const {
    return static_cast<uint8_t>(tos >= 0 ? tos : traffic_class);
  }
  // The flow label of QP q (--flow_label's list, round robin; 0 without one).
  uint32_t flow_label_of(size_t q) const {
    return flow_labels.empty() ? 0 : flow_labels[q % flow_labels.size()];
  }
  // HW and PP: the device's per-QP limit in kb/s (0: none).
  uint32_t device_rate_kbps() const;
  double device_rate_kbps_exact() const;
  // SW: the messages of msg_size bytes per second the loop is held to (perftest's
  // rate_limit_pps).
  double sw_rate_pps(uint64_t msg_size) const;
  // Whether the side with this TCP role posts the test's operations: perftest's CLIENT
  // "machine", the TCP client unless --reversed.
  bool posts_operations(bool tcp_client) const { return tcp_client != reversed; }
  // Whether the loops post SendWr lists through QueuePair::post_send instead of the typed
  // calls: --use_old_post_send, or -c XRC, whose WRs name the remote SRQ, which no typed call
  // takes (rnicdv refuses them on an XRC initiator).
  bool post_send_lists() const { return old_post_send || xrc; }
  // The highest port number the run uses: -i's, or with -O the second port.
  uint32_t highest_port() const { return dual_port ? std::max(ib_port, kSecondPort) : ib_port; }
};

// Parses `rnicperf <test> [options] [server]`. argv[0] is the program name. Errors are one
// line without the "rnicperf: " prefix, e.g. "unknown option '--foo' (try 'rnicperf -h')".
rnicdv::Result<Options> parse_options(int argc, const char* const* argv);

// Applies perftest's defaults and cross-option rules to parsed options (sizes, depths, CQ
// moderation, margins, peak). Separate from parsing so that tests can check each rule.
rnicdv::Status resolve_defaults(Options& opts);

// -h text.
std::string usage_text();

// "64", "4K", "1M" (perftest accepts K/M suffixes for sizes).
rnicdv::Result<uint64_t> parse_size(const std::string& text);

}  // namespace rnicperf
