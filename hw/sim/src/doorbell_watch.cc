// SPDX-License-Identifier: BSD-3-Clause
#include "doorbell_watch.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define RNICDV_HAVE_VALGRIND_H 1
#endif

#include <atomic>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <mutex>

#include "host_access.h"

namespace rnicdv::sim {

namespace {

// Every simulated device in a process uses a few slots (one per UAR page or mapping).
constexpr int kSlots = 1024;

struct Slot {
  std::atomic<uintptr_t> base{0};  // 0: free
  std::atomic<size_t> len{0};
  std::atomic<int> fd{-1};
  std::atomic<bool> armed{false};
  std::atomic<uint32_t> users{0};  // fault handlers inside this slot
};

Slot g_slots[kSlots];
std::atomic<int> g_high{0};  // slots at or above this index were never used
std::mutex g_alloc_mu;       // add/remove only; the handler takes no lock
std::atomic<uint64_t> g_faults{0};
std::atomic<uint64_t> g_mask_checked_at{0};  // 0: check the threads' masks now (after a fork)
std::atomic<bool> g_mask_blocked{false};
struct sigaction g_prev;
struct sigaction g_prev_bus;
std::once_flag g_install_once;
std::atomic<bool> g_installed{false};      // the watch may be used
std::atomic<bool> g_handler_ready{false};  // the fault handler went in (host_access.h)

// The address of the last fault that matched no slot, per thread: a store that faulted on a
// range just before it was removed (and made writable) is retried once before the fault is
// treated as someone else's.
__thread uintptr_t t_unmatched __attribute__((tls_model("initial-exec"))) = 0;

// The kick is sent after the store, not from the fault handler: a device thread woken before
// the store is retried finds nothing and goes back to sleep, and on a busy machine it may be
// woken onto the storing thread's CPU, where it then waits behind that thread for a whole time
// slice. So on x86-64 the fault handler sets the trap flag and the store runs as one single
// step; the SIGTRAP that follows it sends the kick. The slot whose kick is pending stays in
// use (its `users` count) until then.
__thread int t_pending_slot __attribute__((tls_model("initial-exec"))) = -1;
bool g_single_step = false;  // decided once at installation
struct sigaction g_prev_trap;

void on_fault(int sig, siginfo_t* si, void* uctx);
void on_bus(int sig, siginfo_t* si, void* uctx);
void on_trap(int sig, siginfo_t* si, void* uctx);

// The trap flag is set only while the SIGTRAP handler is this file's: a trap that reached the
// default action would end the process.
// A blocked SIGTRAP would end the process at the trap; then the kick goes from here.
bool trap_blocked() noexcept {
  sigset_t cur;
  if (::pthread_sigmask(SIG_SETMASK, nullptr, &cur) != 0) return true;
  return sigismember(&cur, SIGTRAP) == 1;
}

bool trap_handler_in_place() noexcept {
  struct sigaction cur;
  if (::sigaction(SIGTRAP, nullptr, &cur) != 0) return false;
  return (cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == &on_trap;
}

void send_kick(Slot& s) noexcept {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(s.fd.load(std::memory_order_relaxed), &one, sizeof one);
  g_faults.fetch_add(1, std::memory_order_relaxed);
}

// A kick still pending on this thread (a store that faulted twice before its trap) goes now.
void flush_pending_kick() noexcept {
  if (t_pending_slot < 0) return;
  Slot& s = g_slots[t_pending_slot];
  t_pending_slot = -1;
  send_kick(s);
  s.users.fetch_sub(1, std::memory_order_seq_cst);
}

#if defined(__x86_64__)
constexpr greg_t kTrapFlag = 0x100;
void set_trap_flag(void* uctx, bool on) noexcept {
  auto& efl = static_cast<ucontext_t*>(uctx)->uc_mcontext.gregs[REG_EFL];
  efl = on ? (efl | kTrapFlag) : (efl & ~kTrapFlag);
}
#endif

bool handler_in_place() noexcept {
  struct sigaction cur;
  if (::sigaction(SIGSEGV, nullptr, &cur) != 0) return false;
  return (cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == &on_fault;
}

// Passes a signal this file did not cause to whoever handled it before: that handler, or the
// default action (restored; a fault's instruction then runs again and the kernel ends the
// process as it would have without this file; a trap, which does not repeat, is raised
// again).
void chain(const struct sigaction& prev, int sig, siginfo_t* si, void* uctx) {
  if (prev.sa_flags & SA_SIGINFO) {
    if (prev.sa_sigaction) {
      prev.sa_sigaction(sig, si, uctx);
      return;
    }
  } else if (prev.sa_handler == SIG_IGN && sig == SIGTRAP) {
    return;
  } else if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN) {
    prev.sa_handler(sig);
    return;
  }
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(sig, &dfl, nullptr);
  if (sig == SIGTRAP) ::raise(SIGTRAP);
}

void on_fault(int sig, siginfo_t* si, void* uctx) {
  const int saved_errno = errno;
  if (si && si->si_code == SEGV_ACCERR) {
    const auto addr = reinterpret_cast<uintptr_t>(si->si_addr);
    const int high = g_high.load(std::memory_order_acquire);
    for (int i = 0; i < high; ++i) {
      Slot& s = g_slots[i];
      const uintptr_t base = s.base.load(std::memory_order_seq_cst);
      if (base == 0 || addr < base || addr - base >= s.len.load(std::memory_order_relaxed))
        continue;
      s.users.fetch_add(1, std::memory_order_seq_cst);
      if (s.base.load(std::memory_order_seq_cst) == base) {
        // Writable first, then the kick: a device that wakes and re-arms before the store
        // is retried takes the same path again; one that slept on is woken.
        ::mprotect(reinterpret_cast<void*>(base), s.len.load(std::memory_order_relaxed),
                   PROT_READ | PROT_WRITE);
        s.armed.store(false, std::memory_order_relaxed);
        flush_pending_kick();
        t_unmatched = 0;
#if defined(__x86_64__)
        if (g_single_step && uctx && trap_handler_in_place() && !trap_blocked()) {
          t_pending_slot = i;  // keeps its `users` reference until the trap
          set_trap_flag(uctx, true);
          errno = saved_errno;
          return;
        }
#endif
        send_kick(s);
        s.users.fetch_sub(1, std::memory_order_seq_cst);
        errno = saved_errno;
        return;
      }
      s.users.fetch_sub(1, std::memory_order_seq_cst);
    }
  }
  // A device access to memory the application took away (host_access.h): does not return.
  host_access_recover_if_guarded();
  if (si && si->si_code == SEGV_ACCERR) {
    const auto addr = reinterpret_cast<uintptr_t>(si->si_addr);
    if (t_unmatched != addr) {
      t_unmatched = addr;
      errno = saved_errno;
      return;  // retry once (see t_unmatched)
    }
  }
  t_unmatched = 0;
  errno = saved_errno;
  chain(g_prev, sig, si, uctx);
}

// SIGBUS (a page of a truncated file mapping) matters to guarded accesses only.
void on_bus(int sig, siginfo_t* si, void* uctx) {
  host_access_recover_if_guarded();
  chain(g_prev_bus, sig, si, uctx);
}

void on_trap(int sig, siginfo_t* si, void* uctx) {
  const int saved_errno = errno;
#if defined(__x86_64__)
  if (t_pending_slot >= 0 && uctx) {
    set_trap_flag(uctx, false);
    flush_pending_kick();
    // The woken device thread may have been queued on this CPU (a busy machine, or a VM
    // whose idle vCPUs the scheduler avoids); without the yield it would wait for this
    // thread's time slice to end, about 2 ms when this thread then busy-polls.
    ::sched_yield();
    errno = saved_errno;
    return;
  }
#endif
  errno = saved_errno;
  // Not a step this file asked for: the previous handler's, or the default action.
  chain(g_prev_trap, sig, si, uctx);
}

// Single-stepping needs x86-64's trap flag, and a CPU that honours it: valgrind's does not.
bool can_single_step() noexcept {
#if defined(__x86_64__)
#ifdef RNICDV_HAVE_VALGRIND_H
  if (RUNNING_ON_VALGRIND) return false;
#endif
  const char* mode = std::getenv("RNICDV_SIM_DOORBELL_WAKE");
  return !(mode && std::strcmp(mode, "fault-kick") == 0);
#else
  return false;
#endif
}

// The handlers serve two mechanisms: the doorbell watch (off with
// RNICDV_SIM_DOORBELL_WAKE=poll) and the recovery of guarded host accesses (always).
void install() noexcept {
  const char* mode = std::getenv("RNICDV_SIM_DOORBELL_WAKE");
  const bool watch = !(mode && std::strcmp(mode, "poll") == 0);
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = &on_fault;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  {
    struct sigaction bus = sa;
    bus.sa_sigaction = &on_bus;
    if (::sigaction(SIGBUS, &bus, &g_prev_bus) != 0) std::memset(&g_prev_bus, 0, sizeof g_prev_bus);
  }
  if (watch && can_single_step()) {
    struct sigaction st = sa;
    st.sa_sigaction = &on_trap;
    g_single_step = ::sigaction(SIGTRAP, &st, &g_prev_trap) == 0;
  }
  if (::sigaction(SIGSEGV, &sa, &g_prev) != 0) return;
  // A child's threads are not its parent's: it checks their masks afresh.
  ::pthread_atfork(nullptr, nullptr, [] { g_mask_checked_at.store(0, std::memory_order_relaxed); });
  // A runtime that refuses other SIGSEGV handlers (a sanitizer's) may accept the call and
  // keep its own; only a handler that is really in place enables the mechanism.
  g_handler_ready.store(handler_in_place(), std::memory_order_release);
  g_installed.store(watch && g_handler_ready.load(std::memory_order_relaxed),
                    std::memory_order_release);
}

}  // namespace

// A thread that blocks SIGSEGV (sigfillset + pthread_sigmask is a common idiom in servers)
// cannot take the fault on a write-protected page: the kernel would end the process. Every
// thread's blocked set is read from /proc/self/task/*/status, at most every 10 ms.
bool some_thread_blocks_sigsegv() noexcept {
  auto& checked_at = g_mask_checked_at;
  auto& blocked = g_mask_blocked;
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  const uint64_t now = static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull +
                       static_cast<uint64_t>(ts.tv_nsec);
  const uint64_t last = checked_at.load(std::memory_order_acquire);
  if (last != 0 && now - last < 10'000'000) return blocked.load(std::memory_order_acquire);
  bool found = false;
  DIR* dir = ::opendir("/proc/self/task");
  if (!dir) {
    found = true;  // cannot tell: assume the worst
  } else {
    while (dirent* e = ::readdir(dir)) {
      if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
      char path[sizeof "/proc/self/task//status" + sizeof e->d_name];
      std::snprintf(path, sizeof path, "/proc/self/task/%s/status", e->d_name);
      FILE* f = std::fopen(path, "re");
      if (!f) continue;  // the thread has exited
      char line[128];
      while (std::fgets(line, sizeof line, f)) {
        unsigned long long mask = 0;
        if (std::sscanf(line, "SigBlk: %llx", &mask) == 1) {
          if (mask & (1ull << (SIGSEGV - 1))) found = true;
          break;
        }
      }
      std::fclose(f);
      if (found) break;
    }
    ::closedir(dir);
  }
  blocked.store(found, std::memory_order_release);
  checked_at.store(now, std::memory_order_release);
  return found;
}

// Someone replaced the handler. Over the default action (a test framework that saved the
// disposition before this handler was installed, and restored it) it is put back, chaining
// to the default; over a handler of the process's own only when `over_any`, chaining to that
// handler, which then still gets every fault that is not the device's.
static bool reinstall(bool over_any) noexcept {
  std::lock_guard lock(g_alloc_mu);
  struct sigaction cur;
  if (::sigaction(SIGSEGV, nullptr, &cur) != 0) return false;
  if (!over_any && ((cur.sa_flags & SA_SIGINFO) || cur.sa_handler != SIG_DFL)) return false;
  if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == &on_fault) return true;
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = &on_fault;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  if (::sigaction(SIGSEGV, &sa, &g_prev) != 0) return false;
  return handler_in_place();
}

bool host_fault_handler_in_place() noexcept {
  std::call_once(g_install_once, install);
  if (!g_handler_ready.load(std::memory_order_acquire)) return false;
  // A device access to memory the application takes away must reach this handler first.
  return handler_in_place() || reinstall(true);
}

bool doorbell_watch_supported() noexcept {
  std::call_once(g_install_once, install);
  return g_installed.load(std::memory_order_acquire);
}

bool doorbell_watch_available() noexcept {
  std::call_once(g_install_once, install);
  if (!g_installed.load(std::memory_order_acquire)) return false;
  if (some_thread_blocks_sigsegv()) return false;
  // A handler of the process's own, installed later, keeps its place: the devices poll.
  return handler_in_place() || reinstall(false);
}

int doorbell_watch_add(void* addr, size_t len, int kick_fd) noexcept {
  const auto base = reinterpret_cast<uintptr_t>(addr);
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  if (base == 0 || len == 0 || (base % page) != 0 || (len % page) != 0 || kick_fd < 0) return -1;
  std::lock_guard lock(g_alloc_mu);
  for (int i = 0; i < kSlots; ++i) {
    Slot& s = g_slots[i];
    if (s.base.load(std::memory_order_relaxed) != 0) continue;
    s.len.store(len, std::memory_order_relaxed);
    s.fd.store(kick_fd, std::memory_order_relaxed);
    s.armed.store(false, std::memory_order_relaxed);
    s.base.store(base, std::memory_order_seq_cst);
    if (i >= g_high.load(std::memory_order_relaxed)) g_high.store(i + 1, std::memory_order_release);
    return i;
  }
  return -1;
}

void doorbell_watch_remove(int slot) noexcept {
  if (slot < 0 || slot >= kSlots) return;
  std::lock_guard lock(g_alloc_mu);
  Slot& s = g_slots[slot];
  const uintptr_t base = s.base.load(std::memory_order_relaxed);
  if (base == 0) return;
  ::mprotect(reinterpret_cast<void*>(base), s.len.load(std::memory_order_relaxed),
             PROT_READ | PROT_WRITE);
  s.armed.store(false, std::memory_order_relaxed);
  s.base.store(0, std::memory_order_seq_cst);
  while (s.users.load(std::memory_order_seq_cst) != 0) {
  }
}

bool doorbell_watch_arm(int slot) noexcept {
  if (slot < 0 || slot >= kSlots) return false;
  Slot& s = g_slots[slot];
  const uintptr_t base = s.base.load(std::memory_order_acquire);
  if (base == 0) return false;
  if (s.armed.exchange(true, std::memory_order_relaxed)) return true;  // still protected
  if (::mprotect(reinterpret_cast<void*>(base), s.len.load(std::memory_order_relaxed),
                 PROT_READ) != 0) {
    s.armed.store(false, std::memory_order_relaxed);
    return false;
  }
  return true;
}

void doorbell_watch_disarm(int slot) noexcept {
  if (slot < 0 || slot >= kSlots) return;
  Slot& s = g_slots[slot];
  const uintptr_t base = s.base.load(std::memory_order_acquire);
  if (base == 0 || !s.armed.load(std::memory_order_relaxed)) return;
  ::mprotect(reinterpret_cast<void*>(base), s.len.load(std::memory_order_relaxed),
             PROT_READ | PROT_WRITE);
  s.armed.store(false, std::memory_order_relaxed);
}

uint64_t doorbell_watch_faults() noexcept {
  return g_faults.load(std::memory_order_relaxed);
}

}  // namespace rnicdv::sim
