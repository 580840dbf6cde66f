// SPDX-License-Identifier: BSD-3-Clause
// A registered region holds its pages, as ib_umem_get's pin does on a real HCA: whatever the
// program maps over the range afterwards is never written or read by the device, and the
// device's view of the registered pages stays valid until deregistration. The same cases
// through the uverbs shim, with every way of replacing a range: test/verbs/registration_pins.cc.
#include <catch2/catch.hpp>

#include <linux/capability.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "child_process.h"
#include "pages.h"
#include "pinned_memory.h"
#include "sim_harness.h"

using namespace simtest;

namespace {

// Drops CAP_IPC_LOCK from the effective set, which lifts RLIMIT_MEMLOCK for the pinning
// the kernel charges (true if the process does not hold it afterwards).
// `*had` says whether it held it: only then is the child's pinning the only pinning the limit
// counts (the kernel charges io_uring pins per user, and pins made with CAP_IPC_LOCK not at
// all); without it, other processes of the user may hold part of the budget.
bool drop_ipc_lock(bool* had) {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  if (::syscall(SYS_capget, &hdr, data) != 0) return false;
  *had = (data[CAP_IPC_LOCK / 32].effective & (1u << (CAP_IPC_LOCK % 32))) != 0;
  data[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
  if (::syscall(SYS_capset, &hdr, data) != 0) return false;
  return true;
}

// Host B registers `pages` (filled with 0x5a) for every remote access; A has a local buffer.
struct PinnedPair {
  Pair p;
  Pages pages{8192};
  std::unique_ptr<hw::Mr> mr;
  Buffer local;

  PinnedPair() {
    REQUIRE(sim::PinnedMemory::supported());
    p.connect();
    std::memset(pages.p, 0x5a, pages.len);
    mr = must(p.b.dev->reg_mr(*p.b.pd, pages.p, pages.len, all_remote()));
    local = p.a.reg(16384, all_remote(), 0x11);
  }
  Completion run(const SendWr& wr) {
    REQUIRE(p.a.post_and_ring(wr) == Errc::ok);
    return p.wait_send(p.a);
  }
  SendWr rdma(WrOpcode op, uint32_t len, uint64_t local_off = 0) {
    static Sge sge;
    sge = Sge{local.addr(local_off), len, local.lkey()};
    SendWr wr = make_wr(op, &sge, 1);
    wr.remote_addr = pages.addr();
    wr.rkey = mr ? mr->rkey() : 0;
    return wr;
  }
  // RDMA READ of the region's first `len` bytes into local[8192..]: what the device sees.
  bool device_sees(uint8_t v, uint32_t len) {
    std::memset(local.data() + 8192, 0, len);
    const Completion c = run(rdma(WrOpcode::rdma_read, len, 8192));
    if (c.status != IBV_WC_SUCCESS) return false;
    for (uint32_t i = 0; i < len; ++i)
      if (local.data()[8192 + i] != v) return false;
    return true;
  }
  void expect_healthy() {
    CHECK(p.a.qp->state() == hw::QpState::rts);
    CHECK(p.b.qp->state() == hw::QpState::rts);
    CHECK(p.b.counters().host_memory_faults == 0);
    hw::AsyncEvent ev;
    CHECK_FALSE(p.b.dev->next_async_event(&ev));
  }
};

}  // namespace

TEST_CASE("a WRITE into a region mapped over after registration lands in the registered pages") {
  PinnedPair s;
  s.pages.replace();
  CHECK(s.run(s.rdma(WrOpcode::rdma_write, 3000)).status == IBV_WC_SUCCESS);
  // The program's new memory is untouched; the device's view has the WRITE.
  CHECK(s.pages.all(0, s.pages.len));
  CHECK(s.device_sees(0x11, 3000));
  s.expect_healthy();
}

TEST_CASE("a READ of a region unmapped after registration returns the registered pages") {
  PinnedPair s;
  s.pages.unmap();
  CHECK(s.device_sees(0x5a, 6000));
  s.expect_healthy();
}

TEST_CASE("a READ of a region mapped over discloses nothing of the new mapping") {
  PinnedPair s;
  s.pages.replace();
  std::memset(s.pages.p, 0xee, s.pages.len);  // the program's secret, in the new pages
  CHECK(s.device_sees(0x5a, 8192));
  s.expect_healthy();
}

TEST_CASE("a region made inaccessible to the program stays accessible to the device") {
  PinnedPair s;
  s.pages.protect(PROT_NONE);
  CHECK(s.device_sees(0x5a, 3000));
  s.pages.protect(PROT_READ);
  SendWr wr = s.rdma(WrOpcode::atomic_fetch_add, 8);
  wr.compare_add = 1;
  CHECK(s.run(wr).status == IBV_WC_SUCCESS);
  uint64_t word = 0;
  std::memcpy(&word, s.pages.p, 8);
  CHECK(word == 0x5a5a5a5a5a5a5a5bull);  // the same pages: the program sees the atomic
  s.expect_healthy();
}

TEST_CASE("a receive buffer mapped over after posting: the SEND lands in the registered pages") {
  PinnedPair s;
  Sge rsge{s.pages.addr(), 4096, s.mr->lkey()};
  RecvWr rwr{9, &rsge, 1};
  REQUIRE(s.p.b.post_recv(rwr) == Errc::ok);
  s.pages.replace();
  Sge sge{s.local.addr(), 2000, s.local.lkey()};
  CHECK(s.run(make_wr(WrOpcode::send, &sge, 1)).status == IBV_WC_SUCCESS);
  Completion c{};
  REQUIRE(s.p.run_until([&] { return s.p.b.rcq->poll(&c); }));
  CHECK(c.status == IBV_WC_SUCCESS);
  CHECK(s.pages.all(0, s.pages.len));
  CHECK(s.device_sees(0x11, 2000));
  s.expect_healthy();
}

TEST_CASE("a SEND from a local buffer mapped over after registration sends the registered bytes") {
  Pair p;
  p.connect();
  Pages pages(4096);
  std::memset(pages.p, 0x42, pages.len);
  auto mr = must(p.a.dev->reg_mr(*p.a.pd, pages.p, pages.len, all_remote()));
  Buffer dst = p.b.reg(4096);
  REQUIRE(p.b.post_recv(dst, 0, 4096) == Errc::ok);
  pages.replace();
  std::memset(pages.p, 0xee, pages.len);
  Sge sge{pages.addr(), 1000, mr->lkey()};
  REQUIRE(p.a.post_and_ring(make_wr(WrOpcode::send, &sge, 1)) == Errc::ok);
  CHECK(p.wait_send(p.a).status == IBV_WC_SUCCESS);
  Completion c{};
  REQUIRE(p.run_until([&] { return p.b.rcq->poll(&c); }));
  CHECK(c.status == IBV_WC_SUCCESS);
  for (size_t i = 0; i < 1000; ++i) REQUIRE(dst.data()[i] == 0x42);
  CHECK(p.a.counters().host_memory_faults == 0);
}

TEST_CASE("a deregistered region's key and pages are gone; its range registers again") {
  PinnedPair s;
  const uint32_t old_rkey = s.mr->rkey();
  s.mr.reset();
  SendWr wr = s.rdma(WrOpcode::rdma_write, 64);
  wr.rkey = old_rkey;
  CHECK(s.run(wr).status == IBV_WC_REM_ACCESS_ERR);
  CHECK(s.pages.all(0x5a, s.pages.len));
}

TEST_CASE("a region registered again over replaced memory holds the new pages") {
  PinnedPair s;
  s.mr.reset();
  s.pages.replace();
  s.mr = must(s.p.b.dev->reg_mr(*s.p.b.pd, s.pages.p, s.pages.len, all_remote()));
  CHECK(s.run(s.rdma(WrOpcode::rdma_write, 4096)).status == IBV_WC_SUCCESS);
  CHECK(s.pages.all(0x11, 4096));
  CHECK(s.pages.p[4096] == 0);
  s.expect_healthy();
}

TEST_CASE("pinning is charged to RLIMIT_MEMLOCK as the kernel charges ib_umem_get") {
  REQUIRE(sim::PinnedMemory::supported());
  // In a child: it drops CAP_IPC_LOCK (a privileged test runner has it, and it lifts the
  // limit) and lowers its limit to 1 MiB.
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int code = 0;
    rlimit lim{};
    if (::getrlimit(RLIMIT_MEMLOCK, &lim) != 0) ::_exit(10);
    lim.rlim_cur = lim.rlim_max = std::min<rlim_t>(lim.rlim_max, 1u << 20);
    bool privileged = false;
    if (!drop_ipc_lock(&privileged) || ::setrlimit(RLIMIT_MEMLOCK, &lim) != 0) ::_exit(10);
    privileged = privileged && lim.rlim_cur == (1u << 20);
    {
      Pair p;
      Pages small(512 * 1024), large(2u << 20), again(768 * 1024);
      auto b = p.a.dev->reg_mr(*p.a.pd, large.p, large.len, all_remote());
      if (b || b.status().code() != Errc::no_resources ||
          b.status().message().find("RLIMIT_MEMLOCK") == std::string::npos)
        code |= 2;
      if (privileged) {
        auto a = p.a.dev->reg_mr(*p.a.pd, small.p, small.len, all_remote());
        if (!a) code |= 1;
        // 512 KiB + 768 KiB is over the limit; with the first region gone it fits.
        if (p.a.dev->reg_mr(*p.a.pd, again.p, again.len, all_remote())) code |= 4;
        if (a) a.value().reset();
        if (!p.a.dev->reg_mr(*p.a.pd, again.p, again.len, all_remote())) code |= 8;
      }
    }
    ::_exit(code);
  }
  CHECK(rnicdv::test::Child::adopt(pid).wait(std::chrono::seconds(60)) == 0);
}
