// SPDX-License-Identifier: BSD-3-Clause
#include "cm/rdmacm_watch.h"

#include <cerrno>
#include <utility>

#include "cm/rdmacm_cm.h"

namespace rnicdv::hw::mlx5::cm {

Result<std::shared_ptr<WatchedChannel>> WatchedChannel::start(std::shared_ptr<EventThread> thread,
                                                              rdma_event_channel* ch,
                                                              CmAddress remote,
                                                              void (*fn)(void* ctx), void* ctx,
                                                              const std::string& name) {
  RNICDV_ASSIGN_OR_RETURN(ReadyFd ready, ReadyFd::create(name + ": establishment notifier"));
  std::shared_ptr<WatchedChannel> w(new WatchedChannel(thread, ch, remote, std::move(ready)));
  w->fn_ = fn;
  w->ctx_ = ctx;
  // The handler keeps this object alive until close() takes the watch back.
  const auto on_readable = [w] { return w->on_readable(); };
  RNICDV_ASSIGN_OR_RETURN(w->watch_, thread->watch(ch->fd, on_readable, name + ": rdma_cm events"));
  return w;
}

bool WatchedChannel::next(CmEvent* out) {
  std::lock_guard lock(mu_);
  if (queue_.empty()) return false;
  *out = std::move(queue_.front());
  queue_.pop_front();
  if (queue_.empty()) ready_.clear();
  return true;
}

void WatchedChannel::set_notifier(void (*fn)(void* ctx), void* ctx) {
  std::lock_guard lock(mu_);
  fn_ = fn;
  ctx_ = ctx;
}

void WatchedChannel::close() {
  // Out of the epoll set while the channel is still open; then closed_ under mu_, which a
  // handler call still under way holds for as long as it uses the channel. Its handler keeps
  // this object alive until it returns, and the queue with it.
  thread_->unwatch(watch_);
  watch_ = 0;
  std::lock_guard lock(mu_);
  closed_ = true;
}

void WatchedChannel::push_locked(CmEvent ev) {
  if (queue_.empty()) ready_.set();
  queue_.push_back(std::move(ev));
}

bool WatchedChannel::on_readable() {
  for (;;) {
    CmEvent ev;
    void (*fn)(void*) = nullptr;
    void* ctx = nullptr;
    {
      std::lock_guard lock(mu_);
      if (closed_) return true;
      rdma_cm_event* raw = nullptr;
      // Anything but EAGAIN is a channel that is gone (a device removed): stop watching it.
      if (rdma_get_cm_event(ch_, &raw) != 0) return errno == EAGAIN;
      // Acknowledged at once, as next_event() does: rdma_destroy_id waits for every event of
      // its ID to be acknowledged.
      const bool deliver = translate_event(*raw, &ev);
      rdma_ack_cm_event(raw);
      if (!deliver) continue;
      ev.remote = remote_;
      if (ev.type == CmEventType::established) {
        fn = std::exchange(fn_, nullptr);  // once
        ctx = ctx_;
      }
      if (!fn) {
        push_locked(std::move(ev));
        continue;
      }
    }
    // The driver moves the QP to RTS here, before ESTABLISHED can be read. Nothing after it
    // on this channel is read meanwhile, so the order holds.
    fn(ctx);
    std::lock_guard lock(mu_);
    push_locked(std::move(ev));
  }
}

}  // namespace rnicdv::hw::mlx5::cm
