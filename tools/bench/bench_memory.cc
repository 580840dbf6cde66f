// SPDX-License-Identifier: BSD-3-Clause
// rnicdv-bench-driver's memory group: heap bytes per QP, CQ and device; and the heap readings the scale group shares.
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

namespace rnicdv::bench {

double heap_bytes() {
  const struct mallinfo2 m = mallinfo2();
  return static_cast<double>(m.uordblks + m.hblkhd);
}

double per_object(double before, double after, int count) {
  return after > before ? (after - before) / count : 0;
}

void memory_cases(const Options& o, std::vector<Record>* out) {
  const int count = o.smoke ? 4 : 32;
  {
    SimPair s;
    std::vector<CompletionQueue> cqs;
    cqs.reserve(count);
    const double before = heap_bytes();
    for (int i = 0; i < count; ++i) cqs.push_back(must(s.a->create_cq(256), "cq"));
    const double per_cq = per_object(before, heap_bytes(), count);
    const double ring = static_cast<double>(cqs[0].entries()) * 64;
    out->push_back({"memory_per_cq_256", per_cq, "bytes", "cqe_ring_bytes", ring});

    QpConfig config;
    config.caps.max_send_wr = 128;
    config.caps.max_recv_wr = 128;
    std::vector<QueuePair> qps;
    qps.reserve(count);
    CompletionQueue& cq = cqs[0];
    const double before_qp = heap_bytes();
    for (int i = 0; i < count; ++i) qps.push_back(must(s.a->create_qp(*s.pd_a, cq, cq, config), "qp"));
    const double per_qp = per_object(before_qp, heap_bytes(), count);
    const detail::QpCore& core = *qps[0].core();
    const double rings =
        static_cast<double>(core.sq.bb_count) * wqe::kBbBytes +
        static_cast<double>(core.rq.wqe_cnt) * core.rq.stride;
    out->push_back({"memory_per_qp_128x128", per_qp, "bytes", "wq_ring_bytes", rings});
  }
  {
    sim::FabricConfig fc;
    fc.mode = sim::ExecMode::deterministic;
    fc.wire = sim::WireKind::inproc;
    auto fabric = must(sim::Fabric::create(fc), "fabric");
    std::vector<Device> devices;
    devices.reserve(count);
    const double before = heap_bytes();
    for (int i = 0; i < count; ++i)
      devices.push_back(must(Device::wrap(must(fabric->add_device(), "device")), "wrap"));
    const double per_dev = per_object(before, heap_bytes(), count);
    out->push_back({"memory_per_device", per_dev, "bytes", "", 0});
  }
}

}  // namespace rnicdv::bench

