// SPDX-License-Identifier: BSD-3-Clause
// A helper thread that runs while a measurement loop does, so the loop itself never makes a
// syscall: once a second it sends the waiting peer a sign of life over the control channel
// and, in long runs (-D), prints a progress line to stderr (stdout stays parseable).
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include "clock.h"
#include "cpu_util.h"
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

// --run_infinitely (perftest's print thread): every `interval_s` seconds it takes the count of
// completed operations and the clock, and hands `emit` the operations and ticks of that
// interval (and, with `cpu`, the CPU utilization over it from /proc/stat); the measurement
// loop itself only counts. After `stop_after` intervals (0: never) it sets `stop`, which is
// what ends the loop, as a signal handler setting the same flag does. `peer_ended`, when
// given, is asked at each wake (every 100 ms) whether the peer has stopped; once it says so
// the printer prints no more rows and ends.
class IntervalPrinter {
 public:
  using Emit = std::function<void(uint64_t operations, uint64_t ticks, double cpu_percent)>;
  using Watch = std::function<bool()>;
  IntervalPrinter(const Clock& clock, const std::atomic<uint64_t>* counter, uint32_t interval_s,
                  uint32_t stop_after, bool cpu, std::atomic<bool>* stop, Emit emit,
                  Watch peer_ended = {});
  ~IntervalPrinter();  // stops and joins
  IntervalPrinter(const IntervalPrinter&) = delete;
  IntervalPrinter& operator=(const IntervalPrinter&) = delete;

 private:
  void run();
  const Clock& clock_;
  const std::atomic<uint64_t>* counter_;
  uint32_t interval_s_, stop_after_;
  bool cpu_;
  std::atomic<bool>* stop_flag_;
  Emit emit_;
  Watch peer_ended_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace rnicperf
