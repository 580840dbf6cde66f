// SPDX-License-Identifier: BSD-3-Clause
// Per-port addressing: link layer, LID, the source GID the device sends from, MTUs.
//
// GID choice follows perftest's automatic selection (get_best_gid_index): on an Ethernet port
// an IPv4-mapped GID wins, then a non-link-local one, then RoCE v2 over v1; ties go to the
// lowest index. On an InfiniBand port the port GID (index 0) is used and peers are reached by
// LID (see mlx5_modify.h for what that means for QpAttr).
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "rnicdv/hw/device.h"
#include "rnicdv/status.h"

namespace rnicdv::hw::mlx5 {

enum class LinkLayer : uint8_t { infiniband, ethernet, unspecified };
const char* link_layer_name(LinkLayer l) noexcept;  // "InfiniBand", "Ethernet", "unspecified"

// One valid entry of a port's GID table (ibv_gid_entry, narrowed).
struct GidCandidate {
  uint32_t index = 0;
  Gid gid;
  uint32_t type = IBV_GID_TYPE_IB;  // enum ibv_gid_type
};

// The largest GID index an address vector can name (ibv_global_route.sgid_index is a uint8_t).
inline constexpr uint32_t kMaxSgidIndex = 255;

// The best source GID among `entries`, or nothing if none is usable (all zero). Pure.
std::optional<GidCandidate> choose_roce_gid(std::span<const GidCandidate> entries);

bool is_link_local(const Gid& g) noexcept;  // fe80::/10
bool is_zero(const Gid& g) noexcept;

// What a modify needs to know about a port.
struct PortAddressing {
  uint8_t port_num = 0;
  LinkLayer link_layer = LinkLayer::unspecified;
  ibv_port_state state = IBV_PORT_NOP;
  uint16_t lid = 0;
  uint16_t pkey_table_len = 0;
  std::optional<GidCandidate> source_gid;  // unset: no usable GID (e.g. RoCE port, no address)
  Mtu max_mtu = Mtu::mtu256;
  Mtu active_mtu = Mtu::mtu256;
  uint32_t max_msg_size = 0;
};

// "RoCE v2", "RoCE v1", "InfiniBand", or "Ethernet (no GID)".
std::string port_transport_name(const PortAddressing& port);

// Queries port `port_num` of `ctx` and chooses its source GID.
Result<PortAddressing> query_port_addressing(ibv_context* ctx, uint8_t port_num);

// A port counter from sysfs: `class_dir`/<device>/ports/<port>/<name> (class_dir is
// "/sys/class/infiniband" but for tests), where `name` is relative, such as
// "counters/port_xmit_data" or "hw_counters/out_of_buffer", and never leaves the port's
// directory. The error names the device, the port, the counter and the reason.
Result<uint64_t> read_port_counter_file(const std::string& class_dir, const std::string& device,
                                        uint8_t port, const std::string& name);

}  // namespace rnicdv::hw::mlx5
