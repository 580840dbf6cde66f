// SPDX-License-Identifier: BSD-3-Clause
#include "options.h"

#include <strings.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <type_traits>
#include <utility>

#include "rnicdv/hw/ip_address.h"

namespace rnicperf {

using rnicdv::Errc;
using rnicdv::Result;
using rnicdv::Status;

namespace {

enum class Opt : uint8_t {
  all,
  bidirectional,
  device,
  duration,
  margin,
  cpu_freq,
  help,
  inline_size,
  post_list,
  mtu,
  iters,
  no_peak,
  port,
  qps,
  cq_mod,
  rx_depth,
  rdma_cm,
  com_rdma_cm,
  size,
  tx_depth,
  qp_timeout,
  version,
  report_gbits,
  out_json,
  out_json_file,
  early_post,
  first_reply,
  cm_poll_us,
  histogram,
  loopback,
  timeout,
  retry_connect,
  ipv6,
  ipv6_addr,
  bind_source_ip,
  connection,
  gid_index,
  dont_xchg_versions,
  mr_per_qp,
  output,
  use_hugepages,
  warm_up,
  sweep_max,
  wire,
  dpdk_args,
  dpdk_mem,
  events,
  plot,
  plot_compare,
  run_infinitely,
  cpu_util,
  report_both,
  reversed,
  recv_post_list,
  report_histogram,
  report_unsorted,
  report_cycles,
  sl,
  tclass,
  tos,
  hop_limit,
  flow_label,
  pkey_index,
  retry_count,
  rate_limit,
  rate_units,
  rate_limit_type,
  burst_size,
  typical_pkt_size,
  stop_after,
  limit_bw,
  limit_msgrate,
  use_old_post_send,
  wait_destroy,
  ib_port,
  mmap_file,
  mmap_offset,
  force_link,
  dlid,
  report_counters,
  dual_port,
  report_per_port,
};

// Where -h lists an option: perftest's options, rnicperf's own, or nowhere (for tests).
enum class Section : uint8_t { perftest, own, hidden };

// One row per option: its spellings, whether it takes a value, and its help (-h is generated
// from this table, so adding an option is adding a row). `arg` names the value in the help
// ("<n>"); `help` may hold new lines, each a continuation line of the option's text.
struct OptSpec {
  char short_name;  // 0: long only
  const char* long_name;
  bool takes_value;
  Opt id;
  Section section;
  const char* arg;
  const char* help;
};

// perftest's spellings and order (perftest_parameters.c usage()), then rnicperf's own.
constexpr OptSpec kOpts[] = {
    {'a', "all", false, Opt::all, Section::perftest, nullptr,
     "Run sizes from 2 till 2^23"},
    {'b', "bidirectional", false, Opt::bidirectional, Section::perftest, nullptr,
     "Measure bidirectional bandwidth (default unidirectional)"},
    {'c', "connection", true, Opt::connection, Section::perftest, "<type>",
     "Connection type RC (default), UC (send and write tests),\nUD (send_lat, send_bw) or XRC"},
    {'C', "report-cycles", false, Opt::report_cycles, Section::perftest, nullptr,
     "Latency: report times in TSC cycles instead of usec"},
    {'d', "ib-dev", true, Opt::device, Section::perftest, "<dev>",
     "Use device <dev> (default: first real device, else sim0)"},
    {'D', "duration", true, Opt::duration, Section::perftest, "<sec>",
     "Run for <sec> seconds instead of -n iterations"},
    {'e', "events", false, Opt::events, Section::perftest, nullptr,
     "Sleep on CQ events (default poll); not for the write tests"},
    {'f', "margin", true, Opt::margin, Section::perftest, "<sec>",
     "With -D, skip <sec> at each end (default duration/4)"},
    {'F', "CPU-freq", false, Opt::cpu_freq, Section::perftest, nullptr,
     "Do not warn when the CPU frequency is not at its maximum"},
    {'h', "help", false, Opt::help, Section::perftest, nullptr,
     "Show this help screen"},
    {'H', "report-histogram", false, Opt::report_histogram, Section::perftest, nullptr,
     "Latency: print every sample, sorted (the two largest left\nout), before the result row"},
    {'I', "inline_size", true, Opt::inline_size, Section::perftest, "<size>",
     "Max size of message to be sent inline (lat: 220 write, 236 send)"},
    {'l', "post_list", true, Opt::post_list, Section::perftest, "<n>",
     "Post lists of <n> send WQEs with one doorbell (bandwidth)"},
    {'L', "hop_limit", true, Opt::hop_limit, Section::perftest, "<n>",
     "Hop limit (IPv4 TTL) of this side's packets, 0..255 (default\n255, 64 with -R)"},
    {'m', "mtu", true, Opt::mtu, Section::perftest, "<mtu>",
     "MTU 256..4096 (default: the device's active MTU)"},
    {'n', "iters", true, Opt::iters, Section::perftest, "<n>",
     "Number of exchanges (at least 5, default 1000; 5000 write_bw)"},
    {'N', "noPeak", false, Opt::no_peak, Section::perftest, nullptr,
     "Do not compute the peak bandwidth"},
    {'O', "dualport", false, Opt::dual_port, Section::perftest, nullptr,
     "Run test in dual-port mode: twice -q QPs, the first half on\nport 1, the second half on port 2 (bandwidth tests)"},
    {'p', "port", true, Opt::port, Section::perftest, "<port>",
     "Listen on/connect to TCP port <port> (default 18515)"},
    {'q', "qp", true, Opt::qps, Section::perftest, "<n>",
     "Number of QPs (bandwidth, default 1)"},
    {'Q', "cq-mod", true, Opt::cq_mod, Section::perftest, "<n>",
     "One completion per <n> sends (bandwidth, default 100)"},
    {'r', "rx-depth", true, Opt::rx_depth, Section::perftest, "<n>",
     "Receive queue depth for SEND tests (default 512)"},
    {'R', "rdma_cm", false, Opt::rdma_cm, Section::perftest, nullptr,
     "Connect the QP through the connection manager (IB CM)"},
    {'s', "size", true, Opt::size, Section::perftest, "<size>",
     "Message size (default 2 lat, 65536 bw); K/M suffixes"},
    {'S', "sl", true, Opt::sl, Section::perftest, "<sl>",
     "Service level 0..15 (default 0)"},
    {'t', "tx-depth", true, Opt::tx_depth, Section::perftest, "<n>",
     "Send queue depth (default 128 bw, 1 lat)"},
    {'T', "tos", true, Opt::tos, Section::perftest, "<tos>",
     "With -R: the connection's type of service 0..255 (the IP\nheader's TOS byte: DSCP << 2 | ECN)"},
    {'u', "qp-timeout", true, Opt::qp_timeout, Section::perftest, "<t>",
     "QP ACK timeout 4.096 us * 2^t (default 14)"},
    {'U', "report-unsorted", false, Opt::report_unsorted, Section::perftest, nullptr,
     "Latency: print every sample in the order taken, before the\nresult row"},
    {'V', "version", false, Opt::version, Section::perftest, nullptr,
     "Show the version"},
    {'W', "report-counters", true, Opt::report_counters, Section::perftest, "<list>",
     "Report performance counter change after each result row\n(example: \"counters/port_xmit_data,hw_counters/out_of_buffer\")"},
    {'x', "gid-index", true, Opt::gid_index, Section::perftest, "<n>",
     "GID index to use: the device's own (printed as GID index)"},
    {'z', "com_rdma_cm", false, Opt::com_rdma_cm, Section::perftest, nullptr,
     "Exchange the test's data over an RC QP that the connection\nmanager connects on port -p (rdma_cm), not over TCP: the\nclient names the server's HCA address"},
    {0, "ipv6", false, Opt::ipv6, Section::perftest, nullptr,
     "Use an IPv6 GID: the device's address must be IPv6 (the\nsimulated HCA's: RNICDV_SIM_ADDR)"},
    {0, "ipv6-addr", false, Opt::ipv6_addr, Section::perftest, nullptr,
     "Use IPv6 addresses for the parameters' negotiation (the\ncontrol channel); default: either"},
    {0, "bind_source_ip", true, Opt::bind_source_ip, Section::perftest, "<ip>",
     "The control channel's address on this side (client: its\nsource; server: where it listens); with -R, the CM's too.\nAn IPv6 one needs --ipv6-addr"},
    {0, "report_gbits", false, Opt::report_gbits, Section::perftest, nullptr,
     "Report bandwidth in Gb/sec instead of MB/sec (2^20 B)"},
    {0, "recv_post_list", true, Opt::recv_post_list, Section::perftest, "<n>",
     "Post receives in lists of <n> WRs, one call each (send_bw)"},
    {0, "reversed", false, Opt::reversed, Section::perftest, nullptr,
     "Reverse traffic direction - Server send to client\n(bandwidth tests)"},
    {0, "output", true, Opt::output, Section::perftest, "<what>",
     "Print only one number per size: bandwidth or message_rate\n(bandwidth tests), latency (latency tests: t_typical)"},
    {0, "use_hugepages", false, Opt::use_hugepages, Section::perftest, nullptr,
     "Buffers on 2 MiB huge pages (fails if none are free)"},
    {0, "perform_warm_up", false, Opt::warm_up, Section::perftest, nullptr,
     "Write, read, atomic bandwidth: one TX depth of posts first,\nnot measured"},
    {0, "dont_xchg_versions", false, Opt::dont_xchg_versions, Section::perftest, nullptr,
     "Accepted; versions are exchanged anyway (perftest 4.5 needs them)"},
    {0, "mr_per_qp", false, Opt::mr_per_qp, Section::perftest, nullptr,
     "Accepted: every QP has its own memory region anyway"},
    {0, "out_json", false, Opt::out_json, Section::perftest, nullptr,
     "Save the report as JSON (default file perftest_out.json)"},
    {0, "out_json_file", true, Opt::out_json_file, Section::perftest, "<f>",
     "Name of the JSON report file (implies --out_json)"},
    {0, "run_infinitely", false, Opt::run_infinitely, Section::perftest, nullptr,
     "Run test forever, print results every <duration> seconds\n(-D, default 5; write, read, atomic bandwidth; stop with\nSIGINT or SIGTERM)"},
    {0, "cpu_util", false, Opt::cpu_util, Section::perftest, nullptr,
     "Show CPU Utilization in report, valid only in Duration mode"},
    {0, "report-both", false, Opt::report_both, Section::perftest, nullptr,
     "With -b: report the local and the remote results as well"},
    {0, "report-per-port", false, Opt::report_per_port, Section::perftest, nullptr,
     "Report BW data on both ports when running Dualport and\nDuration mode (-O -D)"},
    {0, "pkey_index", true, Opt::pkey_index, Section::perftest, "<n>",
     "P_Key index to use for the QP (default 0)"},
    {0, "retry_count", true, Opt::retry_count, Section::perftest, "<n>",
     "Transport retries 0..7 before a retry-exceeded error\n(default 7)"},
    {0, "tclass", true, Opt::tclass, Section::perftest, "<tc>",
     "Traffic class 0..255 of this side's packets (the IP header's\nTOS byte; default 0)"},
    {0, "flow_label", true, Opt::flow_label, Section::perftest, "<fl0,fl1,..>",
     "Flow label for each QP, round robin (20 bits; an IPv4\npath carries none)"},
    {0, "burst_size", true, Opt::burst_size, Section::perftest, "<n>",
     "Rate limiter burst: SW, messages (default the TX depth);\nPP, bytes (default the device's)"},
    {0, "typical_pkt_size", true, Opt::typical_pkt_size, Section::perftest, "<bytes>",
     "PP rate limiter: the typical packet size 0..65535"},
    {0, "rate_limit", true, Opt::rate_limit, Section::perftest, "<rate>",
     "Maximum send rate, in --rate_units (default Gb/s); turns\non the HW limiter unless --rate_limit_type says otherwise"},
    {0, "rate_units", true, Opt::rate_units, Section::perftest, "<M|g|p>",
     "Rate limit in MiB/s (M), Gb/s (g) or packets/s (p; SW only)"},
    {0, "rate_limit_type", true, Opt::rate_limit_type, Section::perftest, "<SW|HW|PP>",
     "SW: this side's loop spaces bursts (bandwidth tests);\nHW: the device paces each QP; PP: HW with packet-pacing\nparameters (MiB/s, --burst_size bytes, --typical_pkt_size)"},
    {0, "early-post", true, Opt::early_post, Section::own, "<n>",
     "Client: post <n> writes (sends) in RTR before establishment\nand time them from the move to RTS; compare with <n> after"},
    {0, "first-reply", true, Opt::first_reply, Section::own, "<n>",
     "With send_lat --loopback: <n> fresh connections through the\nCM for each way the server can reply (early posting, its own\nqueue; RTU delivered or lost); times the client's connect to\nthe reply (docs/rnicperf.md, \"First reply\")"},
    {0, "cm-poll-us", true, Opt::cm_poll_us, Section::own, "<t>",
     "With --first-reply: the server reads CM events every <t> us\n(0: on every pass of its loop)"},
    {0, "histogram", false, Opt::histogram, Section::own, nullptr,
     "Print a log-scaled latency histogram (and keep it in JSON)"},
    {0, "loopback", false, Opt::loopback, Section::own, nullptr,
     "Both ends in this process (two simulated HCAs, or two QPs\non one device)"},
    {0, "timeout", true, Opt::timeout, Section::own, "<sec>",
     "Bound on every wait: connect, exchange, completions\n(default 20)"},
    {0, "retry-connect", false, Opt::retry_connect, Section::own, nullptr,
     "Client: when the server refuses the connection (not\nlistening yet), try again until --timeout instead of\nfailing at once"},
    {0, "wire", true, Opt::wire, Section::own, "<wire>",
     "The simulated HCA's wire: inproc (with --loopback), udp, or\ndpdk (RoCEv2 frames on a DPDK ethdev port; docs/dpdk.md)"},
    {0, "dpdk-args", true, Opt::dpdk_args, Section::own, "<args>",
     "With --wire dpdk: EAL arguments (e.g. --vdev=net_af_packet0,\niface=veth0) and the wire's --port/--ip/--mac/--peer"},
    {0, "dpdk-mem", false, Opt::dpdk_mem, Section::own, nullptr,
     "Allocate the registered buffers from DPDK's heap\n(hugepage-backed when the machine has free hugepages)"},
    {0, "plot", true, Opt::plot, Section::own, "<f.svg|f.png>",
     "After a latency run, draw its histogram and CDF with the\npercentile marks (python3-matplotlib); with --plot-compare,\nthe file the comparison is drawn to"},
    {0, "plot-compare", true, Opt::plot_compare, Section::own, "<a,b>",
     "Run no test: draw the JSON reports a,b,... (latency runs\nwith --histogram or --plot) over each other, to --plot's\nfile; each series is named after its file"},
    {'w', "limit_bw", true, Opt::limit_bw, Section::perftest, "<value>",
     "Set verifier limit for bandwidth: exit status 1 when no row\nreaches it (MB/sec; Gb/sec with --report_gbits)"},
    {'y', "limit_msgrate", true, Opt::limit_msgrate, Section::perftest, "<value>",
     "Set verifier limit for Msg Rate: exit status 1 when no row\nreaches it (Mpps)"},
    {0, "use_old_post_send", false, Opt::use_old_post_send, Section::perftest, nullptr,
     "Use old post send flow: one post_send call per post list\n(SendWr lists) instead of one typed call per WR"},
    {0, "wait_destroy", true, Opt::wait_destroy, Section::perftest, "<seconds>",
     "Wait <seconds> before destroying allocated resources\n(QP/CQ/PD/MR..)"},
    {'i', "ib-port", true, Opt::ib_port, Section::perftest, "<port>",
     "Use port <port> of the device (default 1, its only port)"},
    {0, "mmap", true, Opt::mmap_file, Section::perftest, "<file>",
     "Use an mmap'd file (shared) as the buffers: QP i's at\n--mmap-offset + i * its buffers' size"},
    {0, "mmap-offset", true, Opt::mmap_offset, Section::perftest, "<offset>",
     "Offset of the buffers in --mmap's file (whole pages)"},
    {0, "force-link", true, Opt::force_link, Section::perftest, "<value>",
     "Force the link type: Ethernet (RoCE; IB is refused)"},
    {0, "dlid", true, Opt::dlid, Section::perftest, "<lid>",
     "Shown as the remote LID; RoCE addresses by GID, not LID"},
    {0, "sweep-max", true, Opt::sweep_max, Section::hidden, nullptr, nullptr},  // for tests: caps the -a sweep
    // For tests: --run_infinitely stops by itself after <n> interval reports.
    {0, "stop-after", true, Opt::stop_after, Section::hidden, nullptr, nullptr},
};

const OptSpec* find_short(char c) {
  for (const auto& o : kOpts)
    if (o.short_name == c) return &o;
  return nullptr;
}

const OptSpec* find_long(std::string_view name) {
  for (const auto& o : kOpts)
    if (name == o.long_name) return &o;
  return nullptr;
}

std::string spelled(const OptSpec& o) {
  if (o.short_name) return std::string("-") + o.short_name;
  return std::string("--") + o.long_name;
}

// A decimal (or 0x hex) unsigned integer in [lo, hi], with the whole text consumed.
Result<uint64_t> parse_uint(const OptSpec& o, const std::string& text, uint64_t lo, uint64_t hi) {
  errno = 0;
  char* end = nullptr;
  if (text.empty() || text[0] == '-' || text[0] == '+')
    return Status::error(Errc::invalid_argument, "%s '%s': not a number", spelled(o).c_str(),
                         text.c_str());
  unsigned long long v = std::strtoull(text.c_str(), &end, 0);
  if (errno != 0 || *end != '\0')
    return Status::error(Errc::invalid_argument, "%s '%s': not a number", spelled(o).c_str(),
                         text.c_str());
  if (v < lo || v > hi)
    return Status::error(Errc::invalid_argument, "%s %llu: must be between %llu and %llu",
                         spelled(o).c_str(), v, static_cast<unsigned long long>(lo),
                         static_cast<unsigned long long>(hi));
  return static_cast<uint64_t>(v);
}

// -w, -y: a limit of 0 or more (perftest reads it with strtof and refuses a negative one with
// `negative`); the whole text must be the number.
Status parse_limit(const OptSpec& o, const std::string& text, const char* negative,
                   double* out) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || errno != 0 || *end != '\0' || !std::isfinite(v))
    return Status::error(Errc::invalid_argument, "%s '%s': not a number", spelled(o).c_str(),
                         text.c_str());
  if (v < 0)
    return Status::error(Errc::invalid_argument, "%s %s: %s (a limit is 0 or more)",
                         spelled(o).c_str(), text.c_str(), negative);
  *out = v;
  return Status::ok();
}

Status apply(Options& opts, const OptSpec& o, const std::string& value) {
  auto number = [&](uint64_t lo, uint64_t hi, auto& field) -> Status {
    return parse_uint(o, value, lo, hi).transform([&](uint64_t v) {
      field = static_cast<std::remove_reference_t<decltype(field)>>(v);
    });
  };
  switch (o.id) {
    case Opt::all:
      opts.all_sizes = true;
      return Status::ok();
    case Opt::bidirectional:
      opts.bidirectional = true;
      return Status::ok();
    case Opt::device:
      opts.device = value;
      return Status::ok();
    case Opt::duration:
      return number(1, 24 * 3600, opts.duration_s);
    case Opt::margin:
      opts.margin_set = true;
      return number(0, 24 * 3600, opts.margin_s);
    case Opt::cpu_freq:
      opts.cpu_freq_f = true;
      return Status::ok();
    case Opt::help:
      opts.help = true;
      return Status::ok();
    case Opt::inline_size:
      return number(0, kMaxInline, opts.inline_size);
    case Opt::post_list:
      return number(1, kMaxTxDepth, opts.post_list);
    case Opt::mtu: {
      Status s = number(256, 4096, opts.mtu);
      if (!s) return s;
      if ((opts.mtu & (opts.mtu - 1)) != 0)
        return Status::error(Errc::invalid_argument,
                             "-m %u: MTU must be one of 256, 512, 1024, 2048, 4096", opts.mtu);
      return Status::ok();
    }
    case Opt::iters:
      opts.iters_set = true;
      return number(kMinIters, kMaxIters, opts.iterations);
    case Opt::no_peak:
      opts.no_peak = true;
      return Status::ok();
    case Opt::port:
      return number(1, 65535, opts.port);
    case Opt::qps:
      return number(1, kMaxQps, opts.num_qps);
    case Opt::cq_mod:
      opts.cq_mod_set = true;
      return number(1, kMaxCqMod, opts.cq_mod);
    case Opt::rx_depth:
      opts.rx_depth_set = true;
      return number(1, kMaxRxDepth, opts.rx_depth);
    case Opt::rdma_cm:
      opts.rdma_cm = true;
      return Status::ok();
    case Opt::com_rdma_cm:
      opts.com_rdma_cm = true;
      return Status::ok();
    case Opt::size: {
      auto v = parse_size(value);
      if (!v) return v.status().prepend("-s");
      if (*v == 0)
        return Status::error(Errc::invalid_argument, "-s 0: message size must be at least 1");
      if (*v > kMaxSize)
        return Status::error(Errc::invalid_argument, "-s %llu: message size above the maximum %llu",
                             static_cast<unsigned long long>(*v),
                             static_cast<unsigned long long>(kMaxSize));
      opts.size = *v;
      opts.size_set = true;
      return Status::ok();
    }
    case Opt::tx_depth:
      opts.tx_depth_set = true;
      return number(1, kMaxTxDepth, opts.tx_depth);
    case Opt::qp_timeout:
      return number(0, 31, opts.qp_timeout);
    case Opt::version:
      opts.version = true;
      return Status::ok();
    case Opt::report_gbits:
      opts.report_gbits = true;
      return Status::ok();
    case Opt::out_json:
      opts.out_json = true;
      return Status::ok();
    case Opt::out_json_file:
      if (value.empty())
        return Status::error(Errc::invalid_argument, "--out_json_file: empty file name");
      opts.out_json = true;
      opts.json_path = value;
      return Status::ok();
    case Opt::early_post:
      return number(1, 4096, opts.early_post);
    case Opt::first_reply:
      return number(1, 100000, opts.first_reply);
    case Opt::cm_poll_us:
      return number(0, 1000000, opts.cm_poll_us);
    case Opt::histogram:
      opts.histogram = true;
      return Status::ok();
    case Opt::loopback:
      opts.loopback = true;
      return Status::ok();
    case Opt::timeout:
      return number(1, 3600, opts.timeout_s);
    case Opt::retry_connect:
      opts.retry_connect = true;
      return Status::ok();
    case Opt::ipv6:
      opts.ipv6 = true;
      return Status::ok();
    case Opt::ipv6_addr:
      opts.ipv6_addr = true;
      return Status::ok();
    case Opt::bind_source_ip: {
      Result<rnicdv::hw::IpAddress> ip = rnicdv::hw::IpAddress::parse(value);
      if (!ip) return ip.status().prepend("--bind_source_ip");
      if (ip.value().is_unspecified() || ip.value().is_multicast())
        return Status::error(Errc::invalid_argument,
                             "--bind_source_ip %s: not the address of an interface",
                             std::string(value).c_str());
      opts.bind_source_ip = ip.value().to_string();
      return Status::ok();
    }
    case Opt::connection:
      if (value == "RC" || value == "UD" || value == "UC" || value == "XRC") {
        opts.ud = value == "UD";
        opts.uc = value == "UC";
        opts.xrc = value == "XRC";
        return Status::ok();
      }
      return Status::error(Errc::invalid_argument,
                           "-c %s: rnicdv's QPs are RC, UC, UD or XRC (DC and SRD are not "
                           "implemented)",
                           value.c_str());
    case Opt::gid_index:
      return number(0, 255, opts.gid_index);
    case Opt::dont_xchg_versions:
    case Opt::mr_per_qp:
      // The versions are always exchanged (perftest 4.5 stops without them, and they tell an
      // rnicperf peer from perftest); one region per QP is rnicperf's layout already.
      return Status::ok();
    case Opt::use_hugepages:
      opts.use_hugepages = true;
      return Status::ok();
    case Opt::warm_up:
      opts.warm_up = true;
      return Status::ok();
    case Opt::events:
      opts.use_event = true;
      return Status::ok();
    case Opt::output:
      if (value == "bandwidth") {
        opts.output = Options::Output::bandwidth;
      } else if (value == "message_rate") {
        opts.output = Options::Output::message_rate;
      } else if (value == "latency") {
        opts.output = Options::Output::latency;
      } else {
        return Status::error(Errc::invalid_argument,
                             "--output=%s: one of bandwidth, message_rate, latency",
                             value.c_str());
      }
      return Status::ok();
    case Opt::sweep_max: {
      auto v = parse_size(value);
      if (!v) return v.status().prepend("--sweep-max");
      if (*v < 2 || *v > kMaxSize)
        return Status::error(Errc::invalid_argument, "--sweep-max: must be between 2 and %llu",
                             static_cast<unsigned long long>(kMaxSize));
      opts.sweep_max = *v;
      return Status::ok();
    }
    case Opt::wire:
      if (value != "inproc" && value != "udp" && value != "dpdk")
        return Status::error(Errc::invalid_argument,
                             "--wire '%s': one of inproc, udp, dpdk", value.c_str());
      opts.wire = value;
      return Status::ok();
    case Opt::dpdk_args:
      opts.dpdk_args = value;
      return Status::ok();
    case Opt::dpdk_mem:
      opts.dpdk_mem = true;
      return Status::ok();
    case Opt::plot: {
      auto ends_with = [&](std::string_view ext) {
        return value.size() > ext.size() && value.compare(value.size() - ext.size(), ext.size(),
                                                          ext) == 0;
      };
      if (!ends_with(".svg") && !ends_with(".png"))
        return Status::error(Errc::invalid_argument,
                             "--plot '%s': the file must end in .svg or .png", value.c_str());
      opts.plot = value;
      return Status::ok();
    }
    case Opt::plot_compare: {
      std::vector<std::string> files;
      size_t start = 0;
      for (;;) {
        size_t comma = value.find(',', start);
        std::string file = value.substr(start, comma == std::string::npos ? comma : comma - start);
        if (file.empty())
          return Status::error(Errc::invalid_argument,
                               "--plot-compare '%s': an empty file name in the list",
                               value.c_str());
        files.push_back(std::move(file));
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
      opts.plot_compare.insert(opts.plot_compare.end(), files.begin(), files.end());
      return Status::ok();
    }
    case Opt::run_infinitely:
      opts.run_infinitely = true;
      return Status::ok();
    case Opt::cpu_util:
      opts.cpu_util = true;
      return Status::ok();
    case Opt::report_both:
      opts.report_both = true;
      return Status::ok();
    case Opt::reversed:
      opts.reversed = true;
      return Status::ok();
    case Opt::recv_post_list:
      return number(1, kMaxRxDepth, opts.recv_post_list);
    case Opt::report_histogram:
      opts.report_histogram = true;
      return Status::ok();
    case Opt::report_unsorted:
      opts.report_unsorted = true;
      return Status::ok();
    case Opt::report_cycles:
      opts.report_cycles = true;
      return Status::ok();
    case Opt::sl:
      return number(0, 15, opts.sl);
    case Opt::tclass:
      return number(0, 255, opts.traffic_class);
    case Opt::tos:
      return number(0, 255, opts.tos);
    case Opt::hop_limit:
      return number(0, 255, opts.hop_limit);
    case Opt::pkey_index:
      return number(0, 0xffff, opts.pkey_index);
    case Opt::retry_count:
      return number(0, 7, opts.retry_count);
    case Opt::flow_label: {
      opts.flow_labels.clear();
      size_t start = 0;
      for (;;) {
        const size_t comma = value.find(',', start);
        const std::string one =
            value.substr(start, comma == std::string::npos ? comma : comma - start);
        auto v = parse_uint(o, one, 0, 0xfffff);
        if (!v) return v.status();
        opts.flow_labels.push_back(static_cast<uint32_t>(*v));
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
      return Status::ok();
    }
    case Opt::rate_limit: {
      char* end = nullptr;
      errno = 0;
      const double v = std::strtod(value.c_str(), &end);
      if (value.empty() || errno != 0 || *end != '\0' || !(v > 0) || v > 1e12)
        return Status::error(Errc::invalid_argument,
                             "--rate_limit '%s': the rate must be a positive number",
                             value.c_str());
      opts.rate_limit = v;
      // perftest: a rate with no type asks for the HW limiter.
      if (opts.rate_limit_type == Options::RateLimitType::disabled)
        opts.rate_limit_type = Options::RateLimitType::hw;
      return Status::ok();
    }
    case Opt::rate_units:
      if (value == "M") {
        opts.rate_units = Options::RateUnits::mibps;
      } else if (value == "g") {
        opts.rate_units = Options::RateUnits::gbps;
      } else if (value == "p") {
        opts.rate_units = Options::RateUnits::pps;
      } else {
        return Status::error(Errc::invalid_argument,
                             "--rate_units=%s: invalid rate limit units, use M (MiB/s), g (Gb/s) "
                             "or p (packets/s)",
                             value.c_str());
      }
      return Status::ok();
    case Opt::rate_limit_type:
      if (value == "SW") {
        opts.rate_limit_type = Options::RateLimitType::sw;
      } else if (value == "HW") {
        opts.rate_limit_type = Options::RateLimitType::hw;
      } else if (value == "PP") {
        opts.rate_limit_type = Options::RateLimitType::pp;
      } else {
        return Status::error(Errc::invalid_argument,
                             "--rate_limit_type=%s: invalid rate limit type, use HW, SW or PP",
                             value.c_str());
      }
      opts.rate_limit_type_set = true;
      return Status::ok();
    case Opt::burst_size:
      return number(0, 1u << 30, opts.burst_size);
    case Opt::typical_pkt_size:
      return number(0, 0xffff, opts.typical_pkt_size);
    case Opt::stop_after:
      return number(1, 1000000, opts.stop_after);
    case Opt::limit_bw:
      return parse_limit(o, value, "Invalid Minimum BW Limit", &opts.limit_bw);
    case Opt::limit_msgrate:
      return parse_limit(o, value, "Invalid Minimum msgRate Limit", &opts.limit_msgrate);
    case Opt::use_old_post_send:
      opts.old_post_send = true;
      return Status::ok();
    case Opt::wait_destroy:
      return number(0, 24 * 3600, opts.wait_destroy_s);
    case Opt::ib_port: {
      Status st = number(0, 255, opts.ib_port);
      if (st && opts.ib_port < 1)
        return Status::error(Errc::invalid_argument, "-i 0: IB Port can't be less than 1");
      return st;
    }
    case Opt::mmap_file:
      if (value.empty())
        return Status::error(Errc::invalid_argument, "--mmap: empty file name");
      opts.mmap_file = value;
      return Status::ok();
    case Opt::mmap_offset:
      opts.mmap_offset_set = true;
      return number(0, UINT64_MAX / 2, opts.mmap_offset);
    case Opt::force_link:
      // perftest's str_link_layer, without its prefix matching ("IBX" is no link type).
      if (strcasecmp(value.c_str(), "IB") == 0) {
        opts.force_link = Options::Link::infiniband;
      } else if (strcasecmp(value.c_str(), "Ethernet") == 0) {
        opts.force_link = Options::Link::ethernet;
      } else {
        return Status::error(Errc::invalid_argument,
                             "--force-link=%s: Invalid link layer value should be IB or ETHERNET.",
                             value.c_str());
      }
      return Status::ok();
    case Opt::dlid:
      return number(0, 0xffff, opts.dlid);
    case Opt::report_counters: {
      // perftest's list: names relative to the port's sysfs directory, comma separated.
      opts.counters.clear();
      size_t at = 0;
      while (true) {
        const size_t comma = std::min(value.find(',', at), value.size());
        const std::string name = value.substr(at, comma - at);
        if (name.empty())
          return Status::error(Errc::invalid_argument,
                               "-W: an empty counter name in \"%s\" (names are separated by "
                               "single commas, e.g. counters/port_xmit_data,hw_counters/"
                               "out_of_buffer)",
                               value.c_str());
        opts.counters.push_back(name);
        if (comma == value.size()) break;
        at = comma + 1;
      }
      return Status::ok();
    }
    case Opt::dual_port:
      opts.dual_port = true;
      return Status::ok();
    case Opt::report_per_port:
      opts.report_per_port = true;
      return Status::ok();
  }
  return Status::error(Errc::internal, "unhandled option");
}

}  // namespace

Result<uint64_t> parse_size(const std::string& text) {
  if (text.empty() || text[0] < '0' || text[0] > '9')
    return Status::error(Errc::invalid_argument, "'%s': not a size", text.c_str());
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  uint64_t scale = 1;
  if (*end == 'K' || *end == 'k') {
    scale = 1024;
    ++end;
  } else if (*end == 'M' || *end == 'm') {
    scale = 1024 * 1024;
    ++end;
  }
  if (errno != 0 || *end != '\0' || v > (UINT64_MAX / scale))
    return Status::error(Errc::invalid_argument, "'%s': not a size", text.c_str());
  return static_cast<uint64_t>(v) * scale;
}

Result<Options> parse_options(int argc, const char* const* argv) {
  Options opts;
  bool have_test = false;
  std::string positional;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg.size() >= 2 && arg[0] == '-' && arg[1] == '-') {
      std::string_view body = arg.substr(2);
      std::string value;
      bool has_inline_value = false;
      if (auto eq = body.find('='); eq != std::string_view::npos) {
        value = std::string(body.substr(eq + 1));
        body = body.substr(0, eq);
        has_inline_value = true;
      }
      const OptSpec* o = find_long(body);
      if (!o)
        return Status::error(Errc::invalid_argument, "unknown option '%s' (try 'rnicperf -h')",
                             std::string(arg).c_str());
      if (o->takes_value && !has_inline_value) {
        if (i + 1 >= argc)
          return Status::error(Errc::invalid_argument, "option '--%s' needs a value", o->long_name);
        value = argv[++i];
      } else if (!o->takes_value && has_inline_value) {
        return Status::error(Errc::invalid_argument, "option '--%s' takes no value", o->long_name);
      }
      RNICDV_TRY(apply(opts, *o, value));
    } else if (arg.size() >= 2 && arg[0] == '-') {
      // Short options, possibly grouped ("-bF") or with an attached value ("-s64").
      for (size_t k = 1; k < arg.size(); ++k) {
        const OptSpec* o = find_short(arg[k]);
        if (!o)
          return Status::error(Errc::invalid_argument, "unknown option '-%c' (try 'rnicperf -h')",
                               arg[k]);
        std::string value;
        if (o->takes_value) {
          if (k + 1 < arg.size()) {
            value = std::string(arg.substr(k + 1));
          } else if (i + 1 < argc) {
            value = argv[++i];
          } else {
            return Status::error(Errc::invalid_argument, "option '-%c' needs a value", arg[k]);
          }
          RNICDV_TRY(apply(opts, *o, value));
          break;
        }
        RNICDV_TRY(apply(opts, *o, value));
      }
    } else if (!have_test && !opts.help && !opts.version) {
      auto id = parse_test_name(arg);
      if (!id)
        return Status::error(Errc::invalid_argument,
                             "unknown test '%s' (one of write_lat, write_bw, send_lat, send_bw, "
                             "read_lat, read_bw, atomic_lat, atomic_bw)",
                             std::string(arg).c_str());
      opts.test = *id;
      have_test = true;
    } else if (positional.empty() && have_test) {
      positional = std::string(arg);
    } else {
      return Status::error(Errc::invalid_argument, "unexpected argument '%s'",
                           std::string(arg).c_str());
    }
  }
  if (opts.help || opts.version) return opts;
  if (!opts.plot_compare.empty()) {
    // Drawing saved reports: no test runs, so nothing else applies.
    if (have_test)
      return Status::error(Errc::invalid_argument,
                           "--plot-compare draws saved JSON reports and runs no test: leave "
                           "out '%s'",
                           test_name(opts.test));
    if (opts.plot.empty())
      return Status::error(Errc::invalid_argument,
                           "--plot-compare needs --plot=<file.svg|file.png> to draw to");
    return opts;
  }
  if (!have_test)
    return Status::error(Errc::invalid_argument,
                         "no test given (usage: rnicperf <test> [options] [server])");
  opts.server = positional;
  if (opts.loopback && !opts.server.empty())
    return Status::error(Errc::invalid_argument,
                         "--loopback runs both ends here: do not give a server address ('%s')",
                         opts.server.c_str());
  // perftest: "--ipv6-addr flag must be used when specifying an IPv6 source IP".
  if (!opts.bind_source_ip.empty() &&
      rnicdv::hw::IpAddress::parse(opts.bind_source_ip).value().is_v6() != opts.ipv6_addr)
    return Status::error(Errc::invalid_argument,
                         opts.ipv6_addr ? "--bind_source_ip %s: --ipv6-addr makes the control "
                                          "channel IPv6, so the source must be IPv6"
                                        : "--bind_source_ip %s: an IPv6 source needs --ipv6-addr",
                         opts.bind_source_ip.c_str());
  if (opts.loopback && (opts.ipv6_addr || !opts.bind_source_ip.empty()))
    return Status::error(Errc::invalid_argument,
                         "--loopback has no control channel to address: leave out %s",
                         opts.ipv6_addr ? "--ipv6-addr" : "--bind_source_ip");
  RNICDV_TRY(resolve_defaults(opts));
  return opts;
}

namespace {

// -T, --tclass and the rate limiter: perftest's rules (force_dependecies), with each refusal
// naming the option.
Status resolve_qos(Options& o, const char* name) {
  using Type = Options::RateLimitType;
  using Units = Options::RateUnits;
  if (o.tos >= 0 && !o.rdma_cm)
    return Status::error(Errc::invalid_argument,
                         "-T %d: the TOS is rdma_cm's (add -R); without it, set the traffic "
                         "class with --tclass",
                         o.tos);
  if (o.tos >= 0 && o.traffic_class != 0 && o.tos != o.traffic_class)
    return Status::error(Errc::invalid_argument,
                         "-T %d and --tclass %u: with -R the TOS is the traffic class; give one",
                         o.tos, o.traffic_class);
  if (o.rdma_cm && o.flow_labels.size() > 1)
    return Status::error(Errc::invalid_argument,
                         "--flow_label: -R connects one QP; give one flow label");

  if (o.burst_size > 0 && o.rate_limit_type == Type::disabled)
    return Status::error(Errc::invalid_argument,
                         "--burst_size: can't enable burst mode when rate limiter is off (add "
                         "--rate_limit)");
  if (o.typical_pkt_size > 0 && o.rate_limit_type != Type::pp)
    return Status::error(Errc::invalid_argument,
                         "--typical_pkt_size: typical packet size only supports the PP rate "
                         "limiter (--rate_limit_type=PP)");
  if (o.rate_limit_type == Type::disabled) return Status::ok();
  if (o.rate_limit <= 0)
    return Status::error(Errc::invalid_argument,
                         "--rate_limit_type=%s: must specify a rate limit (--rate_limit=<rate>)",
                         o.rate_limit_type == Type::sw ? "SW"
                         : o.rate_limit_type == Type::hw ? "HW"
                                                         : "PP");
  if (o.run_infinitely)
    return Status::error(Errc::invalid_argument,
                         "--run_infinitely does not support the rate limiter (--rate_limit)");
  if (o.first_reply > 0)
    return Status::error(Errc::invalid_argument,
                         "--first-reply times single replies; not with --rate_limit");
  switch (o.rate_limit_type) {
    case Type::sw:
      if (o.test.kind != Kind::bandwidth || o.test.verb == Verb::atomic ||
          (o.test.verb == Verb::send && o.bidirectional))
        return Status::error(Errc::invalid_argument,
                             "%s: the SW rate limiter runs in bandwidth tests only, not atomic "
                             "or bidirectional SEND ones (use --rate_limit_type=HW)",
                             name);
      if (o.burst_size == 0) o.burst_size = o.tx_depth;  // perftest: a TX depth per burst
      if (o.burst_size % o.post_list != 0)
        return Status::error(Errc::invalid_argument,
                             "--burst_size %u: a burst is whole post lists of %u (-l)",
                             o.burst_size, o.post_list);
      break;
    case Type::hw:
      if (o.rate_units == Units::pps)
        return Status::error(Errc::invalid_argument,
                             "--rate_units=p: pps rate limit units is not supported when setting "
                             "HW rate limit (use g or M, or --rate_limit_type=SW)");
      if (o.burst_size > 0)
        return Status::error(Errc::invalid_argument,
                             "--burst_size: the HW limiter paces with the device's own burst; "
                             "set one in bytes with --rate_limit_type=PP");
      break;
    case Type::pp:
      if (o.rate_units != Units::mibps)
        return Status::error(Errc::invalid_argument,
                             "--rate_limit_type=PP: packet pacing only supports MiB/s "
                             "(--rate_units=M)");
      break;
    case Type::disabled:
      break;
  }
  if (o.rate_limit_type != Type::sw) {
    const double kbps = o.device_rate_kbps_exact();
    if (kbps < 1 || kbps > 4294967295.0)
      return Status::error(Errc::invalid_argument,
                           "--rate_limit %g: %.0f kb/s is outside what a QP's rate limit holds "
                           "(1 kb/s to 4.29 Tb/s)",
                           o.rate_limit, kbps);
  }
  return Status::ok();
}

// -w, -y, --use_old_post_send, --wait_destroy, --mmap, --force-link: their rules.
Status resolve_run_extras(const Options& o, const char* name) {
  const bool limits = o.limit_bw >= 0 || o.limit_msgrate >= 0;
  const char* limit_opt = o.limit_bw >= 0 ? "-w" : "-y";
  if (limits && o.test.kind != Kind::bandwidth)
    return Status::error(Errc::invalid_argument,
                         "%s: %s: the verifier limits check bandwidth results (perftest has "
                         "them in bandwidth tests only)",
                         name, limit_opt);
  if (limits && o.run_infinitely)
    return Status::error(Errc::invalid_argument,
                         "%s: --run_infinitely has no final result to verify", limit_opt);
  if (o.old_post_send && o.first_reply > 0)
    return Status::error(Errc::invalid_argument,
                         "--use_old_post_send: --first-reply's replies are posted its own way");
  if (o.mmap_offset_set && o.mmap_file.empty())
    return Status::error(Errc::invalid_argument, "--mmap-offset applies with --mmap only");
  if (!o.mmap_file.empty()) {
    const long page = ::sysconf(_SC_PAGESIZE);
    if (page > 0 && o.mmap_offset % static_cast<uint64_t>(page) != 0)
      return Status::error(Errc::invalid_argument,
                           "--mmap-offset %llu: not a multiple of the page size %ld (mmap maps "
                           "whole pages)",
                           static_cast<unsigned long long>(o.mmap_offset), page);
    if (o.use_hugepages || o.dpdk_mem)
      return Status::error(Errc::invalid_argument,
                           "--mmap and %s exclude each other (both choose the buffers' memory)",
                           o.use_hugepages ? "--use_hugepages" : "--dpdk-mem");
  }
  if (o.force_link == Options::Link::infiniband)
    return Status::error(Errc::invalid_argument,
                         "--force-link=IB: rnicdv's devices are RoCE devices, whose link is "
                         "Ethernet: there is no InfiniBand link (no LIDs, no subnet manager) to "
                         "run on");
  return Status::ok();
}

}  // namespace

double Options::device_rate_kbps_exact() const {
  if (rate_limit_type == RateLimitType::pp) return rate_limit * 8 * 1024;  // perftest's PP
  if (rate_units == RateUnits::mibps) return rate_limit * 8 * 1048576 / 1000;
  return rate_limit * 1e6;  // Gb/s
}

uint32_t Options::device_rate_kbps() const {
  if (rate_limit_type != RateLimitType::hw && rate_limit_type != RateLimitType::pp) return 0;
  return static_cast<uint32_t>(device_rate_kbps_exact() + 0.5);
}

double Options::sw_rate_pps(uint64_t msg_size) const {
  // perftest's run_iter_bw: messages per second from the rate and the message size.
  switch (rate_units) {
    case RateUnits::mibps:
      return rate_limit * 1048576 / static_cast<double>(msg_size);
    case RateUnits::gbps:
      return rate_limit * 1e9 / (static_cast<double>(msg_size) * 8);
    case RateUnits::pps:
      return rate_limit;
  }
  return rate_limit;
}

Status resolve_defaults(Options& o) {
  const bool bw = o.test.kind == Kind::bandwidth;
  const char* name = test_name(o.test);

  if (o.test.verb == Verb::atomic) {
    if (o.all_sizes)
      return Status::error(Errc::invalid_argument, "%s: -a is not available: atomics are 8 bytes",
                           name);
    if (o.size_set && o.size != 8)
      return Status::error(Errc::invalid_argument, "%s: -s %llu: atomics are 8 bytes", name,
                           static_cast<unsigned long long>(o.size));
    o.size = 8;
  } else if (!o.size_set) {
    o.size = bw ? 65536 : 2;
  }
  if (o.all_sizes && o.size_set)
    return Status::error(Errc::invalid_argument, "-a and -s exclude each other");

  if (!o.iters_set) o.iterations = (o.test == TestId{Verb::write, Kind::bandwidth}) ? 5000 : 1000;

  // -O and --report-per-port: perftest's rules (force_dependecies), before the QP count's own.
  if (o.dual_port) {
    if (!bw)
      return Status::error(Errc::invalid_argument, "%s: -O: Dual-port mode only supports BW tests.",
                           name);
    if (o.rdma_cm)
      return Status::error(Errc::invalid_argument,
                           "-O with -R: Perftest still doesn't support Dual Port with rdma_cm (the "
                           "connection manager connects one QP)");
    if (o.ib_port != 1)
      return Status::error(Errc::invalid_argument,
                           "-O and -i %u: dual-port mode puts the first half of the QPs on port 1 "
                           "and the second half on port %u (perftest's -O resets -i to 1): leave "
                           "out -i",
                           o.ib_port, kSecondPort);
    if (2ull * o.num_qps > kMaxQps)
      return Status::error(Errc::invalid_argument, "-O -q %u: twice %u QPs is above %u", o.num_qps,
                           o.num_qps, kMaxQps);
    o.num_qps *= 2;  // perftest's num_of_qps *= 2
  }
  if (o.rdma_cm && o.ib_port != 1)
    return Status::error(Errc::invalid_argument,
                         "-R with -i %u: the connection manager connects QPs on port 1, where "
                         "it runs",
                         o.ib_port);
  if (o.report_per_port) {
    // The duration given, not --run_infinitely's default interval: perftest's test_type.
    if (o.duration_s == 0 || !o.dual_port)
      return Status::error(Errc::invalid_argument,
                           "--report-per-port: report per port feature work only with Duration "
                           "and Dualport (-D and -O)");
    if (o.run_infinitely)
      return Status::error(Errc::invalid_argument,
                           "--report-per-port and --run_infinitely exclude each other (perftest's "
                           "endless rows count no ports: their port columns read 0)");
  }

  if (!bw) {
    if (o.bidirectional)
      return Status::error(Errc::invalid_argument, "%s: -b applies to bandwidth tests only", name);
    if (o.num_qps != 1)
      return Status::error(Errc::invalid_argument, "%s: latency tests use one QP (-q %u)", name,
                           o.num_qps);
    if (o.post_list != 1)
      return Status::error(Errc::invalid_argument, "%s: -l applies to bandwidth tests only", name);
  }

  // --run_infinitely, --cpu_util, --report-both: perftest's rules (force_dependecies), checked
  // before -D's own so that the reason given is the option's.
  if (o.run_infinitely) {
    if (o.use_event)
      return Status::error(Errc::invalid_argument,
                           "%s: run_infinitely does not support events feature yet (-e)", name);
    if (!bw)
      return Status::error(Errc::invalid_argument,
                           "%s: run_infinitely exists only in BW tests for now", name);
    if (o.bidirectional && o.test.verb == Verb::send)
      return Status::error(Errc::invalid_argument,
                           "%s: run_infinitely mode is not supported in SEND, SEND_IMM or "
                           "WRITE_IMM Bidirectional BW test (-b)",
                           name);
    if (o.report_both)
      return Status::error(Errc::invalid_argument,
                           "--report-both and --run_infinitely exclude each other (an endless "
                           "-b row is this side's count for both directions)");
    if (o.all_sizes)
      return Status::error(Errc::invalid_argument,
                           "-a and --run_infinitely exclude each other (one size, reported "
                           "every interval)");
    if (o.warm_up)
      return Status::error(Errc::invalid_argument,
                           "--perform_warm_up and --run_infinitely exclude each other");
    if (o.margin_set)
      return Status::error(Errc::invalid_argument,
                           "-f: --run_infinitely has no margins (every interval is reported)");
    if (o.output != Options::Output::full)
      return Status::error(Errc::invalid_argument,
                           "--output and --run_infinitely exclude each other (the interval rows "
                           "are the report)");
    if (o.duration_s == 0) o.duration_s = kDefaultDuration;  // perftest: DEF_DURATION
    o.no_peak = true;
  } else if (o.stop_after > 0) {
    return Status::error(Errc::invalid_argument, "--stop-after applies with --run_infinitely only");
  }
  if (o.cpu_util && o.duration_s == 0)
    return Status::error(Errc::invalid_argument,
                         "--cpu_util: CPU Utilization works only with Duration mode (-D)");
  if (o.report_both && !(bw && o.bidirectional))
    return Status::error(Errc::invalid_argument,
                         "%s: --report-both reports the two directions of a bidirectional "
                         "bandwidth test: add -b",
                         name);

  if (!o.tx_depth_set) o.tx_depth = bw ? 128 : 1;
  if (o.duration_s == 0 && o.tx_depth > o.iterations)
    o.tx_depth = static_cast<uint32_t>(o.iterations);

  if (o.post_list > 1) {
    if (o.post_list > o.tx_depth)
      return Status::error(Errc::invalid_argument, "-l %u: post list above the TX depth %u",
                           o.post_list, o.tx_depth);
    if (o.duration_s == 0 && o.iterations % o.post_list != 0)
      return Status::error(Errc::invalid_argument,
                           "-n %llu: iterations must be a multiple of the post list size %u",
                           static_cast<unsigned long long>(o.iterations), o.post_list);
    if (!o.cq_mod_set) o.cq_mod = o.post_list;
  }
  if (!o.cq_mod_set && o.post_list == 1) {
    // perftest: 100 for bandwidth, but one CQE per message above 8 KiB when not asked.
    o.cq_mod = bw ? ((o.size > 8192 && !o.all_sizes) ? 1 : 100) : 1;
  }
  if (o.cq_mod > o.tx_depth) o.cq_mod = o.tx_depth;

  if (o.duration_s > 0 && !o.run_infinitely) {
    if (!o.margin_set) o.margin_s = o.duration_s / 4;
    if (2ull * o.margin_s >= o.duration_s)
      return Status::error(Errc::invalid_argument,
                           "-D %u -f %u: the margins leave no time to measure", o.duration_s,
                           o.margin_s);
    if (o.all_sizes) return Status::error(Errc::invalid_argument, "-a and -D exclude each other");
    o.no_peak = true;  // perftest: no peak in duration mode
  } else if (o.margin_set) {
    return Status::error(Errc::invalid_argument, "-f applies with -D only");
  }
  if (o.iterations > kPeakMaxIters) o.no_peak = true;

  if (o.warm_up && !(bw && o.test.verb != Verb::send))
    return Status::error(Errc::invalid_argument,
                         "%s: --perform_warm_up applies to write, read and atomic bandwidth tests",
                         name);
  if (o.use_event && o.test.verb == Verb::write)
    return Status::error(Errc::invalid_argument,
                         "%s: -e is not an option of the write tests (their loops poll memory "
                         "and the send CQ, as perftest's do)",
                         name);
  // -H, -U, -C: perftest takes -C in latency tests only and refuses -H and -U in bandwidth
  // tests; all three read the samples of an iteration run, which -D does not keep (perftest
  // ignores them there).
  for (const auto& [given, spelled] :
       {std::pair{o.report_histogram, "-H (--report-histogram)"},
        std::pair{o.report_unsorted, "-U (--report-unsorted)"},
        std::pair{o.report_cycles, "-C (--report-cycles)"}}) {
    if (!given) continue;
    if (bw)
      return Status::error(Errc::invalid_argument, "%s: %s is available only on latency tests",
                           name, spelled);
    if (o.duration_s > 0)
      return Status::error(Errc::invalid_argument,
                           "%s: %s needs the samples, which -D does not keep (use -n)", name,
                           spelled);
  }
  if (o.report_cycles && (o.histogram || !o.plot.empty()))
    return Status::error(Errc::invalid_argument,
                         "-C reports cycles; --histogram and --plot are drawn in usec: not together");

  if (o.recv_post_list > 1) {
    if (!bw)
      return Status::error(Errc::invalid_argument,
                           "%s: --recv_post_list: receive post lists are supported in bandwidth "
                           "tests only",
                           name);
    if (o.test.verb != Verb::send)
      return Status::error(Errc::invalid_argument,
                           "%s: --recv_post_list: only SEND tests post receives (send_bw)", name);
    if (o.duration_s == 0 && o.iterations % o.recv_post_list != 0)
      return Status::error(Errc::invalid_argument,
                           "-n %llu: iterations must be a multiple of the receive post list size "
                           "%u",
                           static_cast<unsigned long long>(o.iterations), o.recv_post_list);
    if (o.recv_post_list > o.rx_depth)
      return Status::error(Errc::invalid_argument,
                           "--recv_post_list=%u: more than the RX depth %u (-r): no list would "
                           "ever be posted",
                           o.recv_post_list, o.rx_depth);
  }

  if (o.reversed) {
    if (!bw)
      return Status::error(Errc::invalid_argument,
                           "%s: --reversed applies to bandwidth tests (the server sends, the "
                           "client receives)",
                           name);
    if (o.bidirectional)
      return Status::error(Errc::invalid_argument,
                           "%s: --reversed turns a one-way test around; with -b both sides send "
                           "already",
                           name);
    if (o.early_post > 0)
      return Status::error(Errc::invalid_argument,
                           "--early-post: the client posts in RTR; not with --reversed");
  }

  RNICDV_TRY(resolve_qos(o, name));
  RNICDV_TRY(resolve_run_extras(o, name));

  if (o.ud) {
    // A datagram that finds no receive posted is dropped, not retried: as perftest does, the
    // receive queue holds every message of an iteration run (up to 16000) unless -r says.
    if (!o.rx_depth_set && o.duration_s == 0)
      o.rx_depth = static_cast<uint32_t>(std::min<uint64_t>(o.iterations, kUdMaxRxDepth));
    // perftest runs UD in the SEND tests only: a datagram carries no remote address.
    if (o.test.verb != Verb::send)
      return Status::error(Errc::invalid_argument,
                           "%s: -c UD: unreliable datagrams carry SENDs only (send_lat, send_bw)",
                           name);
    if (o.early_post > 0 || o.first_reply > 0)
      return Status::error(Errc::invalid_argument,
                           "-c UD: --early-post and --first-reply time a connection; a UD QP "
                           "has none");
    if (o.rate_limit_type == Options::RateLimitType::hw ||
        o.rate_limit_type == Options::RateLimitType::pp)
      return Status::error(Errc::invalid_argument,
                           "-c UD: the device paces RC QPs only (use --rate_limit_type=SW)");
  }

  if (o.uc) {
    // As perftest: UC carries SEND and RDMA WRITE (IBA 9.8.1); its receives are posted as
    // UD's are, since a SEND that finds none is lost rather than retried.
    if (o.test.verb != Verb::send && o.test.verb != Verb::write)
      return Status::error(Errc::invalid_argument,
                           "%s: -c UC: unreliable connections carry SEND and RDMA WRITE only "
                           "(send_lat, send_bw, write_lat, write_bw)",
                           name);
    if (o.test.verb == Verb::send && !o.rx_depth_set && o.duration_s == 0)
      o.rx_depth = static_cast<uint32_t>(std::min<uint64_t>(o.iterations, kUdMaxRxDepth));
    if (o.rdma_cm)
      return Status::error(Errc::invalid_argument,
                           "-c UC with -R: rdma_cm connects RC QPs here (and perftest refuses UC "
                           "with -R too)");
    if (o.first_reply > 0)
      return Status::error(Errc::invalid_argument,
                           "-c UC: --first-reply times connections the connection manager "
                           "makes, which are RC");
  }

  if (o.xrc) {
    // perftest refuses -R with XRC (force_dependecies). Its -z takes XRC but cannot run it:
    // the control QP it makes on the rdma_cm ID is an XRC QP too (its comm parameters keep
    // use_xrc), and its first receive there is refused ("Function ibv_post_recv failed for
    // RDMA_CM QP"). Both are refused here with perftest's line.
    if (o.rdma_cm || o.com_rdma_cm)
      return Status::error(Errc::invalid_argument, "-c XRC: XRC does not support RDMA_CM (%s)",
                           o.rdma_cm ? "-R" : "-z");
    if (o.first_reply > 0)
      return Status::error(Errc::invalid_argument,
                           "-c XRC: --first-reply times connections the connection manager "
                           "makes, which are RC");
  }

  if (o.use_hugepages && o.dpdk_mem)
    return Status::error(Errc::invalid_argument, "--use_hugepages and --dpdk-mem exclude each other");
  if (o.output == Options::Output::latency && bw)
    return Status::error(Errc::invalid_argument,
                         "%s: --output=latency applies to latency tests (bandwidth or "
                         "message_rate here)",
                         name);
  if ((o.output == Options::Output::bandwidth || o.output == Options::Output::message_rate) && !bw)
    return Status::error(Errc::invalid_argument,
                         "%s: --output=%s applies to bandwidth tests (latency here)", name,
                         o.output == Options::Output::bandwidth ? "bandwidth" : "message_rate");

  if (o.inline_size >= 0 && (o.test.verb == Verb::read || o.test.verb == Verb::atomic) &&
      o.inline_size > 0)
    return Status::error(Errc::invalid_argument, "%s: -I: READ and atomics carry no inline data",
                         name);

  if (o.early_post > 0) {
    if (o.early_post > o.iterations)
      return Status::error(Errc::invalid_argument, "--early-post=%u: more than the %llu iterations",
                           o.early_post, static_cast<unsigned long long>(o.iterations));
    if (o.rdma_cm)
      return Status::error(Errc::invalid_argument,
                           "--early-post times the RTR window of the TCP exchange; not with -R");
  }
  if (o.first_reply > 0) {
    if (o.test.verb != Verb::send || o.test.kind != Kind::latency)
      return Status::error(Errc::invalid_argument,
                           "--first-reply: a request and a reply are SENDs; use send_lat");
    if (!o.loopback)
      return Status::error(Errc::invalid_argument,
                           "--first-reply runs client and server in this process: add --loopback");
    if (o.early_post > 0 || o.rdma_cm)
      return Status::error(Errc::invalid_argument,
                           "--first-reply makes its own connections; not with --early-post or -R");
    if (o.com_rdma_cm)
      return Status::error(Errc::invalid_argument,
                           "--first-reply has no control channel to put on rdma_cm: not with -z");
  } else if (o.cm_poll_us > 0) {
    return Status::error(Errc::invalid_argument, "--cm-poll-us applies with --first-reply only");
  }
  if (!o.dpdk_args.empty() && o.wire != "dpdk")
    return Status::error(Errc::invalid_argument, "--dpdk-args applies with --wire dpdk only");
  if (o.wire == "inproc" && !o.loopback)
    return Status::error(Errc::invalid_argument,
                         "--wire inproc joins two simulated HCAs in one process: add --loopback");
  // The CM connects one RC QP; a datagram service answers each UD QP's request in turn.
  if (o.rdma_cm && o.num_qps != 1 && !o.ud)
    return Status::error(Errc::invalid_argument, "-R: one QP per connection (-q %u)", o.num_qps);
  if (!o.plot.empty()) {
    // --plot draws the distribution of one latency run's samples.
    if (bw)
      return Status::error(Errc::invalid_argument,
                           "%s: --plot draws the samples of a latency test; a bandwidth "
                           "test keeps none",
                           name);
    if (o.first_reply > 0)
      return Status::error(Errc::invalid_argument,
                           "--plot: --first-reply prints its own table; nothing to draw");
    if (o.duration_s > 0)
      return Status::error(Errc::invalid_argument,
                           "%s: --plot needs the samples, which -D does not keep (use -n)", name);
    if (o.all_sizes)
      return Status::error(Errc::invalid_argument,
                           "%s: --plot draws one size's samples; not with -a (use -s)", name);
    if (o.is_server() && (o.test.verb == Verb::read || o.test.verb == Verb::atomic))
      return Status::error(Errc::invalid_argument,
                           "%s: --plot on the client: the server of a %s test measures nothing",
                           name, o.test.verb == Verb::read ? "READ" : "atomic");
  }
  return Status::ok();
}

namespace {

// The help text's column: options, padded to it, then their text (perftest's layout).
constexpr size_t kHelpColumn = 28;

void append_help(std::string* out, Section section) {
  for (const OptSpec& o : kOpts) {
    if (o.section != section) continue;
    std::string head = o.short_name ? std::string("  -") + o.short_name + ", --" : "      --";
    head += o.long_name;
    if (o.arg) head += std::string("=") + o.arg;
    // A head too long for the column stands on its own line, the text under it.
    if (head.size() + 2 > kHelpColumn) {
      *out += head + "\n";
      head.clear();
    }
    head.resize(std::max(head.size() + 2, kHelpColumn), ' ');
    *out += head;
    for (const char* p = o.help; *p; ++p) {
      *out += *p;
      if (*p == '\n') out->append(kHelpColumn, ' ');
    }
    *out += '\n';
  }
}

}  // namespace

std::string usage_text() {
  std::string out = R"(Usage:
  rnicperf <test> [options]            start a server and wait for a client
  rnicperf <test> [options] <server>   connect to the server at <server>
  rnicperf <test> --loopback [options] run both ends in this process

Tests: write_lat write_bw send_lat send_bw read_lat read_bw atomic_lat atomic_bw

Options (perftest's names and defaults):
)";
  append_help(&out, Section::perftest);
  out += "\nrnicperf's own:\n";
  append_help(&out, Section::own);
  return out;
}

}  // namespace rnicperf
