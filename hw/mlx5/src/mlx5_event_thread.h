// SPDX-License-Identifier: BSD-3-Clause
// The backend's event thread: the one place where hw/mlx5 reads events on a thread of its own.
//
// hw::CmConnection::set_established_notifier and hw::Qp::set_comm_est_notifier ask the backend
// to call the driver where an establishment is learnt, but librdmacm and libibverbs deliver
// events only to whoever reads their descriptors. So, while such a notifier is set, this thread
// reads them: one per device, started by the first descriptor it is given and stopped and
// joined when the last is taken back. A program that sets no notifier (the driver sets them
// only with ConnectionOptions::release_at_establishment) never gets the thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "rnicdv/status.h"

namespace rnicdv::hw::mlx5 {

// An eventfd readable exactly while a queue holds something: set() when the queue becomes
// non-empty, clear() when it empties again. The owner serialises the calls (its queue's lock).
class ReadyFd {
 public:
  static Result<ReadyFd> create(const std::string& what);
  ReadyFd(ReadyFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  ReadyFd& operator=(ReadyFd&&) = delete;
  ~ReadyFd();

  int fd() const { return fd_; }
  void set();
  void clear();

 private:
  explicit ReadyFd(int fd) : fd_(fd) {}
  int fd_;
};

class EventThread {
 public:
  // Reads what is pending on a watched descriptor. Returns false when the descriptor failed
  // for good (a device gone): it is then no longer watched, rather than polled in a loop.
  using Handler = std::function<bool()>;

  explicit EventThread(std::string device_name) : name_(std::move(device_name)) {}
  ~EventThread();  // stops the thread if it still runs
  EventThread(const EventThread&) = delete;
  EventThread& operator=(const EventThread&) = delete;

  // Calls `on_readable` on the thread whenever `fd` is readable (level-triggered), and starts
  // the thread if this is the first descriptor. Returns the watch's id for unwatch().
  Result<uint64_t> watch(int fd, Handler on_readable, const std::string& what);
  // Stops watching (the descriptor must still be open: it leaves the epoll set). A handler
  // call already under way may still finish; the handler's own state must make that harmless.
  // The last unwatch stops the thread and joins it; called on the thread itself (from a
  // handler), the thread ends when the handler returns.
  void unwatch(uint64_t id);

  bool running() const;  // the thread has been started and not told to stop
  // The thread's name as /proc/self/task/*/comm shows it (at most 15 characters).
  static constexpr const char* kThreadName = "rnicdv-mlx5-ev";

 private:
  // One start-to-stop span of the thread. The thread holds it too, so that a thread told to
  // stop from a handler can finish without touching the EventThread, which may be gone.
  struct Run {
    int epoll_fd = -1;
    int wake_fd = -1;  // written to stop the thread; epoll data 0
    std::atomic<bool> stop{false};
    ~Run();
  };
  void loop(const std::shared_ptr<Run>& run);
  // Under mu_, with no watch left: tells the thread to stop; the caller joins `*thread`.
  void stop_locked(std::thread* thread);
  static void finish(std::thread thread);

  const std::string name_;
  mutable std::mutex mu_;  // never held while a handler runs
  std::shared_ptr<Run> run_;
  std::thread thread_;
  struct Watch {
    int fd;
    std::shared_ptr<Handler> handler;
  };
  std::map<uint64_t, Watch> watches_;
  uint64_t next_id_ = 1;
};

}  // namespace rnicdv::hw::mlx5
