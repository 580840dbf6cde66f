// SPDX-License-Identifier: BSD-3-Clause
#include "user_memory.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "shim.h"

namespace rnicdv::uverbs {

namespace {

bool vm_copy(bool to_user, void* local, uint64_t remote, size_t n) {
  if (n == 0) return true;
  if (remote + n < remote) {
    errno = EFAULT;
    return false;
  }
  size_t done = 0;
  while (done < n) {
    iovec l{static_cast<uint8_t*>(local) + done, n - done};
    iovec r{reinterpret_cast<void*>(remote + done), n - done};
    const ssize_t k = to_user ? ::process_vm_writev(::getpid(), &l, 1, &r, 1, 0)
                              : ::process_vm_readv(::getpid(), &l, 1, &r, 1, 0);
    if (k <= 0) {
      errno = EFAULT;
      return false;
    }
    done += static_cast<size_t>(k);
  }
  return true;
}

}  // namespace

bool copy_from_user(void* dst, uint64_t src, size_t n) noexcept {
  return vm_copy(false, dst, src, n);
}

bool copy_to_user(uint64_t dst, const void* src, size_t n) noexcept {
  return vm_copy(true, const_cast<void*>(src), dst, n);
}

bool user_range_ok(uint64_t addr, size_t len, bool write) noexcept {
  if (len == 0) return true;
  const uint64_t end = addr + len;
  if (end < addr) return false;
  // /proc/self/maps lists the mappings in address order; walk them over [addr, end).
  const int fd = libc::open("/proc/self/maps", O_RDONLY | O_CLOEXEC, 0);
  if (fd < 0) return false;
  char buf[8192];
  size_t have = 0;
  uint64_t covered = addr;  // everything below is known to be mapped as needed
  bool ok = false, eof = false;
  while (!ok) {
    const char* nl = static_cast<const char*>(std::memchr(buf, '\n', have));
    if (!nl) {
      if (eof || have == sizeof buf) break;
      const ssize_t k = libc::read(fd, buf + have, sizeof buf - have);
      if (k <= 0) eof = true;
      else have += static_cast<size_t>(k);
      continue;
    }
    unsigned long lo = 0, hi = 0;
    char perms[8] = {};
    if (std::sscanf(buf, "%lx-%lx %7s", &lo, &hi, perms) == 3 && hi > covered) {
      if (lo > covered) break;  // a hole
      if (perms[0] != 'r' || (write && perms[1] != 'w')) break;
      covered = hi;
      if (covered >= end) ok = true;
    }
    const size_t used = static_cast<size_t>(nl - buf) + 1;
    std::memmove(buf, nl + 1, have - used);
    have -= used;
  }
  libc::close(fd);
  return ok;
}

}  // namespace rnicdv::uverbs
