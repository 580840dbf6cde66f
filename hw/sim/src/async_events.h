// SPDX-License-Identifier: BSD-3-Clause
// The affiliated and unaffiliated asynchronous events of one device (IBA 11.6.3), queued for
// the consumer. The eventfd is readable exactly while the queue is non-empty, so consumers
// can poll/epoll it like the async fd of a verbs context.
#pragma once

#include <deque>
#include <mutex>

#include "rnicdv/hw/device.h"
#include "rnicdv/status.h"

namespace rnicdv::sim {

class AsyncEventQueue {
 public:
  AsyncEventQueue() = default;
  ~AsyncEventQueue();
  AsyncEventQueue(const AsyncEventQueue&) = delete;
  AsyncEventQueue& operator=(const AsyncEventQueue&) = delete;

  Status open();  // creates the eventfd
  int fd() const { return fd_; }
  void push(const hw::AsyncEvent& ev);
  bool pop(hw::AsyncEvent* out);
  size_t size() const;

 private:
  mutable std::mutex mu_;
  std::deque<hw::AsyncEvent> events_;
  int fd_ = -1;
};

}  // namespace rnicdv::sim
