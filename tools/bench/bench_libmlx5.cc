// SPDX-License-Identifier: BSD-3-Clause
// rnicdv-bench-libmlx5: rnicdv's post path beside the system's unmodified libmlx5, both
// posting to simulated HCAs in one process, repetitions alternated (docs/performance.md).
//
//   post_write_1sge_libmlx5   rnicdv's QueuePair::post_send of one RDMA WRITE (one 8-byte SGE,
//                             signaled, DoorbellMode::db), exactly as post_write_1sge; the
//                             baseline, libmlx5_write_1sge, is ibv_post_send of the same WR on
//                             a libibverbs QP of "rnicsim0".
//   post_write_typed_libmlx5  the same WRITE through the typed QueuePair::post_write, exactly
//                             as post_write_typed; the same baseline.
//   post_write_ucx            (built with the `ucx` feature) UCX's uct_ep_put_short of 8 bytes
//                             over rc_mlx5 on the same paused "rnicsim0", UCX's lowest-level
//                             RDMA WRITE (inline data, signaled once per UCX's CQ moderation,
//                             its default MMIO mode); the baseline, rnicdv_write_1sge, is the
//                             loop of post_write_1sge.
//
// Run it with librnicdv-uverbs.so preloaded (LD_PRELOAD): that shim presents the simulated
// HCAs to libibverbs, and libmlx5 then writes its WQEs, doorbell record and doorbell register
// into the simulated device's memory. run.py does so. Both QPs are in RTS and both devices are
// paused (sim::Device::pause()), so neither executes a WQE while posts are timed:
// - rnicdv's QP is on a deterministic in-process fabric of its own that nothing steps, and its
//   SQ is marked retired between repetitions, as in rnicdv-bench-driver;
// - libmlx5's QP is on the shim's device, which runs threaded. Paused, its thread still wakes
//   (every 20 us to 1 ms) to note doorbells: it clears the register and reads the doorbell
//   record, and after seeing one it polls for a while. Beside the posting thread on another
//   CPU it would take those cache lines from under the posts (in some runs most repetitions
//   paid for it, several times over). So the process is pinned to one CPU before the shim
//   starts its threads, which inherit that: the device thread then runs only when the posting
//   thread does not, a repetition interrupted by it is an outlier the median leaves out, and
//   nothing touches the QP's memory while posts run. libmlx5 frees SQ slots only as it polls
//   completions, so when the next repetition would not fit, the device is resumed, every WR
//   executes and completes over the simulated wire, the CQ is polled empty and the device is
//   paused again (untimed, before the repetition, like the retiring of rnicdv's SQ).
// libmlx5 is configured to post as rnicdv's QP does, unless the environment says otherwise:
// MLX5_SINGLE_THREADED=1 (no spinlocks, as Threading::single has none) and
// MLX5_POST_SEND_PREFER_BF=0 (an 8-byte doorbell, not a BlueFlame copy, for a WQE that is not
// inline, as DoorbellMode::db).
//
// Options: --smoke (a few iterations), --callgrind (one counted repetition of each, under
// valgrind --tool=callgrind --collect-atstart=no). Prints a JSON array of records on stdout.
#include <infiniband/verbs.h>
#include <sched.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench_sim.h"
#include "bench_util.h"
#ifdef RNICDV_BENCH_UCX
#include "bench_ucx.h"
#endif
#include "rnicdv/detail/qp_core.h"
#include "rnicdv/rnicdv.h"
#include "rnicdv/sim/sim.h"

using namespace rnicdv;
using namespace rnicdv::bench;

namespace {

constexpr uint32_t kOps = 64;          // posts per repetition, as in rnicdv-bench-driver
constexpr uint32_t kSqDepth = 1024;    // both QPs
constexpr uint8_t kRoceV2Ipv4Gid = 3;  // the shim's GID table: ::ffff:a.b.c.d, RoCE v2
constexpr const char* kMeasured = "rnicsim0";
constexpr const char* kPeer = "rnicsim1";

// ---- The libibverbs side (the control path; failures end the program) ----------------------

struct VerbsDevice {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  std::vector<uint8_t> buf = std::vector<uint8_t>(1 << 16);
  ibv_mr* mr = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  uint32_t max_send_wr = 0;  // as libmlx5 granted it

  VerbsDevice(ibv_device* dev, int cq_entries) {
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
    init.cap.max_send_wr = kSqDepth;
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

ibv_device* find_device(ibv_device** list, int n, const char* name) {
  for (int i = 0; list && i < n; ++i)
    if (std::strcmp(ibv_get_device_name(list[i]), name) == 0) return list[i];
  fail(std::string("no RDMA device '") + name + "' (" +
       (list ? std::to_string(n) + " found" : std::string(std::strerror(errno))) +
       "): run with LD_PRELOAD=<builddir>/hw/uverbs/librnicdv-uverbs.so and the mlx5 provider "
       "(Debian's ibverbs-providers) installed");
}

// The shim's simulated HCA behind a device name: the shim puts its devices on the
// process-wide default fabric (hw/uverbs/src/shim.h).
std::shared_ptr<sim::Device> shim_device(const char* name) {
  std::shared_ptr<sim::Fabric> fabric = must(sim::default_fabric(), "the shim's fabric");
  for (const std::shared_ptr<sim::Device>& d : fabric->devices())
    if (d->config().name == name) return d;
  fail(std::string("the simulated HCA behind '") + name + "' is not on the default fabric");
}

void compare(const Options& o, std::vector<Record>* out) {
  // rnicdv: the QP of post_write_1sge.
  SimPair s;
  s.hw_a->pause();
  QpConfig config;
  config.threading = Threading::single;
  config.doorbell = doorbell::DoorbellMode::db;
  config.caps.max_send_wr = kSqDepth;
  config.caps.max_send_sge = 1;
  config.caps.max_inline_data = 0;
  Conn conn = connect(s, config, kSqDepth, false);
  const Sge sge8{s.mr_a->addr(), 8, s.mr_a->lkey()};
  SendWr wr;
  wr.opcode = WrOpcode::rdma_write;
  wr.flags = send_flags::signaled;
  wr.sg_list = &sge8;
  wr.num_sge = 1;
  wr.remote_addr = s.mr_b->addr();
  wr.rkey = s.mr_b->rkey();

  // libmlx5: the same WR on the shim's rnicsim0, connected to rnicsim1.
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  VerbsDevice mlx(find_device(list, n, kMeasured), static_cast<int>(kSqDepth));
  VerbsDevice peer(find_device(list, n, kPeer), 64);
  ibv_free_device_list(list);
  mlx.connect(peer);
  peer.connect(mlx);
#ifdef RNICDV_BENCH_UCX
  UctPair ucx(kMeasured, kPeer);  // on the same simulated HCAs, connected before the pause
#endif
  std::shared_ptr<sim::Device> mlx_hw = shim_device(kMeasured);
  mlx_hw->pause();
  ibv_sge vsge{reinterpret_cast<uintptr_t>(mlx.buf.data()), 8, mlx.mr->lkey};
  ibv_send_wr vwr{};
  vwr.opcode = IBV_WR_RDMA_WRITE;
  vwr.send_flags = IBV_SEND_SIGNALED;
  vwr.sg_list = &vsge;
  vwr.num_sge = 1;
  vwr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(peer.buf.data());
  vwr.wr.rdma.rkey = peer.mr->rkey;

  uint32_t outstanding = 0;  // WRs posted to libmlx5's QP and not yet completed
  auto drain = [&] {
    mlx_hw->resume();
    std::vector<ibv_wc> wcs(64);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (outstanding != 0) {
      const int got = ibv_poll_cq(mlx.cq, static_cast<int>(wcs.size()), wcs.data());
      if (got < 0) fail("ibv_poll_cq failed");
      for (int i = 0; i < got; ++i)
        if (wcs[i].status != IBV_WC_SUCCESS)
          fail(std::string("libmlx5 WRITE completed with ") + ibv_wc_status_str(wcs[i].status));
      outstanding -= static_cast<uint32_t>(got);
      if (got == 0) {
        if (std::chrono::steady_clock::now() > deadline)
          fail(std::to_string(outstanding) + " libmlx5 WRITEs did not complete in 120 s");
        std::this_thread::yield();
      }
    }
    mlx_hw->pause();
  };

  detail::QpCore& core = *conn.qp->core();
  QueuePair* qp = &*conn.qp;
  auto wrp = std::make_shared<SendWr>(wr);
  ibv_qp* vqp = mlx.qp;
  auto prepare = [&] {
    core.sq_tail.store(core.sq_pi, std::memory_order_release);
    if (outstanding + kOps > mlx.max_send_wr) drain();
  };
  auto libmlx5 = [vqp, &vwr, &outstanding] {
    ibv_send_wr* bad = nullptr;
    for (uint32_t i = 0; i < kOps; ++i) {
      vwr.wr_id = i;
      if (ibv_post_send(vqp, &vwr, &bad) != 0) [[unlikely]]
        fail("ibv_post_send failed");
    }
    outstanding += kOps;
  };
  auto rnicdv_write_1sge = [qp, wrp] {  // the loop of rnicdv-bench-driver's post_write_1sge
    for (uint32_t i = 0; i < kOps; ++i) {
      wrp->wr_id = i;
      if (qp->post_send(*wrp) != Errc::ok) [[unlikely]]
        fail("post_send failed");
    }
  };
  measure({"post_write_1sge_libmlx5", "libmlx5_write_1sge", "ns/post", kOps, prepare,
           rnicdv_write_1sge, libmlx5},
          o, out);
  measure({"post_write_typed_libmlx5", "libmlx5_write_1sge", "ns/post", kOps, prepare,
           [qp, wrp] {  // the loop of rnicdv-bench-driver's post_write_typed
             for (uint32_t i = 0; i < kOps; ++i) {
               wrp->wr_id = i;
               if (qp->post_write(wrp->wr_id, *wrp->sg_list, wrp->remote_addr, wrp->rkey,
                                  send_flags::signaled) != Errc::ok) [[unlikely]]
                 fail("post_write failed");
             }
           },
           libmlx5},
          o, out);
#ifdef RNICDV_BENCH_UCX
  uint32_t ucx_outstanding = 0;
  measure({"post_write_ucx", "rnicdv_write_1sge", "ns/post", kOps,
           [&] {
             prepare();
             if (ucx_outstanding + kOps > UctPair::kDrainAbove) {
               mlx_hw->resume();
               ucx.drain();
               mlx_hw->pause();
               ucx_outstanding = 0;
             }
           },
           [&ucx, &ucx_outstanding] {
             if (!ucx.put_short(kOps)) [[unlikely]]
               fail("uct_ep_put_short failed (no resources, or the endpoint in error)");
             ucx_outstanding += kOps;
           },
           rnicdv_write_1sge},
          o, out);
  mlx_hw->resume();
  ucx.drain();
  mlx_hw->pause();
#endif
  drain();  // nothing posted is left behind when the QPs are destroyed
}

// This thread, and every thread created after it, on the CPU it runs on now.
void pin_to_one_cpu() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0)
    fail(std::string("sched_getaffinity: ") + std::strerror(errno));
  int cpu = sched_getcpu();
  if (cpu < 0 || cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &allowed))
    for (cpu = 0; cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &allowed); ++cpu) {
    }
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  if (sched_setaffinity(0, sizeof one, &one) != 0)
    fail("sched_setaffinity to CPU " + std::to_string(cpu) + ": " + std::strerror(errno));
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--smoke") {
      o.smoke = true;
    } else if (arg == "--callgrind") {
      o.callgrind = true;
    } else {
      fail("unknown option '" + arg + "' (--smoke, --callgrind)");
    }
  }
  if (o.callgrind && !bench::under_valgrind())
    fail("--callgrind: run under valgrind --tool=callgrind --collect-atstart=no");
  // Before libmlx5 reads them, when its first context is opened.
  setenv("MLX5_SINGLE_THREADED", "1", 0);
  setenv("MLX5_POST_SEND_PREFER_BF", "0", 0);
  // Before the first device is opened: the shim starts the device threads then.
  pin_to_one_cpu();
  std::vector<Record> records;
  compare(o, &records);
  print_records(records, stdout);
  return 0;
}
