// SPDX-License-Identifier: BSD-3-Clause
// Figures of the software HCA (a benchmark, run by `meson test --benchmark`, never a test):
// throughput of a 64 KiB RDMA WRITE stream between two devices, deterministic mode and
// threaded mode, and the sizes of the model's QP and CQ objects.
#include <chrono>
#include <cstdio>

#include "cq.h"
#include "qp.h"
#include "sim_harness.h"

using namespace simtest;

namespace {

double write_stream(const FabricOptions& fo, uint64_t total_bytes, bool step) {
  Pair p(fo);
  ConnectOptions o;
  o.mtu = hw::Mtu::mtu4096;
  o.timeout = 14;
  p.connect(o, o);
  constexpr uint32_t kLen = 64 * 1024;
  constexpr int kBatch = 16;
  Buffer a = p.a.reg(kLen);
  Buffer b = p.b.reg(kLen);
  fill_pattern(a.data(), kLen, 1);
  const uint64_t count = total_bytes / kLen;
  const auto t0 = std::chrono::steady_clock::now();
  for (uint64_t done = 0; done < count; done += kBatch) {
    for (int i = 0; i < kBatch; ++i) {
      Sge sge{a.addr(), kLen, a.lkey()};
      SendWr w = make_wr(WrOpcode::rdma_write, &sge, 1, 0,
                         i + 1 == kBatch ? send_flags::signaled : send_flags::none);
      w.remote_addr = b.addr();
      w.rkey = b.rkey();
      if (p.a.post(w) != Errc::ok) return -1;
    }
    p.a.ring();
    Completion c{};
    if (step) {
      if (!p.run_until([&] { return p.a.poll_send(&c); })) return -1;
    } else {
      while (!p.a.poll_send(&c)) {
      }
    }
    if (c.status != IBV_WC_SUCCESS) return -1;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return static_cast<double>(count * kLen) / s / 1e9;
}

}  // namespace

int main() {
  std::printf("sizeof(QpObj) %zu bytes, sizeof(CqObj) %zu bytes, sizeof(SendWqe) %zu bytes\n",
              sizeof(rnicdv::sim::QpObj), sizeof(rnicdv::sim::CqObj),
              sizeof(rnicdv::sim::SendWqe));
  FabricOptions det;
  std::printf("64 KiB WRITE stream, deterministic, in-process: %.2f GB/s\n",
              write_stream(det, 1ull << 30, true));
  FabricOptions thr;
  thr.mode = sim::ExecMode::threaded;
  std::printf("64 KiB WRITE stream, threaded, in-process:      %.2f GB/s\n",
              write_stream(thr, 1ull << 30, false));
  thr.wire = sim::WireKind::udp;
  std::printf("64 KiB WRITE stream, threaded, UDP:             %.2f GB/s\n",
              write_stream(thr, 256ull << 20, false));
  return 0;
}
