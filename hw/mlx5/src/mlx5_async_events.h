// SPDX-License-Identifier: BSD-3-Clause
// The device's asynchronous events (ibv_get_async_event), and COMM_EST where it is learnt.
//
// Normally the application reads them: Mlx5Device::next_async_event reads, maps and
// acknowledges one event at a time. While a QP has a COMM_EST notifier
// (hw::Qp::set_comm_est_notifier), the device's event thread reads them instead: it maps and
// acknowledges each (acknowledging at once keeps ibv_destroy_qp and ibv_destroy_cq from
// waiting on an event the application has not read yet), queues it for next_async_event,
// which returns every event once and in the order the device raised them, and then calls the
// notifier of the QP a COMM_EST names, with no lock held. The fd applications watch stays the
// same throughout: an epoll descriptor holding the queue's eventfd and, while the application
// reads the context's fd itself, that fd.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "mlx5_event_thread.h"
#include "mlx5_verbs.h"
#include "rnicdv/hw/device.h"
#include "rnicdv/status.h"

namespace rnicdv::hw::mlx5 {

class AsyncEvents final : public std::enable_shared_from_this<AsyncEvents> {
 public:
  // `ctx`'s async fd must be non-blocking.
  static Result<std::shared_ptr<AsyncEvents>> create(ContextRef ctx,
                                                     std::shared_ptr<EventThread> thread,
                                                     const std::string& device_name);
  ~AsyncEvents();
  AsyncEvents(const AsyncEvents&) = delete;
  AsyncEvents& operator=(const AsyncEvents&) = delete;

  // Readable (poll, epoll) while an event is pending; the same descriptor for the device's life.
  int fd() const { return app_fd_; }
  // One event: the oldest the thread queued, else one read from the context's fd (while the
  // thread does not read it). False when none is pending.
  bool next(AsyncEvent* out);
  // Events the interface has no type for, acknowledged and dropped.
  uint64_t skipped() const;

  // `fn(ctx)` for each COMM_EST of QP `qpn`; null `fn` removes it. The first notifier hands
  // the context's fd to the event thread, the removal of the last hands it back.
  Status set_comm_est_notifier(uint32_t qpn, void (*fn)(void* ctx), void* ctx);

 private:
  AsyncEvents(ContextRef ctx, std::shared_ptr<EventThread> thread, std::string name, int app_fd,
              ReadyFd ready)
      : ctx_(std::move(ctx)),
        thread_(std::move(thread)),
        name_(std::move(name)),
        app_fd_(app_fd),
        ready_(std::move(ready)) {}

  // On the event thread: reads everything pending.
  bool on_readable();
  // Reads, maps and acknowledges one event of the context's fd; `*out` stays empty for an
  // event the interface has no type for. False when none is pending.
  bool read_locked(std::optional<AsyncEvent>* out);
  void push_locked(const AsyncEvent& ev);
  Status hand_to_thread();
  void take_back();

  const ContextRef ctx_;
  const std::shared_ptr<EventThread> thread_;
  const std::string name_;
  const int app_fd_;  // epoll: ready_ always, the context's fd while !owned_

  std::mutex control_mu_;  // orders notifier changes and the hand-overs; never taken by the thread
  uint64_t watch_ = 0;     // under control_mu_: the thread's watch of the context's fd

  mutable std::mutex mu_;  // the rest; the thread reads the context's fd under it
  bool owned_ = false;     // the thread reads the context's fd
  std::deque<AsyncEvent> queue_;
  ReadyFd ready_;
  std::map<uint32_t, std::pair<void (*)(void*), void*>> notifiers_;
  uint64_t skipped_ = 0;
};

}  // namespace rnicdv::hw::mlx5
