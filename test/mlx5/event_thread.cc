// SPDX-License-Identifier: BSD-3-Clause
// The mlx5 backend's event thread (hw/mlx5/src/mlx5_event_thread.h) on plain eventfds: it
// exists only between the first watch and the last unwatch, calls a handler while its
// descriptor is readable, survives being stopped from its own handler, and stops polling a
// descriptor whose handler reports it failed.
#include <catch2/catch.hpp>

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "mlx5_event_thread.h"
#include "proc_threads.h"

using namespace rnicdv;
using namespace rnicdv::hw::mlx5;
using namespace std::chrono_literals;

namespace {

size_t event_threads() {
  return rnicdv::test::threads_named(EventThread::kThreadName);
}

template <class Pred>
bool eventually(Pred pred) {
  const auto end = std::chrono::steady_clock::now() + 5s;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

bool readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

struct EventFd {
  int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  ~EventFd() { ::close(fd); }
  void signal() const {
    const uint64_t one = 1;
    REQUIRE(::write(fd, &one, sizeof one) == sizeof one);
  }
  bool take() const {
    uint64_t count = 0;
    return ::read(fd, &count, sizeof count) == sizeof count;
  }
};

}  // namespace

TEST_CASE("the event thread runs only between the first watch and the last unwatch") {
  EventFd a, b;
  REQUIRE(a.fd >= 0);
  REQUIRE(b.fd >= 0);
  EventThread thread("test0");
  CHECK_FALSE(thread.running());
  CHECK(event_threads() == 0);

  std::atomic<int> calls_a{0}, calls_b{0};
  auto wa = thread.watch(
      a.fd,
      [&] {
        while (a.take()) ++calls_a;
        return true;
      },
      "a");
  REQUIRE(wa.is_ok());
  CHECK(thread.running());
  CHECK(event_threads() == 1);
  auto wb = thread.watch(
      b.fd,
      [&] {
        while (b.take()) ++calls_b;
        return true;
      },
      "b");
  REQUIRE(wb.is_ok());
  CHECK(event_threads() == 1);  // one thread for every descriptor

  a.signal();
  CHECK(eventually([&] { return calls_a == 1; }));
  b.signal();
  CHECK(eventually([&] { return calls_b == 1; }));
  CHECK(calls_a == 1);

  thread.unwatch(wa.value());
  CHECK(thread.running());
  a.signal();  // no longer watched
  b.signal();
  CHECK(eventually([&] { return calls_b == 2; }));
  CHECK(calls_a == 1);
  thread.unwatch(wb.value());
  CHECK_FALSE(thread.running());  // stopped and joined before unwatch returned
  // The kernel wakes pthread_join before it removes the task: it may be listed a moment more.
  CHECK(eventually([] { return event_threads() == 0; }));
}

TEST_CASE("a handler that takes back the last descriptor ends the thread without joining itself") {
  EventFd a;
  EventThread thread("test1");
  uint64_t id = 0;
  std::atomic<bool> done{false};
  auto w = thread.watch(
      a.fd,
      [&] {
        a.take();
        thread.unwatch(id);  // on the thread itself
        done = true;
        return true;
      },
      "a");
  REQUIRE(w.is_ok());
  id = w.value();
  a.signal();
  REQUIRE(eventually([&] { return done.load(); }));
  CHECK_FALSE(thread.running());
  CHECK(eventually([] { return event_threads() == 0; }));

  // A new watch starts a new thread.
  std::atomic<int> calls{0};
  auto again = thread.watch(
      a.fd,
      [&] {
        while (a.take()) ++calls;
        return true;
      },
      "a again");
  REQUIRE(again.is_ok());
  a.signal();
  CHECK(eventually([&] { return calls == 1; }));
  thread.unwatch(again.value());
  CHECK_FALSE(thread.running());
  CHECK(eventually([] { return event_threads() == 0; }));
}

TEST_CASE("a descriptor whose handler reports a failure is no longer polled") {
  EventFd a;
  EventThread thread("test2");
  std::atomic<int> calls{0};
  auto w = thread.watch(
      a.fd,
      [&] {
        ++calls;
        return false;  // leaves the descriptor readable
      },
      "a");
  REQUIRE(w.is_ok());
  a.signal();
  REQUIRE(eventually([&] { return calls == 1; }));
  std::this_thread::sleep_for(100ms);
  CHECK(calls == 1);
  CHECK(readable(a.fd));
  CHECK(thread.running());  // still counted until unwatched
  thread.unwatch(w.value());
  CHECK_FALSE(thread.running());
}

TEST_CASE("a ready fd is readable exactly between set and clear") {
  auto ready = ReadyFd::create("test");
  REQUIRE(ready.is_ok());
  CHECK_FALSE(readable(ready->fd()));
  ready->set();
  CHECK(readable(ready->fd()));
  ready->clear();
  CHECK_FALSE(readable(ready->fd()));
  ready->clear();  // already clear: no effect, no block
  CHECK_FALSE(readable(ready->fd()));
}
