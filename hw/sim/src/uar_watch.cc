// SPDX-License-Identifier: BSD-3-Clause
#include "uar_watch.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace rnicdv::sim {

namespace {

constexpr uint64_t kPage = 4096;

// A userfaultfd that can write-protect shared memory (the UAR pages are a memfd's), or -1
// with the reason in `why`. UFFD_USER_MODE_ONLY (Linux 5.11) needs no privilege: only the
// application's own stores are caught, which is all a doorbell is.
int open_uffd(std::string* why) {
#ifdef __NR_userfaultfd
  int fd = static_cast<int>(
      ::syscall(__NR_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY));
  if (fd < 0 && errno == EINVAL)  // a kernel before 5.11: no user-mode-only flag
    fd = static_cast<int>(::syscall(__NR_userfaultfd, O_CLOEXEC | O_NONBLOCK));
  if (fd < 0) {
    *why = std::string("userfaultfd refused (") + std::strerror(errno) + ")";
    return -1;
  }
  uffdio_api api{};
  api.api = UFFD_API;
  api.features = UFFD_FEATURE_WP_HUGETLBFS_SHMEM;
  if (::ioctl(fd, UFFDIO_API, &api) != 0) {
    *why = std::string("userfaultfd cannot write-protect shared memory (") +
           std::strerror(errno) + "; Linux 5.19 or later)";
    ::close(fd);
    return -1;
  }
  return fd;
#else
  *why = "no userfaultfd on this architecture";
  return -1;
#endif
}

}  // namespace

UarWatch::~UarWatch() {
  // Closing wakes every store still waiting and drops every registration.
  if (fd_ >= 0) ::close(fd_);
}

const std::string& UarWatch::mechanism() {
  static const std::string m = [] {
    std::string why;
    const int fd = open_uffd(&why);
    if (fd < 0) return why;
    ::close(fd);
    return std::string("userfaultfd");
  }();
  return m;
}

std::string UarWatch::open() {
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ >= 0) return {};
  std::string why;
  fd_ = open_uffd(&why);
  return why;
}

bool UarWatch::add(uint8_t* page) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Page& p : pages_)
    if (p.addr == page) return true;
  if (fd_ < 0) return false;
  // The first store must find a page table entry to protect: touch the page (a read maps a
  // shared page writable).
  (void)*static_cast<volatile uint8_t*>(page);
  uffdio_register reg{};
  reg.range.start = reinterpret_cast<uintptr_t>(page);
  reg.range.len = kPage;
  reg.mode = UFFDIO_REGISTER_MODE_WP;
  if (::ioctl(fd_, UFFDIO_REGISTER, &reg) != 0) return false;
  pages_.push_back(Page{page, false});
  return true;
}

void UarWatch::remove(uint8_t* page) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find_if(pages_.begin(), pages_.end(), [page](const Page& p) { return p.addr == page; });
  if (it == pages_.end()) return;
  uffdio_range range{reinterpret_cast<uintptr_t>(page), kPage};
  // Unregistering wakes a store that waits on the page; a page the application unmapped
  // is no longer registered, and its waiters (none can wait on an unmapped page) need none.
  (void)::ioctl(fd_, UFFDIO_UNREGISTER, &range);
  pages_.erase(it);
}

bool UarWatch::protect(Page& p, bool on) {
  uffdio_writeprotect wp{};
  wp.range.start = reinterpret_cast<uintptr_t>(p.addr);
  wp.range.len = kPage;
  wp.mode = on ? UFFDIO_WRITEPROTECT_MODE_WP : 0;  // off also wakes the waiting store
  if (::ioctl(fd_, UFFDIO_WRITEPROTECT, &wp) == 0) {
    p.armed = on;
    return true;
  }
  if (!on) {
    // The range is gone (unmapped by the application): wake whatever waits on it anyway.
    (void)::ioctl(fd_, UFFDIO_WAKE, &wp.range);
    p.armed = false;
  }
  return false;
}

bool UarWatch::arm(const std::vector<uint8_t*>& pages) {
  std::lock_guard<std::mutex> lock(mu_);
  bool all = true;
  for (uint8_t* addr : pages) {
    auto it = std::find_if(pages_.begin(), pages_.end(), [addr](const Page& p) { return p.addr == addr; });
    if (it == pages_.end()) {
      all = false;  // not watched (userfaultfd refused it): polled
      continue;
    }
    if (!it->armed && !protect(*it, true)) all = false;
  }
  return all;
}

void UarWatch::disarm() {
  std::lock_guard<std::mutex> lock(mu_);
  for (Page& p : pages_)
    if (p.armed) protect(p, false);
}

void UarWatch::take_events(std::vector<uint8_t*>* rung) {
  if (fd_ < 0) return;
  uffd_msg msgs[16];
  for (;;) {
    const ssize_t n = ::read(fd_, msgs, sizeof msgs);
    if (n <= 0) return;  // EAGAIN: none left
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < static_cast<size_t>(n) / sizeof msgs[0]; ++i) {
      if (msgs[i].event != UFFD_EVENT_PAGEFAULT) continue;
      const uint64_t addr = msgs[i].arg.pagefault.address & ~(kPage - 1);
      auto it = std::find_if(pages_.begin(), pages_.end(), [addr](const Page& p) {
        return reinterpret_cast<uintptr_t>(p.addr) == addr;
      });
      if (it == pages_.end()) {
        uffdio_range range{addr, kPage};
        (void)::ioctl(fd_, UFFDIO_WAKE, &range);
        continue;
      }
      if (std::find(rung->begin(), rung->end(), it->addr) == rung->end()) rung->push_back(it->addr);
    }
  }
}

}  // namespace rnicdv::sim
