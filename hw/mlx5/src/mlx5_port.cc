// SPDX-License-Identifier: BSD-3-Clause
#include "mlx5_port.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "mlx5_verbs.h"

namespace rnicdv::hw::mlx5 {

static_assert(static_cast<int>(Mtu::mtu256) == IBV_MTU_256);
static_assert(static_cast<int>(Mtu::mtu4096) == IBV_MTU_4096);

const char* link_layer_name(LinkLayer l) noexcept {
  switch (l) {
    case LinkLayer::infiniband:
      return "InfiniBand";
    case LinkLayer::ethernet:
      return "Ethernet";
    case LinkLayer::unspecified:
      return "unspecified";
  }
  return "?";
}

bool is_link_local(const Gid& g) noexcept {
  return g.raw[0] == 0xfe && (g.raw[1] & 0xc0) == 0x80;
}

bool is_zero(const Gid& g) noexcept {
  for (uint8_t b : g.raw)
    if (b != 0) return false;
  return true;
}

namespace {

// perftest's weights: the address family the user asked for (IPv4 by default) dominates,
// a routable address beats a link-local one, and RoCE v2 (routable, UDP) beats v1.
int gid_score(const GidCandidate& c) {
  int score = 0;
  if (c.gid.is_ipv4_mapped()) score += 100;
  if (!is_link_local(c.gid)) score += 10;
  if (c.type == IBV_GID_TYPE_ROCE_V2) score += 1;
  return score;
}

Mtu mtu_from_ibv(ibv_mtu m) {
  if (m < IBV_MTU_256 || m > IBV_MTU_4096) return Mtu::mtu256;
  return static_cast<Mtu>(m);
}

LinkLayer link_layer_from_ibv(uint8_t l) {
  switch (l) {
    case IBV_LINK_LAYER_INFINIBAND:
      return LinkLayer::infiniband;
    case IBV_LINK_LAYER_ETHERNET:
      return LinkLayer::ethernet;
    default:
      return LinkLayer::unspecified;
  }
}

}  // namespace

std::optional<GidCandidate> choose_roce_gid(std::span<const GidCandidate> entries) {
  std::optional<GidCandidate> best;
  int best_score = -1;
  for (const GidCandidate& c : entries) {
    if (is_zero(c.gid)) continue;
    if (c.type != IBV_GID_TYPE_ROCE_V1 && c.type != IBV_GID_TYPE_ROCE_V2) continue;
    if (c.index > kMaxSgidIndex) continue;  // ibv_global_route.sgid_index is 8 bits
    const int score = gid_score(c);
    if (score > best_score || (score == best_score && c.index < best->index)) {
      best = c;
      best_score = score;
    }
  }
  return best;
}

std::string port_transport_name(const PortAddressing& port) {
  switch (port.link_layer) {
    case LinkLayer::infiniband:
      return "InfiniBand";
    case LinkLayer::ethernet:
      if (!port.source_gid) return "Ethernet (no GID)";
      return port.source_gid->type == IBV_GID_TYPE_ROCE_V2 ? "RoCE v2" : "RoCE v1";
    case LinkLayer::unspecified:
      break;
  }
  return "unspecified link layer";
}

Result<PortAddressing> query_port_addressing(ibv_context* ctx, uint8_t port_num) {
  const std::string what = "port " + std::to_string(port_num);
  ibv_port_attr attr;
  std::memset(&attr, 0, sizeof attr);
  if (int rc = ibv_query_port(ctx, port_num, &attr); rc != 0) {
    return verbs_failure(rc, what, "ibv_query_port");
  }

  PortAddressing port;
  port.port_num = port_num;
  // A port that reports no link layer is InfiniBand (libibverbs' convention for old kernels).
  port.link_layer = attr.link_layer == IBV_LINK_LAYER_UNSPECIFIED
                        ? LinkLayer::infiniband
                        : link_layer_from_ibv(attr.link_layer);
  port.state = attr.state;
  port.lid = attr.lid;
  port.pkey_table_len = attr.pkey_tbl_len;
  port.max_mtu = mtu_from_ibv(attr.max_mtu);
  port.active_mtu = mtu_from_ibv(attr.active_mtu);
  port.max_msg_size = attr.max_msg_sz;

  if (port.link_layer == LinkLayer::infiniband) {
    // The port GID: subnet prefix + port GUID (IBA 4.1.1). Index 0 always holds it.
    ibv_gid_entry entry;
    std::memset(&entry, 0, sizeof entry);
    if (ibv_query_gid_ex(ctx, port_num, 0, &entry, 0) == 0) {
      GidCandidate c;
      c.index = 0;
      std::memcpy(c.gid.raw, entry.gid.raw, sizeof c.gid.raw);
      c.type = IBV_GID_TYPE_IB;
      port.source_gid = c;
    }
    return port;
  }

  // Ethernet: scan the whole table. Empty entries answer ENODATA; any other failure of one
  // entry (an unreadable type, a vanished netdev) only removes that entry from the choice.
  std::vector<GidCandidate> candidates;
  const int table_len = attr.gid_tbl_len > 0 ? attr.gid_tbl_len : 0;
  candidates.reserve(static_cast<size_t>(table_len));
  for (int i = 0; i < table_len; ++i) {
    ibv_gid_entry entry;
    std::memset(&entry, 0, sizeof entry);
    if (ibv_query_gid_ex(ctx, port_num, static_cast<uint32_t>(i), &entry, 0) != 0) continue;
    GidCandidate c;
    c.index = static_cast<uint32_t>(i);
    std::memcpy(c.gid.raw, entry.gid.raw, sizeof c.gid.raw);
    c.type = entry.gid_type;
    candidates.push_back(c);
  }
  port.source_gid = choose_roce_gid(candidates);
  return port;
}

Result<uint64_t> read_port_counter_file(const std::string& class_dir, const std::string& device,
                                        uint8_t port, const std::string& name) {
  const std::string what =
      device + ": read_port_counter: port " + std::to_string(port) + " counter '" + name + "'";
  // A name relative to the port's directory: no absolute path, no "..", nothing empty.
  bool ok = !name.empty() && name.front() != '/' && name.back() != '/';
  for (size_t at = 0; ok && at <= name.size();) {
    const size_t slash = std::min(name.find('/', at), name.size());
    const std::string part = name.substr(at, slash - at);
    ok = !part.empty() && part != "." && part != "..";
    at = slash + 1;
  }
  if (!ok)
    return Status(Errc::invalid_argument,
                  what + ": not a counter's name (e.g. counters/port_xmit_data)");
  const std::string path =
      class_dir + "/" + device + "/ports/" + std::to_string(port) + "/" + name;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return Status(err == ENOENT ? Errc::invalid_argument : Errc::io_error,
                  what + ": open " + path + ": " + std::strerror(err));
  }
  char text[32] = {};
  const ssize_t n = ::read(fd, text, sizeof text - 1);
  const int err = errno;
  ::close(fd);
  if (n < 0) return Status(Errc::io_error, what + ": read " + path + ": " + std::strerror(err));
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (end == text || errno != 0 || (*end != '\n' && *end != '\0'))
    return Status(Errc::io_error, what + ": " + path + " does not hold a number");
  return static_cast<uint64_t>(v);
}

}  // namespace rnicdv::hw::mlx5
