// SPDX-License-Identifier: BSD-3-Clause
#include "events.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>

#include <unordered_map>

#include "exit_teardown.h"
#include "shim.h"

namespace rnicdv::uverbs {

namespace {

struct FileTable {
  std::mutex mu;
  std::unordered_map<int, std::shared_ptr<EventFile>> by_fd;
};
FileTable& file_table() {
  return per_process_table<FileTable>();  // outlives exit
}

void take_count(int fd) {
  uint64_t v;
  [[maybe_unused]] ssize_t r = libc::read(fd, &v, sizeof v);
}

}  // namespace

std::shared_ptr<EventFile> EventFile::create(size_t record_size) {
  const int fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK | EFD_SEMAPHORE);
  if (fd < 0) return nullptr;
  return std::shared_ptr<EventFile>(new EventFile(fd, record_size));
}

EventFile::~EventFile() = default;  // the descriptor belongs to the application

void EventFile::push(const void* record, uint64_t owner, const ReadCounter& counter) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return;
  Record r{};
  std::memcpy(r.bytes, record, record_size_);
  r.owner = owner;
  r.counter = counter;
  records_.push_back(std::move(r));
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t w = libc::write(fd_, &one, sizeof one);
}

void EventFile::purge(uint64_t owner) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return;
  for (auto it = records_.begin(); it != records_.end();) {
    if (it->owner != owner) {
      ++it;
      continue;
    }
    it = records_.erase(it);
    take_count(fd_);
  }
}

void EventFile::closed() {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
  records_.clear();
}

ssize_t EventFile::read(void* buf, size_t n) {
  if (n < record_size_) {
    errno = EINVAL;  // the kernel refuses reads shorter than one event
    return -1;
  }
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!records_.empty()) {
        Record r = std::move(records_.front());
        records_.pop_front();
        take_count(fd_);
        std::memcpy(buf, r.bytes, record_size_);
        if (r.counter) r.counter->fetch_add(1, std::memory_order_relaxed);
        return static_cast<ssize_t>(record_size_);
      }
      if (closed_) {
        errno = EBADF;
        return -1;
      }
    }
    if (app_nonblocking()) {
      errno = EAGAIN;
      return -1;
    }
    pollfd p{fd_, POLLIN, 0};
    const ShimIdle waiting;  // no lock held: exit() from a handler here tears down as usual
    if (::poll(&p, 1, -1) < 0 && errno == EINTR) return -1;
  }
}

std::shared_ptr<EventFile> event_file(int fd) {
  std::lock_guard<std::mutex> lock(file_table().mu);
  auto it = file_table().by_fd.find(fd);
  return it == file_table().by_fd.end() ? nullptr : it->second;
}

void register_event_file(const std::shared_ptr<EventFile>& file) {
  {
    std::lock_guard<std::mutex> lock(file_table().mu);
    file_table().by_fd[file->fd()] = file;
  }
  set_fd_kind(file->fd(), FdKind::event);
}

ssize_t event_read(int fd, void* buf, size_t n) {
  std::shared_ptr<EventFile> f = event_file(fd);
  if (!f) return libc::read(fd, buf, n);
  return f->read(buf, n);
}

void event_close(int fd) {
  std::shared_ptr<EventFile> f;
  {
    std::lock_guard<std::mutex> lock(file_table().mu);
    auto it = file_table().by_fd.find(fd);
    if (it == file_table().by_fd.end()) return;
    f = std::move(it->second);
    file_table().by_fd.erase(it);
  }
  set_fd_kind(fd, FdKind::none);
  f->closed();
}

void event_discard(int fd) {
  event_close(fd);
  libc::close(fd);
}

}  // namespace rnicdv::uverbs
