// SPDX-License-Identifier: BSD-3-Clause
// The rdma_cm commands (ucma.h), with the kernel's rules (drivers/infiniband/core/ucma.c and
// cma.c): which state each command needs, what it answers, and the errno of each refusal.
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/sa.h>
#include <infiniband/verbs.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "shim.h"
#include "ucma.h"
#include "user_memory.h"

namespace rnicdv::uverbs::ucma {

namespace {

constexpr uint8_t kRoceV2Ipv4GidIndex = 3;  // ::ffff:<address>, RoCE v2 (sysfs.cc)
constexpr uint16_t kDefaultPkey = 0xffff;
constexpr uint8_t kHopLimit = 64;           // an IPv4 route's TTL

const char* command_name(uint32_t cmd) {
  static const char* const names[] = {
      "CREATE_ID", "DESTROY_ID", "BIND_IP",      "RESOLVE_IP",   "RESOLVE_ROUTE", "QUERY_ROUTE",
      "CONNECT",   "LISTEN",     "ACCEPT",       "REJECT",       "DISCONNECT",    "INIT_QP_ATTR",
      "GET_EVENT", "GET_OPTION", "SET_OPTION",   "NOTIFY",       "JOIN_IP_MCAST", "LEAVE_MCAST",
      "MIGRATE_ID", "QUERY",     "BIND",         "RESOLVE_ADDR", "JOIN_MCAST"};
  return cmd < std::size(names) ? names[cmd] : "unknown command";
}

// One command being run: its input, its response size, and the error path.
struct Cmd {
  uint32_t number;
  const uint8_t* in;
  size_t in_len;
  size_t out_len;
  const std::shared_ptr<File>& file;

  template <typename T>
  T as() const {
    T v{};
    if (in_len) std::memcpy(&v, in, std::min(sizeof v, in_len));
    return v;
  }
  // Checked with writable() before the command acts; the copy itself cannot fault the shim.
  template <typename T>
  void reply(uint64_t response, const T& resp) const {
    (void)copy_to_user(response, &resp, std::min(sizeof resp, out_len));
  }
  // copy_to_user's check, made before anything changes: 0 or -EFAULT.
  int writable(uint64_t response, size_t size) const {
    if (user_range_ok(response, std::min(size, out_len), true)) return 0;
    return error(EFAULT, "response at %#llx is not writable", static_cast<unsigned long long>(response));
  }
  // -err, with the reason logged when RNICDV_UVERBS_LOG=1.
  int error(int err, const char* fmt, ...) const __attribute__((format(printf, 3, 4)));
  // -err, with one line on stderr always: a feature the simulated HCA does not have.
  int unsupported(int err, const char* what) const;
};

int Cmd::error(int err, const char* fmt, ...) const {
  char why[320];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  fail(err, Status::error(Errc::invalid_argument, "rdma_cm: %s: %s", command_name(number), why));
  return -err;
}

int Cmd::unsupported(int err, const char* what) const {
  log_line("rdma_cm: %s: %s is not supported on the simulated HCA (%s)", command_name(number),
           what, strerror(err));
  return -err;
}

Id* find(uint32_t handle, const std::shared_ptr<File>& file) {
  Registry& r = registry();
  auto it = r.ids.find(handle);
  if (it == r.ids.end() || it->second->file != file) return nullptr;
  return it->second.get();
}

#define FIND_ID(c, var, handle)                                                   \
  Id* var = find(handle, (c).file);                                               \
  if (!var) return (c).error(ENOENT, "id %u does not exist on this channel", handle)

// The simulated device that owns `ipv4`, if any (devices are opened on first use).
SimDevice* device_owning(uint32_t ipv4) {
  for (uint32_t i = 0; i < config().devices; ++i) {
    Result<SimDevice*> d = device_for(i);
    if (d && d.value()->dev->ipv4() == ipv4) return d.value();
  }
  return nullptr;
}

// A socket address from user space. AF_INET, the IPv6 wildcard and IPv4-mapped IPv6, and
// the AF_IB wildcard (librdmacm's probe) are accepted.
struct Parsed {
  int family = 0;
  Endpoint ep;
};

int parse_addr(const Cmd& c, const void* sa, size_t size, Parsed* out) {
  sa_family_t family = 0;
  if (size >= sizeof family) std::memcpy(&family, sa, sizeof family);
  switch (family) {
    case AF_INET: {
      sockaddr_in in{};
      std::memcpy(&in, sa, std::min(size, sizeof in));
      *out = {AF_INET, {ntohl(in.sin_addr.s_addr), ntohs(in.sin_port)}};
      return 0;
    }
    case AF_INET6: {
      sockaddr_in6 in6{};
      std::memcpy(&in6, sa, std::min(size, sizeof in6));
      if (IN6_IS_ADDR_UNSPECIFIED(&in6.sin6_addr)) {
        *out = {AF_INET6, {0, ntohs(in6.sin6_port)}};
        return 0;
      }
      if (IN6_IS_ADDR_V4MAPPED(&in6.sin6_addr)) {
        uint32_t v4;
        std::memcpy(&v4, &in6.sin6_addr.s6_addr[12], 4);
        *out = {AF_INET, {ntohl(v4), ntohs(in6.sin6_port)}};
        return 0;
      }
      return c.unsupported(EADDRNOTAVAIL, "an IPv6 address (the devices have IPv4 addresses)");
    }
    case AF_IB: {
      sockaddr_ib ib{};
      std::memcpy(&ib, sa, std::min(size, sizeof ib));
      static const uint8_t zero[16] = {};
      if (std::memcmp(&ib.sib_addr, zero, sizeof zero) == 0) {
        *out = {AF_IB, {0, 0}};
        return 0;
      }
      return c.unsupported(EAFNOSUPPORT, "AF_IB addressing (native InfiniBand)");
    }
    default:
      return c.error(EAFNOSUPPORT, "address family %u", family);
  }
}

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
    if (port == 0) return c.error(EADDRNOTAVAIL, "no free port");
  } else if (r.ports.count(port) && !id.reuseaddr) {
    return c.error(EADDRINUSE, "port %u is in use", port);
  }
  r.ports.insert(port);
  id.src.port = port;
  id.port_reserved = true;
  return 0;
}

int bind_to(const Cmd& c, Id& id, const Parsed& a) {
  if (id.state != State::idle) return c.error(EINVAL, "id %u is %s", id.handle, state_name(id.state));
  if (a.family == AF_IB) {  // the wildcard AF_IB bind: nothing to reserve
    id.family = AF_IB;
    id.state = State::addr_bound;
    return 0;
  }
  SimDevice* dev = nullptr;
  if (a.ep.ipv4 != 0) {
    dev = device_owning(a.ep.ipv4);
    if (!dev)
      return c.error(EADDRNOTAVAIL, "%s is not the address of a simulated device",
                     hw::cm_address_string({a.ep.ipv4, 0}).c_str());
  }
  if (int rc = reserve_port(c, id, a.ep.port); rc != 0) return rc;
  id.family = a.family;
  id.dev = dev;
  id.src.ipv4 = a.ep.ipv4;
  id.state = State::addr_bound;
  return 0;
}

// Address resolution's answer, as ARP gives it: false only when no simulated HCA can own
// `ipv4`. On the UDP wire a loopback address belongs to the process that bound its RoCE port,
// so a port that can be bound has nobody behind it. Other addresses (other hosts, network
// namespaces) cannot be probed and are taken as present; the CM's retries then decide.
bool address_present(uint32_t ipv4) {
  if (device_owning(ipv4)) return true;
  if ((ipv4 >> 24) != 127) return true;
  Result<std::shared_ptr<sim::Fabric>> fabric = sim::default_fabric();
  if (!fabric || fabric.value()->config().wire != sim::WireKind::udp) return true;
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return true;
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(ipv4);
  sa.sin_port = htons(fabric.value()->config().udp_port);
  const bool free_port = ::bind(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) == 0;
  libc::close(fd);
  return !free_port;
}

int resolve(const Cmd& c, Id& id, const Parsed* src, const Parsed& dst) {
  if (dst.family == AF_IB) return c.unsupported(EAFNOSUPPORT, "AF_IB addressing (native InfiniBand)");
  if (dst.family == AF_INET6) return c.unsupported(EADDRNOTAVAIL, "the IPv6 wildcard as a destination");
  if (id.state == State::idle) {
    Parsed any{AF_INET, {0, 0}};
    if (int rc = bind_to(c, id, src && src->family == AF_INET ? *src : any); rc != 0) return rc;
  } else if (id.state != State::addr_bound || id.family == AF_IB) {
    return c.error(EINVAL, "id %u is %s", id.handle, state_name(id.state));
  }
  uint32_t dst_ip = dst.ep.ipv4;
  if (!id.dev) {
    // The route's device: the one that owns the destination (loopback), or the first.
    id.dev = dst_ip ? device_owning(dst_ip) : nullptr;
    if (!id.dev) {
      Result<SimDevice*> d = device_for(0);
      if (!d) return c.error(ENODEV, "%s", d.status().message().c_str());
      id.dev = d.value();
    }
  }
  if (dst_ip == 0) dst_ip = id.dev->dev->ipv4();  // connecting to "any" is loopback
  id.src.ipv4 = id.dev->dev->ipv4();
  id.dst = {dst_ip, dst.ep.port};
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

sockaddr_in sockaddr_of(const Endpoint& ep) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(ep.ipv4);
  sa.sin_port = htons(ep.port);
  return sa;
}

uint64_t node_guid_be(const Id& id) {
  return id.dev ? htobe64(id.dev->dev->info().node_guid) : 0;
}

hw::Mtu path_mtu(const Id& id) {
  return id.dev ? std::min(id.dev->dev->info().caps.active_mtu, hw::Mtu::mtu4096) : hw::Mtu::mtu1024;
}

// The QP's Local ACK Timeout: RDMA_OPTION_ID_ACK_TIMEOUT, or the path's packet lifetime + 1.
uint8_t local_ack_timeout(const Id& id) {
  return id.ack_timeout ? id.ack_timeout : static_cast<uint8_t>(kPacketLifeTime + 1);
}
uint8_t packet_life_time(const Id& id) { return static_cast<uint8_t>(local_ack_timeout(id) - 1); }

// The RoCE path rdma_cm resolves: IPv4-mapped GIDs, permissive LIDs, the route's hop limit.
ibv_path_record path_record(const Id& id) {
  ibv_path_record p{};
  const hw::Gid d = hw::Gid::from_ipv4(id.dst.ipv4), s = hw::Gid::from_ipv4(id.src.ipv4);
  std::memcpy(p.dgid.raw, d.raw, 16);
  std::memcpy(p.sgid.raw, s.raw, 16);
  p.service_id = htobe64((uint64_t{id.ps} << 16) | id.dst.port);
  p.dlid = htobe16(0xffff);
  p.slid = htobe16(0xffff);
  p.flowlabel_hoplimit = htobe32(kHopLimit);
  p.tclass = id.tos;
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

// ---- Commands -------------------------------------------------------------------------------

int create_id(const Cmd& c) {
  const auto cmd = c.as<rdma_ucm_create_id>();
  if (c.out_len < sizeof(rdma_ucm_create_id_resp)) return -ENOSPC;
  if (int rc = c.writable(cmd.response, sizeof(rdma_ucm_create_id_resp)); rc != 0) return rc;
  uint8_t qp_type;
  switch (cmd.ps) {
    case RDMA_PS_TCP:
      qp_type = IBV_QPT_RC;
      break;
    case RDMA_PS_IB:
      qp_type = cmd.qp_type;
      if (qp_type != IBV_QPT_RC) return c.unsupported(EINVAL, "a UD ID in the IB port space");
      break;
    case RDMA_PS_UDP:
    case RDMA_PS_IPOIB:
      return c.unsupported(EINVAL, "a UD port space (RDMA_PS_UDP, RDMA_PS_IPOIB)");
    default:
      return c.error(EINVAL, "port space %#x", cmd.ps);
  }
  Registry& r = registry();
  auto id = std::make_unique<Id>();
  id->handle = r.next_handle++;
  id->uid = cmd.uid;
  id->file = c.file;
  id->ps = cmd.ps;
  id->qp_type = qp_type;
  rdma_ucm_create_id_resp resp{};
  resp.id = id->handle;
  r.ids.emplace(id->handle, std::move(id));
  c.reply(cmd.response, resp);
  return 0;
}

int destroy_id(const Cmd& c) {
  const auto cmd = c.as<rdma_ucm_destroy_id>();
  if (c.out_len < sizeof(rdma_ucm_destroy_id_resp)) return -ENOSPC;
  if (int rc = c.writable(cmd.response, sizeof(rdma_ucm_destroy_id_resp)); rc != 0) return rc;
  FIND_ID(c, id, cmd.id);
  (void)id;
  rdma_ucm_destroy_id_resp resp{};
  resp.events_reported = destroy_id_locked(cmd.id);
  c.reply(cmd.response, resp);
  return 0;
}

int bind_ip(const Cmd& c) {
  const auto cmd = c.as<rdma_ucm_bind_ip>();
  FIND_ID(c, id, cmd.id);
  Parsed a;
  if (int rc = parse_addr(c, &cmd.addr, sizeof cmd.addr, &a); rc != 0) return rc;
  return bind_to(c, *id, a);
}

int bind(const Cmd& c) {
  const auto cmd = c.as<rdma_ucm_bind>();
  FIND_ID(c, id, cmd.id);
  if (cmd.addr_size > sizeof cmd.addr) return c.error(EINVAL, "address size %u", cmd.addr_size);
  Parsed a;
  if (int rc = parse_addr(c, &cmd.addr, cmd.addr_size, &a); rc != 0) return rc;
  return bind_to(c, *id, a);
}

int resolve_ip(const Cmd& c) {
  const auto cmd = c.as<rdma_ucm_resolve_ip>();
  FIND_ID(c, id, cmd.id);
  Parsed src{}, dst{};
  const bool have_src = cmd.src_addr.sin6_family != 0;
  if (have_src)
    if (int rc = parse_addr(c, &cmd.src_addr, sizeof cmd.src_addr, &src); rc != 0) return rc;
  if (int rc = parse_addr(c, &cmd.dst_addr, sizeof cmd.dst_addr, &dst); rc != 0) return rc;
  return resolve(c, *id, have_src ? &src : nullptr, dst);
}

int resolve_addr(const Cmd& c) {
  const auto cmd = c.as<rdma_ucm_resolve_addr>();
  FIND_ID(c, id, cmd.id);
  if (cmd.src_size > sizeof cmd.src_addr || cmd.dst_size > sizeof cmd.dst_addr || !cmd.dst_size)
    return c.error(EINVAL, "address sizes %u and %u", cmd.src_size, cmd.dst_size);
  Parsed src{}, dst{};
  if (cmd.src_size)
    if (int rc = parse_addr(c, &cmd.src_addr, cmd.src_size, &src); rc != 0) return rc;
  if (int rc = parse_addr(c, &cmd.dst_addr, cmd.dst_size, &dst); rc != 0) return rc;
  return resolve(c, *id, cmd.src_size ? &src : nullptr, dst);
}

int resolve_route(const Cmd& c) {
  const auto cmd = c.as<rdma_ucm_resolve_route>();
  FIND_ID(c, id, cmd.id);
  if (id->state != State::addr_resolved)
    return c.error(EINVAL, "id %u is %s, not address resolved", id->handle, state_name(id->state));
  id->state = State::route_resolved;
  post_event(*id, RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
  return 0;
}

int query_route(const Cmd& c) {
  const auto cmd = c.as<rdma_ucm_query>();
  FIND_ID(c, id, cmd.id);
  if (int rc = c.writable(cmd.response, sizeof(rdma_ucm_query_route_resp)); rc != 0) return rc;
  rdma_ucm_query_route_resp resp{};
  const sockaddr_in src = sockaddr_of(id->src), dst = sockaddr_of(id->dst);
  std::memcpy(&resp.src_addr, &src, sizeof src);
  std::memcpy(&resp.dst_addr, &dst, sizeof dst);
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
      u.hop_limit = kHopLimit;
      u.traffic_class = id->tos;
      u.numb_path = 1;
      u.rate_selector = 2;
      u.rate = 7;
      u.packet_life_time_selector = 2;
      u.packet_life_time = packet_life_time(*id);
      resp.num_paths = 1;
    }
  }
  c.reply(cmd.response, resp);
  return 0;
}

// What QUERY ADDR and QUERY GID say of the device (nothing while the ID has none).
rdma_ucm_query_addr_resp device_part(const Id& id) {
  rdma_ucm_query_addr_resp resp{};
  resp.node_guid = node_guid_be(id);
  resp.port_num = id.dev ? 1 : 0;
  resp.pkey = kDefaultPkey;
  resp.ibdev_index = id.dev ? id.dev->index : UINT32_MAX;
  return resp;
}

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
        const sockaddr_in src = sockaddr_of(id->src), dst = sockaddr_of(id->dst);
        resp.src_size = resp.dst_size = sizeof(sockaddr_in);
        std::memcpy(&resp.src_addr, &src, sizeof src);
        std::memcpy(&resp.dst_addr, &dst, sizeof dst);
      }
      c.reply(cmd.response, resp);
      return 0;
    }
    case RDMA_USER_CM_QUERY_GID: {
      rdma_ucm_query_addr_resp resp = device_part(*id);
      sockaddr_ib s{}, d{};
      s.sib_family = d.sib_family = AF_IB;
      s.sib_pkey = d.sib_pkey = htobe16(kDefaultPkey);
      if (id->dev) {
        const hw::Gid sg = hw::Gid::from_ipv4(id->src.ipv4), dg = hw::Gid::from_ipv4(id->dst.ipv4);
        std::memcpy(&s.sib_addr, sg.raw, 16);
        if (id->dst.ipv4) std::memcpy(&d.sib_addr, dg.raw, 16);
      }
      s.sib_sid = htobe64((uint64_t{id->ps} << 16) | id->src.port);
      d.sib_sid = htobe64((uint64_t{id->ps} << 16) | id->dst.port);
      s.sib_sid_mask = d.sib_sid_mask = htobe64(~uint64_t{0});
      resp.src_size = resp.dst_size = sizeof(sockaddr_ib);
      std::memcpy(&resp.src_addr, &s, sizeof s);
      std::memcpy(&resp.dst_addr, &d, sizeof d);
      c.reply(cmd.response, resp);
      return 0;
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
      c.reply(cmd.response, resp);
      return 0;
    }
    default:
      return c.error(ENOSYS, "query option %u", cmd.option);
  }
}

int listen(const Cmd& c) {
  const auto cmd = c.as<rdma_ucm_listen>();
  FIND_ID(c, id, cmd.id);
  // ucma_listen: a backlog of 0, a negative one or one above max_backlog is max_backlog.
  const int backlog =
      hw::listen_backlog(cmd.backlog > static_cast<uint32_t>(hw::kDefaultListenBacklog)
                             ? 0
                             : static_cast<int>(cmd.backlog));
  if (id->state == State::listen) {
    for (auto& [dev, listener] : id->listeners)
      if (Status st = listener->set_backlog(backlog); !st)
        return c.error(to_errno(st.code()), "%s", st.message().c_str());
    id->backlog = backlog;
    return 0;
  }
  if (id->state == State::idle) {
    Parsed any{AF_INET, {0, 0}};
    if (int rc = bind_to(c, *id, any); rc != 0) return rc;
  }
  if (id->state != State::addr_bound)
    return c.error(EINVAL, "id %u is %s", id->handle, state_name(id->state));
  if (id->family == AF_IB) return c.unsupported(EAFNOSUPPORT, "listening on an AF_IB address");
  std::vector<std::pair<SimDevice*, std::unique_ptr<hw::CmListener>>> listeners;
  std::vector<SimDevice*> devs;
  if (id->dev) {
    devs.push_back(id->dev);
  } else {
    for (uint32_t i = 0; i < config().devices; ++i) {
      Result<SimDevice*> d = device_for(i);
      if (!d) return c.error(ENODEV, "%s", d.status().message().c_str());
      devs.push_back(d.value());
    }
  }
  for (SimDevice* d : devs) {
    hw::ConnectionManager* cm = d->dev->connection_manager();
    Result<std::unique_ptr<hw::CmListener>> l =
        cm->listen({id->dev ? id->src.ipv4 : 0, id->src.port}, backlog);
    if (!l)
      return c.error(to_errno(l.status().code()), "%s", l.status().message().c_str());
    listeners.emplace_back(d, std::move(l).value());
  }
  id->listeners = std::move(listeners);
  id->backlog = backlog;
  id->state = State::listen;
  wake_pump();
  return 0;
}

int connect(const Cmd& c) {
  const auto cmd = c.as<rdma_ucm_connect>();
  FIND_ID(c, id, cmd.id);
  if (id->state != State::route_resolved)
    return c.error(EINVAL, "id %u is %s, not route resolved", id->handle, state_name(id->state));
  const rdma_ucm_conn_param& p = cmd.conn_param;
  if (!p.valid) return c.error(EINVAL, "id %u: no connection parameters", id->handle);
  if (p.private_data_len > hw::kReqPrivateDataMax)
    return c.error(EINVAL, "id %u: %u bytes of private data, a REQ carries at most %zu",
                   id->handle, p.private_data_len, hw::kReqPrivateDataMax);
  hw::CmConnectParams params;
  params.qp.srq = p.srq != 0;
  params.remote = {id->dst.ipv4, id->dst.port};
  params.local_port = id->src.port;
  params.qp.qpn = p.qp_num;
  params.qp.path_mtu = path_mtu(*id);
  params.qp.responder_resources = p.responder_resources;
  params.qp.initiator_depth = p.initiator_depth;
  params.qp.retry_count = std::min<uint8_t>(p.retry_count, 7);
  params.qp.rnr_retry_count = std::min<uint8_t>(p.rnr_retry_count, 7);
  params.qp.local_ack_timeout = local_ack_timeout(*id);
  params.private_data.assign(p.private_data, p.private_data + p.private_data_len);
  params.timeout_ms = kConnectBudgetMs;
  Result<std::unique_ptr<hw::CmConnection>> conn =
      id->dev->dev->connection_manager()->connect(params);
  if (!conn) return c.error(to_errno(conn.status().code()), "%s", conn.status().message().c_str());
  id->conn = std::move(conn).value();
  id->state = State::connect;
  wake_pump();
  return 0;
}

int accept(const Cmd& c) {
  const auto cmd = c.as<rdma_ucm_accept>();
  FIND_ID(c, id, cmd.id);
  if (id->state != State::connect || !id->conn)
    return c.error(EINVAL, "id %u is %s", id->handle, state_name(id->state));
  if (!id->passive) {
    // The active side after CONNECT_RESPONSE (rdma_establish, or librdmacm once it moved the
    // QP to RTS): the RTU.
    if (!id->have_peer) return c.error(EINVAL, "id %u: no REP received yet", id->handle);
    Status st = id->conn->establish();
    if (!st) return c.error(to_errno(st.code()), "%s", st.message().c_str());
    return 0;
  }
  const rdma_ucm_conn_param& p = cmd.conn_param;
  if (!p.valid) return c.error(EINVAL, "id %u: no connection parameters", id->handle);
  if (id->accepted) return c.error(EINVAL, "id %u: accepted already", id->handle);
  if (p.private_data_len > hw::kRepPrivateDataMax)
    return c.error(EINVAL, "id %u: %u bytes of private data, a REP carries at most %zu",
                   id->handle, p.private_data_len, hw::kRepPrivateDataMax);
  hw::CmAcceptParams params;
  params.qp.srq = p.srq != 0;
  params.qp.qpn = p.qp_num;
  params.qp.responder_resources = p.responder_resources;
  params.qp.initiator_depth = p.initiator_depth;
  params.qp.rnr_retry_count = std::min<uint8_t>(p.rnr_retry_count, 7);
  params.private_data.assign(p.private_data, p.private_data + p.private_data_len);
  Status st = id->conn->accept(params);
  if (!st) return c.error(to_errno(st.code()), "%s", st.message().c_str());
  id->uid = cmd.uid;
  id->accepted = true;
  wake_pump();  // the connection's events now have a descriptor of their own
  return 0;
}

int reject(const Cmd& c) {
  const auto cmd = c.as<rdma_ucm_reject>();
  FIND_ID(c, id, cmd.id);
  uint16_t reason = cmd.reason ? cmd.reason : hw::reject_reason::consumer_defined;
  if (reason != hw::reject_reason::consumer_defined && reason != 35)
    return c.error(EINVAL, "id %u: reject reason %u (only 28, consumer defined, and 35)",
                   id->handle, reason);
  if (id->state != State::connect || !id->conn)
    return c.error(EINVAL, "id %u is %s", id->handle, state_name(id->state));
  const size_t n = std::min<size_t>(cmd.private_data_len, hw::kRejPrivateDataMax);
  Status st = id->conn->reject(reason, {cmd.private_data, n});
  if (!st) return c.error(to_errno(st.code()), "%s", st.message().c_str());
  id->state = State::failed;
  return 0;
}

int disconnect(const Cmd& c) {
  const auto cmd = c.as<rdma_ucm_disconnect>();
  FIND_ID(c, id, cmd.id);
  if (!id->conn) return c.error(EINVAL, "id %u has no connection", id->handle);
  // As the kernel: a DREQ, or the DREP to a DREQ already received; never an error once
  // there is a connection.
  (void)id->conn->disconnect();
  return 0;
}

int init_qp_attr(const Cmd& c) {
  const auto cmd = c.as<rdma_ucm_init_qp_attr>();
  FIND_ID(c, id, cmd.id);
  if (c.out_len < sizeof(ib_uverbs_qp_attr)) return -ENOSPC;
  if (int rc = c.writable(cmd.response, sizeof(ib_uverbs_qp_attr)); rc != 0) return rc;
  hw::QpAttr a;
  uint32_t mask = 0;
  if (cmd.qp_state == IBV_QPS_INIT && !id->conn) {
    // Before a connection (rdma_create_qp after route resolution): INIT with no remote access.
    if (!id->dev) return c.error(EINVAL, "id %u has no device yet", id->handle);
    a.state = hw::QpState::init;
    mask = hw::qp_attr::state | hw::qp_attr::port | hw::qp_attr::access_flags;
  } else if (cmd.qp_state >= IBV_QPS_INIT && cmd.qp_state <= IBV_QPS_RTS && id->conn) {
    Status st = id->conn->qp_attr(static_cast<hw::QpState>(cmd.qp_state), &a, &mask);
    if (!st) return c.error(EINVAL, "%s", st.message().c_str());
  } else {
    return c.error(EINVAL, "id %u (%s): no attributes for QP state %u", id->handle,
                   state_name(id->state), cmd.qp_state);
  }
  ib_uverbs_qp_attr r{};
  uint32_t m = 0;
  r.qp_state = static_cast<uint32_t>(a.state);
  if (mask & hw::qp_attr::state) m |= IBV_QP_STATE;
  if (mask & hw::qp_attr::access_flags) m |= IBV_QP_ACCESS_FLAGS, r.qp_access_flags = a.access_flags;
  if (mask & hw::qp_attr::port) {
    m |= IBV_QP_PKEY_INDEX | IBV_QP_PORT;
    r.pkey_index = a.pkey_index;
    r.port_num = a.port_num;
  }
  if (mask & hw::qp_attr::path_mtu) m |= IBV_QP_PATH_MTU, r.path_mtu = static_cast<uint32_t>(a.path_mtu);
  if (mask & hw::qp_attr::dest_qpn) m |= IBV_QP_DEST_QPN, r.dest_qp_num = a.dest_qpn;
  if (mask & hw::qp_attr::rq_psn) m |= IBV_QP_RQ_PSN, r.rq_psn = a.rq_psn;
  if (mask & hw::qp_attr::sq_psn) m |= IBV_QP_SQ_PSN, r.sq_psn = a.sq_psn;
  if (mask & hw::qp_attr::max_rd_atomic) m |= IBV_QP_MAX_QP_RD_ATOMIC, r.max_rd_atomic = a.max_rd_atomic;
  if (mask & hw::qp_attr::max_dest_rd_atomic)
    m |= IBV_QP_MAX_DEST_RD_ATOMIC, r.max_dest_rd_atomic = a.max_dest_rd_atomic;
  if (mask & hw::qp_attr::min_rnr_timer) m |= IBV_QP_MIN_RNR_TIMER, r.min_rnr_timer = a.min_rnr_timer;
  if (mask & hw::qp_attr::timeout) m |= IBV_QP_TIMEOUT, r.timeout = a.timeout;
  if (mask & hw::qp_attr::retry_cnt) m |= IBV_QP_RETRY_CNT, r.retry_cnt = a.retry_cnt;
  if (mask & hw::qp_attr::rnr_retry) m |= IBV_QP_RNR_RETRY, r.rnr_retry = a.rnr_retry;
  if (mask & hw::qp_attr::av) {
    m |= IBV_QP_AV;
    std::memcpy(r.ah_attr.grh.dgid, a.remote_gid.raw, 16);
    r.ah_attr.grh.sgid_index = kRoceV2Ipv4GidIndex;
    r.ah_attr.grh.hop_limit = kHopLimit;
    r.ah_attr.grh.traffic_class = id->tos;
    r.ah_attr.is_global = 1;
    r.ah_attr.port_num = 1;
  }
  r.qp_attr_mask = m;
  c.reply(cmd.response, r);
  return 0;
}

int notify(const Cmd& c) {
  const auto cmd = c.as<rdma_ucm_notify>();
  FIND_ID(c, id, cmd.id);
  if (cmd.event != IBV_EVENT_COMM_EST)
    return c.error(EINVAL, "id %u: event %u (only COMM_EST)", id->handle, cmd.event);
  if (!id->conn || !id->passive) return c.error(EINVAL, "id %u is not a passive connection", id->handle);
  if (id->state == State::established) return -EISCONN;
  Status st = id->conn->notify_comm_est();
  if (!st) return c.error(EINVAL, "%s", st.message().c_str());
  return 0;
}

int set_option(const Cmd& c) {
  const auto cmd = c.as<rdma_ucm_set_option>();
  FIND_ID(c, id, cmd.id);
  // copy_from_user of the value (at most an int here; a path record is refused below).
  uint8_t val[sizeof(int)] = {};
  if (cmd.optlen <= sizeof val && !copy_from_user(val, cmd.optval, cmd.optlen))
    return c.error(EFAULT, "option value at %#llx is not readable",
                   static_cast<unsigned long long>(cmd.optval));
  auto read_int = [&](int* out) {
    if (cmd.optlen != sizeof(int)) return false;
    std::memcpy(out, val, sizeof(int));
    return true;
  };
  if (cmd.level == RDMA_OPTION_ID) {
    int v = 0;
    switch (cmd.optname) {
      case RDMA_OPTION_ID_TOS:
        if (cmd.optlen != sizeof(uint8_t)) return c.error(EINVAL, "TOS: %u bytes", cmd.optlen);
        id->tos = val[0];
        return 0;
      case RDMA_OPTION_ID_REUSEADDR:
        if (!read_int(&v)) return c.error(EINVAL, "REUSEADDR: %u bytes", cmd.optlen);
        if (id->state != State::idle) return c.error(EINVAL, "REUSEADDR after bind");
        id->reuseaddr = v != 0;
        return 0;
      case RDMA_OPTION_ID_AFONLY:
        if (!read_int(&v)) return c.error(EINVAL, "AFONLY: %u bytes", cmd.optlen);
        if (id->state != State::idle) return c.error(EINVAL, "AFONLY after bind");
        id->afonly = v != 0;
        return 0;
      case RDMA_OPTION_ID_ACK_TIMEOUT:
        if (cmd.optlen != sizeof(uint8_t)) return c.error(EINVAL, "ACK_TIMEOUT: %u bytes", cmd.optlen);
        id->ack_timeout = std::min<uint8_t>(val[0], 31);
        return 0;
      default:
        return c.error(ENOSYS, "option %u of level RDMA_OPTION_ID", cmd.optname);
    }
  }
  if (cmd.level == RDMA_OPTION_IB && cmd.optname == RDMA_OPTION_IB_PATH)
    return c.unsupported(EINVAL, "setting an InfiniBand path record");
  return c.error(ENOSYS, "option %u of level %u", cmd.optname, cmd.level);
}

int migrate_id(const Cmd& c) {
  const auto cmd = c.as<rdma_ucm_migrate_id>();
  if (c.out_len < sizeof(rdma_ucm_migrate_resp)) return -ENOSPC;
  if (int rc = c.writable(cmd.response, sizeof(rdma_ucm_migrate_resp)); rc != 0) return rc;
  Registry& r = registry();
  auto fit = r.files.find(static_cast<int>(cmd.fd));
  if (fit == r.files.end())
    return c.error(fd_kind(static_cast<int>(cmd.fd)) == FdKind::none ? ENOENT : EINVAL,
                   "descriptor %d is not an rdma_cm channel", cmd.fd);
  std::shared_ptr<File> from = fit->second;
  Id* id = find(cmd.id, from);
  if (!id) return c.error(ENOENT, "id %u does not exist on channel %d", cmd.id, cmd.fd);
  if (from != c.file) {
    for (const Event& ev : from->take(id->handle)) c.file->push(ev);
    id->file = c.file;
  }
  rdma_ucm_migrate_resp resp{};
  resp.events_reported = id->events_reported;
  c.reply(cmd.response, resp);
  return 0;
}

int join_mcast(const Cmd& c) {
  return c.unsupported(EINVAL, "multicast (it needs UD QPs)");
}

int leave_mcast(const Cmd& c) {
  return c.error(ENOENT, "no multicast group was joined");
}

}  // namespace

int run_command(const std::shared_ptr<File>& file, uint32_t number, const uint8_t* in,
                size_t in_len, size_t out_len) {
  static int (*const table[])(const Cmd&) = {
      create_id,    destroy_id, bind_ip,    resolve_ip,   resolve_route, query_route,
      connect,      listen,     accept,     reject,       disconnect,    init_qp_attr,
      nullptr /* GET_EVENT: ucma.cc */, nullptr /* GET_OPTION */, set_option, notify,
      join_mcast,   leave_mcast, migrate_id, query,       bind,          resolve_addr,
      join_mcast};
  const Cmd c{number, in, in_len, out_len, file};
  if (number >= std::size(table)) return c.error(EINVAL, "unknown command %u", number);
  if (!table[number]) return c.unsupported(ENOSYS, "GET_OPTION");
  std::lock_guard<std::mutex> lock(registry().mu);
  return table[number](c);
}

}  // namespace rnicdv::uverbs::ucma
