// SPDX-License-Identifier: BSD-3-Clause
#include "rnicdv/doorbell/device_wake.h"

#include <unistd.h>

namespace rnicdv::doorbell {

void DeviceWake::kick_if_asleep() const noexcept {
  // The register store before, the load of the word after (device_wake.h).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (asleep_->load(std::memory_order_relaxed) == 0) return;
  const uint64_t one = 1;
  // A full eventfd counter (2^64 - 2 kicks not yet read) still wakes the device.
  [[maybe_unused]] const ssize_t n = ::write(fd_, &one, sizeof one);
}

}  // namespace rnicdv::doorbell
