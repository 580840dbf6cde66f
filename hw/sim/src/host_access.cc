// SPDX-License-Identifier: BSD-3-Clause
#include "host_access.h"

#include <errno.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <mutex>

#include "placement.h"

namespace rnicdv::sim {

namespace {

std::atomic<uint64_t> g_faults{0};

// Whether process_vm_readv works on the own process, probed once. A seccomp filter that
// refuses it (EPERM, ENOSYS) or a kernel without it leaves direct accesses.
bool probe_process_vm() noexcept {
  static const bool works = [] {
    uint64_t src = 0x5a5a5a5a5a5a5a5aull, dst = 0;
    iovec local{&dst, sizeof dst};
    iovec remote{&src, sizeof src};
    return ::process_vm_readv(::getpid(), &local, 1, &remote, 1, 0) ==
               static_cast<ssize_t>(sizeof dst) &&
           dst == src;
  }();
  return works;
}

// The own process's id, read once (getpid is a system call on glibc 2.25 and later). A
// child after fork has its own: the probe runs in whichever process asks first, and a
// child re-reads it (atfork below).
std::atomic<pid_t> g_pid{0};

pid_t self() noexcept {
  pid_t p = g_pid.load(std::memory_order_relaxed);
  if (p == 0) [[unlikely]] {
    static const int registered = [] {
      ::pthread_atfork(nullptr, nullptr, [] { g_pid.store(0, std::memory_order_relaxed); });
      return 0;
    }();
    (void)registered;
    p = ::getpid();
    g_pid.store(p, std::memory_order_relaxed);
  }
  return p;
}

// One call with up to two destination pieces. Whole or nothing counts as success: a short
// copy is a fault (the bytes before it are copied).
bool vm_write(iovec* local, int nlocal, iovec* remote, int nremote, size_t total) noexcept {
  for (;;) {
    const ssize_t n = ::process_vm_writev(self(), local, nlocal, remote, nremote, 0);
    if (n == static_cast<ssize_t>(total)) return true;
    if (n < 0 && errno == EINTR) continue;
    g_faults.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
}

bool vm_read(void* dst, const void* src, size_t n) noexcept {
  iovec local{dst, n};
  iovec remote{const_cast<void*>(src), n};
  for (;;) {
    const ssize_t got = ::process_vm_readv(self(), &local, 1, &remote, 1, 0);
    if (got == static_cast<ssize_t>(n)) return true;
    if (got < 0 && errno == EINTR) continue;
    g_faults.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
}

// Device atomics of every simulated device in the process, one at a time.
std::mutex g_atomic_mu;

}  // namespace

bool host_access_supported() noexcept {
  return probe_process_vm();
}

uint64_t host_access_faults() noexcept {
  return g_faults.load(std::memory_order_relaxed);
}

bool host_read(void* dst, const void* src, size_t n) noexcept {
  if (n == 0) return true;
  if (!probe_process_vm()) [[unlikely]] {
    std::memcpy(dst, src, n);
    return true;
  }
  return vm_read(dst, src, n);
}

bool host_place(void* dst, const void* src, size_t n, size_t last) noexcept {
  if (n == 0) return true;
  if (!probe_process_vm()) [[unlikely]] {
    place_in_order(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), n);
    return true;
  }
  // The kernel copies each byte once (its user copies are restartable, never overlapping);
  // the tail is a second piece of the same call, copied after the first (iovecs are taken in
  // order, and on x86-64 the stores of one copy precede those of the next).
  const size_t tail = last < n ? last : n;
  const size_t head = n - tail;
  auto* d = static_cast<uint8_t*>(dst);
  iovec local{const_cast<void*>(src), n};
  iovec remote[2];
  int pieces = 0;
  if (head != 0) remote[pieces++] = iovec{d, head};
  remote[pieces++] = iovec{d + head, tail};
  return vm_write(&local, 1, remote, pieces, n);
}

bool host_load32(const uint32_t* p, uint32_t* out) noexcept {
  if (!probe_process_vm()) [[unlikely]] {
    *out = __atomic_load_n(p, __ATOMIC_ACQUIRE);
    return true;
  }
  uint32_t first = 0;
  if (!vm_read(&first, p, sizeof first)) return false;
  for (;;) {
    uint32_t again = 0;
    if (!vm_read(&again, p, sizeof again)) return false;
    if (again == first) break;
    first = again;
  }
  std::atomic_thread_fence(std::memory_order_acquire);
  *out = first;
  return true;
}

bool host_store32(uint32_t* p, uint32_t value) noexcept {
  if (!probe_process_vm()) [[unlikely]] {
    __atomic_store_n(p, value, __ATOMIC_RELEASE);
    return true;
  }
  std::atomic_thread_fence(std::memory_order_release);
  iovec local{&value, sizeof value};
  iovec remote{p, sizeof value};
  return vm_write(&local, 1, &remote, 1, sizeof value);
}

bool host_read(PinRef pin, void* dst, const void* va, size_t n) noexcept {
  if (!pin) return host_read(dst, va, n);
  if (pin.owner->read(pin, static_cast<const uint8_t*>(va), dst, n)) return true;
  g_faults.fetch_add(1, std::memory_order_relaxed);
  return false;
}

bool host_place(PinRef pin, void* va, const void* src, size_t n, size_t last) noexcept {
  if (!pin) return host_place(va, src, n, last);
  if (pin.owner->place(pin, static_cast<uint8_t*>(va), src, n, last)) return true;
  g_faults.fetch_add(1, std::memory_order_relaxed);
  return false;
}

bool host_atomic64(uint64_t* p, HostAtomic op, uint64_t operand, uint64_t compare,
                   uint64_t* original) noexcept {
  return host_atomic64(PinRef{}, p, op, operand, compare, original);
}

bool host_atomic64(PinRef pin, uint64_t* p, HostAtomic op, uint64_t operand, uint64_t compare,
                   uint64_t* original) noexcept {
  std::lock_guard<std::mutex> lock(g_atomic_mu);
  uint64_t old = 0;
  if (!host_read(pin, &old, p, sizeof old)) return false;
  *original = old;
  uint64_t updated = old;
  if (op == HostAtomic::fetch_add)
    updated = old + operand;
  else if (old == compare)
    updated = operand;
  if (updated == old) return true;
  return host_place(pin, p, &updated, sizeof updated);
}

}  // namespace rnicdv::sim
