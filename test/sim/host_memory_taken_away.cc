// SPDX-License-Identifier: BSD-3-Clause
// Memory the application takes away while the device uses it: rings, doorbell records and a
// UAR mapping placed by someone else (as libmlx5 places them through the uverbs shim), and
// registered regions accessed by address. A real HCA keeps working on pinned pages and never
// brings the host down; the simulated device must not either. It stops using that memory, moves what used it
// to an error state with an asynchronous event, counts it (host_memory_faults), and every
// other object of the device keeps working.
#include <catch2/catch.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <thread>
#include <vector>

#include "handles.h"
#include "host_access.h"
#include "pages.h"
#include "sim_harness.h"

using namespace simtest;

namespace {

// A UAR page as the uverbs shim makes one: a memfd page the application maps (`app`) and
// the device reads through a mapping of its own (`device`).
struct UarPage {
  int fd = -1;
  uint8_t* app = nullptr;
  uint8_t* device = nullptr;
  UarPage() {
    fd = ::memfd_create("uar", MFD_CLOEXEC);
    REQUIRE(fd >= 0);
    REQUIRE(::ftruncate(fd, 4096) == 0);
    app = map();
    device = map();
  }
  ~UarPage() {
    if (app) ::munmap(app, 4096);
    ::munmap(device, 4096);
    ::close(fd);
  }
  UarPage(const UarPage&) = delete;
  UarPage& operator=(const UarPage&) = delete;
  uint8_t* map() const {
    void* m = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    REQUIRE(m != MAP_FAILED);
    return static_cast<uint8_t*>(m);
  }
  void unmap_app() {
    REQUIRE(::munmap(app, 4096) == 0);
    app = nullptr;
  }
};

// A QP and CQ in pages the test owns, as the uverbs shim hands libmlx5's memory to the device.
struct PlacedHost {
  Pages qp_buf{16 * 64 + 64 * 64};  // RQ: 16 x 64 B, then SQ: 64 BBs
  Pages qp_dbr{64};
  Pages cq_buf{64 * 64};
  Pages cq_dbr{64};
  UarPage uar;
  Host host;

  void create(const std::shared_ptr<sim::Device>& dev) {
    host.dev = dev;
    host.pd = must(dev->alloc_pd());
    for (uint32_t i = 0; i < 64; ++i) cq_buf.p[i * 64 + 63] = 0xF0;  // libmlx5's initial owner
    sim::ExternalCqMemory cm;
    cm.buf = cq_buf.p;
    cm.cqe_cnt = 64;
    cm.cqe_size = 64;
    cm.dbrec = reinterpret_cast<uint32_t*>(cq_dbr.p);
    cm.cq_uar = uar.app;
    host.scq->cq = must(sim::create_cq_external(*dev, cm));
    host.rcq = host.scq;
    must_ok(sim::attach_uar_page(*dev, uar.app, uar.device));
    sim::ExternalQpMemory qm;
    qm.rq_buf = qp_buf.p;
    qm.rq_wqe_cnt = 16;
    qm.rq_stride = 64;
    qm.sq_buf = qp_buf.p + 16 * 64;
    qm.sq_wqe_cnt = 64;
    qm.dbrec = reinterpret_cast<uint32_t*>(qp_dbr.p);
    qm.bf_reg = uar.app + 0x800;
    qm.bf_size = 256;
    qm.granted.max_send_wr = 32;
    qm.granted.max_recv_wr = 16;
    qm.granted.max_send_sge = 4;
    qm.granted.max_recv_sge = 4;
    qm.granted.max_inline_data = 64;
    host.qp = must(sim::create_qp_external(*dev, *host.pd, *host.scq->cq, *host.scq->cq, qm));
  }
};

// A placed host A connected to an ordinary host B, with one WRITE that works first.
struct PlacedPair {
  std::shared_ptr<sim::Fabric> fabric = make_fabric();
  std::shared_ptr<sim::Device> dev_a = must(fabric->add_device());
  std::shared_ptr<sim::Device> dev_b = must(fabric->add_device());
  PlacedHost a;
  Host b;
  Buffer abuf, bbuf;

  PlacedPair() {
    a.create(dev_a);
    b.init_on(dev_b, Pair::default_host());
    connect(a.host, b);
    abuf = a.host.reg(4096);
    bbuf = b.reg(4096);
    REQUIRE(a.host.post_and_ring(write_wr()) == Errc::ok);
    Completion c{};
    REQUIRE(fabric->run_until([&] { return a.host.poll_send(&c); }));
    REQUIRE(c.status == IBV_WC_SUCCESS);
  }
  SendWr write_wr() {
    static Sge sge;
    sge = Sge{abuf.addr(), 256, abuf.lkey()};
    SendWr w = make_wr(WrOpcode::rdma_write, &sge, 1);
    w.remote_addr = bbuf.addr();
    w.rkey = bbuf.rkey();
    return w;
  }
  bool run_until_a_fails() {
    return fabric->run_until([&] { return a.host.qp->state() == hw::QpState::err; });
  }
  // The events device A raised, in order.
  std::vector<hw::AsyncEvent> events_a() {
    std::vector<hw::AsyncEvent> out;
    hw::AsyncEvent ev;
    while (dev_a->next_async_event(&ev)) out.push_back(ev);
    return out;
  }
  // Another QP pair on the same two devices still runs a SEND.
  void others_still_work() {
    Host a2, b2;
    a2.init_on(dev_a, Pair::default_host());
    b2.init_on(dev_b, Pair::default_host());
    connect(a2, b2);
    Buffer src = a2.reg(64, all_remote(), 0x5a);
    Buffer dst = b2.reg(64);
    REQUIRE(b2.post_recv(dst, 0, 64) == Errc::ok);
    Sge sge{src.addr(), 64, src.lkey()};
    REQUIRE(a2.post_and_ring(make_wr(WrOpcode::send, &sge, 1)) == Errc::ok);
    Completion c{};
    REQUIRE(fabric->run_until([&] { return b2.rcq->poll(&c); }));
    CHECK(c.status == IBV_WC_SUCCESS);
    CHECK(dst.data()[63] == 0x5a);
  }
};

bool has_event(const std::vector<hw::AsyncEvent>& evs, hw::AsyncEventType t, uint32_t qpn,
               uint32_t cqn) {
  for (const auto& e : evs)
    if (e.type == t && e.qpn == qpn && e.cqn == cqn) return true;
  return false;
}

}  // namespace

TEST_CASE("a device access to unmapped, protected or truncated memory fails instead of faulting") {
  REQUIRE(sim::host_access_supported());
  const uint64_t before = sim::host_access_faults();
  Pages page(4096);
  uint8_t buf[16] = {};
  page.p[5] = 42;
  CHECK(sim::host_read(buf, page.p, 16));
  CHECK(buf[5] == 42);

  page.protect(PROT_READ);
  CHECK(sim::host_read(buf, page.p, 16));         // reading is allowed
  CHECK_FALSE(sim::host_place(page.p, buf, 16));  // writing is not
  uint64_t orig = 0;
  CHECK_FALSE(sim::host_atomic64(reinterpret_cast<uint64_t*>(page.p), sim::HostAtomic::fetch_add,
                                 1, 0, &orig));
  page.protect(PROT_NONE);
  uint32_t word = 0;
  CHECK_FALSE(sim::host_load32(reinterpret_cast<uint32_t*>(page.p), &word));
  page.unmap();
  CHECK_FALSE(sim::host_read(buf, page.p, 16));
  CHECK_FALSE(sim::host_place(page.p + 100, buf, 16));
  CHECK_FALSE(sim::host_store32(reinterpret_cast<uint32_t*>(page.p), 1));

  // SIGBUS territory: the second page of a mapping past the end of its 4 KiB file.
  FILE* f = std::tmpfile();
  REQUIRE(f);
  REQUIRE(::ftruncate(fileno(f), 4096) == 0);
  void* m = ::mmap(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fileno(f), 0);
  REQUIRE(m != MAP_FAILED);
  auto* file_page = static_cast<uint8_t*>(m);
  CHECK(sim::host_place(file_page, buf, 16));
  CHECK_FALSE(sim::host_read(buf, file_page + 4096, 16));
  ::munmap(m, 8192);
  std::fclose(f);

  CHECK(sim::host_access_faults() - before == 7);
}

TEST_CASE("a device atomic on registered memory is atomic across devices, and fetches the original") {
  alignas(8) static uint64_t word = 5;
  uint64_t orig = 0;
  REQUIRE(sim::host_atomic64(&word, sim::HostAtomic::fetch_add, 3, 0, &orig));
  CHECK(orig == 5);
  CHECK(word == 8);
  REQUIRE(sim::host_atomic64(&word, sim::HostAtomic::compare_swap, 100, 7, &orig));
  CHECK(orig == 8);  // compare failed: unchanged
  CHECK(word == 8);
  REQUIRE(sim::host_atomic64(&word, sim::HostAtomic::compare_swap, 100, 8, &orig));
  CHECK(orig == 8);
  CHECK(word == 100);
  // Four threads, as four devices' responders would: no increment is lost.
  word = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([] {
      for (int i = 0; i < 2000; ++i) {
        uint64_t o = 0;
        REQUIRE(sim::host_atomic64(&word, sim::HostAtomic::fetch_add, 1, 0, &o));
      }
    });
  for (auto& t : threads) t.join();
  CHECK(word == 8000);
}

TEST_CASE("an SQ ring taken away: the QP goes to ERR with QP_FATAL and the device lives on") {
  PlacedPair s;
  // Posted and rung; the ring is taken away before the device (which runs only inside the
  // deterministic fabric's steps) fetches the WQE.
  REQUIRE(s.a.host.post_and_ring(s.write_wr()) == Errc::ok);
  s.a.qp_buf.protect(PROT_NONE);
  REQUIRE(s.run_until_a_fails());
  const auto evs = s.events_a();
  CHECK(has_event(evs, hw::AsyncEventType::qp_fatal, s.a.host.qpn(), 0));
  CHECK(s.dev_a->counters().host_memory_faults == 1);
  // The device reads the ring no more: giving it back changes nothing, and more doorbells
  // are not executed.
  s.a.qp_buf.protect(PROT_READ | PROT_WRITE);
  const uint64_t fetched = s.dev_a->counters().wqes_fetched;
  REQUIRE(s.a.host.post_and_ring(s.write_wr()) == Errc::ok);
  while (s.fabric->step()) {
  }
  CHECK(s.dev_a->counters().wqes_fetched == fetched);
  CHECK(s.dev_a->counters().host_memory_faults == 1);
  s.others_still_work();
}

TEST_CASE("a receive queue taken away: the sender gets a NAK, the QP goes to ERR") {
  PlacedPair s;
  REQUIRE(s.a.host.post_recv(s.abuf, 0, 64) == Errc::ok);
  s.a.qp_buf.unmap();
  Sge sge{s.bbuf.addr(), 64, s.bbuf.lkey()};
  REQUIRE(s.b.post_and_ring(make_wr(WrOpcode::send, &sge, 1)) == Errc::ok);
  Completion c{};
  REQUIRE(s.fabric->run_until([&] { return s.b.poll_send(&c); }));
  CHECK(c.status == IBV_WC_REM_OP_ERR);
  CHECK(s.a.host.qp->state() == hw::QpState::err);
  CHECK(has_event(s.events_a(), hw::AsyncEventType::qp_fatal, s.a.host.qpn(), 0));
  CHECK(s.dev_a->counters().host_memory_faults == 1);
  s.others_still_work();
}

TEST_CASE("a doorbell record taken away: the QP goes to ERR with QP_FATAL") {
  PlacedPair s;
  REQUIRE(s.a.host.post(s.write_wr()) == Errc::ok);
  s.a.qp_dbr.unmap();
  s.a.host.write_register();  // the device reads the record the doorbell points it to
  REQUIRE(s.run_until_a_fails());
  CHECK(has_event(s.events_a(), hw::AsyncEventType::qp_fatal, s.a.host.qpn(), 0));
  CHECK(s.dev_a->counters().host_memory_faults == 1);
  s.others_still_work();
}

TEST_CASE("a CQ ring made read-only: CQ_ERR, and its QPs go to ERR") {
  PlacedPair s;
  s.a.cq_buf.protect(PROT_READ);
  REQUIRE(s.a.host.post_and_ring(s.write_wr()) == Errc::ok);
  REQUIRE(s.run_until_a_fails());
  const auto evs = s.events_a();
  const uint32_t cqn = s.a.host.scq->cq->view().dv.cqn;
  CHECK(has_event(evs, hw::AsyncEventType::cq_err, 0, cqn));
  CHECK(has_event(evs, hw::AsyncEventType::qp_fatal, s.a.host.qpn(), 0));
  CHECK(s.dev_a->counters().host_memory_faults == 1);
  CHECK(s.dev_a->counters().cq_overflows == 0);
  s.others_still_work();
}

TEST_CASE("an application that unmaps its UAR mapping leaves the device's own untouched") {
  // A ConnectX's UAR is device memory the application maps; unmapping that mapping does not
  // touch the device. The simulated device reads the page through its own mapping, so the
  // QPs that ring it keep working through any other mapping of it.
  PlacedPair s;
  s.a.uar.unmap_app();
  uint8_t* again = s.a.uar.map();
  // Ring a WRITE through the new mapping, at the register the QP was given (same offset).
  s.a.host.qp_view_override_bf(again + 0x800);
  REQUIRE(s.a.host.post_and_ring(s.write_wr()) == Errc::ok);
  Completion c{};
  REQUIRE(s.fabric->run_until([&] { return s.a.host.poll_send(&c); }));
  CHECK(c.status == IBV_WC_SUCCESS);
  CHECK(s.a.host.qp->state() == hw::QpState::rts);
  CHECK(s.dev_a->counters().host_memory_faults == 0);
  ::munmap(again, 4096);
  s.others_still_work();
}

namespace {

// Regions registered while it lives are accessed by address, as on a host where io_uring is
// not available (pinned_memory.h): taking their pages away is what these tests are about.
// Pinned regions keep their pages: registration_pins.cc.
struct ByAddress {
  ByAddress() { sim::PinnedMemory::set_enabled(false); }
  ~ByAddress() { sim::PinnedMemory::set_enabled(true); }
  ByAddress(const ByAddress&) = delete;
  ByAddress& operator=(const ByAddress&) = delete;
};

// Two ordinary hosts, and a region on B in pages the test takes away after registering it.
struct RegionPair {
  ByAddress by_address;
  Pair p;
  Pages pages{8192};
  std::unique_ptr<hw::Mr> mr;
  Buffer local;

  RegionPair() {
    p.connect();
    mr = must(p.b.dev->reg_mr(*p.b.pd, pages.p, pages.len, all_remote()));
    local = p.a.reg(8192, all_remote(), 0x11);
  }
  Completion run(SendWr wr) {
    REQUIRE(p.a.post_and_ring(wr) == Errc::ok);
    return p.wait_send(p.a);
  }
  SendWr rdma(WrOpcode op, uint32_t len) {
    static Sge sge;
    sge = Sge{local.addr(), len, local.lkey()};
    SendWr wr = make_wr(op, &sge, 1);
    wr.remote_addr = pages.addr();
    wr.rkey = mr->rkey();
    return wr;
  }
  void expect_responder_failed() {
    CHECK(p.b.qp->state() == hw::QpState::err);
    hw::AsyncEvent ev;
    REQUIRE(p.b.dev->next_async_event(&ev));
    CHECK(ev.type == hw::AsyncEventType::qp_access_err);
    CHECK(ev.qpn == p.b.qpn());
    CHECK(p.b.counters().host_memory_faults == 1);
  }
};

}  // namespace

TEST_CASE("by address: a WRITE into a registered region that was unmapped: remote access error") {
  RegionPair s;
  s.pages.unmap();
  CHECK(s.run(s.rdma(WrOpcode::rdma_write, 3000)).status == IBV_WC_REM_ACCESS_ERR);
  s.expect_responder_failed();
}

TEST_CASE("by address: a READ of a registered region made inaccessible: remote access error") {
  RegionPair s;
  s.pages.protect(PROT_NONE);
  CHECK(s.run(s.rdma(WrOpcode::rdma_read, 3000)).status == IBV_WC_REM_ACCESS_ERR);
  s.expect_responder_failed();
}

TEST_CASE("by address: an atomic on a registered region made read-only: remote access error") {
  RegionPair s;
  s.pages.protect(PROT_READ);
  SendWr wr = s.rdma(WrOpcode::atomic_fetch_add, 8);
  wr.compare_add = 1;
  CHECK(s.run(wr).status == IBV_WC_REM_ACCESS_ERR);
  s.expect_responder_failed();
}

TEST_CASE("by address: a receive buffer unmapped after posting: the receive fails, the sender gets a NAK") {
  RegionPair s;
  Sge rsge{s.pages.addr(), 4096, s.mr->lkey()};
  RecvWr rwr{9, &rsge, 1};
  REQUIRE(s.p.b.post_recv(rwr) == Errc::ok);
  s.pages.unmap();
  Sge sge{s.local.addr(), 2000, s.local.lkey()};
  CHECK(s.run(make_wr(WrOpcode::send, &sge, 1)).status == IBV_WC_REM_OP_ERR);
  Completion c{};
  REQUIRE(s.p.run_until([&] { return s.p.b.rcq->poll(&c); }));
  CHECK(c.status == IBV_WC_LOC_PROT_ERR);
  s.expect_responder_failed();
}

TEST_CASE("by address: a SEND from a local buffer unmapped after registration: local protection error") {
  ByAddress by_address;
  Pair p;
  p.connect();
  Pages pages(4096);
  auto mr = must(p.a.dev->reg_mr(*p.a.pd, pages.p, pages.len, all_remote()));
  Buffer dst = p.b.reg(4096);
  REQUIRE(p.b.post_recv(dst, 0, 4096) == Errc::ok);
  pages.unmap();
  Sge sge{pages.addr(), 1000, mr->lkey()};
  REQUIRE(p.a.post_and_ring(make_wr(WrOpcode::send, &sge, 1)) == Errc::ok);
  Completion c = p.wait_send(p.a);
  CHECK(c.status == IBV_WC_LOC_PROT_ERR);
  CHECK(p.a.qp->state() == hw::QpState::err);
  CHECK(p.a.counters().host_memory_faults == 1);
}

TEST_CASE("by address: a READ into a local buffer made read-only: local protection error") {
  ByAddress by_address;
  Pair p;
  p.connect();
  Pages pages(4096);
  auto mr = must(p.a.dev->reg_mr(*p.a.pd, pages.p, pages.len, all_remote()));
  Buffer src = p.b.reg(4096, all_remote(), 0x33);
  pages.protect(PROT_READ);
  Sge sge{pages.addr(), 1000, mr->lkey()};
  SendWr wr = make_wr(WrOpcode::rdma_read, &sge, 1);
  wr.remote_addr = src.addr();
  wr.rkey = src.rkey();
  REQUIRE(p.a.post_and_ring(wr) == Errc::ok);
  Completion c = p.wait_send(p.a);
  CHECK(c.status == IBV_WC_LOC_PROT_ERR);
  CHECK(p.a.qp->state() == hw::QpState::err);
  CHECK(p.a.counters().host_memory_faults == 1);
}
