// SPDX-License-Identifier: BSD-3-Clause
// Classic pcap capture file (LINKTYPE_ETHERNET, nanosecond timestamps) that several threads
// append to. Every record goes to the kernel in one writev() as soon as it is written, so a
// process that crashes still leaves a readable file holding every frame written before the
// crash (at worst the last record is cut short, which readers report as truncated).
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "rnicdv/status.h"

namespace rnicdv::sim {

class PcapWriter {
 public:
  // pcap file header constants (https://www.tcpdump.org/manpages/pcap-savefile.5.html).
  static constexpr uint32_t kMagicNanoseconds = 0xA1B23C4Du;
  static constexpr uint16_t kVersionMajor = 2, kVersionMinor = 4;
  static constexpr uint32_t kLinktypeEthernet = 1;
  static constexpr uint32_t kSnapLen = 65535;
  static constexpr int kMaxParts = 8;  // iovecs per record, after the record header

  // Creates (or truncates) the file. Every "%p" in `path_template` is replaced by the process
  // id. The writer holds an exclusive advisory lock (flock) on its file for its lifetime: a
  // second process given the same path finds it taken, leaves it alone, says so on stderr and
  // writes per_process_path(path) instead, so two captures never interleave in one file.
  static Result<std::unique_ptr<PcapWriter>> open(const std::string& path_template);
  static std::string expand_path(const std::string& path_template);
  // `path` with ".<pid>" before its extension ("/tmp/x.pcap" -> "/tmp/x.1234.pcap").
  static std::string per_process_path(const std::string& path);

  ~PcapWriter();
  PcapWriter(const PcapWriter&) = delete;
  PcapWriter& operator=(const PcapWriter&) = delete;

  // Appends one frame made of `count` (at most kMaxParts) consecutive pieces. Thread-safe.
  // A failed write is counted and the capture stops; the wire carries on without it.
  void write(uint64_t timestamp_ns, const iovec* parts, int count) noexcept;

  const std::string& path() const noexcept { return path_; }
  uint64_t records_written() const noexcept {
    return records_written_.load(std::memory_order_relaxed);
  }
  uint64_t write_errors() const noexcept { return write_errors_.load(std::memory_order_relaxed); }

 private:
  PcapWriter(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}

  int fd_;
  std::string path_;
  std::mutex mutex_;  // keeps records whole and in order
  bool failed_ = false;
  std::atomic<uint64_t> records_written_{0};
  std::atomic<uint64_t> write_errors_{0};
};

}  // namespace rnicdv::sim
