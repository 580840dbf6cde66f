// SPDX-License-Identifier: BSD-3-Clause
// The text report: perftest's dashed header block with its "key : value" lines, the local
// and remote address lines, and the result tables with perftest's exact column headers.
// Every function returns text (no I/O), so the format is checked against literal strings.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "stats.h"
#include "test_id.h"

namespace rnicperf {

// 87 dashes and a newline (perftest RESULT_LINE).
const std::string& result_line();
// --report-per-port: 163 dashes and a newline (perftest RESULT_LINE_PER_PORT), where the
// result table's lines are: above its column header and below its rows.
const std::string& result_line_per_port();

// The star box a server prints before it waits.
std::string waiting_banner();

struct HeaderInfo {
  TestId test;
  bool bidirectional = false;
  bool initiator = true;  // client, or either side of a bidirectional run: shows TX depth
  bool server = false;
  std::string device;
  bool dual_port = false;  // -O: "Dual-port : ON" and a "GID index2" line
  uint32_t num_qps = 1;
  std::string transport_type = "IB";  // perftest prints IB for RoCE as well
  std::string connection = "RC";      // -c
  bool using_srq = false;             // -c XRC: perftest's XRC implies its SRQ
  uint32_t tx_depth = 1;
  uint32_t post_list = 1;
  uint32_t recv_post_list = 1;  // --recv_post_list: a "Recv Post List" line above 1
  uint32_t rx_depth = 0;  // SEND tests on the receiving side
  uint32_t cq_mod = 1;
  uint32_t mtu_bytes = 1024;
  std::string link_type = "Ethernet";
  int gid_index = 0;  // < 0: no GID line
  int gid_index2 = -1;           // -O: port 2's (perftest's gid_index2); < 0: no line
  bool report_per_port = false;  // --report-per-port: the per-port table (and JSON fields)
  uint32_t inline_size = 0;
  uint32_t out_reads = 16;
  bool rdma_cm = false;
  bool com_rdma_cm = false;  // -z: the control channel over rdma_cm
  bool duration_mode = false;
  bool events = false;  // -e: " Test with events. Using <device>_comp0"
  // rnicperf's additions; a line is printed only when its value is set.
  std::string early_post;      // "16 writes in RTR (withheld in_place)"
  std::string post_calls;      // "post_send, a SendWr list per call" (--use_old_post_send, XRC)
  std::string sim_wire;        // "udp 127.0.0.2:4791"
  std::string device_profile;  // "mlx5 (keeps_rtr_doorbell)"
  std::string buffers;         // "DPDK heap, hugepages" (--dpdk-mem)
  std::string clock;           // Clock::description()
};

// From the first dashed line to the closing one, inclusive.
std::string format_header(const HeaderInfo& h);

struct AddressInfo {
  uint16_t lid = 0;
  uint32_t out_reads = 0;
  uint32_t qpn = 0;
  uint32_t psn = 0;
  uint32_t rkey = 0;
  uint64_t vaddr = 0;
  uint8_t gid[16] = {};
  bool has_gid = true;
  uint32_t srqn = 0;
  bool show_srqn = false;  // -c XRC: the record's SRQ number is printed (perftest's XRC_FMT)
};

// " local address: LID 0000 QPN 0x0048 PSN 0xf5aed1 RKey 0x1fd4bc VAddr 0x007f0e0c8aa000"
// (READ adds " OUT 0x10" before RKey; SEND and atomics print no RKey/VAddr, as perftest;
// XRC ends the line with " SRQn 0x000041"), then " GID: 00:00:...:255:255:127:00:00:02" (the
// GID bytes in decimal, perftest's format).
std::string format_address(const char* side, Verb verb, const AddressInfo& a);

// Latency table. The header line is perftest's, character for character.
const std::string& latency_table_header();
std::string format_latency_row(const LatencyResult& r);
const std::string& latency_duration_header();
std::string format_latency_duration_row(const LatencyDurationResult& r);

// Bandwidth table (MiB/sec, or Gb/sec with --report_gbits).
const std::string& bandwidth_table_header(BwUnit unit);
std::string format_bandwidth_row(const BandwidthResult& r, BwUnit unit);
// --report-per-port: perftest's RESULT_FMT_PER_PORT columns and REPORT_FMT_PER_PORT rows, each
// port's average and message rate after the totals (never the six-decimal form).
const std::string& bandwidth_table_header_per_port(BwUnit unit);
std::string format_bandwidth_row_per_port(const BandwidthResult& r);

// --cpu_util: a table header with perftest's RESULT_EXT_CPU_UTIL ("    CPU_Util[%]") in place of
// its final new line, and a row with REPORT_EXT_CPU_UTIL ("\t    %-3.2f") in place of its own.
std::string with_cpu_util_header(const std::string& header);
std::string with_cpu_util(const std::string& row, double percent);

// --report-both (perftest's write_bw.c and friends): after the row of a bidirectional test
// (the sum), this side's and the peer's rows, each under its own title and table header.
// `cpu_percent` >= 0 (--cpu_util): the CPU column on both, this side's figure (perftest's).
// `per_port` (--report-per-port): the rows are per-port ones under the usual column headers,
// as perftest prints them.
std::string format_report_both(const BandwidthResult& local, const BandwidthResult& remote,
                               BwUnit unit, double cpu_percent = -1, bool per_port = false);

// --run_infinitely: what perftest prints when the run is stopped, and what its passive server
// prints instead of a row. An endless run where both sides loop (send_bw, -b) prints the
// second, or kServerClosed, on the side whose peer stopped the run.
inline constexpr const char* kUserStopped = "\n User stopped traffic\n";
inline constexpr const char* kClientClosed = " Client closed connection\n";
inline constexpr const char* kServerClosed = " Server closed connection\n";

// --histogram.
std::string format_histogram(const Histogram& h, int rtt_factor);

// -U and -H: perftest's raw sample dumps (print_report_lat). A header line naming the unit,
// "#, usec" ("#, cycles" with -C), then one line per sample, "<number>, <value>", the value
// the sample's ticks over `ticks_per_unit` (%g, as perftest prints it), numbered from
// `first_number` (1 for the first sample; a long dump is formatted in parts).
std::string sample_dump_header(const char* unit);
std::string format_sample_dump(std::span<const uint64_t> ticks, double ticks_per_unit,
                               uint64_t first_number);

// --early-post: the batch posted in RTR beside the same batch posted after establishment.
struct EarlyPostRow {
  uint32_t posts = 0;
  bool in_rtr = false;
  uint32_t withheld = 0;  // WRs the driver held when the QP moved to RTS
  double t_first_us = 0;  // from ESTABLISHED (RTS) / from the post, to the first completion
  double t_last_us = 0;   // ... to the last completion
};
const std::string& early_post_table_header();
std::string format_early_post_row(const EarlyPostRow& r);

}  // namespace rnicperf
