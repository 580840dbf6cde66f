// SPDX-License-Identifier: BSD-3-Clause
// --out_json: the whole run as one JSON document. Unlike perftest (which truncated the file
// for every row, so -a kept only the last size), "results" holds every size.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "report.h"
#include "rnicdv/status.h"
#include "stats.h"

namespace rnicperf {

class JsonReport {
 public:
  void set_header(const HeaderInfo& header, const char* role, BwUnit unit);
  void set_addresses(std::vector<AddressInfo> local, std::vector<AddressInfo> remote);
  // `histogram` and `cdf` (--histogram, --plot): the distribution of the samples.
  void add(const LatencyResult& r, const Histogram* histogram = nullptr,
           const Cdf* cdf = nullptr);
  void add(const LatencyDurationResult& r);
  void add(const BandwidthResult& r);
  void set_early_post(const EarlyPostRow& in_rtr, const EarlyPostRow& after_rts, const char* op,
                      uint64_t size);
  void set_error(const std::string& message) { error_ = message; }
  // -e: how many completion events this side slept on and took.
  void set_completion_events(uint64_t n) { completion_events_ = n; }
  // When the run started, "2026-12-06 17:30:05 UTC" (test_info's Date; left out when unset).
  void set_date(std::string date) { date_ = std::move(date); }
  // A receiving side: its receive post calls over the run (test_info's Receive_post_calls),
  // which --recv_post_list divides by its list size.
  void set_receive_post_calls(uint64_t n) { receive_post_calls_ = n; }
  // --use_old_post_send or -c XRC: the QueuePair::post_send calls this side's loops made
  // (test_info's Post_send_calls), one per post list.
  void set_post_send_calls(uint64_t n) { post_send_calls_ = n; }
  // -C: the latency figures are in cycles (test_info's Latency_unit; "usec" by default).
  void set_latency_unit(std::string unit) { latency_unit_ = std::move(unit); }

  std::string text() const;
  // Writes atomically (a temporary file renamed over `path`).
  rnicdv::Status write(const std::string& path) const;

 private:
  HeaderInfo header_;
  std::string role_;
  BwUnit unit_ = BwUnit::mib_per_sec;
  std::vector<AddressInfo> local_, remote_;
  struct Lat {
    LatencyResult r;
    std::optional<Histogram> h;
    std::optional<Cdf> cdf;
  };
  std::vector<Lat> lat_;
  std::vector<LatencyDurationResult> lat_dur_;
  std::vector<BandwidthResult> bw_;
  bool have_early_ = false;
  EarlyPostRow early_[2];
  std::string early_op_;
  uint64_t early_size_ = 0;
  std::optional<uint64_t> completion_events_;
  std::optional<uint64_t> receive_post_calls_;
  std::optional<uint64_t> post_send_calls_;
  std::string error_;
  std::string date_;
  std::string latency_unit_ = "usec";
};

// Writes `doc` to `path` through a temporary file and a rename (never a half-written report).
rnicdv::Status write_report_file(const std::string& path, const std::string& doc);

}  // namespace rnicperf
