// SPDX-License-Identifier: BSD-3-Clause
#include "reporter.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace rnicperf {

Reporter::Reporter(OobSession* alive, std::string label, uint32_t duration_s,
                   const std::atomic<uint64_t>* counter)
    : alive_(alive), label_(std::move(label)), duration_s_(duration_s), counter_(counter) {
  if (alive_ || !label_.empty()) thread_ = std::thread([this] { run(); });
}

Reporter::~Reporter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Reporter::run() {
  std::unique_lock<std::mutex> lock(mu_);
  uint32_t seconds = 0;
  while (!cv_.wait_for(lock, std::chrono::seconds(1), [this] { return stop_; })) {
    ++seconds;
    const uint64_t done = counter_ ? counter_->load(std::memory_order_relaxed) : seconds;
    if (alive_ && !alive_->send_alive(done)) alive_ = nullptr;  // the peer is gone: stop trying
    if (!label_.empty()) {
      unsigned long long n = counter_ ? counter_->load(std::memory_order_relaxed) : 0;
      if (duration_s_)
        std::fprintf(stderr, "rnicperf: %s: %u/%u s, %llu operations\n", label_.c_str(), seconds,
                     duration_s_, n);
      else
        std::fprintf(stderr, "rnicperf: %s: %u s, %llu operations\n", label_.c_str(), seconds, n);
    }
  }
}

IntervalPrinter::IntervalPrinter(const Clock& clock, const std::atomic<uint64_t>* counter,
                                 uint32_t interval_s, uint32_t stop_after, bool cpu,
                                 std::atomic<bool>* stop, Emit emit, Watch peer_ended)
    : clock_(clock),
      counter_(counter),
      interval_s_(interval_s),
      stop_after_(stop_after),
      cpu_(cpu),
      stop_flag_(stop),
      emit_(std::move(emit)),
      peer_ended_(std::move(peer_ended)) {
  thread_ = std::thread([this] { run(); });
}

IntervalPrinter::~IntervalPrinter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void IntervalPrinter::run() {
  uint64_t t0 = clock_.now();
  uint64_t n0 = counter_->load(std::memory_order_relaxed);
  CpuTimes cpu0 = cpu_ ? read_cpu_times() : CpuTimes{};
  uint32_t intervals = 0;
  std::unique_lock<std::mutex> lock(mu_);
  // Woken each 100 ms to see the stop flag (a signal handler can only set it), each interval
  // to report.
  auto next = std::chrono::steady_clock::now() + std::chrono::seconds(interval_s_);
  while (!stop_) {
    if (stop_flag_->load(std::memory_order_relaxed)) return;
    const auto wake = std::min(next, std::chrono::steady_clock::now() + std::chrono::milliseconds(100));
    if (cv_.wait_until(lock, wake, [this] { return stop_; })) return;
    if (peer_ended_ && peer_ended_()) return;
    if (std::chrono::steady_clock::now() < next || stop_flag_->load(std::memory_order_relaxed))
      continue;
    next += std::chrono::seconds(interval_s_);
    const uint64_t t1 = clock_.now();
    const uint64_t n1 = counter_->load(std::memory_order_relaxed);
    const CpuTimes cpu1 = cpu_ ? read_cpu_times() : CpuTimes{};
    emit_(n1 - n0, t1 - t0, cpu_ ? cpu_util_percent(cpu0, cpu1) : -1.0);
    t0 = t1;
    n0 = n1;
    cpu0 = cpu1;
    if (stop_after_ > 0 && ++intervals >= stop_after_) {
      stop_flag_->store(true, std::memory_order_relaxed);
      return;
    }
  }
}

}  // namespace rnicperf
