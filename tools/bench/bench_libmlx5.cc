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
#include "bench_verbs.h"
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
constexpr const char* kMeasured = "rnicsim0";
constexpr const char* kPeer = "rnicsim1";

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
  VerbsDevice mlx(find_device(list, n, kMeasured), static_cast<int>(kSqDepth), kSqDepth);
  VerbsDevice peer(find_device(list, n, kPeer), 64, kSqDepth);
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
