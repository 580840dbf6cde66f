// SPDX-License-Identifier: BSD-3-Clause
#include "user_memory.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

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

// ---- The address space as /proc/self/maps last showed it ----
//
// Reading /proc/self/maps costs an open, a few reads and a parse of every mapping: too much
// for every command. The parsed list is kept, with the generation of the address space it was
// read at. The generation moves whenever the process's own mmap (MAP_FIXED), munmap, mremap,
// mprotect, pkey_mprotect, brk or sbrk returns (interpose.cc): each can take memory away or
// take a right away, which is what could make a kept "mapped, writable" answer wrong. A kept
// "not mapped" answer may only be stale the other way (something was mapped since), so it is
// checked again against a fresh read before it is given. Memory that libc unmaps by its own
// internal calls (free() of a large block, a thread's stack), or a raw system call, does not
// move the generation; a kept positive answer is therefore confirmed with mincore(), one
// system call that fails for any page not mapped, and a failure reads the maps again.
// (A right that libc itself takes away, such as the RELRO mprotect after a library is
// loaded, is not seen until the generation next moves.)

struct Mapping {
  uint64_t lo = 0, hi = 0;
  bool readable = false, writable = false;
};

struct MapsCache {
  std::mutex mu;
  uint64_t generation = 0;  // of the address space when `maps` was read; 0: never read
  std::vector<Mapping> maps;  // in address order
};

std::atomic<uint64_t> g_generation{1};
std::atomic<uint64_t> g_maps_reads{0};

// Reads and parses /proc/self/maps into `out`; false if it cannot be read.
bool read_maps(std::vector<Mapping>* out) {
  const int fd = libc::open("/proc/self/maps", O_RDONLY | O_CLOEXEC, 0);
  if (fd < 0) return false;
  g_maps_reads.fetch_add(1, std::memory_order_relaxed);
  out->clear();
  // A line is at most a path (PATH_MAX) and ~100 bytes before it.
  static constexpr size_t kBuf = 16384;
  char* buf = static_cast<char*>(std::malloc(kBuf));
  if (!buf) {
    libc::close(fd);
    return false;
  }
  size_t have = 0;
  bool eof = false, ok = true;
  for (;;) {
    const char* nl = static_cast<const char*>(std::memchr(buf, '\n', have));
    if (!nl) {
      if (eof) break;
      if (have == kBuf) {
        ok = false;  // not a maps line
        break;
      }
      const ssize_t k = libc::read(fd, buf + have, kBuf - have);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) eof = true;
      else have += static_cast<size_t>(k);
      continue;
    }
    unsigned long lo = 0, hi = 0;
    char perms[8] = {};
    if (std::sscanf(buf, "%lx-%lx %7s", &lo, &hi, perms) == 3)
      out->push_back(Mapping{lo, hi, perms[0] == 'r', perms[1] == 'w'});
    const size_t used = static_cast<size_t>(nl - buf) + 1;
    std::memmove(buf, nl + 1, have - used);
    have -= used;
  }
  std::free(buf);
  libc::close(fd);
  return ok;
}

// True if `maps` cover [addr, end) with the access needed.
bool covered(const std::vector<Mapping>& maps, uint64_t addr, uint64_t end, bool write) {
  auto it = std::upper_bound(maps.begin(), maps.end(), addr,
                             [](uint64_t a, const Mapping& m) { return a < m.hi; });
  uint64_t at = addr;  // everything below is known to be mapped as needed
  for (; it != maps.end() && at < end; ++it) {
    if (it->lo > at) return false;  // a hole
    if (!it->readable || (write && !it->writable)) return false;
    at = it->hi;
  }
  return at >= end;
}

// The system's page size, read once at load (mincore works in whole pages).
const uint64_t g_page_size = [] {
  const long size = ::sysconf(_SC_PAGESIZE);
  return size > 0 ? static_cast<uint64_t>(size) : uint64_t{4096};
}();

// True if every page of [addr, end) is mapped now (mincore fails with ENOMEM otherwise).
bool still_mapped(uint64_t addr, uint64_t end) {
  const uint64_t page = g_page_size;
  constexpr size_t kPagesPerCall = 4096;
  unsigned char vec[kPagesPerCall];
  for (uint64_t at = addr & ~(page - 1); at < end;) {
    const uint64_t pages = std::min<uint64_t>((end - at + page - 1) / page, kPagesPerCall);
    if (::mincore(reinterpret_cast<void*>(at), pages * page, vec) != 0) return false;
    at += pages * page;
  }
  return true;
}

// Reads the maps again, recording the generation first: a change while they are read moves
// the generation past it, and the next check reads them again.
bool reload_locked(MapsCache& cache) {
  cache.generation = g_generation.load(std::memory_order_acquire);
  if (read_maps(&cache.maps)) return true;
  cache.generation = 0;
  cache.maps.clear();
  return false;
}

}  // namespace

void address_space_changed() noexcept { g_generation.fetch_add(1, std::memory_order_release); }

uint64_t maps_reads() noexcept { return g_maps_reads.load(std::memory_order_relaxed); }

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
  MapsCache& cache = per_process_table<MapsCache>();
  std::lock_guard<std::mutex> lock(cache.mu);
  bool fresh = false;
  if (cache.generation != g_generation.load(std::memory_order_acquire)) {
    if (!reload_locked(cache)) return false;
    fresh = true;
  }
  // A reading just made needs no confirmation; a kept one is confirmed with mincore().
  if (covered(cache.maps, addr, end, write) && (fresh || still_mapped(addr, end))) return true;
  if (fresh) return false;
  // A kept answer that says no (something may have been mapped since), or a yes that mincore
  // contradicts (unmapped behind libc's entry points): the maps as they are now decide.
  if (!reload_locked(cache)) return false;
  return covered(cache.maps, addr, end, write);
}

}  // namespace rnicdv::uverbs

// How many times the shim has read /proc/self/maps to check a user pointer: a diagnostic for
// the shim's own tests (test/verbs/user_pointers.cc), which look it up with dlsym.
extern "C" __attribute__((visibility("default"))) uint64_t rnicdv_uverbs_maps_reads(void) {
  return rnicdv::uverbs::maps_reads();
}
