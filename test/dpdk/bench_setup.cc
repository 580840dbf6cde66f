// SPDX-License-Identifier: BSD-3-Clause
// What allocating registered memory from DPDK's heap (rnicperf --dpdk-mem) changes, beside
// the baseline of anonymous mmap measured in the same run:
//  * MR set-up: allocate, first touch and register a region of each size;
//  * QP set-up: PD, CQ, QP to RTS and a registered buffer, for a connected pair;
//  * a TLB-sensitive case: 64-byte RDMA WRITEs to random offsets of a 64 MiB region.
// With free hugepages the DPDK heap is hugepage-backed; without, EAL runs --no-huge and the
// heap is ordinary 4 KiB pages that EAL has already touched. Figures, not a test.
#include <sys/mman.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>

#include "rnicdv/rnicdv.h"
#include "rnicdv/sim/dpdk.h"
#include "rnicdv/sim/sim.h"

using namespace rnicdv;
using Clock = std::chrono::steady_clock;

namespace {

struct Buffer {
  uint8_t* base = nullptr;
  size_t bytes = 0;
  bool dpdk = false;
};

Buffer allocate(size_t bytes, bool dpdk) {
  Buffer b{nullptr, bytes, dpdk};
  if (dpdk) {
    auto m = sim::dpdk_alloc(bytes, 4096);
    if (!m) {
      std::fprintf(stderr, "%s\n", m.status().message().c_str());
      std::exit(1);
    }
    b.base = static_cast<uint8_t*>(m.value());
  } else {
    void* m = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) std::exit(1);
    b.base = static_cast<uint8_t*>(m);
  }
  return b;
}

void release(Buffer& b) {
  if (b.dpdk)
    sim::dpdk_free(b.base);
  else
    ::munmap(b.base, b.bytes);
}

template <class T>
T must(Result<T> r) {
  if (!r) {
    std::fprintf(stderr, "%s\n", r.status().message().c_str());
    std::exit(1);
  }
  return std::move(r).value();
}

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// Median of `runs` timings of fn() in ms.
double median_ms(int runs, const std::function<void()>& fn) {
  std::vector<double> t;
  for (int i = 0; i < runs; ++i) {
    const auto start = Clock::now();
    fn();
    t.push_back(ms_since(start));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

constexpr uint32_t kAccess = hw::access::local_write | hw::access::remote_write |
                             hw::access::remote_read;

struct Side {
  std::optional<Device> dev;
  std::optional<ProtectionDomain> pd;
  std::optional<CompletionQueue> cq;
  std::optional<QueuePair> qp;
  std::optional<MemoryRegion> mr;
  Buffer buf;
};

void open_side(Side& s, const std::shared_ptr<sim::Fabric>& fabric, size_t bytes, bool dpdk) {
  s.dev.emplace(must(Device::wrap(must(fabric->add_device()))));
  s.pd.emplace(must(s.dev->alloc_pd()));
  s.cq.emplace(must(s.dev->create_cq(1024)));
  QpConfig c;
  c.caps.max_send_wr = 512;
  c.caps.max_recv_wr = 16;
  c.threading = Threading::single;
  s.qp.emplace(must(s.dev->create_qp(*s.pd, *s.cq, *s.cq, c)));
  s.buf = allocate(bytes, dpdk);
  std::memset(s.buf.base, 0, bytes);
  s.mr.emplace(must(s.pd->reg_mr(s.buf.base, bytes, kAccess)));
}

void connect(Side& a, Side& b) {
  auto ok = [](const Status& st) {
    if (!st) {
      std::fprintf(stderr, "%s\n", st.message().c_str());
      std::exit(1);
    }
  };
  ok(a.qp->to_init());
  ok(b.qp->to_init());
  ok(a.qp->to_rtr(b.qp->local_endpoint(1), hw::Mtu::mtu1024));
  ok(b.qp->to_rtr(a.qp->local_endpoint(2), hw::Mtu::mtu1024));
  ok(b.qp->to_rts(1));
  ok(a.qp->to_rts(2));
}

void close_side(Side& s) {
  s.qp.reset();
  s.mr.reset();
  s.cq.reset();
  s.pd.reset();
  s.dev.reset();
  release(s.buf);
}

std::shared_ptr<sim::Fabric> fabric() {
  sim::FabricConfig c;
  c.mode = sim::ExecMode::deterministic;
  c.wire = sim::WireKind::inproc;
  return must(sim::Fabric::create(c));
}

// 64-byte WRITEs to random 64-byte-aligned offsets of b's region; returns ns per WRITE.
double random_writes(bool dpdk, size_t region, int writes) {
  auto f = fabric();
  Side a, b;
  open_side(a, f, 4096, false);
  open_side(b, f, region, dpdk);
  connect(a, b);
  std::mt19937_64 rng(5);
  const Sge sge = a.mr->sge(0, 64);
  Completion wc[64];
  const auto start = Clock::now();
  int done = 0, posted = 0;
  while (done < writes) {
    while (posted - done < 256 && posted < writes) {
      SendWr wr;
      wr.wr_id = static_cast<uint64_t>(posted);
      wr.opcode = WrOpcode::rdma_write;
      wr.flags = send_flags::signaled;
      wr.sg_list = &sge;
      wr.num_sge = 1;
      wr.remote_addr = b.mr->addr() + (rng() % (region / 64)) * 64;
      wr.rkey = b.mr->rkey();
      if (a.qp->post_send(wr) != Errc::ok) break;
      ++posted;
    }
    f->step();
    for (int n; (n = a.cq->poll(wc, 64)) > 0;) done += n;
  }
  const double ns = std::chrono::duration<double, std::nano>(Clock::now() - start).count();
  close_side(a);
  close_side(b);
  return ns / writes;
}

}  // namespace

int main() {
  // Start EAL first so that its start-up is not charged to the first measurement.
  if (Status st = sim::dpdk_init(""); !st) {
    std::printf("skipped: %s\n", st.message().c_str());
    return 77;
  }
  std::printf("DPDK heap memory: %s\n\n", sim::dpdk_memory_mode().c_str());
  std::printf("MR set-up: allocate + first touch + reg_mr (median of 5, ms)\n");
  std::printf("%12s %14s %14s\n", "bytes", "mmap", "DPDK heap");
  for (const size_t bytes : {size_t{64} << 10, size_t{4} << 20, size_t{64} << 20}) {
    double t[2];
    for (int dpdk = 0; dpdk < 2; ++dpdk) {
      auto f = fabric();
      auto dev = must(Device::wrap(must(f->add_device())));
      auto pd = must(dev.alloc_pd());
      t[dpdk] = median_ms(5, [&] {
        Buffer b = allocate(bytes, dpdk != 0);
        std::memset(b.base, 1, bytes);
        { auto mr = must(pd.reg_mr(b.base, bytes, kAccess)); }
        release(b);
      });
    }
    std::printf("%12zu %14.3f %14.3f\n", bytes, t[0], t[1]);
  }

  std::printf("\nQP set-up: two devices, PD, CQ, QP to RTS, 4 MiB registered each "
              "(median of 5, ms)\n");
  double qp[2];
  for (int dpdk = 0; dpdk < 2; ++dpdk) {
    qp[dpdk] = median_ms(5, [&] {
      auto f = fabric();
      Side a, b;
      open_side(a, f, size_t{4} << 20, dpdk != 0);
      open_side(b, f, size_t{4} << 20, dpdk != 0);
      connect(a, b);
      close_side(a);
      close_side(b);
    });
  }
  std::printf("%12s %14.3f %14.3f\n", "pair", qp[0], qp[1]);

  std::printf("\nRandom 64-byte WRITEs into a 64 MiB region (ns per WRITE, 200000 WRITEs)\n");
  const double w0 = random_writes(false, size_t{64} << 20, 200000);
  const double w1 = random_writes(true, size_t{64} << 20, 200000);
  std::printf("%12s %14.1f %14.1f\n", "write", w0, w1);
  return 0;
}
