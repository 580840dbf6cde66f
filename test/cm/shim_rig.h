// SPDX-License-Identifier: BSD-3-Clause
// The real-device connection path (the mlx5 backend with librdmacm) on the simulated HCA of
// the uverbs shim, in this process: the first verbs device must be the shim's (rnicsim*),
// else the test skips (exit 77). One rnicdv Device on it with two CQs, a registered buffer of
// 32 64-byte slots and two QPs (qa, qb), the simulated device behind it (its counters and the
// CM's hooks), and the helpers the rdma_cm tests share.
#pragma once

#include <catch2/catch.hpp>

#include <infiniband/verbs.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cm_env.h"
#include "rnicdv/rnicdv.h"
#include "rnicdv/sim/sim.h"

namespace rnicdv::test {

struct ShimRig {
  static constexpr size_t kMsg = 64;

  std::string name;
  std::optional<Device> dev;
  std::optional<ProtectionDomain> pd;
  std::optional<CompletionQueue> cqa, cqb;
  std::vector<uint8_t> mem = std::vector<uint8_t>(32 * kMsg, 0);
  std::optional<MemoryRegion> mr;
  std::optional<QueuePair> qa, qb;
  std::string ip;
  std::shared_ptr<sim::Device> sim;

  ShimRig() {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (list && n > 0) name = ibv_get_device_name(list[0]);
    if (list) ibv_free_device_list(list);
    if (name.rfind("rnicsim", 0) != 0) {
      std::printf("skipped: needs the uverbs shim preloaded (first device: '%s')\n", name.c_str());
      std::fflush(stdout);
      std::exit(77);
    }
    dev.emplace(take(Device::open(name)));
    REQUIRE(dev->info().kind == "mlx5");
    REQUIRE(dev->hw().connection_manager() != nullptr);
    const hw::Gid gid = dev->info().gid;
    REQUIRE(gid.is_ipv4_mapped());
    char text[32];
    std::snprintf(text, sizeof text, "%u.%u.%u.%u", gid.raw[12], gid.raw[13], gid.raw[14],
                  gid.raw[15]);
    ip = text;
    pd.emplace(take(dev->alloc_pd()));
    cqa.emplace(take(dev->create_cq(64)));
    cqb.emplace(take(dev->create_cq(64)));
    mr.emplace(take(pd->reg_mr(mem.data(), mem.size(), hw::access::local_write)));
    if (auto fabric = sim::default_fabric())
      for (auto& d : fabric.value()->devices())
        if (d->config().name == name) sim = d;
    REQUIRE(sim);
    new_qps();
  }

  // Fresh QPs and a clean buffer: a case that connected the previous ones calls it first.
  void new_qps() {
    std::memset(mem.data(), 0, mem.size());
    qa.emplace(take(dev->create_qp(*pd, *cqa, *cqa, QpConfig{})));
    qb.emplace(take(dev->create_qp(*pd, *cqb, *cqb, QpConfig{})));
  }

  Errc post_recv(QueuePair& q, uint64_t wr_id, uint32_t slot) {
    Sge s = mr->sge(slot * kMsg, kMsg);
    return q.post_recv(RecvWr{wr_id, &s, 1});
  }
  // A signaled SEND of slot `slot`, filled with `fill` first.
  Errc post_send(QueuePair& q, uint64_t wr_id, uint32_t slot, uint8_t fill) {
    std::memset(&mem[slot * kMsg], fill, kMsg);
    Sge s = mr->sge(slot * kMsg, kMsg);
    SendWr wr;
    wr.wr_id = wr_id;
    wr.flags = send_flags::signaled;
    wr.sg_list = &s;
    wr.num_sge = 1;
    return q.post_send(wr);
  }
  // Polls `cq`, and nothing else, until `n` completions arrived or `limit` passed; each must
  // succeed. The count of each wr_id.
  std::map<uint64_t, int> completions(CompletionQueue& cq, size_t n,
                                      std::chrono::milliseconds limit = 10s) {
    std::map<uint64_t, int> seen;
    size_t got = 0;
    const auto end = std::chrono::steady_clock::now() + limit;
    while (got < n && std::chrono::steady_clock::now() < end) {
      Completion wc[8];
      const int k = cq.poll(wc, 8);
      for (int i = 0; i < k; ++i) {
        CHECK(wc[i].status == IBV_WC_SUCCESS);
        ++seen[wc[i].wr_id];
      }
      got += static_cast<size_t>(k);
    }
    return seen;
  }
  // The doorbells the simulated device took from `q`'s UAR register.
  uint64_t doorbells(const QueuePair& q) const {
    Result<sim::QpSnapshot> s = sim->qp_snapshot(q.qpn());
    return s ? s.value().uar_doorbells : ~uint64_t{0};
  }
};

}  // namespace rnicdv::test
