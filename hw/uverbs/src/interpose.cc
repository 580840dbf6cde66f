// SPDX-License-Identifier: BSD-3-Clause
// The libc functions the shim interposes when it is loaded with LD_PRELOAD. Each one looks
// at the path or descriptor first and hands everything that is not the shim's straight to
// the next definition (glibc), so a process that never touches RDMA is unaffected.
//
// libibverbs 44 and libmlx5 44 import open, openat, stat, fstat, read, write, ioctl, mmap,
// munmap, close and socket (nm -D); the 64-bit and __xstat spellings are covered as well for
// programs built against other glibc versions, and the access() family, which programs such
// as UCX use to check the device node before opening it. The calls that change the address
// space (mmap over a mapping, munmap, mremap, mprotect, pkey_mprotect, brk, sbrk) are passed
// on unchanged and then move the generation of the shim's copy of /proc/self/maps
// (user_memory.cc): one atomic increment, safe in a signal handler.
//
// Every next definition is looked up at load time (resolve_next_symbols), before main() and
// before any handler of the program can run: dlsym is not async-signal-safe, and a program may
// make its first mprotect from a SIGSEGV handler (a garbage collector, libsigsegv). Should one
// of the memory calls come before even that (another library's constructor), it is made as a
// system call, which is what glibc's own wrapper does; brk and sbrk go to glibc's __sbrk, which
// keeps the break that malloc relies on.
#undef _FORTIFY_SOURCE
// Each spelling (open and open64, mmap and mmap64, ...) is defined here under its own name;
// with 64-bit file offsets glibc's headers would rename one onto the other.
#undef _FILE_OFFSET_BITS
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "events.h"
#include "exit_teardown.h"
#include "next_symbols.h"
#include "shim.h"
#include "user_memory.h"

namespace rnicdv::uverbs {

namespace {

using namespace next;

constexpr int kMaxTrackedFd = 1 << 16;
std::atomic<uint8_t> g_fd_kinds[kMaxTrackedFd];

// The memory calls before resolve_next_symbols: what glibc's wrappers do, without a lookup.
void* raw_mmap(void* addr, size_t len, int prot, int flags, int fd, off_t off) {
  return reinterpret_cast<void*>(::syscall(SYS_mmap, addr, len, prot, flags, fd, off));
}
int raw_munmap(void* addr, size_t len) { return static_cast<int>(::syscall(SYS_munmap, addr, len)); }

}  // namespace
}  // namespace rnicdv::uverbs

// glibc's own sbrk under its internal name (exported since 2.2.5): the break malloc keeps
// stays right when brk or sbrk is called before the lookups are made.
extern "C" void* __sbrk(intptr_t increment);

namespace rnicdv::uverbs {
namespace {

// Event descriptors are non-blocking underneath; O_NONBLOCK as the application sets and
// reads it is kept aside and decides whether read() waits.
int event_fcntl(fcntl_fn real, int fd, int cmd, long arg) {
  std::shared_ptr<EventFile> f = event_file(fd);
  if (f && cmd == F_GETFL) {
    const int flags = real(fd, F_GETFL);
    if (flags < 0) return flags;
    return f->app_nonblocking() ? flags : flags & ~O_NONBLOCK;
  }
  if (f && cmd == F_SETFL) {
    f->set_app_nonblocking((arg & O_NONBLOCK) != 0);
    return real(fd, F_SETFL, static_cast<int>(arg | O_NONBLOCK));
  }
  return real(fd, cmd, arg);
}

bool wants_mode(int flags) { return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE; }

// rdma_cm channels keep O_NONBLOCK aside the same way.
int ucma_fcntl(fcntl_fn real, int fd, int cmd, long arg) {
  bool on = false;
  if (cmd == F_GETFL && ucma_nonblocking(fd, &on, false)) {
    const int flags = real(fd, F_GETFL);
    if (flags < 0) return flags;
    return on ? flags : flags & ~O_NONBLOCK;
  }
  if (cmd == F_SETFL) {
    on = (arg & O_NONBLOCK) != 0;
    if (ucma_nonblocking(fd, &on, true)) return real(fd, F_SETFL, static_cast<int>(arg | O_NONBLOCK));
  }
  return real(fd, cmd, arg);
}

// A descriptor of the shim's is going away (close, or dup2/dup3 onto it, where the kernel
// closes what the target held): the shim lets go of what it stood for.
void forget_special_fd(int fd) {
  switch (fd_kind(fd)) {
    case FdKind::command: {
      const ShimCall in(kInVerbs);
      command_close(fd);
      break;
    }
    case FdKind::event: {
      const ShimCall in(kInVerbs);
      event_close(fd);
      break;
    }
    case FdKind::ucma: {
      const ShimCall in(kInUcma);
      ucma_close(fd);
      break;
    }
    case FdKind::counter:
      counter_file_close(fd);
      break;
    case FdKind::none:
      break;
  }
}

// After a duplicate `newfd` of `oldfd` was made: a command descriptor's duplicate is the same
// device file. (Duplicates of event and rdma_cm descriptors are not tracked.)
int duplicated(int oldfd, int newfd) {
  if (newfd >= 0 && newfd != oldfd && fd_kind(oldfd) == FdKind::command) {
    const ShimCall in(kInVerbs);
    command_dup(oldfd, newfd);
  }
  return newfd;
}

int kind_fcntl(fcntl_fn real, int fd, int cmd, long arg) {
  if (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC) return duplicated(fd, real(fd, cmd, arg));
  switch (fd_kind(fd)) {
    case FdKind::event: {
      const ShimCall in(kInVerbs);
      return event_fcntl(real, fd, cmd, arg);
    }
    case FdKind::ucma: {
      const ShimCall in(kInUcma);
      return ucma_fcntl(real, fd, cmd, arg);
    }
    default:
      return real(fd, cmd, arg);
  }
}

// The cdevs and the per-process sysfs files; -2 means "not ours".
int open_special(const char* path, int flags) {
  const ShimCall in(kInOpen);
  const int index = uverbs_index_of(path);
  if (index >= 0) return open_uverbs(static_cast<uint32_t>(index), flags);
  if (index == -3) return -2;  // null path: libc reports it
  if (is_ucma_path(path)) return open_ucma(flags);
  return open_dynamic_sysfs_file(path, flags);
}

int stat_special(const char* path, struct stat* st) {
  if (is_ucma_path(path)) return fake_stat_ucma(st);  // null-safe
  const int index = uverbs_index_of(path);
  if (index < 0) return -2;
  return fake_stat_uverbs(static_cast<uint32_t>(index), st);
}

// access() and its family on the cdevs: they exist as crw-rw-rw- character devices, so read
// and write are granted and execute is not (the kernel's answer for a 0666 device node);
// -2 means "not ours". A relative path is never one of them.
int access_special(int dirfd, const char* path, int mode) {
  if (!path || path[0] != '/') {
    (void)dirfd;
    return -2;
  }
  if (uverbs_index_of(path) < 0 && !is_ucma_path(path)) return -2;
  if (mode & X_OK) {
    errno = EACCES;
    return -1;
  }
  return 0;
}

// fstat of a descriptor the shim made; -2 means "not ours".
int fstat_special(int fd, struct stat* st) {
  const ShimCall in(kInVerbs);
  switch (fd_kind(fd)) {
    case FdKind::command:
      return fstat_command_fd(fd, st);
    case FdKind::ucma:
      return fake_stat_ucma(st);
    default:
      return -2;
  }
}

}  // namespace

FdKind fd_kind(int fd) noexcept {
  if (fd < 0 || fd >= kMaxTrackedFd) return FdKind::none;
  return static_cast<FdKind>(g_fd_kinds[fd].load(std::memory_order_acquire));
}

void set_fd_kind(int fd, FdKind kind) noexcept {
  if (fd < 0 || fd >= kMaxTrackedFd) return;
  g_fd_kinds[fd].store(static_cast<uint8_t>(kind), std::memory_order_release);
}

namespace libc {
int open(const char* path, int flags, mode_t mode) {
  return next_symbol(g_open, "open")(path, flags, mode);
}
ssize_t read(int fd, void* buf, size_t n) { return next_symbol(g_read, "read")(fd, buf, n); }
ssize_t write(int fd, const void* buf, size_t n) {
  return next_symbol(g_write, "write")(fd, buf, n);
}
int close(int fd) { return next_symbol(g_close, "close")(fd); }
void* mmap(void* addr, size_t len, int prot, int flags, int fd, off_t off) {
  if (const mmap_fn f = resolved(g_mmap)) return f(addr, len, prot, flags, fd, off);
  return raw_mmap(addr, len, prot, flags, fd, off);
}
int munmap(void* addr, size_t len) {
  const munmap_fn f = resolved(g_munmap);
  const int r = f ? f(addr, len) : raw_munmap(addr, len);
  address_space_changed();
  return r;
}
}  // namespace libc

}  // namespace rnicdv::uverbs

using namespace rnicdv::uverbs;

extern "C" {

// The mode argument exists only when the flags create a file.
#define RNICDV_OPEN_MODE(flags, mode)    \
  mode_t mode = 0;                       \
  if (wants_mode(flags)) {               \
    va_list ap;                          \
    va_start(ap, flags);                 \
    mode = va_arg(ap, mode_t);           \
    va_end(ap);                          \
  }

int open(const char* path, int flags, ...) {
  RNICDV_OPEN_MODE(flags, mode)
  const int fd = open_special(path, flags);
  return fd != -2 ? fd : next_symbol(g_open, "open")(path, flags, mode);
}

int open64(const char* path, int flags, ...) {
  RNICDV_OPEN_MODE(flags, mode)
  const int fd = open_special(path, flags);
  return fd != -2 ? fd : next_symbol(g_open64, "open64")(path, flags, mode);
}

int __open_2(const char* path, int flags) { return open(path, flags); }
int __open64_2(const char* path, int flags) { return open64(path, flags); }

// Absolute paths only can name the device or the sysfs files; open_special checks.
int openat(int dirfd, const char* path, int flags, ...) {
  RNICDV_OPEN_MODE(flags, mode)
  const int fd = open_special(path, flags);
  return fd != -2 ? fd : next_symbol(g_openat, "openat")(dirfd, path, flags, mode);
}

int openat64(int dirfd, const char* path, int flags, ...) {
  RNICDV_OPEN_MODE(flags, mode)
  const int fd = open_special(path, flags);
  return fd != -2 ? fd : next_symbol(g_openat64, "openat64")(dirfd, path, flags, mode);
}

#undef RNICDV_OPEN_MODE

int stat(const char* path, struct stat* st) {
  const int r = stat_special(path, st);
  if (r != -2) return r;
  return next_symbol(g_stat, "stat")(path, st);
}

int stat64(const char* path, struct stat64* st) {
  const int r = stat_special(path, reinterpret_cast<struct stat*>(st));
  if (r != -2) return r;
  return next_symbol(g_stat64, "stat64")(path, reinterpret_cast<struct stat*>(st));
}

// UCX and others check the device node before opening it (access(path, R_OK | W_OK)).
int access(const char* path, int mode) {
  if (const int r = access_special(AT_FDCWD, path, mode); r != -2) return r;
  return next_symbol(g_access, "access")(path, mode);
}
int euidaccess(const char* path, int mode) {
  if (const int r = access_special(AT_FDCWD, path, mode); r != -2) return r;
  return next_symbol(g_euidaccess, "euidaccess")(path, mode);
}
int eaccess(const char* path, int mode) {
  if (const int r = access_special(AT_FDCWD, path, mode); r != -2) return r;
  return next_symbol(g_eaccess, "eaccess")(path, mode);
}
int faccessat(int dirfd, const char* path, int mode, int flags) {
  if (const int r = access_special(dirfd, path, mode); r != -2) return r;
  return next_symbol(g_faccessat, "faccessat")(dirfd, path, mode, flags);
}

int fstat(int fd, struct stat* st) {
  if (const int r = fstat_special(fd, st); r != -2) return r;
  return next_symbol(g_fstat, "fstat")(fd, st);
}

int fstat64(int fd, struct stat64* st) {
  if (const int r = fstat_special(fd, reinterpret_cast<struct stat*>(st)); r != -2) return r;
  return next_symbol(g_fstat64, "fstat64")(fd, reinterpret_cast<struct stat*>(st));
}

// The pre-2.33 glibc spellings, still exported for old binaries.
int __xstat(int ver, const char* path, struct stat* st) {
  const int r = stat_special(path, st);
  if (r != -2) return r;
  return next_symbol(g_xstat, "__xstat")(ver, path, st);
}
int __xstat64(int ver, const char* path, struct stat64* st) {
  const int r = stat_special(path, reinterpret_cast<struct stat*>(st));
  if (r != -2) return r;
  return next_symbol(g_xstat64, "__xstat64")(ver, path, reinterpret_cast<struct stat*>(st));
}
int __fxstat(int ver, int fd, struct stat* st) {
  if (const int r = fstat_special(fd, st); r != -2) return r;
  return next_symbol(g_fxstat, "__fxstat")(ver, fd, st);
}
int __fxstat64(int ver, int fd, struct stat64* st) {
  if (const int r = fstat_special(fd, reinterpret_cast<struct stat*>(st)); r != -2) return r;
  return next_symbol(g_fxstat64, "__fxstat64")(ver, fd, reinterpret_cast<struct stat*>(st));
}

ssize_t read(int fd, void* buf, size_t n) {
  switch (fd_kind(fd)) {
    case FdKind::event: {
      const ShimCall in(kInVerbs);
      return event_read(fd, buf, n);
    }
    case FdKind::command:
    case FdKind::ucma:
      // Neither cdev has a read method: the kernel answers EINVAL.
      errno = EINVAL;
      return -1;
    case FdKind::counter: {
      const ShimCall in(kInOpen);
      return counter_file_read(fd, buf, n);
    }
    case FdKind::none:
      break;
  }
  return next_symbol(g_read, "read")(fd, buf, n);
}

ssize_t write(int fd, const void* buf, size_t n) {
  switch (fd_kind(fd)) {
    case FdKind::command: {
      const ShimCall in(kInVerbs);
      return command_write(fd, buf, n);
    }
    case FdKind::ucma: {
      const ShimCall in(kInUcma);
      return ucma_write(fd, buf, n);
    }
    default:
      return next_symbol(g_write, "write")(fd, buf, n);
  }
}

int dup(int fd) {
  return duplicated(fd, next_symbol(g_dup, "dup")(fd));
}

int dup2(int oldfd, int newfd) {
  if (oldfd != newfd) forget_special_fd(newfd);
  return duplicated(oldfd, next_symbol(g_dup2, "dup2")(oldfd, newfd));
}

int dup3(int oldfd, int newfd, int flags) {
  if (oldfd != newfd) forget_special_fd(newfd);
  return duplicated(oldfd, next_symbol(g_dup3, "dup3")(oldfd, newfd, flags));
}

int close(int fd) {
  forget_special_fd(fd);
  return next_symbol(g_close, "close")(fd);
}

// A path a program builds under the real /sys/class/infiniband for a simulated device
// (perftest's -W resolves its counters' paths first) resolves in the shim's tree, where the
// device's files are.
char* realpath(const char* path, char* resolved) {
  std::string redirected;
  if (redirect_real_sysfs_path(path, &redirected)) path = redirected.c_str();
  return next_symbol(g_realpath, "realpath")(path, resolved);
}
char* __realpath_chk(const char* path, char* resolved, size_t resolved_len) {
  std::string redirected;
  if (redirect_real_sysfs_path(path, &redirected)) path = redirected.c_str();
  return next_symbol(g_realpath_chk, "__realpath_chk")(path, resolved, resolved_len);
}

int ioctl(int fd, unsigned long request, ...) {
  va_list ap;
  va_start(ap, request);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  if (fd_kind(fd) == FdKind::command) {
    const ShimCall in(kInVerbs);
    return command_ioctl(fd, request, arg);
  }
  return next_symbol(g_ioctl, "ioctl")(fd, request, arg);
}

// A mapping at a fixed address replaces what was there (MAP_FIXED_NOREPLACE does not): the
// shim's copy of the maps may then be wrong. A new mapping elsewhere only adds memory, which
// the copy finds when it is checked again.
// mmap and mmap64: `next` is the one glibc would have run (null before the lookups at load).
static void* mmap_through(mmap_fn next, void* addr, size_t len, int prot, int flags, int fd,
                          off_t off) {
  void* p;
  if (fd_kind(fd) == FdKind::command) {
    const ShimCall in(kInVerbs);
    p = command_mmap(fd, addr, len, prot, flags, off);
  } else {
    p = next ? next(addr, len, prot, flags, fd, off) : raw_mmap(addr, len, prot, flags, fd, off);
  }
  if (flags & MAP_FIXED) address_space_changed();
  return p;
}

void* mmap(void* addr, size_t len, int prot, int flags, int fd, off_t off) {
  return mmap_through(resolved(g_mmap), addr, len, prot, flags, fd, off);
}

void* mmap64(void* addr, size_t len, int prot, int flags, int fd, off_t off) {
  return mmap_through(resolved(g_mmap64), addr, len, prot, flags, fd, off);
}

int munmap(void* addr, size_t len) {
  {
    const ShimCall in(kInVerbs);
    if (command_munmap(addr, len)) return 0;
  }
  const munmap_fn f = resolved(g_munmap);
  const int r = f ? f(addr, len) : raw_munmap(addr, len);
  address_space_changed();
  return r;
}

void* mremap(void* old_addr, size_t old_len, size_t new_len, int flags, ...) {
  void* new_addr = nullptr;
  if (flags & MREMAP_FIXED) {
    va_list ap;
    va_start(ap, flags);
    new_addr = va_arg(ap, void*);
    va_end(ap);
  }
  const mremap_fn f = resolved(g_mremap);
  void* p = f ? f(old_addr, old_len, new_len, flags, new_addr)
              : reinterpret_cast<void*>(
                    ::syscall(SYS_mremap, old_addr, old_len, new_len, flags, new_addr));
  address_space_changed();
  return p;
}

int mprotect(void* addr, size_t len, int prot) {
  const mprotect_fn f = resolved(g_mprotect);
  const int r = f ? f(addr, len, prot) : static_cast<int>(::syscall(SYS_mprotect, addr, len, prot));
  address_space_changed();
  return r;
}

int pkey_mprotect(void* addr, size_t len, int prot, int pkey) {
  const pkey_mprotect_fn f = resolved(g_pkey_mprotect);
  // glibc's pkey_mprotect makes a plain mprotect for key -1.
  const int r = f             ? f(addr, len, prot, pkey)
                : pkey == -1  ? static_cast<int>(::syscall(SYS_mprotect, addr, len, prot))
                              : static_cast<int>(::syscall(SYS_pkey_mprotect, addr, len, prot, pkey));
  address_space_changed();
  return r;
}

int brk(void* addr) {
  int r;
  if (const brk_fn f = resolved(g_brk)) {
    r = f(addr);
  } else {
    // As glibc's brk: 0, or -1 with ENOMEM (from __sbrk) when the break cannot move there.
    void* now = __sbrk(0);
    r = now == reinterpret_cast<void*>(-1) ||
                __sbrk(static_cast<char*>(addr) - static_cast<char*>(now)) ==
                    reinterpret_cast<void*>(-1)
            ? -1
            : 0;
  }
  address_space_changed();
  return r;
}

void* sbrk(intptr_t increment) {
  const sbrk_fn f = resolved(g_sbrk);
  void* p = f ? f(increment) : __sbrk(increment);
  if (increment != 0) address_space_changed();
  return p;
}

int fcntl(int fd, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  const long arg = va_arg(ap, long);
  va_end(ap);
  return kind_fcntl(next_symbol(g_fcntl, "fcntl"), fd, cmd, arg);
}

int fcntl64(int fd, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  const long arg = va_arg(ap, long);
  va_end(ap);
  return kind_fcntl(next_symbol(g_fcntl64, "fcntl64"), fd, cmd, arg);
}

// RDMA netlink (NETLINK_RDMA = 20) is where libibverbs looks for devices before sysfs; a
// kernel without RDMA refuses the protocol, and so does the shim, so that the simulated
// devices in the sysfs tree are the ones found.
int socket(int domain, int type, int protocol) {
  if (domain == AF_NETLINK && protocol == 20) {
    errno = EPROTONOSUPPORT;
    return -1;
  }
  return next_symbol(g_socket, "socket")(domain, type, protocol);
}

}  // extern "C"
