// SPDX-License-Identifier: BSD-3-Clause
// rnicdv-bench-driver's flush group: releasing early posts at the move to RTS.
#include <endian.h>
#include <infiniband/mlx5dv.h>
#include <malloc.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "rnicdv/detail/qp_core.h"
#include "rnicdv/doorbell/barrier.h"
#include "rnicdv/doorbell/mmio.h"
#include "bench_driver.h"

using namespace rnicdv;
using namespace rnicdv::bench;

namespace {

// The mean of the middle 80 % of the samples: the plain mean would carry preemptions, and a
// median of few samples jumps between neighbouring values.
double trimmed_mean(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t cut = v.size() / 10;
  double sum = 0;
  for (size_t i = cut; i < v.size() - cut; ++i) sum += v[i];
  return sum / static_cast<double>(v.size() - 2 * cut);
}

}  // namespace

namespace rnicdv::bench {

void flush_cases(const Options& o, std::vector<Record>* out) {
  static const bench::Timer timer;
  SimPair s;
  s.hw_a->pause();
  const uint32_t sizes[] = {1, 64, 4096};
  const int reps = o.smoke ? 2 : 200;
  // One timed sample is a run of flushes of `qps` QPs, each armed with its own batch before the
  // run starts: one flush of a small batch lasts a few ticks of a virtual machine's TSC (which
  // advances in steps of about 10 ns), so timing each alone would measure the clock. The same
  // run length for every N, so that each flush finds its QP's lines as far from the core
  // (the arming of the others came between) whatever N is.
  const uint32_t qps = 8;
  const Sge sge8{s.mr_a->addr(), 8, s.mr_a->lkey()};
  const size_t max_bytes = size_t{4096} * wqe::kBbBytes;

  std::vector<SendWr> wrs(4096);
  for (uint32_t i = 0; i < wrs.size(); ++i) {
    wrs[i].wr_id = i;
    wrs[i].opcode = WrOpcode::rdma_write;
    wrs[i].sg_list = &sge8;
    wrs[i].num_sge = 1;
    wrs[i].remote_addr = s.mr_b->addr();
    wrs[i].rkey = s.mr_b->rkey();
    wrs[i].flags = i % 64 == 63 ? send_flags::signaled : 0;
  }
  hw::QpAttr rts;
  rts.state = hw::QpState::rts;
  rts.sq_psn = 100;
  namespace attr = hw::qp_attr;
  const uint32_t rts_mask = attr::state | attr::sq_psn | attr::timeout | attr::retry_cnt |
                            attr::rnr_retry | attr::max_rd_atomic;
  // The memcpy baseline's buffers: the sizes of a shadow ring and an SQ, page-aligned as the
  // rings are (glibc's memcpy slows down several times for some source-to-destination
  // distances on this machine, so these must not depend on where the heap puts them).
  struct FreeDeleter {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  auto page_buffer = [&] {
    void* p = std::aligned_alloc(4096, max_bytes);
    if (!p) fail("out of memory");
    return std::unique_ptr<uint8_t, FreeDeleter>(static_cast<uint8_t*>(p));
  };
  // One pair per QP of a run, as each QP has its own rings.
  std::vector<std::unique_ptr<uint8_t, FreeDeleter>> srcs, dsts;
  for (uint32_t q = 0; q < qps; ++q) {
    srcs.push_back(page_buffer());
    dsts.push_back(page_buffer());
    std::memset(srcs.back().get(), 0, max_bytes);
    std::memset(dsts.back().get(), 0, max_bytes);
  }

  for (EarlyPost strategy : {EarlyPost::in_place, EarlyPost::shadow}) {
    const bool shadow = strategy == EarlyPost::shadow;
    QpConfig config;
    config.threading = Threading::single;
    config.doorbell = doorbell::DoorbellMode::db;
    config.early_post = strategy;
    config.caps.max_send_wr = 4096;
    std::vector<Conn> conns;
    for (uint32_t q = 0; q < qps; ++q) {
      conns.push_back(connect(s, config, 64, true));
      if (conns.back().qp->early_post() != strategy) fail("early-post strategy not granted");
    }
    const std::string kind = shadow ? "shadow" : "in_place";

    double base_one = 0;
    for (uint32_t n : sizes) {
      // One sample: the QP back to RTR with n withheld WRs and its device QP moved to RTS;
      // then the driver's flush (release_withheld_locked, which QpCore::modify calls once the
      // device is in RTS) is timed: the copy of a shadow batch, the DBR, one doorbell, RTS
      // published.
      auto arm = [&](Conn& c) {
        must(c.qp->reset(), "reset");
        must(c.qp->to_init(), "INIT");
        must(c.qp->to_rtr(c.peer->local_endpoint(200), hw::Mtu::mtu1024), "RTR");
        if (c.qp->post_send(std::span<const SendWr>(wrs.data(), n)) != Errc::ok)
          fail("post in RTR failed");
        if (c.qp->withheld() != n) fail("WRs not withheld");
        must(c.qp->core()->hw_qp->modify(rts, rts_mask), "device RTS");
      };
      auto check = [&](Conn& c) {
        const detail::QpCore& core = *c.qp->core();
        if (c.qp->state() != hw::QpState::rts || c.qp->withheld() != 0 ||
            core.doorbell_pi.load() != core.sq_pi)
          fail("flush did not release the batch");
      };
      const size_t bytes = size_t{n} * wqe::kBbBytes;
      // The same memory traffic as `arm`: the reset clears both rings whole, then the posts
      // write the batch into the shadow ring.
      // (The batch is written with ordinary stores, 48 of every 64 bytes as a WRITE WQE's
      // segments are: glibc's memset of a large block may bypass the cache, the encoder's
      // stores do not.)
      auto arm_copy = [&](uint32_t q, int r) {
        uint8_t* src = srcs[q].get();
        std::memset(dsts[q].get(), 0, max_bytes);
        std::memset(src, 0, max_bytes);
        const uint64_t word = 0x0101010101010101ull * static_cast<uint8_t>(r);
        for (size_t b = 0; b < bytes; b += wqe::kBbBytes)
          for (size_t w = 0; w < 48; w += 8) std::memcpy(src + b + w, &word, 8);
        clobber(src);
      };
      const std::string name = "flush_" + kind + "_" + std::to_string(n);
      const std::string base_name = shadow ? "memcpy_" + std::to_string(bytes) : "flush_in_place_1";
      if (o.callgrind) {
        // One uncounted flush and copy first: the first call of a library function also
        // counts the dynamic linker's symbol lookup.
        Conn& c = conns[0];
        arm(c);
        c.qp->core()->release_withheld_locked();
        if (shadow) {
          arm_copy(0, 1);
          std::memcpy(dsts[0].get(), srcs[0].get(), bytes);
          clobber(dsts[0].get());
        }
        arm(c);
        bench::count_begin();
        c.qp->core()->release_withheld_locked();
        bench::count_end(name, 1);
        check(c);
        if (shadow) {
          arm_copy(0, 1);
          bench::count_begin();
          std::memcpy(dsts[0].get(), srcs[0].get(), bytes);
          clobber(dsts[0].get());
          bench::count_end(base_name, 1);
        }
        continue;
      }
      const uint32_t run = qps;
      std::vector<double> drv, base;
      for (int r = 0; r < reps; ++r) {
        for (uint32_t q = 0; q < run; ++q) arm(conns[q]);
        uint64_t t0 = timer.now();
        for (uint32_t q = 0; q < run; ++q) conns[q].qp->core()->release_withheld_locked();
        uint64_t t1 = timer.now();
        drv.push_back(timer.ns(t0, t1) / run);
        for (uint32_t q = 0; q < run; ++q) check(conns[q]);
        if (shadow) {
          for (uint32_t q = 0; q < run; ++q) arm_copy(q, r);
          t0 = timer.now();
          for (uint32_t q = 0; q < run; ++q) {
            std::memcpy(dsts[q].get(), srcs[q].get(), bytes);
            clobber(dsts[q].get());
          }
          t1 = timer.now();
          base.push_back(timer.ns(t0, t1) / run);
        }
      }
      const double value = trimmed_mean(drv);
      if (!shadow && n == 1) base_one = value;
      out->push_back({name, value, "ns/flush", base_name, shadow ? trimmed_mean(base) : base_one});
    }
  }
}

}  // namespace rnicdv::bench

