// SPDX-License-Identifier: BSD-3-Clause
#include "exit_teardown.h"

#include <time.h>

namespace rnicdv::uverbs {

namespace {
// Plain thread-local storage (no constructor), readable from a signal handler's exit().
thread_local uint8_t t_work = 0;
}  // namespace

ShimCall::ShimCall(ShimWork work) noexcept : saved_(t_work) {
  t_work = static_cast<uint8_t>(saved_ | work);
}

ShimCall::~ShimCall() { t_work = saved_; }

ShimIdle::ShimIdle() noexcept : saved_(t_work) { t_work = 0; }

ShimIdle::~ShimIdle() { t_work = saved_; }

uint8_t shim_work_of_this_thread() noexcept { return t_work; }

bool ExitDeadline::lock(std::mutex& m) const {
  for (;;) {
    if (m.try_lock()) return true;
    if (std::chrono::steady_clock::now() >= until_) return false;
    const timespec pause{0, 200'000};  // 0.2 ms
    ::nanosleep(&pause, nullptr);
  }
}

}  // namespace rnicdv::uverbs
