// SPDX-License-Identifier: BSD-3-Clause
// A passive connection's event channel once the device's event thread reads it
// (RdmaCmConnection::set_established_notifier; mlx5_event_thread.h).
//
// librdmacm hands an event only to whoever reads the channel, so the establishment would be
// learnt only when the application polls the connection. Here the thread reads every event as
// it arrives, acknowledges it, calls the establishment notifier for ESTABLISHED (the RTU, or
// COMM_EST forwarded with rdma_notify) with no lock held, and only then queues the event for
// next(): the driver has moved the QP to RTS before the application can see ESTABLISHED.
// Events keep their order, and each is queued once; fd() is readable while one is queued.
#pragma once

#include <rdma/rdma_cma.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>

#include "mlx5_event_thread.h"
#include "rnicdv/hw/cm.h"

namespace rnicdv::hw::mlx5::cm {

class WatchedChannel final {
 public:
  // The thread starts reading `ch` (non-blocking), the channel of one passive connection,
  // whose peer is `remote`. The channel stays the connection's: it must stay open, and its ID
  // alive, until close() returns.
  static Result<std::shared_ptr<WatchedChannel>> start(std::shared_ptr<EventThread> thread,
                                                       rdma_event_channel* ch, CmAddress remote,
                                                       void (*fn)(void* ctx), void* ctx,
                                                       const std::string& name);
  WatchedChannel(const WatchedChannel&) = delete;
  WatchedChannel& operator=(const WatchedChannel&) = delete;

  int fd() const { return ready_.fd(); }
  bool next(CmEvent* out);
  // Null `fn`: no call (one already under way may still happen).
  void set_notifier(void (*fn)(void* ctx), void* ctx);
  // The thread lets go of the channel: once this returns it no longer reads it, and every
  // event it took is acknowledged (rdma_destroy_id may go ahead). Queued events stay readable.
  void close();

 private:
  WatchedChannel(std::shared_ptr<EventThread> thread, rdma_event_channel* ch, CmAddress remote,
                 ReadyFd ready)
      : thread_(std::move(thread)), ch_(ch), remote_(remote), ready_(std::move(ready)) {}

  bool on_readable();  // on the event thread
  void push_locked(CmEvent ev);

  const std::shared_ptr<EventThread> thread_;
  rdma_event_channel* const ch_;
  const CmAddress remote_;
  uint64_t watch_ = 0;  // set by start(), cleared by close(): the connection's calls only

  std::mutex mu_;  // the thread reads and acknowledges under it; never held across the notifier
  bool closed_ = false;
  void (*fn_)(void*) = nullptr;
  void* ctx_ = nullptr;
  std::deque<CmEvent> queue_;
  ReadyFd ready_;
};

}  // namespace rnicdv::hw::mlx5::cm
