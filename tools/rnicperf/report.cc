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

// Writes `cells` so that each starts at the column where its label starts in `header`: for
// rnicperf's own tables (duration-mode latency, early post), which perftest does not have.
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

// Two pairs on one line, separated by two tabs (perftest's " %-16s: %s\t\t%-15s: %s").
std::string kv2(const char* key1, const std::string& v1, const char* key2, const std::string& v2) {
  return kv(key1, v1) + fmt("\t\t%-15s: %s\n", key2, v2.c_str());
}

const char* on_off(bool b) {
  return b ? "ON" : "OFF";
}

const std::vector<std::string_view> kLatDurLabels = {"#bytes", "#iterations", "t_avg[usec]",
                                                     "tps average"};
const std::vector<std::string_view> kEarlyLabels = {"#posts", "posted", "withheld", "t_first[usec]",
                                                    "t_last[usec]"};

}  // namespace

const std::string& result_line() {
  static const std::string line = std::string(87, '-') + "\n";
  return line;
}

const std::string& result_line_per_port() {
  static const std::string line = std::string(163, '-') + "\n";
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
  // The completion channel perftest names after the device and the completion vector.
  if (h.events) out += " Test with events. Using " + h.device + "_comp0\n";
  out += kv2("Dual-port", on_off(h.dual_port), "Device", h.device);
  out += kv2("Number of qps", std::to_string(h.num_qps), "Transport type", h.transport_type);
  out += kv2("Connection type", h.connection, "Using SRQ", on_off(h.using_srq));
  // rnicdv registers no memory with relaxed ordering and does not post through ibv_wr_*.
  out += kv("PCIe relax order", "OFF") + "\n";
  out += kv("ibv_wr* API", "OFF") + "\n";
  if (h.initiator) out += kv("TX depth", std::to_string(h.tx_depth)) + "\n";
  if (h.post_list > 1) out += kv("Post List", std::to_string(h.post_list)) + "\n";
  if (h.recv_post_list > 1) out += kv("Recv Post List", std::to_string(h.recv_post_list)) + "\n";
  if (h.test.verb == Verb::send && h.rx_depth > 0 && (h.server || h.bidirectional))
    out += kv("RX depth", std::to_string(h.rx_depth)) + "\n";
  if (bw) out += kv("CQ Moderation", std::to_string(h.cq_mod)) + "\n";
  out += kv("Mtu", std::to_string(h.mtu_bytes) + "[B]") + "\n";
  out += kv("Link type", h.link_type) + "\n";
  if (h.gid_index >= 0) out += kv("GID index", std::to_string(h.gid_index)) + "\n";
  if (h.dual_port && h.gid_index2 >= 0)
    out += kv("GID index2", std::to_string(h.gid_index2)) + "\n";
  if (h.test.verb == Verb::read || h.test.verb == Verb::atomic)
    out += kv("Outstand reads", std::to_string(h.out_reads)) + "\n";
  else
    out += kv("Max inline data", std::to_string(h.inline_size) + "[B]") + "\n";
  out += std::string(" rdma_cm QPs\t : ") + on_off(h.rdma_cm) + "\n";  // perftest's tab
  // The control channel: TCP ("Ethernet"), or with -z a QP the CM connects (rdma_cm).
  out += kv("Data ex. method", h.com_rdma_cm ? "rdma_cm" : "Ethernet") + "\n";
  if (!h.early_post.empty()) out += kv("Early post", h.early_post) + "\n";
  if (!h.post_calls.empty()) out += kv("Post calls", h.post_calls) + "\n";
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
  if (a.show_srqn) out += fmt(" SRQn %#08x", a.srqn);  // perftest's XRC_FMT
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
  // perftest's REPORT_FMT_LAT, tabs included.
  return fmt(" %-7llu %-10llu   %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f"
             "\t\t%-7.2f \t\t%-7.2f\n",
             static_cast<unsigned long long>(r.size), static_cast<unsigned long long>(r.iterations),
             r.t_min, r.t_max, r.t_typical, r.t_avg, r.t_stdev, r.p99, r.p999);
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

namespace {
std::string without_new_line(const std::string& line) {
  return !line.empty() && line.back() == '\n' ? line.substr(0, line.size() - 1) : line;
}
}  // namespace

std::string with_cpu_util_header(const std::string& header) {
  return without_new_line(header) + "    CPU_Util[%]\n";
}

std::string with_cpu_util(const std::string& row, double percent) {
  return without_new_line(row) + fmt("\t    %-3.2f\n", percent);
}

std::string format_report_both(const BandwidthResult& local, const BandwidthResult& remote,
                               BwUnit unit, double cpu_percent, bool per_port) {
  const bool cpu = cpu_percent >= 0;
  const std::string header =
      cpu ? with_cpu_util_header(bandwidth_table_header(unit)) : bandwidth_table_header(unit);
  auto row = [&](const BandwidthResult& r) {
    const std::string line =
        per_port ? format_bandwidth_row_per_port(r) : format_bandwidth_row(r, unit);
    return cpu ? with_cpu_util(line, cpu_percent) : line;
  };
  std::string out = result_line();
  out += "\n Local results: \n";
  out += result_line();
  out += header;
  out += row(local);
  out += result_line();
  out += "\n Remote results: \n";
  out += result_line();
  out += header;
  out += row(remote);
  return out;
}

const std::string& bandwidth_table_header(BwUnit unit) {
  // MB/sec is Debian's perftest's label (4.5); the unit is 2^20 bytes, as there.
  static const std::string mb =
      " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n";
  static const std::string gb =
      " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n";
  return unit == BwUnit::mib_per_sec ? mb : gb;
}

std::string format_bandwidth_row(const BandwidthResult& r, BwUnit unit) {
  // perftest's REPORT_FMT, tabs included; REPORT_FMT_EXT (six decimals) when a Gb/sec average
  // is below 0.1.
  const bool ext = unit == BwUnit::gbit_per_sec && r.bw_avg < 0.1;
  return fmt(ext ? " %-7llu    %-10llu       %-7.6f            %-7.6f\t\t   %-7.6f\n"
                 : " %-7llu    %-10llu       %-7.2f            %-7.2f\t\t   %-7.6f\n",
             static_cast<unsigned long long>(r.size), static_cast<unsigned long long>(r.iterations),
             r.bw_peak, r.bw_avg, r.msg_rate);
}

const std::string& bandwidth_table_header_per_port(BwUnit unit) {
  static const std::string mb =
      " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]   "
      "BW Port1[MB/sec]   MsgRate Port1[Mpps]   BW Port2[MB/sec]   MsgRate Port2[Mpps]\n";
  static const std::string gb =
      " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]   "
      "BW Port1[Gb/sec]   MsgRate Port1[Mpps]   BW Port2[Gb/sec]   MsgRate Port2[Mpps]\n";
  return unit == BwUnit::mib_per_sec ? mb : gb;
}

std::string format_bandwidth_row_per_port(const BandwidthResult& r) {
  // perftest's REPORT_FMT_PER_PORT, tabs included (two spaces fewer before the peak than
  // REPORT_FMT).
  return fmt(
      " %-7llu    %-10llu     %-7.2f            %-7.2f\t\t   %-7.6f        %-7.2f      "
      "      %-7.6f              %-7.2f            %-7.6f\n",
      static_cast<unsigned long long>(r.size), static_cast<unsigned long long>(r.iterations),
      r.bw_peak, r.bw_avg, r.msg_rate, r.port[0].bw_avg, r.port[0].msg_rate, r.port[1].bw_avg,
      r.port[1].msg_rate);
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

std::string sample_dump_header(const char* unit) {
  return fmt("#, %s\n", unit);
}

std::string format_sample_dump(std::span<const uint64_t> ticks, double ticks_per_unit,
                               uint64_t first_number) {
  std::string out;
  out.reserve(ticks.size() * 16);
  for (size_t i = 0; i < ticks.size(); ++i)
    out += fmt("%llu, %g\n", static_cast<unsigned long long>(first_number + i),
               static_cast<double>(ticks[i]) / ticks_per_unit);
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
