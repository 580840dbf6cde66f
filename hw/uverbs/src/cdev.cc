// SPDX-License-Identifier: BSD-3-Clause
// The character device: open, stat, the command descriptor's ioctl/mmap/close, and the
// registry of open contexts.
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/ib_user_ioctl_cmds.h>
#include <rdma/mlx5-abi.h>
#include <rdma/rdma_user_ioctl_cmds.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "context.h"
#include "exit_teardown.h"
#include "handles.h"
#include "shim.h"
#include "user_memory.h"

namespace rnicdv::uverbs {

namespace {

struct ContextRegistry {
  std::mutex mu;
  std::unordered_map<int, std::shared_ptr<Context>> by_fd;
  std::unordered_map<uintptr_t, std::weak_ptr<Context>> by_uar;  // first mappings of UAR pages
  std::atomic<size_t> uar_count{0};
};

ContextRegistry& contexts() {
  return per_process_table<ContextRegistry>();  // outlives exit; see devices.cc
}

std::atomic<uint64_t> g_owner_keys{1};

constexpr const char kCdevPrefix[] = "/dev/infiniband/uverbs";

}  // namespace

uint64_t next_owner_key() { return g_owner_keys.fetch_add(1, std::memory_order_relaxed); }

int uverbs_index_of(const char* path) noexcept {
  if (!path) return -3;
  if (strncmp(path, kCdevPrefix, sizeof kCdevPrefix - 1) != 0) return -1;
  const char* digits = path + sizeof kCdevPrefix - 1;
  if (*digits < '0' || *digits > '9') return -1;
  char* end = nullptr;
  const unsigned long n = strtoul(digits, &end, 10);
  if (*end != '\0' || n >= config().devices) return -1;
  return static_cast<int>(n);
}

int fake_stat_uverbs(uint32_t index, struct stat* st) noexcept {
  std::memset(st, 0, sizeof *st);
  st->st_mode = S_IFCHR | 0666;
  st->st_rdev = makedev(kUverbsMajor, kUverbsMinorBase + index);
  st->st_nlink = 1;
  st->st_blksize = 4096;
  return 0;
}

int fstat_command_fd(int fd, struct stat* st) {
  std::shared_ptr<Context> ctx = context_of(fd);
  if (!ctx) {
    errno = EBADF;
    return -1;
  }
  return fake_stat_uverbs(ctx->dev->index, st);
}

int open_uverbs(uint32_t index, int flags) {
  if ((flags & O_ACCMODE) != O_RDWR) {
    errno = EACCES;  // the kernel's uverbs cdev needs read and write
    return -1;
  }
  Result<SimDevice*> dev = device_for(index);
  if (!dev) {
    log_line_once(dev.status().message());
    errno = ENODEV;
    return -1;
  }
  // A memfd: its pages at libmlx5's mmap offsets are the UAR pages (context.h
  // kCommandFileBytes), however the application reaches mmap.
  const int fd = ::memfd_create("rnicdv-uverbs-cmd", (flags & O_CLOEXEC) ? MFD_CLOEXEC : 0);
  if (fd < 0) return -1;
  if (::ftruncate(fd, static_cast<off_t>(kCommandFileBytes)) != 0) {
    const int err = errno;
    libc::close(fd);
    errno = err;
    return -1;
  }
  auto ctx = std::make_shared<Context>();
  ctx->cmd_fd = fd;
  ctx->dev = dev.value();
  {
    std::lock_guard<std::mutex> lock(contexts().mu);
    contexts().by_fd[fd] = ctx;
  }
  set_fd_kind(fd, FdKind::command);
  return fd;
}

std::shared_ptr<Context> context_of(int cmd_fd) {
  std::lock_guard<std::mutex> lock(contexts().mu);
  auto it = contexts().by_fd.find(cmd_fd);
  return it == contexts().by_fd.end() ? nullptr : it->second;
}

std::vector<std::shared_ptr<Context>> contexts_on(uint32_t index) {
  std::vector<std::shared_ptr<Context>> out;
  std::lock_guard<std::mutex> lock(contexts().mu);
  for (auto& [fd, ctx] : contexts().by_fd)
    if (ctx->dev->index == index && std::find(out.begin(), out.end(), ctx) == out.end())
      out.push_back(ctx);
  return out;
}

// A descriptor of the command kind with no context of this process: in a child of fork(), one
// it inherited (the child's tables are its own, shim.h per_process_table). The kernel refuses
// a forked child's commands on its parent's file: ib_uverbs_write and ucma_write check that the
// caller's credentials are the opener's (ib_safe_file_access), and a forked child has its own:
// EACCES. Nothing the child does reaches the parent's objects; it opens a device of its own.
int unknown_descriptor(const char* file, const char* op, int fd) {
  if (fork_generation() == 0) {
    errno = EBADF;
    return -1;
  }
  return fail(EACCES, Status::error(Errc::access_denied,
                                    "%s: %s on descriptor %d in process %d: the descriptor was "
                                    "inherited, and a child of fork() cannot use its parent's "
                                    "objects",
                                    file, op, fd, static_cast<int>(::getpid())));
}

ssize_t command_write(int fd, const void* buf, size_t n) {
  std::shared_ptr<Context> ctx = context_of(fd);
  if (!ctx) return unknown_descriptor("uverbs", "write", fd);
  // The command is copied in first, as the kernel's copy_from_user does: a buffer that is
  // not readable for all of its n bytes is EFAULT, and nothing past them is ever read.
  if (n > kMaxCommandBytes) {
    errno = EINVAL;
    return -1;
  }
  std::vector<uint8_t> copy(n);
  if (!copy_from_user(copy.data(), reinterpret_cast<uintptr_t>(buf), n)) {
    fail(EFAULT, Status::error(Errc::invalid_argument, "%s: write of %zu bytes at %p: not readable",
                               device_name(ctx->dev->index).c_str(), n, buf));
    return -1;
  }
  std::lock_guard<std::mutex> lock(ctx->mu);
  // The handlers' -errno becomes write()'s -1 with errno here, and only here.
  if (const int rc = dispatch_write(*ctx, copy.data(), n); rc < 0) {
    errno = -rc;
    return -1;
  }
  return static_cast<ssize_t>(n);
}

// The ioctl interface (RDMA_VERBS_IOCTL) is not provided, as on kernels before it existed:
// ENOTTY makes libibverbs use write() for every command (its has_ioctl_write probe), mark
// every ioctl-first method unsupported, and take the write fallback.
//
// One method is answered: QUERY_CONTEXT, which ibv_import_device sends (ioctl only, no write
// form) on a descriptor shared with another process or dup()ed. libmlx5 can import only a
// context whose UARs the kernel allocates on demand (tot_bfregs 0, MLX5_IB_OBJECT_UAR, both
// ioctl-only); the shim's contexts have static UAR pages, so the import is refused with
// EOPNOTSUPP and its reason, as a device without the capability refuses it.
int command_ioctl(int fd, unsigned long request, void* arg) {
  std::shared_ptr<Context> ctx = context_of(fd);
  if (!ctx && request == RDMA_VERBS_IOCTL) return unknown_descriptor("uverbs", "ioctl", fd);
  if (!ctx || request != RDMA_VERBS_IOCTL) {
    errno = ENOTTY;
    return -1;
  }
  ib_uverbs_ioctl_hdr hdr{};
  if (!copy_from_user(&hdr, reinterpret_cast<uintptr_t>(arg), sizeof hdr))
    return fail(EFAULT, Status::error(Errc::invalid_argument, "%s: ioctl header at %p: not readable",
                                      device_name(ctx->dev->index).c_str(), arg));
  if (hdr.object_id == UVERBS_OBJECT_DEVICE && hdr.method_id == UVERBS_METHOD_QUERY_CONTEXT)
    return fail(EOPNOTSUPP,
                Status::error(Errc::unsupported,
                              "%s: QUERY_CONTEXT (ibv_import_device): importing a context needs "
                              "UARs the kernel allocates on demand; the simulated HCA's contexts "
                              "have static UAR pages",
                              device_name(ctx->dev->index).c_str()));
  errno = ENOTTY;
  return -1;
}

namespace {

// libmlx5's UAR mmap offset, ((cmd << 8) | index) pages with the index's high bits from bit 16
// (the kernel's get_command, get_index, get_extended_index).
struct UarOffset {
  uint32_t cmd = 0;
  uint32_t index = 0;
  bool known_cmd = false;  // regular, write-combining, non-cached or a dynamic page
  bool dynamic = false;    // MLX5_IB_MMAP_ALLOC_WC
};

UarOffset decode_uar_offset(uint64_t off) {
  const uint64_t pgoff = off / kPage;
  UarOffset u;
  u.cmd = (pgoff >> 8) & 0xff;
  u.index = static_cast<uint32_t>((pgoff & 0xff) | ((pgoff >> 16) << 8));
  u.dynamic = u.cmd == MLX5_IB_MMAP_ALLOC_WC;
  u.known_cmd = u.dynamic || u.cmd == MLX5_IB_MMAP_REGULAR_PAGE ||
                u.cmd == MLX5_IB_MMAP_WC_PAGE || u.cmd == MLX5_IB_MMAP_NC_PAGE;
  return u;
}

uint32_t uar_pages_of_kind(const Context& ctx, const UarOffset& u) {
  return u.dynamic ? kDynUarPages : ctx.static_pages;
}

}  // namespace

int64_t uar_page_of_offset(const Context& ctx, uint64_t off) {
  const UarOffset u = decode_uar_offset(off);
  if (off % kPage != 0 || !u.known_cmd || u.index >= uar_pages_of_kind(ctx, u)) return -1;
  return u.dynamic ? ctx.static_pages + u.index : u.index;
}

namespace {

// Gives the device the first mapping of UAR page `idx`, at `offset` of the command memfd,
// with a mapping of its own to read the registers through (the caller holds ctx.mu).
Status adopt_uar_page_locked(const std::shared_ptr<Context>& ctx, uint32_t idx, uint8_t* page,
                             uint64_t offset) {
  void* view = libc::mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_SHARED, ctx->uar_memfd,
                          static_cast<off_t>(offset));
  if (view == MAP_FAILED)
    return Status::error(Errc::no_resources, "%s: UAR page %u: the device's mapping: %s",
                         device_name(ctx->dev->index).c_str(), idx, std::strerror(errno));
  Status st = sim::attach_uar_page(*ctx->dev->dev, page, view);
  if (!st) {
    libc::munmap(view, kPage);
    return st;
  }
  if (ctx->uar_device_views.size() < ctx->uar_pages.size())
    ctx->uar_device_views.resize(ctx->uar_pages.size(), nullptr);
  ctx->uar_device_views[idx] = static_cast<uint8_t*>(view);
  ctx->uar_pages[idx] = page;
  std::lock_guard<std::mutex> rl(contexts().mu);
  contexts().by_uar[reinterpret_cast<uintptr_t>(page)] = ctx;
  contexts().uar_count.fetch_add(1, std::memory_order_release);
  return Status::ok();
}

}  // namespace

void adopt_unseen_uar_mappings_locked(Context& ctx) {
  if (ctx.uar_memfd < 0) return;
  struct stat st{};
  if (::syscall(SYS_fstat, ctx.uar_memfd, &st) != 0) return;
  std::shared_ptr<Context> self;
  {
    std::lock_guard<std::mutex> lock(contexts().mu);
    auto it = contexts().by_fd.find(ctx.cmd_fd);
    if (it != contexts().by_fd.end()) self = it->second;
  }
  if (!self) return;
  FILE* maps = std::fopen("/proc/self/maps", "re");
  if (!maps) return;
  char line[512];
  while (std::fgets(line, sizeof line, maps)) {
    unsigned long start = 0, end = 0, inode = 0;
    unsigned long long offset = 0;
    char perms[8] = {};
    unsigned dev_major = 0, dev_minor = 0;
    if (std::sscanf(line, "%lx-%lx %7s %llx %x:%x %lu", &start, &end, perms, &offset,
                    &dev_major, &dev_minor, &inode) != 7)
      continue;
    if (inode != st.st_ino || perms[3] != 's' || !std::strstr(line, "rnicdv-uverbs-cmd")) continue;
    // The kernel merges mappings of consecutive pages at consecutive addresses into one
    // line (libmlx5 maps its UAR pages one after another): every page of it is looked at.
    for (unsigned long at = start; at < end; at += kPage) {
      const int64_t idx = uar_page_of_offset(ctx, offset + (at - start));
      if (idx < 0 || ctx.uar_pages[static_cast<size_t>(idx)]) continue;
      (void)adopt_uar_page_locked(self, static_cast<uint32_t>(idx), reinterpret_cast<uint8_t*>(at),
                                  offset + (at - start));
    }
  }
  std::fclose(maps);
}

// libmlx5 maps UAR page `idx` at offset ((cmd << 8) | idx) * page size (mlx5_ib_mmap_cmd:
// 0 regular, 2 write-combining, 3 non-cached, 6 a dynamic page). The command descriptor is
// the memfd that holds the pages, mapped here at the offset asked for, as the kernel maps it
// when the application's mmap bypasses the shim.
void* command_mmap(int fd, void* addr, size_t len, int prot, int flags, off_t off) {
  std::shared_ptr<Context> ctx = context_of(fd);
  if (!ctx) {
    unknown_descriptor("uverbs", "mmap", fd);
    return MAP_FAILED;
  }
  std::lock_guard<std::mutex> lock(ctx->mu);
  const UarOffset u = decode_uar_offset(static_cast<uint64_t>(off));
  if (off % kPage != 0 || len != kPage || !(flags & MAP_SHARED)) {
    fail(EINVAL, Status::error(Errc::invalid_argument,
                               "%s: mmap offset %#llx length %zu: one shared page at a page "
                               "offset expected",
                               device_name(ctx->dev->index).c_str(),
                               static_cast<unsigned long long>(off), len));
    return MAP_FAILED;
  }
  if (!u.known_cmd) {
    (void)unimplemented("mmap command", u.cmd);
    errno = EINVAL;
    return MAP_FAILED;
  }
  const uint32_t limit = uar_pages_of_kind(*ctx, u);
  if (!ctx->have_ucontext || u.index >= limit) {
    fail(EINVAL, Status::error(Errc::invalid_argument, "%s: mmap %s UAR page %u: only %u pages",
                               device_name(ctx->dev->index).c_str(),
                               u.dynamic ? "dynamic" : "static", u.index, limit));
    return MAP_FAILED;
  }
  const auto idx = static_cast<uint32_t>(uar_page_of_offset(*ctx, static_cast<uint64_t>(off)));
  void* p = libc::mmap(addr, len, prot | PROT_READ | PROT_WRITE, flags, ctx->uar_memfd, off);
  if (p == MAP_FAILED) return p;
  // Not inherited by a child of fork(), as the kernel's UAR mappings are not
  // (rdma_user_mmap_io sets VM_DONTCOPY): a child's doorbell cannot ring the parent's QPs.
  (void)::madvise(p, len, MADV_DONTFORK);
  if (!ctx->uar_pages[idx]) {
    if (Status st = adopt_uar_page_locked(ctx, idx, static_cast<uint8_t*>(p),
                                          static_cast<uint64_t>(off));
        !st) {
      libc::munmap(p, len);
      fail(EINVAL, st);
      return MAP_FAILED;
    }
  }
  return p;
}

// The device reads a UAR page through its first mapping; while a QP still rings a register
// in it the page stays mapped (until the context is torn down) even if libmlx5 unmaps it.
bool command_munmap(void* addr, size_t len) {
  ContextRegistry& r = contexts();
  if (r.uar_count.load(std::memory_order_acquire) == 0 || len != kPage) return false;
  std::shared_ptr<Context> ctx;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.by_uar.find(reinterpret_cast<uintptr_t>(addr));
    if (it == r.by_uar.end()) return false;
    ctx = it->second.lock();
    r.by_uar.erase(it);
    r.uar_count.fetch_sub(1, std::memory_order_release);
  }
  if (!ctx) return false;
  std::lock_guard<std::mutex> lock(ctx->mu);
  auto* page = static_cast<uint8_t*>(addr);
  uint8_t* view = nullptr;
  for (size_t i = 0; i < ctx->uar_pages.size(); ++i) {
    if (ctx->uar_pages[i] != page) continue;
    ctx->uar_pages[i] = nullptr;
    if (i < ctx->uar_device_views.size()) std::swap(view, ctx->uar_device_views[i]);
  }
  if (!ctx->qps.empty()) {
    ctx->kept_mappings.emplace_back(page, len);
    if (view) ctx->kept_device_views.push_back(view);
    return true;
  }
  sim::detach_uar_page(*ctx->dev->dev, page);
  if (view) libc::munmap(view, kPage);
  return false;
}

void teardown_locked(Context& ctx) {
  for (auto& [h, q] : ctx.qps) {
    if (ctx.async) ctx.async->purge(q.key);
  }
  ctx.qps.clear();
  for (auto& [h, srq] : ctx.srqs) {
    if (ctx.async) ctx.async->purge(srq.key);
  }
  ctx.srqs.clear();
  ctx.xrcds.clear();  // after the SRQs and targets of them
  for (auto& [h, c] : ctx.cqs) {
    (void)sim::set_cq_event_handler(*c.cq, {});
    if (c.channel) c.channel->purge(c.key);
    if (ctx.async) ctx.async->purge(c.key);
  }
  ctx.cqs.clear();
  ctx.mrs.clear();
  ctx.ahs.clear();
  ctx.pds.clear();
  {
    std::lock_guard<std::mutex> rl(contexts().mu);
    for (uint8_t* page : ctx.uar_pages) {
      if (!page) continue;
      if (contexts().by_uar.erase(reinterpret_cast<uintptr_t>(page)))
        contexts().uar_count.fetch_sub(1, std::memory_order_release);
    }
  }
  for (uint8_t* page : ctx.uar_pages)
    if (page) sim::detach_uar_page(*ctx.dev->dev, page);
  for (auto& [page, len] : ctx.kept_mappings) {
    sim::detach_uar_page(*ctx.dev->dev, page);
    libc::munmap(page, len);
  }
  ctx.kept_mappings.clear();
  // The device no longer reads any page: its own mappings go.
  for (uint8_t* view : ctx.uar_device_views)
    if (view) libc::munmap(view, kPage);
  ctx.uar_device_views.clear();
  for (uint8_t* view : ctx.kept_device_views) libc::munmap(view, kPage);
  ctx.kept_device_views.clear();
  // The application's own mappings of the pages stay valid (memfd pages outlive the fd).
  ctx.uar_pages.clear();
  if (ctx.uar_memfd >= 0) libc::close(ctx.uar_memfd);
  ctx.uar_memfd = -1;
  ctx.channels.clear();
  ctx.async.reset();
}

void command_close(int fd) {
  std::shared_ptr<Context> ctx;
  {
    std::lock_guard<std::mutex> lock(contexts().mu);
    auto it = contexts().by_fd.find(fd);
    if (it == contexts().by_fd.end()) return;
    ctx = std::move(it->second);
    contexts().by_fd.erase(it);
    // A duplicate still open keeps the file, and so the context, alive (as the kernel's
    // file reference count does).
    for (const auto& [other, c] : contexts().by_fd)
      if (c == ctx) ctx.reset();
    if (ctx && ctx->cmd_fd == fd) ctx->cmd_fd = -1;
  }
  set_fd_kind(fd, FdKind::none);
  if (!ctx) return;
  std::lock_guard<std::mutex> lock(ctx->mu);
  teardown_locked(*ctx);
}

void command_dup(int oldfd, int newfd) {
  {
    std::lock_guard<std::mutex> lock(contexts().mu);
    auto it = contexts().by_fd.find(oldfd);
    if (it == contexts().by_fd.end()) return;
    contexts().by_fd[newfd] = it->second;
  }
  set_fd_kind(newfd, FdKind::command);
}

// At exit (devices.cc at_exit), as the kernel releases the files of a process that ended. A
// context whose lock another thread still holds at the deadline (a command in progress) is
// left as it is, in the registry and with its objects: freeing what that thread may still
// use would be worse than leaving memory to a process that is ending. True if every context
// was torn down.
bool shutdown_contexts(const ExitDeadline& deadline) {
  ContextRegistry& reg = contexts();
  std::unordered_map<int, std::shared_ptr<Context>> all;
  {
    if (!deadline.lock(reg.mu)) return false;
    std::lock_guard<std::mutex> lock(reg.mu, std::adopt_lock);
    all = reg.by_fd;
  }
  std::vector<std::shared_ptr<Context>> done, left;
  for (auto& [fd, ctx] : all) {
    if (std::find(done.begin(), done.end(), ctx) != done.end() ||
        std::find(left.begin(), left.end(), ctx) != left.end())
      continue;  // a duplicate
    if (!deadline.lock(ctx->mu)) {
      left.push_back(ctx);
      continue;
    }
    std::lock_guard<std::mutex> lock(ctx->mu, std::adopt_lock);
    teardown_locked(*ctx);
    done.push_back(ctx);
  }
  if (!deadline.lock(reg.mu)) return false;
  std::lock_guard<std::mutex> lock(reg.mu, std::adopt_lock);
  for (auto it = reg.by_fd.begin(); it != reg.by_fd.end();) {
    if (std::find(done.begin(), done.end(), it->second) == done.end()) {
      ++it;
      continue;
    }
    set_fd_kind(it->first, FdKind::none);
    it = reg.by_fd.erase(it);
  }
  return left.empty();
}

}  // namespace rnicdv::uverbs
