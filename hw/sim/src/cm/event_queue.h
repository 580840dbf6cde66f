// SPDX-License-Identifier: BSD-3-Clause
// A queue of CM events with an eventfd that is readable while the queue is not empty.
#pragma once

#include <deque>
#include <memory>
#include <mutex>

#include "rnicdv/hw/cm.h"
#include "rnicdv/status.h"

namespace rnicdv::sim::cm {

class CmEventQueue {
 public:
  static Result<std::shared_ptr<CmEventQueue>> create();
  ~CmEventQueue();
  CmEventQueue(const CmEventQueue&) = delete;
  CmEventQueue& operator=(const CmEventQueue&) = delete;

  void push(hw::CmEvent event);
  bool pop(hw::CmEvent* out);
  size_t size() const;
  int fd() const { return fd_; }

 private:
  explicit CmEventQueue(int fd) : fd_(fd) {}
  mutable std::mutex mu_;
  std::deque<hw::CmEvent> events_;
  int fd_;
};

}  // namespace rnicdv::sim::cm
