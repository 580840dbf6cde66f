// SPDX-License-Identifier: BSD-3-Clause
// rnicdv-bench-driver's poll group: CQEs decoded, against an owner-bit check.
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

void poll_cases(const Options& o, std::vector<Record>* out) {
  SimPair s;
  QpConfig config;
  config.threading = Threading::single;
  config.caps.max_send_wr = 64;
  Conn c = connect(s, config, 256, false);
  // Time the driver as on hardware: the device is advanced by the benchmark between
  // repetitions (fabric->step), never from inside poll().
  c.cq->core()->progress = {};
  detail::CqCore& cq = *c.cq->core();
  constexpr int kBatch = 16;

  std::vector<SendWr> wrs(kBatch);
  const Sge sge8{s.mr_a->addr(), 8, s.mr_a->lkey()};
  for (int i = 0; i < kBatch; ++i) {
    wrs[i].wr_id = i;
    wrs[i].opcode = WrOpcode::rdma_write;
    wrs[i].flags = send_flags::signaled;
    wrs[i].sg_list = &sge8;
    wrs[i].num_sge = 1;
    wrs[i].remote_addr = s.mr_b->addr();
    wrs[i].rkey = s.mr_b->rkey();
  }
  // 16 real CQEs from the simulated device, in the ring and not yet consumed. `measure` runs
  // this before the baseline's repetitions too, which read the CQEs without consuming them.
  int pending = 0;
  auto completions = std::make_shared<std::vector<Completion>>(kBatch);
  auto fill = [&] {
    if (pending != 0) {
      if (pending != kBatch) fail("poll consumed " + std::to_string(kBatch - pending) + " of 16");
      return;
    }
    for (const Completion& x : *completions)
      if (x.status != IBV_WC_SUCCESS) fail("completion with an error");
    const uint64_t before = s.hw_a->counters().cqes_written;
    if (c.qp->post_send(wrs) != Errc::ok) fail("post failed");
    if (!s.fabric->run_until([&] { return s.hw_a->counters().cqes_written >= before + kBatch; }))
      fail("the device did not complete the batch");
    pending = kBatch;
  };
  // The baseline: for each CQE, the owner-bit check and a load of one field, by hand.
  auto hand = [&cq] {
    uint32_t ci = cq.ci;
    uint32_t sum = 0;
    for (int i = 0; i < kBatch; ++i, ++ci) {
      const mlx5_cqe64* e = cq.ring.cqe(ci);
      const uint8_t op_own = __atomic_load_n(&e->op_own, __ATOMIC_ACQUIRE);
      if ((op_own >> 4) == MLX5_CQE_INVALID || (op_own & 1) != ((ci & cq.ring.cqe_cnt) ? 1 : 0))
        break;
      sum += be16toh(e->wqe_counter);
    }
    asm volatile("" : : "r"(sum) : "memory");
  };
  CompletionQueue* pcq = &*c.cq;
  measure({"poll_1", "hand_cqe_check_1", "ns/cqe", kBatch, fill,
           [&] {
             for (int i = 0; i < kBatch; ++i) pending -= pcq->poll(completions->data() + i, 1);
           },
           hand},
          o, out);
  measure({"poll_batch_16", "hand_cqe_check_16", "ns/cqe", kBatch, fill,
           [&] { pending -= pcq->poll(completions->data(), kBatch); }, hand},
          o, out);
  // The lean path: each completion to a callable that keeps its wr_id and status, as a
  // consumer that matches completions to requests does.
  auto lean = std::make_shared<std::vector<LeanCompletion>>(kBatch);
  measure({"poll_1_lean", "hand_cqe_check_1", "ns/cqe", kBatch, fill,
           [&] {
             LeanCompletion* out_lean = lean->data();
             for (int i = 0; i < kBatch; ++i)
               pending -= pcq->poll_each(1, [out_lean, i](const LeanCompletion& lc) {
                 out_lean[i].wr_id = lc.wr_id;
                 out_lean[i].status = lc.status;
               });
           },
           hand},
          o, out);
  measure({"poll_batch_16_lean", "hand_cqe_check_16", "ns/cqe", kBatch, fill,
           [&] {
             LeanCompletion* next = lean->data();
             pending -= pcq->poll_each(kBatch, [&next](const LeanCompletion& lc) {
               next->wr_id = lc.wr_id;
               next->status = lc.status;
               ++next;
             });
           },
           hand},
          o, out);
}

}  // namespace rnicdv::bench

