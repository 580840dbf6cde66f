// SPDX-License-Identifier: BSD-3-Clause
// The model's device capabilities.
#include <infiniband/mlx5dv.h>

#include "hca.h"
#include "rnicdv/wqe/send_wqe.h"

namespace rnicdv::sim {

namespace {
// Packet pacing from 1 Mb/s to 100 Gb/s, a ConnectX-5's range.
constexpr uint32_t kRateLimitMinKbps = 1000;
constexpr uint32_t kRateLimitMaxKbps = 100'000'000;
// Multicast: as many groups as rxe offers, and 240 QPs in each, a ConnectX's num_qp_per_mcg.
constexpr uint32_t kMaxMcastGroups = 8192;
constexpr uint32_t kMaxMcastQpsPerGroup = 240;
}  // namespace

hw::DeviceCaps format_limits() {
  // A WQE is at most 63 16-byte units (the 6-bit DS field). The tightest opcodes carry a
  // ctrl and a raddr segment (RDMA WRITE/READ): 61 data segments, or 63*16 - 32 - 4 = 972
  // bytes of inline data after the 4-byte inline header.
  hw::DeviceCaps c;
  c.max_qp = 1u << 24;
  c.max_qp_wr = kMaxSqBbs;
  c.max_send_sge = wqe::kMaxWqeDs - 2;
  c.max_recv_sge = wqe::kMaxDecodedSegments;
  c.max_inline_data = wqe::kMaxWqeDs * wqe::kDsBytes - 2 * wqe::kDsBytes -
                      static_cast<uint32_t>(sizeof(mlx5_wqe_inl_data_seg));
  c.max_cq = 1u << 24;
  c.max_cqe = 1u << 22;
  c.max_mr = 1u << 24;
  c.max_mr_size = uint64_t{1} << 47;
  c.max_pd = 1u << 24;
  c.max_msg_size = 1u << 31;
  c.max_qp_rd_atom = 255;
  c.max_qp_init_rd_atom = 255;
  c.max_mtu = hw::Mtu::mtu4096;
  c.active_mtu = hw::Mtu::mtu4096;
  c.max_srq = 1u << 24;
  c.max_srq_wr = kMaxSrqWqes - 1;  // one WQE of the ring is never handed out (srq_wqe.h)
  c.rate_limit_min_kbps = kRateLimitMinKbps;
  c.rate_limit_max_kbps = kRateLimitMaxKbps;
  c.max_mcast_grp = kMaxMcastGroups;
  c.max_mcast_qp_attach = kMaxMcastQpsPerGroup;
  c.max_total_mcast_qp_attach = kMaxMcastGroups * kMaxMcastQpsPerGroup;
  return c;
}

hw::DeviceCaps default_caps() {
  // ConnectX-like, modest in memory. 30 send SGEs is what a ConnectX reports (a 512-byte
  // WQE: ctrl + raddr + 30 data segments = 32 units); the format would allow 61.
  hw::DeviceCaps c;
  c.max_qp = 1024;
  c.max_qp_wr = 16384;
  c.max_send_sge = 30;
  c.max_recv_sge = 32;
  c.max_inline_data = 256;
  c.max_cq = 4096;
  c.max_cqe = 1u << 22;
  c.max_mr = 65536;
  c.max_mr_size = uint64_t{1} << 40;
  c.max_pd = 4096;
  c.max_msg_size = 1u << 31;
  c.max_qp_rd_atom = 16;
  c.max_qp_init_rd_atom = 16;
  c.max_mtu = hw::Mtu::mtu4096;
  c.active_mtu = hw::Mtu::mtu4096;
  c.max_srq = 1024;
  c.max_srq_wr = 16383;
  c.rate_limit_min_kbps = kRateLimitMinKbps;
  c.rate_limit_max_kbps = kRateLimitMaxKbps;
  c.max_mcast_grp = kMaxMcastGroups;
  c.max_mcast_qp_attach = kMaxMcastQpsPerGroup;
  c.max_total_mcast_qp_attach = kMaxMcastGroups * kMaxMcastQpsPerGroup;
  return c;
}

}  // namespace rnicdv::sim
