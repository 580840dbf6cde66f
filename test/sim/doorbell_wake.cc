// SPDX-License-Identifier: BSD-3-Clause
// Doorbell wake-up (hw/sim/src/doorbell_watch.h): an idle device thread sleeps without a
// timer, with the UAR pages software rings write-protected, and the first doorbell store
// wakes it; a fault anywhere else still reaches whoever handled SIGSEGV before.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "doorbell_watch.h"
#include "sim_harness.h"

using namespace simtest;

namespace {

FabricOptions threaded_inproc() {
  FabricOptions fo;
  fo.mode = sim::ExecMode::threaded;
  fo.wire = sim::WireKind::inproc;
  return fo;
}

// Two threaded HCAs on the in-process wire, connected, with a 64-byte source on `a` and a
// destination on `b`.
struct WritePair {
  Pair p{threaded_inproc()};
  Buffer src, dst;

  explicit WritePair(uint8_t fill) {
    ConnectOptions o;
    o.timeout = 14;
    p.connect(o, o);
    src = p.a.reg(64, all_remote(), fill);
    dst = p.b.reg(64);
  }

  // One signaled 64-byte WRITE from `src` to `dst`, rung.
  Errc post_write() {
    Sge sge{src.addr(), 64, src.lkey()};
    SendWr w = make_wr(WrOpcode::rdma_write, &sge, 1);
    w.remote_addr = dst.addr();
    w.rkey = dst.rkey();
    return p.a.post_and_ring(w);
  }
};


// Runs `body` in a child process and returns its wait status.
template <class Body>
int in_child(Body&& body) {
  const pid_t pid = fork();
  if (pid == 0) {
    body();
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

}  // namespace

TEST_CASE("An idle device thread sleeps with its doorbell pages watched, and the first doorbell "
          "after that wakes it",
          "[sim][threaded]") {
  if (!sim::doorbell_watch_available()) {
    WARN("the doorbell watch is off (RNICDV_SIM_DOORBELL_WAKE=poll, or a sanitizer keeps SIGSEGV)");
    return;
  }
  WritePair w(0x5c);
  Pair& p = w.p;
  for (int round = 0; round < 3; ++round) {
    // Idle until the device is in its watched sleep.
    const uint64_t watched = p.a.dev->counters().watched_sleeps;
    REQUIRE(wait_real([&] { return p.a.dev->counters().watched_sleeps > watched; }));
    const uint64_t faults = sim::doorbell_watch_faults();
    std::memset(w.dst.data(), 0, 64);
    REQUIRE(w.post_write() == Errc::ok);
    // Nothing on this thread drives the engine: only the woken device thread can run it.
    Completion c;
    REQUIRE(wait_real([&] { return p.a.poll_send(&c); }));
    CHECK(c.status == IBV_WC_SUCCESS);
    CHECK(std::memcmp(w.dst.data(), w.src.data(), 64) == 0);
    // The doorbell store faulted on the protected page and the handler woke the device.
    CHECK(sim::doorbell_watch_faults() > faults);
  }
}

TEST_CASE("An idle device thread does not wake on a timer while nothing is due", "[sim][threaded]") {
  if (!sim::doorbell_watch_available()) {
    WARN("the doorbell watch is off (RNICDV_SIM_DOORBELL_WAKE=poll, or a sanitizer keeps SIGSEGV)");
    return;
  }
  Pair p(threaded_inproc());
  p.connect();
  // Past the back-off into the watched sleep, then count sleeps over 300 ms of idling. With
  // the 1 ms timed back-off alone that would be about 300; the watched sleep's only timer is
  // a 100 ms safety net.
  const uint64_t w0 = p.a.dev->counters().watched_sleeps;
  REQUIRE(wait_real([&] { return p.a.dev->counters().watched_sleeps > w0; }));
  const uint64_t s0 = p.a.dev->counters().sleeps;
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  CHECK(p.a.dev->counters().sleeps - s0 <= 8);
}

TEST_CASE("A write to a read-only page outside the watched ones still ends the process",
          "[sim][threaded]") {
  const int status = in_child([] {
    Pair p(threaded_inproc());  // installs the handler
    (void)sim::doorbell_watch_available();
    void* page = mmap(nullptr, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    *static_cast<volatile char*>(page) = 1;
    _exit(3);  // not reached
  });
  // Killed by the signal; or, under a sanitizer whose handler was there first, ended by its
  // report (exit status 1, or SIGABRT with abort_on_error). Never carried on.
  INFO("wait status " << status);
  if (WIFSIGNALED(status)) {
    CHECK((WTERMSIG(status) == SIGSEGV || WTERMSIG(status) == SIGABRT));
  } else {
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) != 0);
    CHECK(WEXITSTATUS(status) != 3);
  }
}

TEST_CASE("A process with a thread that blocks SIGSEGV keeps its devices polling, and its "
          "doorbells work",
          "[sim][threaded]") {
  const int status = in_child([] {
    sigset_t segv;
    sigemptyset(&segv);
    sigaddset(&segv, SIGSEGV);
    pthread_sigmask(SIG_BLOCK, &segv, nullptr);  // this thread, and the device threads it starts
    WritePair w(0x33);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // idle: deep sleeps
    if (w.p.a.dev->counters().watched_sleeps != 0) _exit(4);
    if (w.post_write() != Errc::ok) _exit(5);
    Completion c;
    if (!wait_real([&] { return w.p.a.poll_send(&c); }) || c.status != IBV_WC_SUCCESS) _exit(6);
    _exit(std::memcmp(w.dst.data(), w.src.data(), 64) == 0 ? 0 : 7);
  });
  INFO("wait status " << status);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

namespace {
void exit_42(int) {
  _exit(42);
}
}  // namespace

TEST_CASE("A SIGSEGV handler installed before the simulated HCA still gets the faults that are "
          "not doorbells",
          "[sim][threaded]") {
  const int status = in_child([] {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_handler = &exit_42;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, nullptr);
    Pair p(threaded_inproc());
    (void)sim::doorbell_watch_available();
    void* page = mmap(nullptr, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    *static_cast<volatile char*>(page) = 1;
    _exit(3);
  });
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 42);
}

TEST_CASE("A removed watch leaves its page writable", "[sim]") {
  if (!sim::doorbell_watch_available()) {
    WARN("the doorbell watch is off (RNICDV_SIM_DOORBELL_WAKE=poll, or a sanitizer keeps SIGSEGV)");
    return;
  }
  auto* page = static_cast<uint8_t*>(
      mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  REQUIRE(page != MAP_FAILED);
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const int slot = sim::doorbell_watch_add(page, 4096, fds[1]);
  REQUIRE(slot >= 0);
  REQUIRE(sim::doorbell_watch_arm(slot));
  const uint64_t faults = sim::doorbell_watch_faults();
  page[100] = 7;  // faults, is made writable, kicks
  CHECK(page[100] == 7);
  CHECK(sim::doorbell_watch_faults() == faults + 1);
  uint64_t kick = 0;
  CHECK(read(fds[0], &kick, sizeof kick) == sizeof kick);
  CHECK(kick == 1);
  REQUIRE(sim::doorbell_watch_arm(slot));
  sim::doorbell_watch_remove(slot);
  page[200] = 9;  // no fault: the page is writable again
  CHECK(page[200] == 9);
  CHECK(sim::doorbell_watch_faults() == faults + 1);
  close(fds[0]);
  close(fds[1]);
  munmap(page, 4096);
}
