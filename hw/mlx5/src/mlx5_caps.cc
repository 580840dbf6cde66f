// SPDX-License-Identifier: BSD-3-Clause
#include "mlx5_caps.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "mlx5_verbs.h"

namespace rnicdv::hw::mlx5 {

namespace {

uint32_t to_u32(int v) {
  return v > 0 ? static_cast<uint32_t>(v) : 0;
}

uint8_t to_u8(int v) {
  return static_cast<uint8_t>(std::clamp(v, 0, int{std::numeric_limits<uint8_t>::max()}));
}

// Requests above this are not made: no mlx5 WQE comes near it (the largest send WQE is
// 16 basic blocks, 1 KiB, on current ConnectX parts).
constexpr uint32_t kInlineProbeCeiling = 64 * 1024;

}  // namespace

DeviceCaps caps_from_attrs(const ibv_device_attr& dev, const PortAddressing* port1) {
  DeviceCaps caps;
  caps.max_qp = to_u32(dev.max_qp);
  caps.max_qp_wr = to_u32(dev.max_qp_wr);
  caps.max_send_sge = to_u32(dev.max_sge);
  caps.max_recv_sge = to_u32(dev.max_sge);
  caps.max_cq = to_u32(dev.max_cq);
  caps.max_cqe = to_u32(dev.max_cqe);
  caps.max_mr = to_u32(dev.max_mr);
  caps.max_mr_size = dev.max_mr_size;
  caps.max_pd = to_u32(dev.max_pd);
  caps.max_srq = to_u32(dev.max_srq);
  caps.max_srq_wr = to_u32(dev.max_srq_wr);
  caps.max_qp_rd_atom = to_u8(dev.max_qp_rd_atom);
  caps.max_qp_init_rd_atom = to_u8(dev.max_qp_init_rd_atom);
  caps.max_mcast_grp = to_u32(dev.max_mcast_grp);
  caps.max_mcast_qp_attach = to_u32(dev.max_mcast_qp_attach);
  caps.max_total_mcast_qp_attach = to_u32(dev.max_total_mcast_qp_attach);
  if (port1) {
    caps.max_msg_size = port1->max_msg_size;
    caps.max_mtu = port1->max_mtu;
    caps.active_mtu = port1->active_mtu;
  }
  return caps;
}

uint32_t find_max_inline(const std::function<std::optional<uint32_t>(uint32_t)>& try_create,
                         uint32_t ceiling) {
  const std::optional<uint32_t> first = try_create(0);
  if (!first) return 0;
  uint64_t ok = *first;                  // largest grant seen
  uint64_t bad = uint64_t{ceiling} + 1;  // smallest request known (or assumed) to fail
  // Gallop: requests grow by 64, 128, 256, ... above the last grant until one fails.
  for (uint64_t step = 64; ok + 1 < bad; step *= 2) {
    const uint64_t request = std::min(ok + step, bad - 1);
    const std::optional<uint32_t> granted = try_create(static_cast<uint32_t>(request));
    if (!granted) {
      bad = request;
      break;
    }
    ok = std::max<uint64_t>(ok, *granted);
  }
  // Bisect between the largest grant and the smallest failure.
  while (ok + 1 < bad) {
    const uint64_t request = ok + (bad - ok) / 2;
    const std::optional<uint32_t> granted = try_create(static_cast<uint32_t>(request));
    if (granted) {
      ok = std::max<uint64_t>(ok, *granted);
    } else {
      bad = request;
    }
  }
  return static_cast<uint32_t>(ok);
}

uint32_t probe_max_inline(ibv_context* ctx) {
  PdPtr pd(ibv_alloc_pd(ctx));
  if (!pd) return 0;
  CqPtr cq(ibv_create_cq(ctx, 1, nullptr, nullptr, 0));
  if (!cq) return 0;
  auto try_create = [&](uint32_t inline_size) -> std::optional<uint32_t> {
    ibv_qp_init_attr init;
    std::memset(&init, 0, sizeof init);
    init.send_cq = cq.get();
    init.recv_cq = cq.get();
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = 1;
    init.cap.max_recv_wr = 1;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    init.cap.max_inline_data = inline_size;
    QpPtr qp(ibv_create_qp(pd.get(), &init));
    if (!qp) return std::nullopt;
    // ibv_create_qp writes the granted capabilities back into `init`.
    return std::max(init.cap.max_inline_data, inline_size);
  };
  return find_max_inline(try_create, kInlineProbeCeiling);
}

}  // namespace rnicdv::hw::mlx5
