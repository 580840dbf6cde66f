// SPDX-License-Identifier: BSD-3-Clause
#include "report_json.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "json.h"

namespace rnicperf {

using rnicdv::Errc;
using rnicdv::Status;

void JsonReport::set_header(const HeaderInfo& header, const char* role, BwUnit unit) {
  header_ = header;
  role_ = role;
  unit_ = unit;
}

void JsonReport::set_addresses(std::vector<AddressInfo> local, std::vector<AddressInfo> remote) {
  local_ = std::move(local);
  remote_ = std::move(remote);
}

void JsonReport::add(const LatencyResult& r, const Histogram* histogram, const Cdf* cdf) {
  lat_.push_back({r, histogram ? std::optional<Histogram>(*histogram) : std::nullopt,
                  cdf ? std::optional<Cdf>(*cdf) : std::nullopt});
}
void JsonReport::add(const LatencyDurationResult& r) {
  lat_dur_.push_back(r);
}
void JsonReport::add(const BandwidthResult& r) {
  bw_.push_back(r);
}

void JsonReport::set_early_post(const EarlyPostRow& in_rtr, const EarlyPostRow& after_rts,
                                const char* op, uint64_t size) {
  have_early_ = true;
  early_[0] = in_rtr;
  early_[1] = after_rts;
  early_op_ = op;
  early_size_ = size;
}

namespace {

void write_address(JsonWriter& w, const AddressInfo& a) {
  char hex[24];
  w.begin_object();
  w.field("lid", static_cast<uint64_t>(a.lid));
  w.field("qpn", static_cast<uint64_t>(a.qpn));
  w.field("psn", static_cast<uint64_t>(a.psn));
  w.field("rkey", static_cast<uint64_t>(a.rkey));
  std::snprintf(hex, sizeof hex, "0x%016llx", static_cast<unsigned long long>(a.vaddr));
  w.field("vaddr", hex);
  std::string gid;
  for (int i = 0; i < 16; ++i) {
    std::snprintf(hex, sizeof hex, i ? ":%02x" : "%02x", a.gid[i]);
    gid += hex;
  }
  w.field("gid", gid);
  if (a.show_srqn) w.field("srqn", static_cast<uint64_t>(a.srqn));
  w.end_object();
}

std::string underscored(std::string s) {
  for (char& c : s)
    if (c == ' ') c = '_';
  return s;
}

}  // namespace

std::string JsonReport::text() const {
  const HeaderInfo& h = header_;
  JsonWriter w;
  w.begin_object();
  w.field("tool", "rnicperf");
  w.key("test_info").begin_object();
  w.field("test", underscored(test_title(h.test, h.bidirectional, h.post_list > 1)));
  w.field("rnicperf_test", test_name(h.test));
  w.field("role", role_);
  w.field("Dual_port", h.dual_port ? "ON" : "OFF");
  w.field("Device", h.device);
  w.field("Number_of_qps", h.num_qps);
  w.field("Transport_type", h.transport_type);
  w.field("Connection_type", h.connection);
  w.field("Using_SRQ", h.using_srq ? "ON" : "OFF");
  if (h.initiator) w.field("TX_depth", h.tx_depth);
  if (h.post_list > 1) w.field("Post_List", h.post_list);
  if (h.recv_post_list > 1) w.field("Recv_Post_List", h.recv_post_list);
  if (h.test.verb == Verb::send && h.rx_depth > 0 && (h.server || h.bidirectional))
    w.field("RX_depth", h.rx_depth);
  if (h.test.kind == Kind::bandwidth) w.field("CQ_Moderation", h.cq_mod);
  w.field("Mtu", h.mtu_bytes);
  w.field("Link_type", h.link_type);
  if (h.gid_index >= 0) w.field("GID_index", h.gid_index);
  if (h.dual_port && h.gid_index2 >= 0) w.field("GID_index2", h.gid_index2);
  if (h.test.verb == Verb::read || h.test.verb == Verb::atomic)
    w.field("Outstand_reads", h.out_reads);
  else
    w.field("Max_inline_data", h.inline_size);
  w.field("rdma_cm_QPs", h.rdma_cm ? "ON" : "OFF");
  w.field("Data_ex_method", h.com_rdma_cm ? "rdma_cm" : "Ethernet");
  if (!h.early_post.empty()) w.field("Early_post", h.early_post);
  if (!h.post_calls.empty()) w.field("Post_calls", h.post_calls);
  if (!h.sim_wire.empty()) w.field("Sim_wire", h.sim_wire);
  if (!h.device_profile.empty()) w.field("Device_profile", h.device_profile);
  if (!h.buffers.empty()) w.field("Buffers", h.buffers);
  if (!h.clock.empty()) w.field("Clock", h.clock);
  if (completion_events_) w.field("Completion_events", *completion_events_);
  if (receive_post_calls_) w.field("Receive_post_calls", *receive_post_calls_);
  if (post_send_calls_) w.field("Post_send_calls", *post_send_calls_);
  if (!date_.empty()) w.field("Date", date_);
  if (h.test.kind == Kind::bandwidth)
    w.field("BW_unit", unit_ == BwUnit::mib_per_sec ? "MiB/sec" : "Gb/sec");
  else
    w.field("Latency_unit", latency_unit_);
  w.end_object();

  w.key("local_address").begin_array();
  for (const auto& a : local_) write_address(w, a);
  w.end_array();
  w.key("remote_address").begin_array();
  for (const auto& a : remote_) write_address(w, a);
  w.end_array();

  w.key("results").begin_array();
  for (const auto& l : lat_) {
    const LatencyResult& r = l.r;
    w.begin_object();
    w.field("MsgSize", r.size);
    w.field("n_iterations", r.iterations);
    w.field("t_min", r.t_min);
    w.field("t_max", r.t_max);
    w.field("t_typical", r.t_typical);
    w.field("t_avg", r.t_avg);
    w.field("t_stdev", r.t_stdev);
    w.field("percentile_99", r.p99);
    w.field("percentile_99_9", r.p999);
    w.field("percentile_90", r.p90);
    if (l.h) {
      w.key("histogram").begin_object();
      w.field("unit", "usec");
      w.field("buckets_per_octave", kBucketsPerOctave);
      w.field("samples", l.h->total);
      w.key("buckets").begin_array();
      for (const auto& b : l.h->buckets) {
        w.begin_object();
        w.field("from", b.lo_us);
        w.field("to", b.hi_us);
        w.field("count", b.count);
        w.end_object();
      }
      w.end_array();
      w.end_object();
    }
    if (l.cdf) {
      w.key("cdf").begin_object();
      w.field("unit", "usec");
      w.field("samples", l.cdf->total);
      w.key("points").begin_array();
      for (const auto& p : l.cdf->points) {
        w.begin_array();
        w.value(p.us);
        w.value(p.fraction);
        w.end_array();
      }
      w.end_array();
      w.end_object();
    }
    w.end_object();
  }
  for (const auto& r : lat_dur_) {
    w.begin_object();
    w.field("MsgSize", r.size);
    w.field("n_iterations", r.iterations);
    w.field("t_avg", r.t_avg);
    w.field("tps_average", r.tps);
    if (r.cpu_util >= 0) w.field("CPU_util", r.cpu_util);  // perftest's key
    w.end_object();
  }
  for (const auto& r : bw_) {
    w.begin_object();
    w.field("MsgSize", r.size);
    w.field("n_iterations", r.iterations);
    w.field("BW_peak", r.bw_peak);
    w.field("BW_average", r.bw_avg);
    w.field("MsgRate", r.msg_rate);
    if (h.report_per_port) {
      // rnicperf's addition: perftest prints each port's figures in its table only.
      w.field("BW_average_port1", r.port[0].bw_avg);
      w.field("MsgRate_port1", r.port[0].msg_rate);
      w.field("BW_average_port2", r.port[1].bw_avg);
      w.field("MsgRate_port2", r.port[1].msg_rate);
    }
    if (r.cpu_util >= 0) w.field("CPU_util", r.cpu_util);  // perftest's key
    w.end_object();
  }
  w.end_array();

  if (have_early_) {
    w.key("early_post").begin_object();
    w.field("operation", early_op_);
    w.field("MsgSize", early_size_);
    for (const auto& row : early_) {
      w.key(row.in_rtr ? "posted_in_rtr" : "posted_after_rts").begin_object();
      w.field("posts", row.posts);
      w.field("withheld_at_rts", row.withheld);
      w.field("t_first_usec", row.t_first_us);
      w.field("t_last_usec", row.t_last_us);
      w.end_object();
    }
    w.end_object();
  }
  if (!error_.empty()) w.field("error", error_);
  w.end_object();
  return w.str();
}

Status JsonReport::write(const std::string& path) const {
  return write_report_file(path, text());
}

Status write_report_file(const std::string& path, const std::string& doc) {
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return Status::error(Errc::io_error, "cannot write JSON report %s: %s", tmp.c_str(),
                         std::strerror(errno));
  size_t done = 0;
  while (done < doc.size()) {
    ssize_t n = ::write(fd, doc.data() + done, doc.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return Status::error(Errc::io_error, "cannot write JSON report %s: %s", tmp.c_str(),
                           std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return Status::error(Errc::io_error, "cannot write JSON report %s: %s", path.c_str(),
                         std::strerror(err));
  }
  return Status::ok();
}

}  // namespace rnicperf
