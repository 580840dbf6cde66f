// SPDX-License-Identifier: BSD-3-Clause
// A queue of CM events and the descriptor that wakes its reader.
//
// A queue either owns an eventfd, readable while it holds events (listeners, active
// connections, accepted connections), or owns none and makes a parent's readable instead: a
// connection request the application took but has not accepted relays its wake-ups to its
// listener's queue, once someone asked for its descriptor (fd()) and so watches it; a
// request nobody watches (the driver's, read only through accept) keeps its events to
// itself, and never leaves the listener's descriptor readable. A waiting request so costs no
// descriptor, and a flood of REQs cannot use up the process's (one eventfd per request would, at
// about a thousand requests). attach_fd() gives a relayed queue its own descriptor when the
// connection is accepted.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>

#include "rnicdv/hw/cm.h"
#include "rnicdv/status.h"

namespace rnicdv::sim::cm {

class CmEventQueue {
 public:
  // With an eventfd of its own.
  static Result<std::shared_ptr<CmEventQueue>> create();
  // Without one: while it holds events, `parent`'s descriptor is readable (parent has one).
  static std::shared_ptr<CmEventQueue> create_relayed(std::shared_ptr<CmEventQueue> parent);
  ~CmEventQueue();
  CmEventQueue(const CmEventQueue&) = delete;
  CmEventQueue& operator=(const CmEventQueue&) = delete;

  // Gives a relayed queue its own eventfd (readable at once if events wait) and stops the
  // relay. Nothing to do for a queue that has one.
  Status attach_fd();

  // `request`: the communication ID of the connection request an entry announces (the
  // listener's queue), 0 otherwise.
  void push(hw::CmEvent event, uint32_t request = 0);
  bool pop(hw::CmEvent* out, uint32_t* request = nullptr);
  // Drops the entries that announce `request` (a request that went away before it was taken).
  void remove_request(uint32_t request);
  size_t size() const;
  // The queue's own descriptor, or its parent's while it relays (from then on its events
  // make the parent's readable).
  int fd() const;

 private:
  explicit CmEventQueue(int fd) : fd_(fd) {}
  struct Entry {
    hw::CmEvent event;
    uint32_t request = 0;
  };
  // Readable exactly while events or relayed events wait (mu_ held; fd_ >= 0).
  void update_signal_locked();
  // A relayed child's events: `delta` more (or fewer) wait.
  void add_relayed(int64_t delta);

  mutable std::mutex mu_;
  std::deque<Entry> events_;
  int fd_ = -1;
  bool signalled_ = false;
  uint64_t relayed_ = 0;                  // events waiting in children that relay to us
  std::shared_ptr<CmEventQueue> parent_;  // set while relaying
  mutable bool watched_ = false;          // fd() was asked: relayed events count in parent_
};

}  // namespace rnicdv::sim::cm
