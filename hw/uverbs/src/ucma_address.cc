// SPDX-License-Identifier: BSD-3-Clause
// rdma_cm addresses and routes: BIND_IP and BIND, RESOLVE_IP and RESOLVE_ADDR, RESOLVE_ROUTE,
// QUERY_ROUTE and QUERY (address, path, GID), with the kernel's rules (ucma.c, cma.c).
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/sa.h>
#include <infiniband/verbs.h>
#include <string.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "shim.h"
#include "ucma_command.h"
#include "user_memory.h"

namespace rnicdv::uverbs::ucma {

// ---- Addresses and routes -------------------------------------------------------------------

SimDevice* device_owning(const hw::IpAddress& ip) {
  for (uint32_t i = 0; i < config().devices; ++i) {
    Result<SimDevice*> d = device_for(i);
    if (d && d.value()->dev->address() == ip) return d.value();
  }
  return nullptr;
}

// `id` names the ID the address is for, in messages.
int parse_addr(const Cmd& c, const Id& id, const void* sa, size_t size, Parsed* out) {
  sa_family_t family = 0;
  if (size >= sizeof family) std::memcpy(&family, sa, sizeof family);
  switch (family) {
    case AF_INET: {
      sockaddr_in in{};
      std::memcpy(&in, sa, std::min(size, sizeof in));
      *out = {AF_INET, {hw::IpAddress::v4(ntohl(in.sin_addr.s_addr)), ntohs(in.sin_port)}};
      return 0;
    }
    case AF_INET6: {
      sockaddr_in6 in6{};
      std::memcpy(&in6, sa, std::min(size, sizeof in6));
      // An IPv4-mapped address names the IPv4 one, which only a device speaking IPv4 owns.
      const hw::IpAddress ip = hw::IpAddress::from_bytes(in6.sin6_addr.s6_addr);
      *out = {ip.is_v4() ? AF_INET : AF_INET6, {ip, ntohs(in6.sin6_port), in6.sin6_scope_id}};
      return 0;
    }
    case AF_IB: {
      sockaddr_ib ib{};
      std::memcpy(&ib, sa, std::min(size, sizeof ib));
      static const uint8_t zero[16] = {};
      if (std::memcmp(&ib.sib_addr, zero, sizeof zero) == 0) {
        *out = {AF_IB, {}};
        return 0;
      }
      return c.unsupported(EAFNOSUPPORT, "id %u: AF_IB addressing (native InfiniBand)", id.handle);
    }
    default:
      return c.error(EAFNOSUPPORT, "id %u: address family %u", id.handle, family);
  }
}

namespace {

uint16_t ephemeral_port(Registry& r) {
  static std::mt19937 rng{std::random_device{}()};
  for (int tries = 0; tries < 65536; ++tries) {
    const auto p = static_cast<uint16_t>(32768 + rng() % 28232);
    if (!r.ports.count(p)) return p;
  }
  return 0;
}

// Takes `ep.port` (0: an ephemeral one) for `id`.
int reserve_port(const Cmd& c, Id& id, uint16_t port) {
  Registry& r = registry();
  if (port == 0) {
    port = ephemeral_port(r);
    if (port == 0) return c.error(EADDRNOTAVAIL, "id %u: no free port", id.handle);
  } else if (r.ports.count(port) && !id.reuseaddr) {
    return c.error(EADDRINUSE, "id %u: port %u is in use", id.handle, port);
  }
  r.ports.insert(port);
  id.src.port = port;
  id.port_reserved = true;
  return 0;
}

}  // namespace

int bind_to(const Cmd& c, Id& id, const Parsed& a) {
  if (id.state != State::idle)
    return c.error(EINVAL, "id %u: binding: it is %s, not idle", id.handle, state_name(id.state));
  if (a.family == AF_IB) {  // the wildcard AF_IB bind: nothing to reserve
    id.family = AF_IB;
    id.state = State::addr_bound;
    return 0;
  }
  // A link-local address names its link by the interface (the kernel's cma_check_linklocal).
  if (a.family == AF_INET6 && a.ep.ip.is_link_local() && a.ep.scope_id == 0)
    return c.error(EINVAL, "id %u: binding %s: a link-local address needs its interface "
                   "(sin6_scope_id)",
                   id.handle, a.ep.ip.to_string().c_str());
  SimDevice* dev = nullptr;
  if (!a.ep.ip.is_unspecified()) {
    dev = device_owning(a.ep.ip);
    if (!dev)
      return c.error(EADDRNOTAVAIL, "id %u: %s is not the address of a simulated device",
                     id.handle, a.ep.ip.to_string().c_str());
  }
  if (int rc = reserve_port(c, id, a.ep.port); rc != 0) return rc;
  id.family = a.family;
  id.dev = dev;
  id.src.ip = a.ep.ip;
  id.src.scope_id = a.ep.scope_id;
  id.state = State::addr_bound;
  return 0;
}

namespace {

// Address resolution's answer, as ARP or neighbour discovery gives it: false only when no
// simulated HCA can own `ip`. On the UDP wire an address of this host belongs to the process
// that bound its RoCE port, so a port that can be bound has nobody behind it. Other addresses
// (other hosts, other network namespaces, where bind fails) cannot be probed and are taken as
// present; the CM's retries then decide. A multicast group is present (no one device owns it;
// a join resolves it to reach the group's route).
bool address_present(const hw::IpAddress& ip) {
  if (ip.is_multicast() || device_owning(ip)) return true;
  Result<std::shared_ptr<sim::Fabric>> fabric = sim::default_fabric();
  if (!fabric || fabric.value()->config().wire != sim::WireKind::udp) return true;
  const hw::SocketAddress sa = hw::to_socket_address(ip, fabric.value()->config().udp_port);
  const int fd = ::socket(sa.storage.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return true;
  const bool free_port = ::bind(fd, sa.get(), sa.len) == 0;
  libc::close(fd);
  return !free_port;
}

// The device a route to `dst` leaves from, for an ID bound to none: the one that owns `dst`
// (loopback), else the first whose address is of `dst`'s IP version. Null, with the reason
// reported, when there is none.
SimDevice* route_device(const Cmd& c, const Id& id, const hw::IpAddress& dst, int* rc) {
  if (!dst.is_unspecified())
    if (SimDevice* owner = device_owning(dst)) return owner;
  std::string seen;
  for (uint32_t i = 0; i < config().devices; ++i) {
    Result<SimDevice*> d = device_for(i);
    if (!d) {
      *rc = c.error(ENODEV, "id %u: %s", id.handle, d.status().message().c_str());
      return nullptr;
    }
    const hw::IpAddress own = d.value()->dev->address();
    if (own.is_v4() == dst.is_v4()) return d.value();
    seen += (seen.empty() ? "" : ", ") + d.value()->dev->info().name + " " + own.to_string();
  }
  *rc = c.error(ENETUNREACH, "id %u: no route to %s: no simulated device has an %s address (%s)",
                id.handle, dst.to_string().c_str(), dst.is_v4() ? "IPv4" : "IPv6",
                seen.c_str());
  return nullptr;
}

int resolve(const Cmd& c, Id& id, const Parsed* src, const Parsed& dst) {
  if (dst.family == AF_IB)
    return c.unsupported(EAFNOSUPPORT, "id %u: AF_IB addressing (native InfiniBand)", id.handle);
  if (id.state == State::idle) {
    // An unbound ID takes the destination's IP version (cma_bind_addr).
    Parsed any{dst.family, {dst.ep.ip.is_v4() ? hw::IpAddress::v4(0) : hw::IpAddress{}, 0}};
    if (int rc = bind_to(c, id, src && src->family != AF_IB ? *src : any); rc != 0) return rc;
  } else if (id.state != State::addr_bound || id.family == AF_IB) {
    return c.error(EINVAL, "id %u: resolving: it is %s", id.handle, state_name(id.state));
  }
  // The source and the destination are of one IP version (rdma_resolve_addr's EINVAL).
  if (id.family != dst.family)
    return c.error(EINVAL, "id %u: resolving %s from an ID bound to an %s address", id.handle,
                   dst.ep.ip.to_string().c_str(), id.family == AF_INET6 ? "IPv6" : "IPv4");
  if (!id.dev) {
    int rc = 0;
    id.dev = route_device(c, id, dst.ep.ip, &rc);
    if (!id.dev) return rc;
  }
  const hw::IpAddress own = id.dev->dev->address();
  if (own.is_v4() != dst.ep.ip.is_v4())
    return c.error(ENETUNREACH, "id %u: no route to %s from %s, whose address %s is %s",
                   id.handle, dst.ep.ip.to_string().c_str(), id.dev->dev->info().name.c_str(),
                   own.to_string().c_str(), own.is_v4() ? "IPv4" : "IPv6");
  // Connecting to "any" is loopback.
  const hw::IpAddress dst_ip = dst.ep.ip.is_unspecified() ? own : dst.ep.ip;
  id.src.ip = own;
  id.dst = {dst_ip, dst.ep.port, dst.ep.scope_id};
  if (!address_present(dst_ip)) {
    // As an ARP request nobody answers: ADDR_ERROR, and the ID is bound as before.
    id.state = State::addr_bound;
    post_event(id, RDMA_CM_EVENT_ADDR_ERROR, -EHOSTUNREACH);
    return 0;
  }
  id.state = State::addr_resolved;
  post_event(id, RDMA_CM_EVENT_ADDR_RESOLVED, 0);
  return 0;
}

// An address as the ID reports it: an unspecified one in the ID's family (IPv4 until it has
// one), as the kernel's zeroed sockaddr of the bound family.
hw::SocketAddress sockaddr_of(const Id& id, const Endpoint& ep) {
  hw::IpAddress ip = ep.ip;
  if (ip.is_unspecified()) ip = id.family == AF_INET6 ? hw::IpAddress{} : hw::IpAddress::v4(0);
  return hw::to_socket_address(ip, ep.port, ep.scope_id);
}

uint64_t node_guid_be(const Id& id) {
  return id.dev ? htobe64(id.dev->dev->info().node_guid) : 0;
}

}  // namespace

hw::Mtu path_mtu(const Id& id) {
  return id.dev ? std::min(id.dev->dev->info().caps.active_mtu, hw::Mtu::mtu4096)
                : hw::Mtu::mtu1024;
}

// The QP's Local ACK Timeout: RDMA_OPTION_ID_ACK_TIMEOUT, or the path's packet lifetime + 1.
uint8_t local_ack_timeout(const Id& id) {
  return id.ack_timeout ? id.ack_timeout : static_cast<uint8_t>(kPacketLifeTime + 1);
}

namespace {

uint8_t packet_life_time(const Id& id) { return static_cast<uint8_t>(local_ack_timeout(id) - 1); }

// The RoCE path rdma_cm resolves: the two addresses' GIDs (IPv4-mapped or IPv6), permissive
// LIDs, the route's hop limit.
ibv_path_record path_record(const Id& id) {
  ibv_path_record p{};
  const hw::Gid d = hw::Gid::from_ip(id.dst.ip), s = hw::Gid::from_ip(id.src.ip);
  std::memcpy(p.dgid.raw, d.raw, 16);
  std::memcpy(p.sgid.raw, s.raw, 16);
  p.service_id = htobe64((uint64_t{id.ps} << 16) | id.dst.port);
  p.dlid = htobe16(0xffff);
  p.slid = htobe16(0xffff);
  p.flowlabel_hoplimit = htobe32((id.flow_label & 0xfffff) << 8 | id.hop_limit);
  p.tclass = id.tos;
  p.qosclass_sl = htobe16(id.sl & 0xf);
  p.reversible_numpath = 0x80 | 1;
  p.pkey = htobe16(kDefaultPkey);
  p.mtu = static_cast<uint8_t>(2 << 6 | static_cast<uint8_t>(path_mtu(id)));
  p.rate = 2 << 6 | 7;  // exactly 40 Gb/s (IB rate code 7)
  p.packetlifetime = static_cast<uint8_t>(2 << 6 | packet_life_time(id));
  return p;
}

bool routed(const Id& id) {
  return id.state >= State::route_resolved && id.state != State::listen && id.dev;
}


}  // namespace

int bind_ip(const Cmd& c) {
  const auto cmd = c.as<rdma_ucm_bind_ip>();
  FIND_ID(c, id, cmd.id);
  Parsed a;
  if (int rc = parse_addr(c, *id, &cmd.addr, sizeof cmd.addr, &a); rc != 0) return rc;
  return bind_to(c, *id, a);
}

int bind(const Cmd& c) {
  const auto cmd = c.as<rdma_ucm_bind>();
  FIND_ID(c, id, cmd.id);
  if (cmd.addr_size > sizeof cmd.addr)
    return c.error(EINVAL, "id %u: address size %u", id->handle, cmd.addr_size);
  Parsed a;
  if (int rc = parse_addr(c, *id, &cmd.addr, cmd.addr_size, &a); rc != 0) return rc;
  return bind_to(c, *id, a);
}

int resolve_ip(const Cmd& c) {
  const auto cmd = c.as<rdma_ucm_resolve_ip>();
  FIND_ID(c, id, cmd.id);
  Parsed src{}, dst{};
  const bool have_src = cmd.src_addr.sin6_family != 0;
  if (have_src)
    if (int rc = parse_addr(c, *id, &cmd.src_addr, sizeof cmd.src_addr, &src); rc != 0) return rc;
  if (int rc = parse_addr(c, *id, &cmd.dst_addr, sizeof cmd.dst_addr, &dst); rc != 0) return rc;
  return resolve(c, *id, have_src ? &src : nullptr, dst);
}

int resolve_addr(const Cmd& c) {
  const auto cmd = c.as<rdma_ucm_resolve_addr>();
  FIND_ID(c, id, cmd.id);
  if (cmd.src_size > sizeof cmd.src_addr || cmd.dst_size > sizeof cmd.dst_addr || !cmd.dst_size)
    return c.error(EINVAL, "id %u: address sizes %u and %u", id->handle, cmd.src_size,
                   cmd.dst_size);
  Parsed src{}, dst{};
  if (cmd.src_size)
    if (int rc = parse_addr(c, *id, &cmd.src_addr, cmd.src_size, &src); rc != 0) return rc;
  if (int rc = parse_addr(c, *id, &cmd.dst_addr, cmd.dst_size, &dst); rc != 0) return rc;
  return resolve(c, *id, cmd.src_size ? &src : nullptr, dst);
}

int resolve_route(const Cmd& c) {
  const auto cmd = c.as<rdma_ucm_resolve_route>();
  FIND_ID(c, id, cmd.id);
  if (id->state != State::addr_resolved)
    return c.error(EINVAL, "id %u: it is %s, not address resolved", id->handle,
                   state_name(id->state));
  id->state = State::route_resolved;
  post_event(*id, RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
  return 0;
}

int query_route(const Cmd& c) {
  const auto cmd = c.as<rdma_ucm_query>();
  FIND_ID(c, id, cmd.id);
  if (int rc = c.writable(cmd.response, sizeof(rdma_ucm_query_route_resp)); rc != 0) return rc;
  rdma_ucm_query_route_resp resp{};
  const hw::SocketAddress src = sockaddr_of(*id, id->src), dst = sockaddr_of(*id, id->dst);
  std::memcpy(&resp.src_addr, &src.storage, src.len);
  std::memcpy(&resp.dst_addr, &dst.storage, dst.len);
  resp.ibdev_index = UINT32_MAX;
  if (id->dev) {
    resp.node_guid = node_guid_be(*id);
    resp.port_num = 1;
    resp.ibdev_index = id->dev->index;
    if (routed(*id)) {
      const ibv_path_record p = path_record(*id);
      ib_user_path_rec& u = resp.ib_route[0];
      std::memcpy(u.dgid, p.dgid.raw, 16);
      std::memcpy(u.sgid, p.sgid.raw, 16);
      u.dlid = p.dlid;
      u.slid = p.slid;
      u.reversible = 1;
      u.mtu = static_cast<uint8_t>(path_mtu(*id));
      u.mtu_selector = 2;
      u.pkey = p.pkey;
      u.hop_limit = id->hop_limit;
      u.traffic_class = id->tos;
      u.flow_label = htobe32(id->flow_label & 0xfffff);
      u.sl = static_cast<uint8_t>(id->sl & 0xf);
      u.numb_path = 1;
      u.rate_selector = 2;
      u.rate = 7;
      u.packet_life_time_selector = 2;
      u.packet_life_time = packet_life_time(*id);
      resp.num_paths = 1;
    }
  }
  return c.reply(cmd.response, resp);
}

namespace {

// What QUERY ADDR and QUERY GID say of the device (nothing while the ID has none).
rdma_ucm_query_addr_resp device_part(const Id& id) {
  rdma_ucm_query_addr_resp resp{};
  resp.node_guid = node_guid_be(id);
  resp.port_num = id.dev ? 1 : 0;
  resp.pkey = kDefaultPkey;
  resp.ibdev_index = id.dev ? id.dev->index : UINT32_MAX;
  return resp;
}

}  // namespace

int query(const Cmd& c) {
  const auto cmd = c.as<rdma_ucm_query>();
  FIND_ID(c, id, cmd.id);
  if (int rc = c.writable(cmd.response, sizeof(rdma_ucm_query_addr_resp)); rc != 0) return rc;
  switch (cmd.option) {
    case RDMA_USER_CM_QUERY_ADDR: {
      rdma_ucm_query_addr_resp resp = device_part(*id);
      if (id->family == AF_IB) {
        sockaddr_ib ib{};
        ib.sib_family = AF_IB;
        resp.src_size = resp.dst_size = sizeof ib;
        std::memcpy(&resp.src_addr, &ib, sizeof ib);
        std::memcpy(&resp.dst_addr, &ib, sizeof ib);
      } else {
        const hw::SocketAddress src = sockaddr_of(*id, id->src), dst = sockaddr_of(*id, id->dst);
        resp.src_size = static_cast<uint16_t>(src.len);
        resp.dst_size = static_cast<uint16_t>(dst.len);
        std::memcpy(&resp.src_addr, &src.storage, src.len);
        std::memcpy(&resp.dst_addr, &dst.storage, dst.len);
      }
      return c.reply(cmd.response, resp);
    }
    case RDMA_USER_CM_QUERY_GID: {
      rdma_ucm_query_addr_resp resp = device_part(*id);
      sockaddr_ib s{}, d{};
      s.sib_family = d.sib_family = AF_IB;
      s.sib_pkey = d.sib_pkey = htobe16(kDefaultPkey);
      if (id->dev) {
        const hw::Gid sg = hw::Gid::from_ip(id->src.ip), dg = hw::Gid::from_ip(id->dst.ip);
        std::memcpy(&s.sib_addr, sg.raw, 16);
        if (!id->dst.ip.is_unspecified()) std::memcpy(&d.sib_addr, dg.raw, 16);
      }
      s.sib_sid = htobe64((uint64_t{id->ps} << 16) | id->src.port);
      d.sib_sid = htobe64((uint64_t{id->ps} << 16) | id->dst.port);
      s.sib_sid_mask = d.sib_sid_mask = htobe64(~uint64_t{0});
      resp.src_size = resp.dst_size = sizeof(sockaddr_ib);
      std::memcpy(&resp.src_addr, &s, sizeof s);
      std::memcpy(&resp.dst_addr, &d, sizeof d);
      return c.reply(cmd.response, resp);
    }
    case RDMA_USER_CM_QUERY_PATH: {
      // rdma_ucm_query_path_resp: num_paths, a reserved word, then ib_path_rec_data entries,
      // as many as fit in the response.
      static_assert(sizeof(ibv_path_data) == sizeof(ib_path_rec_data));
      constexpr size_t kHead = sizeof(rdma_ucm_query_path_resp);
      if (c.out_len < kHead) return -ENOSPC;
      uint8_t resp[kHead + sizeof(ibv_path_data)] = {};
      const uint32_t num_paths = routed(*id) && c.out_len >= sizeof resp ? 1 : 0;
      std::memcpy(resp, &num_paths, sizeof num_paths);
      if (num_paths) {
        ibv_path_data path{};
        path.flags = IBV_PATH_FLAG_GMP | IBV_PATH_FLAG_PRIMARY | IBV_PATH_FLAG_BIDIRECTIONAL;
        path.path = path_record(*id);
        std::memcpy(resp + kHead, &path, sizeof path);
      }
      return c.reply(cmd.response, resp);
    }
    default:
      return c.error(ENOSYS, "id %u: query option %u", id->handle, cmd.option);
  }
}

}  // namespace rnicdv::uverbs::ucma
