// SPDX-License-Identifier: BSD-3-Clause
#include "wire/dpdk_port.h"

#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <rte_errno.h>
#include <rte_eth_ring.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_ring.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace rnicdv::sim {
namespace {

constexpr uint16_t kRxDescriptors = 1024, kTxDescriptors = 1024;
constexpr unsigned kLinkRingSize = 1024;
// The sender's mbufs wait in the in-process link's ring until the receiver frees them, so a
// pool holds more than a ring's worth.
constexpr unsigned kPoolMbufs = 2047;
static_assert(kPoolMbufs > kLinkRingSize);
// A jumbo frame's room: the largest RoCEv2 frame (62 + 4164 + 4 bytes over IPv6) fits without chaining,
// and so does what net_af_packet asks of an RX mbuf when its frames are large enough for a
// 4096-byte path MTU (framesz=8192).
constexpr uint16_t kMbufDataRoom = RTE_PKTMBUF_HEADROOM + 9216;
static_assert(kMbufDataRoom - RTE_PKTMBUF_HEADROOM >= kMaxRoceFrameLen);

struct PortSlot {
  bool claimed = false;
  rte_mempool* pool = nullptr;
};

struct Registry {
  std::mutex mu;
  PortSlot slots[RTE_MAX_ETHPORTS];
  bool link_made = false;
  uint16_t link_ports[2] = {0, 0};
};

Registry& registry() {
  static Registry* r = new Registry;  // ports outlive static destructors, like EAL
  return *r;
}

Status dpdk_error(Errc code, int err, const char* what, const std::string& port) {
  return Status::error(code, "dpdk wire: %s: %s: %s", port.c_str(), what, rte_strerror(err));
}

Result<rte_mempool*> pool_for(Registry& r, uint16_t port) {
  if (r.slots[port].pool) return r.slots[port].pool;
  const std::string name = "rnicdv_mb" + std::to_string(port);
  const int socket = rte_eth_dev_socket_id(port);
  rte_mempool* pool = rte_pktmbuf_pool_create(name.c_str(), kPoolMbufs, 0, 0, kMbufDataRoom,
                                              socket < 0 ? SOCKET_ID_ANY : socket);
  if (pool == nullptr)
    return Status::error(Errc::no_resources, "dpdk wire: port %u: mbuf pool '%s': %s",
                         unsigned{port}, name.c_str(), rte_strerror(rte_errno));
  r.slots[port].pool = pool;
  return pool;
}

// The in-process link: ring a->b is port 0's TX and port 1's RX, ring b->a the reverse.
Status make_link(Registry& r) {
  if (r.link_made) return Status::ok();
  rte_ring* ab = rte_ring_lookup("rnicdv_link_ab");
  if (ab == nullptr)
    ab = rte_ring_create("rnicdv_link_ab", kLinkRingSize, SOCKET_ID_ANY,
                         RING_F_SP_ENQ | RING_F_SC_DEQ);
  rte_ring* ba = rte_ring_lookup("rnicdv_link_ba");
  if (ba == nullptr)
    ba = rte_ring_create("rnicdv_link_ba", kLinkRingSize, SOCKET_ID_ANY,
                         RING_F_SP_ENQ | RING_F_SC_DEQ);
  if (ab == nullptr || ba == nullptr)
    return Status::error(Errc::no_resources, "dpdk wire: in-process link: rings: %s",
                         rte_strerror(rte_errno));
  const int p0 = rte_eth_from_rings("rnicdv_link0", &ba, 1, &ab, 1, SOCKET_ID_ANY);
  if (p0 < 0)
    return Status::error(Errc::no_resources, "dpdk wire: in-process link: port rnicdv_link0: %s",
                         rte_strerror(rte_errno));
  const int p1 = rte_eth_from_rings("rnicdv_link1", &ab, 1, &ba, 1, SOCKET_ID_ANY);
  if (p1 < 0)
    return Status::error(Errc::no_resources, "dpdk wire: in-process link: port rnicdv_link1: %s",
                         rte_strerror(rte_errno));
  r.link_ports[0] = static_cast<uint16_t>(p0);
  r.link_ports[1] = static_cast<uint16_t>(p1);
  r.link_made = true;
  return Status::ok();
}

bool is_link_port(const Registry& r, uint16_t port) {
  return r.link_made && (port == r.link_ports[0] || port == r.link_ports[1]);
}

Result<uint16_t> resolve(const std::string& wanted) {
  char* end = nullptr;
  const unsigned long id = std::strtoul(wanted.c_str(), &end, 10);
  if (!wanted.empty() && *end == '\0') {
    if (id >= RTE_MAX_ETHPORTS || !rte_eth_dev_is_valid_port(static_cast<uint16_t>(id)))
      return Status::error(Errc::not_found, "dpdk wire: port %s: no such ethdev port (%u probed)",
                           wanted.c_str(), unsigned{rte_eth_dev_count_avail()});
    return static_cast<uint16_t>(id);
  }
  uint16_t port = 0;
  if (rte_eth_dev_get_port_by_name(wanted.c_str(), &port) != 0)
    return Status::error(Errc::not_found,
                         "dpdk wire: port '%s': no ethdev port by that name (give EAL a --vdev "
                         "or a PCI device for it)",
                         wanted.c_str());
  return port;
}

// The MTU of kernel interface `if_index`, or -1.
int interface_mtu(uint32_t if_index) {
  if (if_index == 0) return -1;
  ifreq req{};
  if (::if_indextoname(if_index, req.ifr_name) == nullptr) return -1;
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const int rc = ::ioctl(fd, SIOCGIFMTU, &req);
  ::close(fd);
  return rc == 0 ? req.ifr_mtu : -1;
}

Result<DpdkPort> describe_port(Registry& r, uint16_t id) {
  DpdkPort p;
  p.id = id;
  char name[RTE_ETH_NAME_MAX_LEN] = {};
  rte_eth_dev_get_name_by_port(id, name);
  p.name = name;
  rte_eth_dev_info info{};
  if (int rc = rte_eth_dev_info_get(id, &info); rc != 0)
    return dpdk_error(Errc::io_error, -rc, "device info", p.describe());
  p.driver = info.driver_name ? info.driver_name : "?";
  p.if_index = info.if_index;
  rte_ether_addr mac{};
  rte_eth_macaddr_get(id, &mac);
  std::memcpy(p.hw_mac.data(), mac.addr_bytes, 6);
  p.in_process_link = is_link_port(r, id);
  p.link_index = p.in_process_link && id == r.link_ports[1] ? 1 : 0;
  uint16_t mtu = RTE_ETHER_MTU;
  rte_eth_dev_get_mtu(id, &mtu);
  if (p.driver == "net_ring") {
    p.max_frame = static_cast<uint32_t>(kMaxRoceFrameLen);  // rings carry any mbuf
  } else if (const int kernel_mtu = interface_mtu(p.if_index); kernel_mtu > 0) {
    // af_packet and tap send through a kernel interface, whose MTU is the limit (their ethdev
    // MTU and max_rx_pktlen are fixed defaults, not the interface's).
    p.max_frame = static_cast<uint32_t>(
        std::min<uint64_t>(uint64_t(kernel_mtu) + kEthHeaderLen, kMaxRoceFrameLen));
  } else {
    uint64_t max = uint64_t{mtu} + kEthHeaderLen;
    if (info.max_rx_pktlen > RTE_ETHER_CRC_LEN)
      max = std::min<uint64_t>(max, info.max_rx_pktlen - RTE_ETHER_CRC_LEN);
    p.max_frame = static_cast<uint32_t>(std::min<uint64_t>(max, kMaxRoceFrameLen));
  }
  RNICDV_ASSIGN_OR_RETURN(p.pool, pool_for(r, id));
  return p;
}

// The EAL arguments that ask for devices: --vdev, -a/--allow (PCI).
std::string named_devices(const std::vector<std::string>& eal_args) {
  std::string out;
  for (size_t i = 0; i < eal_args.size(); ++i) {
    const std::string& a = eal_args[i];
    const bool takes_next = a == "--vdev" || a == "-a" || a == "--allow";
    const bool inline_value = a.rfind("--vdev=", 0) == 0 || a.rfind("--allow=", 0) == 0 ||
                              (a.size() > 2 && a[0] == '-' && a[1] == 'a');
    if (!takes_next && !inline_value) continue;
    if (!out.empty()) out += ' ';
    out += a;
    if (takes_next && i + 1 < eal_args.size()) out += ' ' + eal_args[++i];
  }
  return out;
}

}  // namespace

std::string DpdkPort::describe() const {
  return "port " + std::to_string(id) + " " + name + " (" + driver + ")";
}

Result<std::vector<DpdkPort>> claim_dpdk_ports(const std::vector<std::string>& wanted,
                                               const std::vector<std::string>& eal_args) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  std::vector<uint16_t> ids;
  if (!wanted.empty()) {
    for (const std::string& w : wanted) {
      RNICDV_ASSIGN_OR_RETURN(const uint16_t id, resolve(w));
      for (uint16_t seen : ids)
        if (seen == id)
          return Status::error(Errc::invalid_argument, "dpdk wire: port %s is named twice",
                               w.c_str());
      if (r.slots[id].claimed)
        return Status::error(Errc::busy, "dpdk wire: port %s is in use by another DPDK wire",
                             w.c_str());
      ids.push_back(id);
    }
  } else {
    uint16_t id;
    bool probed_any = false;
    RTE_ETH_FOREACH_DEV(id) {
      if (is_link_port(r, id)) continue;
      probed_any = true;
      if (!r.slots[id].claimed) ids.push_back(id);
    }
    if (ids.empty() && probed_any)
      return Status::error(Errc::busy,
                           "dpdk wire: every ethdev port is in use by another DPDK wire");
    if (ids.empty()) {
      if (const std::string named = named_devices(eal_args); !named.empty())
        return Status::error(Errc::not_found,
                             "dpdk wire: EAL probed no ethdev port for '%s' (see DPDK's "
                             "messages above for why)",
                             named.c_str());
      RNICDV_TRY(make_link(r));
      if (r.slots[r.link_ports[0]].claimed || r.slots[r.link_ports[1]].claimed)
        return Status::error(Errc::busy,
                             "dpdk wire: the in-process link is in use by another DPDK wire");
      ids = {r.link_ports[0], r.link_ports[1]};
    }
  }
  std::vector<DpdkPort> ports;
  for (uint16_t id : ids) {
    RNICDV_ASSIGN_OR_RETURN(DpdkPort p, describe_port(r, id));
    ports.push_back(std::move(p));
  }
  for (const DpdkPort& p : ports) r.slots[p.id].claimed = true;
  return ports;
}

void release_dpdk_ports(const std::vector<DpdkPort>& ports) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  for (const DpdkPort& p : ports) r.slots[p.id].claimed = false;
}

size_t drain_dpdk_port(const DpdkPort& port) {
  rte_mbuf* mbufs[32];
  size_t total = 0;
  while (true) {
    const uint16_t n = rte_eth_rx_burst(port.id, 0, mbufs, 32);
    if (n == 0) break;
    rte_pktmbuf_free_bulk(mbufs, n);
    total += n;
  }
  return total;
}

Status start_dpdk_port(const DpdkPort& port) {
  const std::string what = port.describe();
  rte_eth_conf conf{};
  uint16_t mtu = RTE_ETHER_MTU;
  // Keep the link's MTU as it is (af_packet and tap would otherwise set their interface's).
  if (rte_eth_dev_get_mtu(port.id, &mtu) == 0) conf.rxmode.mtu = mtu;
  if (int rc = rte_eth_dev_configure(port.id, 1, 1, &conf); rc != 0)
    return dpdk_error(Errc::io_error, -rc, "configure", what);
  const int socket = rte_eth_dev_socket_id(port.id);
  const unsigned socket_id = socket < 0 ? SOCKET_ID_ANY : static_cast<unsigned>(socket);
  if (int rc = rte_eth_rx_queue_setup(port.id, 0, kRxDescriptors, socket_id, nullptr, port.pool);
      rc != 0)
    return dpdk_error(Errc::io_error, -rc, "RX queue set-up", what);
  if (int rc = rte_eth_tx_queue_setup(port.id, 0, kTxDescriptors, socket_id, nullptr); rc != 0)
    return dpdk_error(Errc::io_error, -rc, "TX queue set-up", what);
  if (int rc = rte_eth_dev_start(port.id); rc != 0)
    return dpdk_error(Errc::io_error, -rc, "start", what);
  // Devices use their own MACs, not the port's; a port that cannot be promiscuous (ENOTSUP)
  // still works when the devices use its MAC (--mac=).
  const int promisc = rte_eth_promiscuous_enable(port.id);
  if (promisc != 0 && promisc != -ENOTSUP) {
    rte_eth_dev_stop(port.id);
    return dpdk_error(Errc::io_error, -promisc, "promiscuous mode", what);
  }
  drain_dpdk_port(port);
  return Status::ok();
}

void stop_dpdk_port(const DpdkPort& port) {
  drain_dpdk_port(port);
  rte_eth_dev_stop(port.id);
}

}  // namespace rnicdv::sim
