// SPDX-License-Identifier: BSD-3-Clause
// The descriptors libibverbs reads events from: a context's async fd (16-byte
// ib_uverbs_async_event_desc records) and completion channels (8-byte
// ib_uverbs_comp_event_desc records).
//
// Each is a real eventfd, so poll, epoll and select work on it unchanged. Its count always
// equals the number of queued records: the shim queues and removes records under one lock,
// and read() (interposed) takes one record and one count together. The eventfd itself is
// non-blocking; a blocking read, when the application has not set O_NONBLOCK, waits in
// poll(). As in the kernel, destroying an object removes its unread events, and the number
// of events the application did read is what the destroy command reports.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>

namespace rnicdv::uverbs {

// Counts the events of one object that the application has read.
using ReadCounter = std::shared_ptr<std::atomic<uint32_t>>;

class EventFile {
 public:
  // record_size: 8 (completion channel) or 16 (async fd). Returns null (errno set) on failure.
  static std::shared_ptr<EventFile> create(size_t record_size);
  ~EventFile();
  EventFile(const EventFile&) = delete;
  EventFile& operator=(const EventFile&) = delete;

  int fd() const { return fd_; }
  // Queues one record owned by `owner` (an object key); `counter` is bumped when it is read.
  void push(const void* record, uint64_t owner, const ReadCounter& counter);
  // Removes the unread records of `owner`.
  void purge(uint64_t owner);
  ssize_t read(void* buf, size_t n);
  // The application's view of O_NONBLOCK (F_GETFL/F_SETFL are interposed for these fds).
  void set_app_nonblocking(bool on) { app_nonblock_.store(on, std::memory_order_relaxed); }
  bool app_nonblocking() const { return app_nonblock_.load(std::memory_order_relaxed); }
  // The application closed the descriptor: nothing is queued any more.
  void closed();

 private:
  struct Record {
    uint8_t bytes[16];
    uint64_t owner;
    ReadCounter counter;
  };
  EventFile(int fd, size_t record_size) : fd_(fd), record_size_(record_size) {}

  int fd_;
  size_t record_size_;
  std::atomic<bool> app_nonblock_{false};
  std::mutex mu_;
  bool closed_ = false;
  std::deque<Record> records_;
};

// The event file behind a descriptor the shim handed out, if any.
std::shared_ptr<EventFile> event_file(int fd);
void register_event_file(const std::shared_ptr<EventFile>& file);

}  // namespace rnicdv::uverbs
