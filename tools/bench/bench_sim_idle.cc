// SPDX-License-Identifier: BSD-3-Clause
// The simulated HCA's reaction to a doorbell after an idle period, and what an idle device
// costs (docs/performance.md, "The simulated HCA when idle").
//
//   rnicdv-bench-sim-idle doorbell [--samples N] [--idle-ms M]
//       Two threaded simulated HCAs on the in-process wire, a QP pair in RTS. Each sample
//       leaves both devices idle for M ms (10), then posts one signaled 8-byte WRITE (a typed
//       post: no progress hook runs on this thread; the driver kicks the sleeping device,
//       doorbell/device_wake.h) and times the post to the moment the device's engine took the
//       doorbell (DeviceCounters::last_doorbell_ns). Prints p50 and p99 in ns as bench
//       records, beside the floor of any design that sleeps: a thread asleep on an eventfd
//       for the same period, woken by a write.
//   rnicdv-bench-sim-idle doorbell-libmlx5 [--samples N] [--idle-ms M]
//       The same with libibverbs and the unmodified libmlx5 on "rnicsim0" and "rnicsim1" of
//       the uverbs shim (run with LD_PRELOAD=<builddir>/hw/uverbs/librnicdv-uverbs.so and
//       RNICDV_UVERBS_DEVICES=2): ibv_post_send stores the doorbell, and the store into the
//       write-protected UAR page wakes the device (hw/sim/src/uar_watch.h).
//   rnicdv-bench-sim-idle idle-cpu [--devices K] [--seconds S]
//       K threaded devices (4), each with a QP in RTS, idle for S seconds (2): the CPU time
//       their threads used, as a fraction of one core per device.
#include <poll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>

#include "bench_sim.h"
#include "bench_verbs.h"

namespace {

using namespace rnicdv;
using rnicdv::bench::fail;
using rnicdv::bench::must;

// Two threaded HCAs with a connected QP pair in RTS.
struct ThreadedPair : rnicdv::bench::SimPair {
  std::optional<CompletionQueue> cq_a, cq_b;
  std::optional<QueuePair> qp_a, qp_b;

  ThreadedPair() : SimPair(sim::ExecMode::threaded) {
    cq_a.emplace(must(a->create_cq(256), "cq a"));
    cq_b.emplace(must(b->create_cq(256), "cq b"));
    QpConfig config;
    qp_a.emplace(must(a->create_qp(*pd_a, *cq_a, *cq_a, config), "qp a"));
    qp_b.emplace(must(b->create_qp(*pd_b, *cq_b, *cq_b, config), "qp b"));
    must(qp_a->to_init(), "qp a INIT");
    must(qp_b->to_init(), "qp b INIT");
    must(qp_a->to_rtr(qp_b->local_endpoint(200), hw::Mtu::mtu1024), "qp a RTR");
    must(qp_b->to_rtr(qp_a->local_endpoint(100), hw::Mtu::mtu1024), "qp b RTR");
    must(qp_a->to_rts(100), "qp a RTS");
    must(qp_b->to_rts(200), "qp b RTS");
  }
};

uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const size_t k = static_cast<size_t>(std::ceil(p * static_cast<double>(v.size()))) - 1;
  return v[std::min(k, v.size() - 1)];
}

std::vector<double> thread_wakeup_after_idle(uint32_t samples, uint32_t idle_ms) {
  const int fd = ::eventfd(0, EFD_CLOEXEC);
  if (fd < 0) fail("eventfd failed");
  std::atomic<uint64_t> woke{0};
  std::atomic<bool> stop{false};
  std::thread sleeper([&] {
    while (!stop.load()) {
      pollfd p{fd, POLLIN, 0};
      ::poll(&p, 1, -1);
      woke.store(monotonic_ns());
      uint64_t v;
      [[maybe_unused]] ssize_t n = ::read(fd, &v, sizeof v);
    }
  });
  std::vector<double> ns;
  for (uint32_t i = 0; i < samples + 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(idle_ms));
    woke.store(0);
    const uint64_t t0 = monotonic_ns();
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(fd, &one, sizeof one);
    while (woke.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (i > 0) ns.push_back(static_cast<double>(woke.load() - t0));
  }
  stop.store(true);
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(fd, &one, sizeof one);
  sleeper.join();
  ::close(fd);
  return ns;
}

// `ns` as p50 and p99 records named `base`, each beside the floor of any device that sleeps
// when idle: a thread asleep on an eventfd for the same idle period, woken by a write, timed
// from the write to the thread running.
void print_beside_wakeup(const std::string& base, const std::vector<double>& ns, uint32_t samples,
                         uint32_t idle_ms) {
  const std::vector<double> wake = thread_wakeup_after_idle(samples, idle_ms);
  std::vector<rnicdv::bench::Record> out;
  out.push_back({base + "_p50", percentile(ns, 0.50), "ns", "thread_wakeup_idle_p50",
                 percentile(wake, 0.50)});
  out.push_back({base + "_p99", percentile(ns, 0.99), "ns", "thread_wakeup_idle_p99",
                 percentile(wake, 0.99)});
  rnicdv::bench::print_records(out, stdout);
}

void doorbell_after_idle(uint32_t samples, uint32_t idle_ms) {
  ThreadedPair p;
  const rnicdv::bench::Timer timer;
  const Sge sge{reinterpret_cast<uint64_t>(p.buf_a.data()), 8, p.mr_a->lkey()};
  const uint64_t remote = reinterpret_cast<uint64_t>(p.buf_b.data());
  std::vector<double> ns;
  Completion wc[4];
  uint64_t doorbells = p.hw_a->counters().uar_doorbells;
  for (uint32_t i = 0; i < samples + 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(idle_ms));
    const uint64_t t0 = monotonic_ns();
    if (Errc e = p.qp_a->post_write(i, sge, remote, p.mr_b->rkey(), send_flags::signaled);
        e != Errc::ok)
      fail(std::string("post_write: ") + errc_name(e));
    // This thread sleeps while the device works (a thread that spins here competes with the
    // device thread for the CPU; docs/performance.md), then reads when the engine took the
    // doorbell: it fetches and runs the WQE in the same pass.
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (;;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      if (p.hw_a->counters().uar_doorbells != doorbells) break;
      if (std::chrono::steady_clock::now() > give_up) fail("doorbell: not taken in 10 s");
    }
    ++doorbells;
    const uint64_t t1 = p.hw_a->counters().last_doorbell_ns;
    if (i > 0) ns.push_back(static_cast<double>(t1 - t0));
    // Reap the completion (this calls the progress hook, which is fine outside the timing).
    for (int got = 0; got == 0;) {
      got = p.cq_a->poll(wc, 4);
      if (got > 0 && wc[0].status != IBV_WC_SUCCESS) fail("doorbell: the WRITE failed");
      if (std::chrono::steady_clock::now() > give_up) fail("doorbell: no completion in 10 s");
    }
  }
  print_beside_wakeup("sim_doorbell_to_execution_idle", ns, samples, idle_ms);
}

// libibverbs and the unmodified libmlx5 through the uverbs shim (bench_verbs.h).
void doorbell_libmlx5_after_idle(uint32_t samples, uint32_t idle_ms) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  rnicdv::bench::VerbsDevice a(rnicdv::bench::find_device(list, n, "rnicsim0"), 64, 16);
  rnicdv::bench::VerbsDevice b(rnicdv::bench::find_device(list, n, "rnicsim1"), 64, 16);
  ibv_free_device_list(list);
  a.connect(b);
  b.connect(a);
  using rnicdv::bench::shim_device;
  const std::shared_ptr<sim::Device> dev = shim_device("rnicsim0");
  std::vector<double> ns;
  uint64_t doorbells = dev->counters().uar_doorbells;
  for (uint32_t i = 0; i < samples + 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(idle_ms));
    ibv_sge sge{reinterpret_cast<uintptr_t>(a.buf.data()), 8, a.mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = i;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(b.buf.data());
    wr.wr.rdma.rkey = b.mr->rkey;
    ibv_send_wr* bad = nullptr;
    const uint64_t t0 = monotonic_ns();
    if (ibv_post_send(a.qp, &wr, &bad) != 0) fail("ibv_post_send");
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (;;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      if (dev->counters().uar_doorbells != doorbells) break;
      if (std::chrono::steady_clock::now() > give_up) fail("doorbell: not taken in 10 s");
    }
    doorbells = dev->counters().uar_doorbells;
    const uint64_t t1 = dev->counters().last_doorbell_ns;
    if (i > 0) ns.push_back(static_cast<double>(t1 - t0));
    ibv_wc wc{};
    for (int got = 0; got == 0;) {
      got = ibv_poll_cq(a.cq, 1, &wc);
      if (got < 0 || (got > 0 && wc.status != IBV_WC_SUCCESS)) fail("doorbell: the WRITE failed");
      if (std::chrono::steady_clock::now() > give_up) fail("doorbell: no completion in 10 s");
    }
  }
  print_beside_wakeup("sim_doorbell_to_execution_idle_libmlx5", ns, samples, idle_ms);
}

double cpu_seconds(clockid_t id) {
  timespec ts{};
  clock_gettime(id, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

void idle_cpu(uint32_t devices, uint32_t seconds) {
  // Pairs of devices, each pair with a connected QP: every device has work objects and is
  // then left alone.
  std::vector<std::unique_ptr<ThreadedPair>> pairs;
  for (uint32_t i = 0; i < (devices + 1) / 2; ++i) pairs.push_back(std::make_unique<ThreadedPair>());
  const uint32_t n = static_cast<uint32_t>(pairs.size()) * 2;
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // past the back-off
  const double p0 = cpu_seconds(CLOCK_PROCESS_CPUTIME_ID);
  const double m0 = cpu_seconds(CLOCK_THREAD_CPUTIME_ID);
  const auto w0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::seconds(seconds));
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
  const double used = (cpu_seconds(CLOCK_PROCESS_CPUTIME_ID) - p0) -
                      (cpu_seconds(CLOCK_THREAD_CPUTIME_ID) - m0);
  std::vector<rnicdv::bench::Record> out;
  // Devices that used nothing measurable can come out a hair below zero (the two clocks tick
  // apart): that is zero.
  out.push_back({"sim_idle_cpu_per_device", std::max(0.0, used / wall / n), "core", "", 0});
  rnicdv::bench::print_records(out, stdout);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2)
    fail("usage: rnicdv-bench-sim-idle doorbell|doorbell-libmlx5 [--samples N] [--idle-ms M] | "
         "idle-cpu [--devices K] [--seconds S]");
  const std::string test = argv[1];
  uint32_t samples = 200, idle_ms = 10, devices = 4, seconds = 2;
  for (int i = 2; i < argc; i += 2) {
    if (i + 1 >= argc) fail(std::string(argv[i]) + ": missing value");
    const std::string opt = argv[i];
    if (opt == "--samples") samples = rnicdv::bench::parse_count(argv[i], argv[i + 1], 1'000'000);
    else if (opt == "--idle-ms") idle_ms = rnicdv::bench::parse_count(argv[i], argv[i + 1], 1'000'000);
    else if (opt == "--devices") devices = rnicdv::bench::parse_count(argv[i], argv[i + 1], 1'000'000);
    else if (opt == "--seconds") seconds = rnicdv::bench::parse_count(argv[i], argv[i + 1], 1'000'000);
    else fail("unknown option '" + opt + "'");
  }
  if (test == "doorbell") doorbell_after_idle(samples, idle_ms);
  else if (test == "doorbell-libmlx5") doorbell_libmlx5_after_idle(samples, idle_ms);
  else if (test == "idle-cpu") idle_cpu(devices, seconds);
  else fail("unknown test '" + test + "'");
  return 0;
}
