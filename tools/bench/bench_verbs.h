// SPDX-License-Identifier: BSD-3-Clause
// libibverbs on the uverbs shim's simulated HCAs, for the benchmark programs that drive the
// unmodified libmlx5 (rnicdv-bench-libmlx5, rnicdv-bench-sim-idle): an RC QP connected as
// perftest connects one, and the simulated device behind a shim device name. Failures end
// the program (the control path of a benchmark).
#pragma once

#include <infiniband/verbs.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench_sim.h"
#include "rnicdv/sim/sim.h"

namespace rnicdv::bench {

inline constexpr uint8_t kRoceV2Ipv4Gid = 3;  // the shim's GID table: ::ffff:a.b.c.d, RoCE v2

// A device's context, PD, a 64 KiB registered buffer, a CQ and an RC QP of `sq_depth` WRs.
struct VerbsDevice {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  std::vector<uint8_t> buf = std::vector<uint8_t>(1 << 16);
  ibv_mr* mr = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  uint32_t max_send_wr = 0;  // as libmlx5 granted it

  VerbsDevice(ibv_device* dev, int cq_entries, uint32_t sq_depth) {
    const std::string name = ibv_get_device_name(dev);
    ctx = ibv_open_device(dev);
    if (!ctx) fail(name + ": ibv_open_device: " + std::strerror(errno));
    pd = ibv_alloc_pd(ctx);
    if (!pd) fail(name + ": ibv_alloc_pd: " + std::strerror(errno));
    mr = ibv_reg_mr(pd, buf.data(), buf.size(),
                    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    if (!mr) fail(name + ": ibv_reg_mr: " + std::strerror(errno));
    cq = ibv_create_cq(ctx, cq_entries, nullptr, nullptr, 0);
    if (!cq) fail(name + ": ibv_create_cq: " + std::strerror(errno));
    ibv_qp_init_attr init{};
    init.send_cq = cq;
    init.recv_cq = cq;
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = sq_depth;
    init.cap.max_recv_wr = 1;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    qp = ibv_create_qp(pd, &init);
    if (!qp) fail(name + ": ibv_create_qp: " + std::strerror(errno));
    max_send_wr = init.cap.max_send_wr;
  }
  ~VerbsDevice() {
    ibv_destroy_qp(qp);
    ibv_destroy_cq(cq);
    ibv_dereg_mr(mr);
    ibv_dealloc_pd(pd);
    ibv_close_device(ctx);
  }
  VerbsDevice(const VerbsDevice&) = delete;
  VerbsDevice& operator=(const VerbsDevice&) = delete;

  ibv_gid gid() const {
    ibv_gid g{};
    if (ibv_query_gid(ctx, 1, kRoceV2Ipv4Gid, &g) != 0)
      fail(std::string("ibv_query_gid: ") + std::strerror(errno));
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (std::memcmp(g.raw, mapped, sizeof mapped) != 0)
      fail("GID index 3 is not an IPv4-mapped (RoCE v2) GID");
    return g;
  }

  // RESET -> INIT -> RTR -> RTS against `peer`, as perftest does.
  void connect(const VerbsDevice& peer) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
      fail(std::string("modify to INIT: ") + std::strerror(errno));
    a = {};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = peer.qp->qp_num;
    a.rq_psn = 100;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = peer.gid();
    a.ah_attr.grh.sgid_index = kRoceV2Ipv4Gid;
    a.ah_attr.grh.hop_limit = 64;
    a.ah_attr.port_num = 1;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
      fail(std::string("modify to RTR: ") + std::strerror(errno));
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.sq_psn = 100;
    a.max_rd_atomic = 1;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                  IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
      fail(std::string("modify to RTS: ") + std::strerror(errno));
  }
};

inline ibv_device* find_device(ibv_device** list, int n, const char* name) {
  for (int i = 0; list && i < n; ++i)
    if (std::strcmp(ibv_get_device_name(list[i]), name) == 0) return list[i];
  fail(std::string("no RDMA device '") + name + "' (" +
       (list ? std::to_string(n) + " found" : std::string(std::strerror(errno))) +
       "): run with LD_PRELOAD=<builddir>/hw/uverbs/librnicdv-uverbs.so and the mlx5 provider "
       "(Debian's ibverbs-providers) installed");
}

// The shim's simulated HCA behind a device name: the shim puts its devices on the
// process-wide default fabric (hw/uverbs/src/shim.h).
inline std::shared_ptr<sim::Device> shim_device(const char* name) {
  std::shared_ptr<sim::Fabric> fabric = must(sim::default_fabric(), "the shim's fabric");
  for (const std::shared_ptr<sim::Device>& d : fabric->devices())
    if (d->config().name == name) return d;
  fail(std::string("the simulated HCA behind '") + name + "' is not on the default fabric");
}

}  // namespace rnicdv::bench
