// SPDX-License-Identifier: BSD-3-Clause
// The state behind a CompletionChannel: the device's channel (hw::CompletionChannel) for the
// events the device raises, and the driver's own for software completions (flush errors the
// driver makes in ERR, which the device never sees), behind one epoll fd the application
// waits on.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "rnicdv/cq.h"
#include "rnicdv/hw/device.h"

namespace rnicdv::detail {

struct CqCore;

struct ChannelCore {
  ChannelCore() = default;
  ChannelCore(const ChannelCore&) = delete;
  ChannelCore& operator=(const ChannelCore&) = delete;
  ~ChannelCore();

  // Opens the epoll fd and the software eventfd around `hw_channel`.
  Status open(std::unique_ptr<hw::CompletionChannel> hw_channel, const std::string& device);

  void attach(CqCore* cq);
  // Before the device CQ is destroyed: no event is mapped to `cq` any more.
  void detach(CqCore* cq) noexcept;
  // After it is destroyed: the events of `cqn` still queued are dropped.
  void forget(uint32_t cqn) noexcept;
  // A software completion for an armed CQ.
  void push_software(uint32_t cqn) noexcept;
  bool next(CqEvent* out);

  std::unique_ptr<hw::CompletionChannel> hw;
  hw::ProgressHook progress;
  int epoll_fd = -1;     // what CompletionChannel::fd() returns
  int software_fd = -1;  // eventfd, readable exactly while `software` is not empty

 private:
  bool take_software(uint32_t* cqn) noexcept;

  std::mutex mu_;
  std::unordered_map<uint32_t, CqCore*> cqs_;  // by CQN: the CQs created on this channel
  std::deque<uint32_t> software_;
};

}  // namespace rnicdv::detail
