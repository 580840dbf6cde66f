// SPDX-License-Identifier: BSD-3-Clause
// The simulated HCA's completion channel (hw::CompletionChannel): an eventfd that is readable
// while the queue of event CQNs is not empty. CQs created on it push their CQN from their
// event handler (handles.h set_cq_event_handler), on the engine's thread, after the device
// lock is released: a short mutex and an 8-byte write, never blocking.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>

#include "rnicdv/hw/device.h"
#include "rnicdv/status.h"

namespace rnicdv::sim {

class SimCompletionChannel final : public hw::CompletionChannel {
 public:
  // The queue and the fd, shared with the handlers of the channel's CQs, so that a handler
  // running while the channel is destroyed still writes into live memory.
  struct Queue {
    ~Queue();
    void push(uint32_t cqn) noexcept;
    bool pop(uint32_t* cqn) noexcept;
    void forget(uint32_t cqn) noexcept;

    int fd = -1;
    std::mutex mu;
    std::deque<uint32_t> cqns;  // fd is readable exactly while this is not empty
  };

  static Result<std::unique_ptr<SimCompletionChannel>> create(const char* device_name);

  int fd() const override { return queue_->fd; }
  bool next_event(uint32_t* cqn) override { return queue_->pop(cqn); }
  void forget(uint32_t cqn) override { queue_->forget(cqn); }
  const std::shared_ptr<Queue>& queue() const { return queue_; }

 private:
  explicit SimCompletionChannel(std::shared_ptr<Queue> q) : queue_(std::move(q)) {}
  std::shared_ptr<Queue> queue_;
};

}  // namespace rnicdv::sim
