// SPDX-License-Identifier: BSD-3-Clause
#include "host_access.h"

#include <setjmp.h>
#include <signal.h>

#include <atomic>
#include <cstring>

#include "doorbell_watch.h"
#include "placement.h"

namespace rnicdv::sim {

namespace {

// Initial-exec: the fault handler reads it, and must not be the first to touch a dynamic
// TLS block (which allocates). The thread that arms it has always touched it first anyway.
__thread sigjmp_buf* t_guard __attribute__((tls_model("initial-exec"))) = nullptr;
std::atomic<uint64_t> g_faults{0};

}  // namespace

bool host_access(void (*fn)(void*), void* ctx) noexcept {
  sigjmp_buf jb;
  sigjmp_buf* const outer = t_guard;
  // No signal mask is saved (no system call): the recovery path unblocks the two signals
  // itself before it jumps.
  if (sigsetjmp(jb, 0) != 0) {
    t_guard = outer;
    g_faults.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  t_guard = &jb;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  fn(ctx);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t_guard = outer;
  return true;
}

namespace {

struct Copy {
  void* dst;
  const void* src;
  size_t n;
};

}  // namespace

bool host_read(void* dst, const void* src, size_t n) noexcept {
  if (n == 0) return true;
  Copy c{dst, src, n};
  return host_access([](void* p) {
    auto* a = static_cast<Copy*>(p);
    std::memcpy(a->dst, a->src, a->n);
  }, &c);
}

bool host_place(void* dst, const void* src, size_t n) noexcept {
  if (n == 0) return true;
  Copy c{dst, src, n};
  return host_access([](void* p) {
    auto* a = static_cast<Copy*>(p);
    place_in_order(static_cast<uint8_t*>(a->dst), static_cast<const uint8_t*>(a->src), a->n);
  }, &c);
}

bool host_load32(const uint32_t* p, uint32_t* out) noexcept {
  struct Load {
    const uint32_t* p;
    uint32_t v;
  } l{p, 0};
  if (!host_access([](void* a) {
        auto* l2 = static_cast<Load*>(a);
        l2->v = __atomic_load_n(l2->p, __ATOMIC_ACQUIRE);
      }, &l))
    return false;
  *out = l.v;
  return true;
}

bool host_access_supported() noexcept {
  return host_fault_handler_in_place();
}

uint64_t host_access_faults() noexcept {
  return g_faults.load(std::memory_order_relaxed);
}

void host_access_recover_if_guarded() noexcept {
  sigjmp_buf* jb = t_guard;
  if (!jb) return;
  // The handler runs with the signal blocked; the jump leaves the handler for good, so the
  // mask it would have restored on return is restored here.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGSEGV);
  sigaddset(&set, SIGBUS);
  ::pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  siglongjmp(*jb, 1);
}

}  // namespace rnicdv::sim
