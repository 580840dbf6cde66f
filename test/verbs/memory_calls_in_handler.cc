// SPDX-License-Identifier: BSD-3-Clause
// A program whose first calls that change its address space come from a signal handler, as a
// garbage collector's or libsigsegv's SIGSEGV handler makes them. It writes "main starts"
// before the handler runs and "handler done" after; run_memory_calls_in_handler.sh checks,
// from the dynamic linker's trace, that the preloaded shim looked up none of libc's functions
// between the two (dlsym is not async-signal-safe).
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>

namespace {

void say(const char* text, size_t n) {
  if (write(2, text, n) != static_cast<ssize_t>(n)) _exit(3);
}

volatile sig_atomic_t g_failed = 0;

void handler(int) {
  void* page = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) {
    g_failed = 1;
    return;
  }
  if (mprotect(page, 4096, PROT_READ) != 0) g_failed = 1;
  if (pkey_mprotect(page, 4096, PROT_READ | PROT_WRITE, -1) != 0) g_failed = 1;
  void* moved = mremap(page, 4096, 8192, MREMAP_MAYMOVE);
  if (moved == MAP_FAILED) {
    g_failed = 1;
    moved = page;
  }
  if (munmap(moved, moved == page ? 4096 : 8192) != 0) g_failed = 1;
  void* top = sbrk(0);
  if (top == reinterpret_cast<void*>(-1) || brk(top) != 0) g_failed = 1;
}

}  // namespace

int main() {
  static const char kStart[] = "main starts\n", kDone[] = "handler done\n";
  say(kStart, sizeof kStart - 1);
  struct sigaction sa {};
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGUSR1, &sa, nullptr) != 0) return 2;
  if (raise(SIGUSR1) != 0) return 2;
  say(kDone, sizeof kDone - 1);
  return g_failed ? 1 : 0;
}
