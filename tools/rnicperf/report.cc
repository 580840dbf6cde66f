// SPDX-License-Identifier: BSD-3-Clause
#include "report.h"

#include <cstdarg>
#include <cstdio>
#include <string_view>
#include <vector>

namespace rnicperf {

namespace {

[[gnu::format(printf, 1, 2)]] std::string fmt(const char* f, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

// Writes `cells` so that each starts at the column where its label starts in `header`
// (rows line up under perftest's headers with spaces; perftest itself mixes in tabs).
std::string row_under(const std::string& header, const std::vector<std::string_view>& labels,
                      const std::vector<std::string>& cells) {
  std::string line;
  size_t search_from = 0;
  for (size_t i = 0; i < cells.size(); ++i) {
    size_t col = header.find(labels[i], search_from);
    search_from = col + labels[i].size();
    if (line.size() < col)
      line.append(col - line.size(), ' ');
    else if (!line.empty())
      line += ' ';
    line += cells[i];
  }
  line += '\n';
  return line;
}

// " Key             : value" (keys padded to 16, perftest's layout).
std::string kv(const char* key, const std::string& value) {
  return fmt(" %-16s: %s", key, value.c_str());
}

// Two pairs on one line; the second starts at column 32.
std::string kv2(const char* key1, const std::string& v1, const char* key2, const std::string& v2) {
  std::string left = kv(key1, v1);
  if (left.size() < 32)
    left.append(32 - left.size(), ' ');
  else
    left += ' ';
  return left + fmt("%-15s: %s\n", key2, v2.c_str());
}

const char* on_off(bool b) {
  return b ? "ON" : "OFF";
}

const std::vector<std::string_view> kLatLabels = {
    "#bytes",        "#iterations",          "t_min[usec]",
    "t_max[usec]",   "t_typical[usec]",      "t_avg[usec]",
    "t_stdev[usec]", "99% percentile[usec]", "99.9% percentile[usec]"};
const std::vector<std::string_view> kLatDurLabels = {"#bytes", "#iterations", "t_avg[usec]",
                                                     "tps average"};
const std::vector<std::string_view> kBwLabelsMib = {"#bytes", "#iterations", "BW peak[MiB/sec]",
                                                    "BW average[MiB/sec]", "MsgRate[Mpps]"};
const std::vector<std::string_view> kBwLabelsGb = {"#bytes", "#iterations", "BW peak[Gb/sec]",
                                                   "BW average[Gb/sec]", "MsgRate[Mpps]"};
const std::vector<std::string_view> kEarlyLabels = {"#posts", "posted", "withheld", "t_first[usec]",
                                                    "t_last[usec]"};

}  // namespace

const std::string& result_line() {
  static const std::string line = std::string(87, '-') + "\n";
  return line;
}

std::string waiting_banner() {
  return "\n************************************\n"
         "* Waiting for client to connect... *\n"
         "************************************\n";
}

std::string format_header(const HeaderInfo& h) {
  const bool bw = h.test.kind == Kind::bandwidth;
  std::string out = result_line();
  out += "                    " + test_title(h.test, h.bidirectional, h.post_list > 1) + "\n";
  out += kv2("Dual-port", "OFF", "Device", h.device);
  out += kv2("Number of qps", std::to_string(h.num_qps), "Transport type", h.transport_type);
  out += kv2("Connection type", "RC", "Using SRQ", "OFF");
  if (h.initiator) out += kv("TX depth", std::to_string(h.tx_depth)) + "\n";
  if (h.post_list > 1) out += kv("Post List", std::to_string(h.post_list)) + "\n";
  if (h.test.verb == Verb::send && h.rx_depth > 0 && (h.server || h.bidirectional))
    out += kv("RX depth", std::to_string(h.rx_depth)) + "\n";
  if (bw) out += kv("CQ Moderation", std::to_string(h.cq_mod)) + "\n";
  out += kv("Mtu", std::to_string(h.mtu_bytes) + "[B]") + "\n";
  out += kv("Link type", h.link_type) + "\n";
  if (h.gid_index >= 0) out += kv("GID index", std::to_string(h.gid_index)) + "\n";
  if (h.test.verb == Verb::read || h.test.verb == Verb::atomic)
    out += kv("Outstand reads", std::to_string(h.out_reads)) + "\n";
  else
    out += kv("Max inline data", std::to_string(h.inline_size) + "[B]") + "\n";
  out += kv("rdma_cm QPs", on_off(h.rdma_cm)) + "\n";
  // The control channel is always TCP ("Ethernet"), with -R too (see cm_connect.h).
  out += kv("Data ex. method", "Ethernet") + "\n";
  if (!h.early_post.empty()) out += kv("Early post", h.early_post) + "\n";
  if (!h.sim_wire.empty()) out += kv("Sim wire", h.sim_wire) + "\n";
  if (!h.device_profile.empty()) out += kv("Device profile", h.device_profile) + "\n";
  if (!h.buffers.empty()) out += kv("Buffers", h.buffers) + "\n";
  if (!h.clock.empty()) out += kv("Clock", h.clock) + "\n";
  out += result_line();
  return out;
}

std::string format_address(const char* side, Verb verb, const AddressInfo& a) {
  // perftest's conversions: LID %#04x, QPN/PSN %#06x, OUT %#04x, RKey %#08x, VAddr %#016Lx.
  std::string out = fmt(" %s address: LID %#04x QPN %#06x PSN %#06x", side, a.lid, a.qpn, a.psn);
  if (verb == Verb::read) out += fmt(" OUT %#04x", a.out_reads);
  if (verb == Verb::read || verb == Verb::write)
    out += fmt(" RKey %#08x VAddr %#016llx", a.rkey, static_cast<unsigned long long>(a.vaddr));
  out += '\n';
  if (a.has_gid) {
    out += " GID: ";
    for (int i = 0; i < 16; ++i) out += fmt(i ? ":%02d" : "%02d", a.gid[i]);
    out += '\n';
  }
  return out;
}

const std::string& latency_table_header() {
  static const std::string h =
      " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    "
      "t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n";
  return h;
}

std::string format_latency_row(const LatencyResult& r) {
  return row_under(latency_table_header(), kLatLabels,
                   {std::to_string(r.size), std::to_string(r.iterations), fmt("%.2f", r.t_min),
                    fmt("%.2f", r.t_max), fmt("%.2f", r.t_typical), fmt("%.2f", r.t_avg),
                    fmt("%.2f", r.t_stdev), fmt("%.2f", r.p99), fmt("%.2f", r.p999)});
}

const std::string& latency_duration_header() {
  static const std::string h = " #bytes        #iterations       t_avg[usec]    tps average\n";
  return h;
}

std::string format_latency_duration_row(const LatencyDurationResult& r) {
  return row_under(latency_duration_header(), kLatDurLabels,
                   {std::to_string(r.size), std::to_string(r.iterations), fmt("%.2f", r.t_avg),
                    fmt("%.2f", r.tps)});
}

const std::string& bandwidth_table_header(BwUnit unit) {
  static const std::string mib =
      " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]\n";
  static const std::string gb =
      " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n";
  return unit == BwUnit::mib_per_sec ? mib : gb;
}

std::string format_bandwidth_row(const BandwidthResult& r, BwUnit unit) {
  // perftest REPORT_FMT_EXT: six decimals when a Gb/sec average is below 0.1.
  const char* bw_fmt = (unit == BwUnit::gbit_per_sec && r.bw_avg < 0.1) ? "%.6f" : "%.2f";
  return row_under(bandwidth_table_header(unit),
                   unit == BwUnit::mib_per_sec ? kBwLabelsMib : kBwLabelsGb,
                   {std::to_string(r.size), std::to_string(r.iterations), fmt(bw_fmt, r.bw_peak),
                    fmt(bw_fmt, r.bw_avg), fmt("%.6f", r.msg_rate)});
}

std::string format_histogram(const Histogram& h, int rtt_factor) {
  std::string out = fmt(" Latency histogram [usec, %s; %llu samples, none dropped]\n",
                        rtt_factor == 2 ? "half round trip" : "round trip",
                        static_cast<unsigned long long>(h.total));
  out += "       from         to        count       %\n";
  uint64_t peak = 1;
  for (const auto& b : h.buckets)
    if (b.count > peak) peak = b.count;
  for (const auto& b : h.buckets) {
    double pct = h.total ? 100.0 * static_cast<double>(b.count) / static_cast<double>(h.total) : 0;
    auto bar_len = static_cast<size_t>((b.count * 40 + peak - 1) / peak);
    out += fmt(" %10.3f %10.3f %12llu %7.2f%% ", b.lo_us, b.hi_us,
               static_cast<unsigned long long>(b.count), pct);
    out += std::string(bar_len, '#');
    out += '\n';
  }
  return out;
}

const std::string& early_post_table_header() {
  static const std::string h =
      " #posts     posted       withheld     t_first[usec]    t_last[usec]\n";
  return h;
}

std::string format_early_post_row(const EarlyPostRow& r) {
  return row_under(
      early_post_table_header(), kEarlyLabels,
      {std::to_string(r.posts), r.in_rtr ? "in RTR" : "after RTS", std::to_string(r.withheld),
       fmt("%.2f", r.t_first_us), fmt("%.2f", r.t_last_us)});
}

}  // namespace rnicperf
