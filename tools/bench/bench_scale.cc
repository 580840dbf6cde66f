// SPDX-License-Identifier: BSD-3-Clause
// rnicdv-bench-driver's scale group: many QPs on one CQ, memory per connected QP.
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

// Devices with room for 1024 QPs and the one-QP case beside them.
std::shared_ptr<sim::Device> roomy_device(sim::Fabric& fabric) {
  sim::DeviceConfig dc;
  dc.caps.max_qp = 4096;
  return must(fabric.add_device(dc), "device");
}

// `n` QPs of `a` on `cq`, each connected (RTS) to a QP of `b` on `peer_cq`.
struct QpFarm {
  std::vector<QueuePair> qps, peers;
};

void grow_farm(QpFarm& f, Device& a, Device& b, ProtectionDomain& pd_a, ProtectionDomain& pd_b,
               CompletionQueue& cq, CompletionQueue& peer_cq, uint32_t n) {
  QpConfig config;
  config.threading = Threading::single;
  config.caps.max_send_wr = 16;
  config.caps.max_recv_wr = 16;
  for (uint32_t i = 0; i < n; ++i) {
    f.qps.push_back(must(a.create_qp(pd_a, cq, cq, config), "qp"));
    f.peers.push_back(must(b.create_qp(pd_b, peer_cq, peer_cq, config), "peer qp"));
    QueuePair& q = f.qps.back();
    QueuePair& p = f.peers.back();
    must(q.to_init(), "qp INIT");
    must(p.to_init(), "peer INIT");
    must(q.to_rtr(p.local_endpoint(200), hw::Mtu::mtu1024), "qp RTR");
    must(p.to_rtr(q.local_endpoint(100), hw::Mtu::mtu1024), "peer RTR");
    must(p.to_rts(200), "peer RTS");
    must(q.to_rts(100), "qp RTS");
  }
}

}  // namespace

namespace rnicdv::bench {

// poll() per CQE when the 16 CQEs of a batch come from 16 different QPs of one CQ shared by 64
// or 1024 QPs (each batch moves on to the next 16, so a 1024-QP run touches every QP's state
// in turn, cold in cache as on a target with many connections), beside the same batch from
// one QP on a CQ of its own, timed alternately in the same run.
void scale_poll_cases(const Options& o, std::vector<Record>* out) {
  static const Timer timer;
  sim::FabricConfig fc;
  fc.mode = sim::ExecMode::deterministic;
  fc.wire = sim::WireKind::inproc;
  auto fabric = must(sim::Fabric::create(fc), "fabric");
  auto hw_a = roomy_device(*fabric), hw_b = roomy_device(*fabric);
  Device a = must(Device::wrap(hw_a), "wrap a"), b = must(Device::wrap(hw_b), "wrap b");
  ProtectionDomain pd_a = must(a.alloc_pd(), "pd a"), pd_b = must(b.alloc_pd(), "pd b");
  std::vector<uint8_t> buf_a(4096), buf_b(4096);
  const uint32_t all = hw::access::local_write | hw::access::remote_write;
  MemoryRegion mr_a = must(pd_a.reg_mr(buf_a.data(), buf_a.size(), all), "mr a");
  MemoryRegion mr_b = must(pd_b.reg_mr(buf_b.data(), buf_b.size(), all), "mr b");
  constexpr int kBatch = 16;
  const Sge sge{mr_a.addr(), 8, mr_a.lkey()};

  struct Side {
    std::optional<CompletionQueue> cq, peer_cq;
    QpFarm farm;
    uint32_t next = 0;  // the first QP of the next batch
  };
  const auto make_side = [&](uint32_t n) {
    auto side = std::make_unique<Side>();
    side->cq.emplace(must(a.create_cq(1024), "cq"));
    side->peer_cq.emplace(must(b.create_cq(1024), "peer cq"));
    side->cq->core()->progress = {};  // advanced by the benchmark, never from poll()
    grow_farm(side->farm, a, b, pd_a, pd_b, *side->cq, *side->peer_cq, n);
    return side;
  };
  // 16 signaled WRITEs: one on each of the next 16 QPs (all on the one QP when there is one),
  // completed by the device, their CQEs waiting in the ring.
  const auto fill = [&](Side& side) {
    const uint64_t before = hw_a->counters().cqes_written;
    const uint32_t n = static_cast<uint32_t>(side.farm.qps.size());
    for (int i = 0; i < kBatch; ++i) {
      QueuePair& q = side.farm.qps[(side.next + static_cast<uint32_t>(i)) % n];
      if (q.post_write(static_cast<uint64_t>(i), sge, mr_b.addr(), mr_b.rkey(),
                       send_flags::signaled) != Errc::ok)
        fail("scale: post failed");
    }
    side.next = (side.next + kBatch) % n;
    if (!fabric->run_until([&] { return hw_a->counters().cqes_written >= before + kBatch; }))
      fail("scale: the device did not complete the batch");
  };
  Completion wc[kBatch];
  const auto poll_all = [&](Side& side) {
    int got = 0;
    while (got < kBatch) got += side.cq->poll(wc + got, kBatch - got);
    for (const Completion& c : wc)
      if (c.status != IBV_WC_SUCCESS) fail("scale: completion with an error");
  };
  auto one = make_side(1);
  for (const uint32_t n : {64u, 1024u}) {
    auto many = make_side(n);
    const int warmup = o.smoke ? 2 : static_cast<int>(n / kBatch) + 50;
    const int reps = o.smoke ? 5 : 401;
    if (o.callgrind) {
      fill(*many);
      count_begin();
      poll_all(*many);
      count_end("poll_cqe_" + std::to_string(n) + "qp", kBatch);
      fill(*one);
      count_begin();
      poll_all(*one);
      count_end("poll_cqe_1qp_for_" + std::to_string(n), kBatch);
      continue;
    }
    std::vector<double> t_many, t_one;
    for (int r = 0; r < warmup + reps; ++r) {
      fill(*many);
      uint64_t t0 = timer.now();
      poll_all(*many);
      uint64_t t1 = timer.now();
      if (r >= warmup) t_many.push_back(timer.ns(t0, t1) / kBatch);
      fill(*one);
      t0 = timer.now();
      poll_all(*one);
      t1 = timer.now();
      if (r >= warmup) t_one.push_back(timer.ns(t0, t1) / kBatch);
    }
    out->push_back({"poll_cqe_" + std::to_string(n) + "qp", median(t_many), "ns/cqe",
                    "poll_cqe_1qp", median(t_one)});
  }
}

// Heap bytes per QP created and connected, for the 1024 QPs of a target with many connections,
// beside the same for the first 32 QPs of a fresh device (what memory_per_qp measures).
// Everything the QP costs in this process counts: the driver's QP and its rings, and the
// simulated device's own state for it (a real device keeps that in its memory instead).
void scale_memory_cases(std::vector<Record>* out) {
  const uint32_t many = 1024, few = 32;
  sim::FabricConfig fc;
  fc.mode = sim::ExecMode::deterministic;
  fc.wire = sim::WireKind::inproc;
  auto fabric = must(sim::Fabric::create(fc), "fabric");
  const auto per_qp = [&](uint32_t n) {
    auto hw_a = roomy_device(*fabric), hw_b = roomy_device(*fabric);
    Device a = must(Device::wrap(hw_a), "wrap a"), b = must(Device::wrap(hw_b), "wrap b");
    ProtectionDomain pd_a = must(a.alloc_pd(), "pd a"), pd_b = must(b.alloc_pd(), "pd b");
    CompletionQueue cq = must(a.create_cq(4096), "cq");
    CompletionQueue peer_cq = must(b.create_cq(4096), "peer cq");
    QpFarm f;
    f.qps.reserve(n);
    f.peers.reserve(n);
    // The peers are made first and not counted: only the measured side's QPs are.
    QpConfig config;
    config.threading = Threading::single;
    config.caps.max_send_wr = 16;
    config.caps.max_recv_wr = 16;
    for (uint32_t i = 0; i < n; ++i)
      f.peers.push_back(must(b.create_qp(pd_b, peer_cq, peer_cq, config), "peer qp"));
    const double before = heap_bytes();
    for (uint32_t i = 0; i < n; ++i) {
      f.qps.push_back(must(a.create_qp(pd_a, cq, cq, config), "qp"));
      QueuePair& q = f.qps.back();
      must(q.to_init(), "qp INIT");
      must(q.to_rtr(f.peers[i].local_endpoint(200), hw::Mtu::mtu1024), "qp RTR");
      must(q.to_rts(100), "qp RTS");
    }
    return per_object(before, heap_bytes(), static_cast<int>(n));
  };
  const double base = per_qp(few);
  const double value = per_qp(many);
  out->push_back({"memory_per_connected_qp_" + std::to_string(many), value, "bytes",
                  "memory_per_connected_qp_" + std::to_string(few), base});
}

}  // namespace rnicdv::bench

