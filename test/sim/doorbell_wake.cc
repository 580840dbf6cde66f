// SPDX-License-Identifier: BSD-3-Clause
// Doorbell wake-up without signals (hw/sim/src/device_thread.cc): an idle device thread
// sleeps with no timer; rnicdv's driver wakes it with its eventfd after a doorbell when it
// published that it sleeps (doorbell/device_wake.h), and a store of libmlx5's into a UAR page
// the application maps wakes it through userfaultfd (hw/sim/src/uar_watch.h).
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "handles.h"
#include "threaded_traffic.h"

using namespace simtest;

TEST_CASE("a sleeping device publishes it, and the driver's kick after a doorbell wakes it",
          "[sim][threaded]") {
  Traffic t;
  REQUIRE(t.p.a.view().wake.asleep != nullptr);
  REQUIRE(t.p.a.view().wake.kick_fd >= 0);
  for (int round = 0; round < 3; ++round) {
    t.wait_idle();
    REQUIRE(t.post() == Errc::ok);  // rings, then kicks
    // Nothing on this thread drives the engine: only the woken device thread can run it.
    CHECK(t.landed());
  }
}

TEST_CASE("a sleeping device has no timer: a doorbell without the kick waits until one comes",
          "[sim][threaded]") {
  Traffic t;
  t.wait_idle();
  t.p.a.kick_after_doorbell = false;
  REQUIRE(t.post() == Errc::ok);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  Completion c;
  CHECK_FALSE(t.p.a.poll_send(&c));  // the device never looked
  CHECK(t.idle());
  t.p.a.kick_if_asleep();
  CHECK(t.landed());
}

TEST_CASE("an idle device thread does not wake while nothing is due", "[sim][threaded]") {
  Pair p(threaded_inproc());
  p.connect();
  // Both devices past the short timed sleeps, into the deep one (watched: no timer of its
  // own), and settled there: the end of the handshake (the last frames, the QPs' last
  // modifies) may still wake each once or twice, rightly.
  auto deep = [](Host& h) { return h.dev->counters().watched_sleeps > 0 && device_asleep(h); };
  uint64_t a0 = 0, b0 = 0;
  REQUIRE(wait_real([&] {
    if (!deep(p.a) || !deep(p.b)) return false;
    a0 = p.a.dev->counters().sleeps;
    b0 = p.b.dev->counters().sleeps;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return deep(p.a) && deep(p.b) && p.a.dev->counters().sleeps == a0 &&
           p.b.dev->counters().sleeps == b0;
  }));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  // A device that polled with 1 ms sleeps would have slept about 300 times.
  CHECK(p.a.dev->counters().sleeps - a0 <= 1);
  CHECK(p.b.dev->counters().sleeps - b0 <= 1);
}

namespace {

// A UAR page as the uverbs shim makes one: a memfd page the application maps, and the
// device's own mapping of it.
struct UarPage {
  int fd = ::memfd_create("uar", MFD_CLOEXEC);
  uint8_t* app = map();
  uint8_t* device = map();
  uint8_t* map() {
    if (fd >= 0 && ::ftruncate(fd, 4096) != 0) return nullptr;
    void* m = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    return m == MAP_FAILED ? nullptr : static_cast<uint8_t*>(m);
  }
  ~UarPage() {
    ::munmap(app, 4096);
    ::munmap(device, 4096);
    ::close(fd);
  }
};

}  // namespace

TEST_CASE("a store into a UAR page the application maps wakes a sleeping device, no signal",
          "[sim][threaded]") {
  if (sim::uar_wake_mechanism() != "userfaultfd") {
    WARN("no userfaultfd here (" << sim::uar_wake_mechanism() << ")");
    return;
  }
  Pair p(threaded_inproc());
  UarPage uar;
  REQUIRE(uar.app);
  REQUIRE(uar.device);
  // Device a's QP rings a register of the attached page, as libmlx5's QPs do.
  must_ok(sim::attach_uar_page(*p.a.dev, uar.app, uar.device));
  alignas(4096) static uint8_t ring[16 * 64 + 64 * 64];
  alignas(64) static uint32_t dbrec[2];
  sim::ExternalQpMemory qm;
  qm.rq_buf = ring;
  qm.rq_wqe_cnt = 16;
  qm.rq_stride = 64;
  qm.sq_buf = ring + 16 * 64;
  qm.sq_wqe_cnt = 64;
  qm.dbrec = dbrec;
  qm.bf_reg = uar.app + 0x800;
  qm.granted.max_send_wr = 32;
  qm.granted.max_recv_wr = 16;
  qm.granted.max_send_sge = 1;
  qm.granted.max_recv_sge = 1;
  p.a.qp = must(sim::create_qp_external(*p.a.dev, *p.a.pd, *p.a.scq->cq, *p.a.rcq->cq, qm));
  p.connect();
  Buffer src = p.a.reg(64, all_remote(), 0x42), dst = p.b.reg(64);
  SendWr wr;
  Sge sge{src.addr(), 64, src.lkey()};
  wr = make_wr(WrOpcode::rdma_write, &sge, 1);
  wr.remote_addr = dst.addr();
  wr.rkey = dst.rkey();
  struct sigaction before[3];
  const int sigs[3] = {SIGSEGV, SIGBUS, SIGTRAP};
  for (int i = 0; i < 3; ++i) REQUIRE(::sigaction(sigs[i], nullptr, &before[i]) == 0);
  for (int round = 0; round < 3; ++round) {
    REQUIRE(wait_real([&] { return p.a.dev->counters().watched_sleeps > 0 && device_asleep(p.a); }));
    const uint64_t watched = p.a.dev->counters().watched_sleeps;
    p.a.kick_after_doorbell = false;  // libmlx5 only stores
    REQUIRE(p.a.post_and_ring(wr) == Errc::ok);
    Completion c;
    REQUIRE(wait_real([&] { return p.a.poll_send(&c); }));
    CHECK(c.status == IBV_WC_SUCCESS);
    CHECK(dst.data()[63] == 0x42);
    CHECK(p.a.dev->counters().watched_sleeps >= watched);
  }
  // Nothing took over a signal on the way.
  for (int i = 0; i < 3; ++i) {
    struct sigaction now {};
    REQUIRE(::sigaction(sigs[i], nullptr, &now) == 0);
    CHECK(now.sa_handler == before[i].sa_handler);
  }
  p.a.qp.reset();
  sim::detach_uar_page(*p.a.dev, uar.app);
}
