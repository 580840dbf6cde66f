// SPDX-License-Identifier: BSD-3-Clause
// Threads the library starts for itself (a device's engine, the shim's event and rdma_cm
// threads) never run the application's signal handlers.
//
// A signal sent to the process (SIGALRM from setitimer, SIGINT, SIGTERM, SIGCHLD, ...) goes to
// any thread that does not block it. A handler the application wrote for its own threads could
// otherwise run on a library thread, where it finds none of its state, and a handler that calls
// exit() there would make the library's exit teardown wait for the very thread that runs it.
// So these threads start with every asynchronous signal blocked (the mask is the new thread's
// own, inherited at creation; the caller's is restored at once). Signals the kernel raises for
// a fault of the thread itself (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS) stay
// unblocked, so that a fault is reported as it would be anywhere else.
#pragma once

#include <pthread.h>
#include <signal.h>

#include <thread>
#include <utility>

namespace rnicdv::sim {

template <class F>
std::thread start_quiet_thread(F&& fn) {
  sigset_t quiet, before;
  sigfillset(&quiet);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS}) sigdelset(&quiet, sig);
  pthread_sigmask(SIG_BLOCK, &quiet, &before);
  struct Restore {
    const sigset_t* mask;
    ~Restore() { pthread_sigmask(SIG_SETMASK, mask, nullptr); }
  } restore{&before};
  return std::thread(std::forward<F>(fn));
}

}  // namespace rnicdv::sim
