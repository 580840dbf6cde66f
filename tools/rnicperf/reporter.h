// SPDX-License-Identifier: BSD-3-Clause
// A helper thread that runs while a measurement loop does, so the loop itself never makes a
// syscall: once a second it sends the waiting peer a sign of life over the control channel
// and, in long runs (-D), prints a progress line to stderr (stdout stays parseable).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include "oob_protocol.h"

namespace rnicperf {

class Reporter {
 public:
  // `alive`: send signs of life on `oob`. `label`: print "rnicperf: <label>: 3/10 s, <n>
  // operations" every second when non-empty; `duration_s` is the run's length.
  Reporter(OobSession* alive, std::string label, uint32_t duration_s,
           const std::atomic<uint64_t>* counter);
  ~Reporter();  // stops and joins
  Reporter(const Reporter&) = delete;
  Reporter& operator=(const Reporter&) = delete;

 private:
  void run();
  OobSession* alive_;
  std::string label_;
  uint32_t duration_s_;
  const std::atomic<uint64_t>* counter_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace rnicperf
