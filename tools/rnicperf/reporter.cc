// SPDX-License-Identifier: BSD-3-Clause
#include "reporter.h"

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

}  // namespace rnicperf
