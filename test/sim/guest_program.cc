// SPDX-License-Identifier: BSD-3-Clause
// The simulated HCA as a guest in other people's programs: it takes over no signal, so
// programs that handle, block or debug signals run unchanged with devices open and busy. Each
// case uses threaded devices that went idle (their threads asleep, as after a pause in
// traffic) and then rings them, which is where the device used to fault on purpose.
#include <catch2/catch.hpp>

#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "child_process.h"
#include "threaded_traffic.h"

using namespace simtest;

namespace {

std::atomic<int> g_segv{0};
uint8_t* g_guard = nullptr;

// A program's own SIGSEGV handler: a guard page it opens on first touch.
void open_guard_page(int, siginfo_t* si, void*) {
  g_segv.fetch_add(1);
  if (si->si_addr >= g_guard && si->si_addr < g_guard + 4096)
    ::mprotect(g_guard, 4096, PROT_READ | PROT_WRITE);
}

struct Handlers {
  struct sigaction saved[3];
  static constexpr int kSigs[3] = {SIGSEGV, SIGBUS, SIGTRAP};
  Handlers() {
    for (int i = 0; i < 3; ++i) REQUIRE(::sigaction(kSigs[i], nullptr, &saved[i]) == 0);
  }
  ~Handlers() {
    for (int i = 0; i < 3; ++i) ::sigaction(kSigs[i], &saved[i], nullptr);
  }
  // Every handler is still what `expected` holds.
  static void check_unchanged(const struct sigaction (&expected)[3]) {
    for (int i = 0; i < 3; ++i) {
      struct sigaction now {};
      REQUIRE(::sigaction(kSigs[i], nullptr, &now) == 0);
      INFO("signal " << kSigs[i]);
      CHECK(now.sa_handler == expected[i].sa_handler);
      CHECK((now.sa_flags & SA_SIGINFO) == (expected[i].sa_flags & SA_SIGINFO));
    }
  }
};

void install_guard_handler() {
  struct sigaction sa {};
  sa.sa_sigaction = open_guard_page;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  REQUIRE(::sigaction(SIGSEGV, &sa, nullptr) == 0);
}

// The program's guard-page trick: touching the page faults once, the handler opens it.
void use_guard_page() {
  g_guard = static_cast<uint8_t*>(
      ::mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  REQUIRE(g_guard != MAP_FAILED);
  const int before = g_segv.load();
  *reinterpret_cast<volatile uint8_t*>(g_guard + 100) = 7;
  CHECK(g_guard[100] == 7);
  CHECK(g_segv.load() == before + 1);
  ::munmap(g_guard, 4096);
  g_guard = nullptr;
}

}  // namespace

TEST_CASE("opening and running devices leaves the program's signal handlers as they were") {
  Handlers h;
  Traffic t;
  t.wait_idle();
  REQUIRE(t.post() == Errc::ok);
  CHECK(t.landed());
  Handlers::check_unchanged(h.saved);
}

TEST_CASE("a SIGSEGV handler installed before the devices open keeps every fault, and doorbells "
          "raise none") {
  Handlers h;
  install_guard_handler();
  struct sigaction mine[3];
  for (int i = 0; i < 3; ++i) REQUIRE(::sigaction(Handlers::kSigs[i], nullptr, &mine[i]) == 0);
  g_segv = 0;
  Traffic t;
  for (int round = 0; round < 3; ++round) {
    t.wait_idle();
    REQUIRE(t.post() == Errc::ok);
    CHECK(t.landed());
  }
  CHECK(g_segv.load() == 0);  // no doorbell faulted
  use_guard_page();
  Handlers::check_unchanged(mine);
}

TEST_CASE("a SIGSEGV handler installed after the device went idle gets only the program's faults") {
  Handlers h;
  Traffic t;
  t.wait_idle();
  install_guard_handler();
  g_segv = 0;
  for (int round = 0; round < 3; ++round) {
    REQUIRE(t.post() == Errc::ok);
    CHECK(t.landed());
    t.wait_idle();
  }
  CHECK(g_segv.load() == 0);
  use_guard_page();
}

TEST_CASE("a worker created while its creator blocks every signal posts to an idle device") {
  Traffic t;
  t.wait_idle();
  sigset_t all, old;
  sigfillset(&all);
  REQUIRE(::pthread_sigmask(SIG_BLOCK, &all, &old) == 0);
  Errc posted = Errc::internal;
  std::thread worker([&] { posted = t.post(); });  // inherits the full mask
  worker.join();
  REQUIRE(::pthread_sigmask(SIG_SETMASK, &old, nullptr) == 0);
  REQUIRE(posted == Errc::ok);
  CHECK(t.landed());
}

namespace {
Traffic* g_traffic = nullptr;
Errc g_posted_in_handler = Errc::internal;
void post_from_handler(int) {
  g_posted_in_handler = g_traffic->post();
}
}  // namespace

TEST_CASE("a post from a signal handler whose mask blocks everything reaches an idle device") {
  Handlers h;
  Traffic t;
  g_traffic = &t;
  struct sigaction sa {}, old {};
  sa.sa_handler = post_from_handler;
  sigfillset(&sa.sa_mask);
  REQUIRE(::sigaction(SIGUSR1, &sa, &old) == 0);
  t.wait_idle();
  g_posted_in_handler = Errc::internal;
  REQUIRE(::raise(SIGUSR1) == 0);
  ::sigaction(SIGUSR1, &old, nullptr);
  REQUIRE(g_posted_in_handler == Errc::ok);
  CHECK(t.landed());
  g_traffic = nullptr;
}

TEST_CASE("a process whose threads all block SIGSEGV keeps deep sleeps and prompt doorbells") {
  // In a child, so that every thread (device threads included) starts with SIGSEGV blocked.
  const pid_t pid = ::fork();
  if (pid == 0) {
    sigset_t segv;
    sigemptyset(&segv);
    sigaddset(&segv, SIGSEGV);
    ::pthread_sigmask(SIG_BLOCK, &segv, nullptr);
    int code = 0;
    {
      Traffic t;
      const auto begin = std::chrono::steady_clock::now();
      for (int round = 0; round < 20 && code == 0; ++round) {
        if (!wait_real([&] { return t.idle(); }, 10)) code = 3;
        if (code == 0 && t.post() != Errc::ok) code = 4;
        if (code == 0 && !t.landed()) code = 5;
      }
      // Twenty doorbells, each after the device went to sleep: a device that polled at a
      // millisecond would still pass; one that could not be woken would take seconds.
      if (code == 0 && std::chrono::steady_clock::now() - begin > std::chrono::seconds(5)) code = 6;
      const uint64_t sleeps = t.p.a.dev->counters().sleeps;
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      // Idle: at most a few more sleeps, not one per millisecond.
      if (code == 0 && t.p.a.dev->counters().sleeps - sleeps > 6) code = 7;
    }
    ::_exit(code);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  INFO("child exit status " << (WIFEXITED(status) ? WEXITSTATUS(status) : -1));
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

namespace {
// LeakSanitizer's check at a forked child's exit cannot see the parent's threads' stacks and
// would report what only they referenced: the children below exit without it (LSan calls
// this hook when the program defines it).
volatile int g_forked_child = 0;
}  // namespace
extern "C" int __lsan_is_turned_off() {
  return g_forked_child;
}

TEST_CASE("a child of fork() that drops its copy of a threaded device exits at once") {
  sim::FabricConfig fc;
  fc.mode = sim::ExecMode::threaded;
  fc.wire = sim::WireKind::inproc;
  auto fabric = sim::Fabric::create(fc);
  REQUIRE(fabric.is_ok());
  auto dev = fabric.value()->add_device({});
  REQUIRE(dev.is_ok());
  std::shared_ptr<sim::Device> device = std::move(dev).value();  // the only reference
  REQUIRE(device.use_count() == 1);
  for (int i = 0; i < 20; ++i) {
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      g_forked_child = 1;
      // The device's thread is the parent's: its destructor must neither join it nor wait
      // for a lock it held at the fork.
      device.reset();
      std::exit(0);
    }
    // Its exit status, or -1 if it has not ended within 5 s (then killed and reaped).
    const int status = rnicdv::test::Child::adopt(child).wait(std::chrono::seconds(5));
    INFO("child " << i);
    REQUIRE(status == 0);  // ended at once (not -1), exited (not 128 + a signal), with 0
  }
  CHECK(device->counters().sleeps > 0);  // the parent's device still runs
}

TEST_CASE("a child of fork() can use nothing of its parent's devices, and opens its own") {
  FabricOptions fo;
  fo.mode = sim::ExecMode::threaded;
  fo.wire = sim::WireKind::udp;  // the sockets are shared with a child: the wire it could reach
  Pair p(fo);
  p.connect();
  Buffer child_data = p.a.reg(4096, all_remote(), 0xc1);
  Buffer parent_data = p.a.reg(4096, all_remote(), 0xd2);
  Buffer dst = p.b.reg(8192);
  REQUIRE(p.b.post_recv(dst, 0, 4096, 1) == Errc::ok);
  REQUIRE(p.b.post_recv(dst, 4096, 4096, 2) == Errc::ok);

  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    g_forked_child = 1;
    int code = 0;
    // The control path says why.
    auto mr = p.a.dev->reg_mr(*p.a.pd, child_data.data(), 4096, all_remote());
    if (mr || mr.status().code() != Errc::access_denied ||
        mr.status().message().find("child of fork()") == std::string::npos)
      code |= 1;
    hw::QpAttr attr;
    attr.state = hw::QpState::err;
    if (p.a.qp->modify(attr, hw::qp_attr::state)) code |= 2;
    if (p.a.dev->create_cq(16)) code |= 4;
    // A SEND posted and rung here, and the engine asked to run: nothing leaves.
    Sge sge{child_data.addr(), 100, child_data.lkey()};
    (void)p.a.post_and_ring(make_wr(WrOpcode::send, &sge, 1, 77));
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
    while (std::chrono::steady_clock::now() < until) p.fabric->step();
    // Devices of its own work.
    {
      Pair own(fo);
      own.connect();
      Buffer s = own.a.reg(4096, all_remote(), 0x3c);
      Buffer d = own.b.reg(4096);
      if (own.b.post_recv(d, 0, 4096, 5) != Errc::ok) code |= 8;
      Sge one{s.addr(), 64, s.lkey()};
      if (own.a.post_and_ring(make_wr(WrOpcode::send, &one, 1, 6)) != Errc::ok) code |= 8;
      Completion c{};
      if (!own.run_until([&] { return own.b.rcq->poll(&c); }, 10'000'000'000ull) ||
          c.status != IBV_WC_SUCCESS || d.data()[63] != 0x3c)
        code |= 16;
    }
    ::_exit(code);
  }
  CHECK(rnicdv::test::Child::adopt(pid).wait(std::chrono::seconds(60)) == 0);

  // The parent's connection carries the parent's SEND, and only it.
  Sge sge{parent_data.addr(), 100, parent_data.lkey()};
  REQUIRE(p.a.post_and_ring(make_wr(WrOpcode::send, &sge, 1, 9)) == Errc::ok);
  CHECK(p.wait_send(p.a).status == IBV_WC_SUCCESS);
  Completion c{};
  REQUIRE(p.run_until([&] { return p.b.rcq->poll(&c); }, 10'000'000'000ull));
  CHECK(c.status == IBV_WC_SUCCESS);
  CHECK(c.byte_len == 100);
  CHECK(dst.data()[0] == 0xd2);
  CHECK(dst.data()[99] == 0xd2);
  Completion extra{};
  CHECK_FALSE(p.run_until([&] { return p.b.rcq->poll(&extra); }, 200'000'000ull));
}
