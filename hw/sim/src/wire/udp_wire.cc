// SPDX-License-Identifier: BSD-3-Clause
// The UDP wire: one kernel UDP socket per attached endpoint, bound to exactly that address
// (one 127.0.0.x per simulated HCA, all on port 4791), so simulated HCAs in different
// processes talk over loopback and tshark decodes the traffic as RoCEv2.
//
// Sockets are unconnected and set IP_MTU_DISCOVER = IP_PMTUDISC_DO: Linux then sends every
// datagram with DF set and IPv4 ID 0, so the pseudo header the ICRC covers (roce_icrc) is the
// header actually sent (IBA Annex A17, RoCEv2). A receiver cannot see the IPv4 header; it
// rebuilds the same pseudo header from the sender's address (recvmmsg) and the bound address.
//
// IPv6. An endpoint with an IPv6 address gets an AF_INET6 socket (IPV6_V6ONLY, and
// IPV6_PMTUDISC_DO: IPv6 routers never fragment, and neither does the sender), and the ICRC's
// pseudo header is the IPv6 header, whose variant fields it masks. A link-local address is
// bound on the interface that holds it (getifaddrs), and datagrams to a link-local peer leave
// on that same interface. The traffic class and hop limit go as ancillary data (IPV6_TCLASS,
// IPV6_HOPLIMIT); the flow label is the kernel's to choose (it needs a flow label lease), which
// the ICRC masks.
//
// A peer's port that is gone. When the process that had an address ends (however it ends:
// exit, SIGKILL, a crash), the kernel closes its socket, and a datagram sent there draws an
// ICMP port unreachable. The sockets set IP_RECVERR, so the kernel keeps that error for the
// sender (an unconnected UDP socket otherwise ignores it): it sets the socket's pending error
// (the next sendmsg or recvmmsg fails with ECONNREFUSED, once) and queues the refused
// datagram's destination on the error queue. Whoever meets the error marks the port; the
// poller then reads the error queue and tells the sink which addresses are gone
// (WireSink::on_unreachable). A send that met the pending error, which belongs to an earlier
// datagram and not to this one, is sent again.
//
// Multicast. An endpoint that joins a group gets a second socket for it, bound to the group's
// address and port (SO_REUSEADDR: every member in every process binds the same) and a member
// of the group on the interface of the endpoint's address (IP_ADD_MEMBERSHIP; for an IPv6
// group IPV6_JOIN_GROUP on the interface that holds the address, a link-scope group's socket
// bound with that interface as its scope), with IP_MULTICAST_ALL (IPV6_MULTICAST_ALL) off so
// that it hears that group only. A datagram for a group leaves from the endpoint's own socket,
// whose multicast interface is its address's; the kernel then hands a
// copy to every member socket, the sender's own included (multicast loopback). The receiver
// rebuilds the ICRC's pseudo header with the group as the destination. From the first join,
// the endpoint's wait fd is an epoll set of its sockets.
//
// Faults are applied by the sender. Held-back frames wait in the sending endpoint's outbox
// (an MPSC ring, as transmit may run on any thread) and holding area, and leave when
// poll(sender) finds them due. Capture happens on send: a frame is written once it has been
// handed to the kernel; frames dropped before (fault drop, full outbox or holding area,
// socket error, endpoint detached during the hold) are not written.
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <linux/errqueue.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

#include "wire/endpoint_table.h"
#include "rnicdv/sim/mpsc_ring.h"
#include "wire/wire_base.h"

namespace rnicdv::sim {
namespace {

constexpr unsigned kOutboxLog2 = 8;  // held frames on their way to the holding area
constexpr size_t kHeldLimit = 1024;  // frames held back per endpoint
constexpr unsigned kRecvBatch = 32;  // datagrams per recvmmsg
constexpr int kSocketBufferBytes = 8 << 20;
constexpr uint32_t kLoopbackNet = 0x7F000000u;  // 127.0.0.0
constexpr uint32_t kFirstAutoHost = 2, kLastAutoHost = 254;

// The IP header fields a QP's address vector sets, as ancillary data for sendmsg (IP_TOS,
// IP_TTL), in `control`; none when they are the socket's own (TOS 0, TTL 64).
struct IpClassControl {
  alignas(cmsghdr) uint8_t bytes[CMSG_SPACE(sizeof(int)) * 2];
};

void set_ip_class(msghdr* msg, IpClass ip, bool v6, IpClassControl* control) {
  if (ip.tos == 0 && ip.ttl == IpClass{}.ttl) return;
  msg->msg_control = control->bytes;
  msg->msg_controllen = sizeof(control->bytes);
  cmsghdr* c = CMSG_FIRSTHDR(msg);
  const int values[2] = {ip.tos, ip.ttl};
  const int types[2] = {v6 ? IPV6_TCLASS : IP_TOS, v6 ? IPV6_HOPLIMIT : IP_TTL};
  for (int i = 0; i < 2; ++i) {
    c->cmsg_level = v6 ? IPPROTO_IPV6 : IPPROTO_IP;
    c->cmsg_type = types[i];
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &values[i], sizeof(int));
    c = CMSG_NXTHDR(msg, c);
  }
}

SocketAddress to_sockaddr(const Endpoint& ep, uint32_t scope_id = 0) {
  return hw::to_socket_address(ep.ip, ep.port, scope_id);
}

// The endpoint a received datagram came from; false when it is of neither family.
bool from_sockaddr(const sockaddr_storage& from, socklen_t len, Endpoint* ep) {
  return hw::from_socket_address(reinterpret_cast<const sockaddr*>(&from), len, &ep->ip,
                                 &ep->port);
}

// The index of the interface that holds the IPv6 address `ip` (a link-local address is only
// meaningful with it, and IPv6 multicast leaves and is joined on it), or 0 when none does.
uint32_t interface_holding(const IpAddress& ip) {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return 0;
  uint32_t index = 0;
  for (const ifaddrs* i = list; i != nullptr && index == 0; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET6) continue;
    const auto* sa = reinterpret_cast<const sockaddr_in6*>(i->ifa_addr);
    if (std::memcmp(sa->sin6_addr.s6_addr, ip.bytes.data(), 16) == 0)
      index = i->ifa_name ? ::if_nametoindex(i->ifa_name) : 0;
  }
  ::freeifaddrs(list);
  return index;
}

// A non-blocking UDP socket bound to `ep` (on interface `scope_id` when it is link-local), or
// -errno.
int open_bound_socket(const Endpoint& ep, uint32_t scope_id, const char** failed_step) {
  const bool v6 = ep.ip.is_v6();
  const int fd = ::socket(v6 ? AF_INET6 : AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *failed_step = "socket";
    return -errno;
  }
  const auto fail = [fd, failed_step](const char* step) {
    const int err = errno;
    ::close(fd);
    *failed_step = step;
    return -err;
  };
  const int one = 1;
  if (v6 && ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one)) != 0)
    return fail("set IPV6_V6ONLY");
  // IPv4: DF set and IPv4 ID 0 on an unconnected socket. IPv6: no fragments.
  const int pmtu = v6 ? IPV6_PMTUDISC_DO : IP_PMTUDISC_DO;
  if (::setsockopt(fd, v6 ? IPPROTO_IPV6 : IPPROTO_IP, v6 ? IPV6_MTU_DISCOVER : IP_MTU_DISCOVER,
                   &pmtu, sizeof(pmtu)) != 0)
    return fail(v6 ? "set IPV6_MTU_DISCOVER" : "set IP_MTU_DISCOVER");
  // ICMP errors (a peer's port that is gone) are kept for the socket: see the header comment.
  const int recverr = 1;
  if (::setsockopt(fd, v6 ? IPPROTO_IPV6 : IPPROTO_IP, v6 ? IPV6_RECVERR : IP_RECVERR, &recverr,
                   sizeof(recverr)) != 0)
    return fail(v6 ? "set IPV6_RECVERR" : "set IP_RECVERR");
  // Deep buffers absorb bursts between polls. The *FORCE variants pass net.core.*mem_max
  // when privileged; otherwise the kernel clamps the plain request, which is fine.
  const int bytes = kSocketBufferBytes;
  if (::setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof(bytes)) != 0)
    (void)::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
  if (::setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &bytes, sizeof(bytes)) != 0)
    (void)::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
  const SocketAddress sa = to_sockaddr(ep, scope_id);
  if (::bind(fd, sa.get(), sa.len) != 0) return fail("bind");
  if (v6) {
    // Datagrams for a group leave through the interface that holds this address (as for IPv4
    // below); an address no interface holds has been refused by bind already.
    const int ifindex = static_cast<int>(scope_id ? scope_id : interface_holding(ep.ip));
    if (ifindex)
      (void)::setsockopt(fd, IPPROTO_IPV6, IPV6_MULTICAST_IF, &ifindex, sizeof(ifindex));
    return fd;
  }
  // Datagrams for a group leave through the interface that has this address. Without it the
  // kernel picks the route's, and a send to a group may then fail (and count as a send error).
  in_addr mc_if{};
  mc_if.s_addr = htonl(ep.ip.ipv4());
  (void)::setsockopt(fd, IPPROTO_IP, IP_MULTICAST_IF, &mc_if, sizeof(mc_if));
  return fd;
}

// A non-blocking UDP socket that hears `group` on the interface of `local`'s address, or
// -errno; `*failed_step` names the call that failed.
int open_group_socket(const Endpoint& local, const IpAddress& group, const char** failed_step) {
  const bool v6 = !group.is_v4();
  // An IPv6 group is joined on the interface of the endpoint's address.
  const uint32_t ifindex = v6 ? interface_holding(local.ip) : 0;
  if (v6 && ifindex == 0) {
    *failed_step = "finding the interface that holds the address";
    return -EADDRNOTAVAIL;
  }
  const int fd = ::socket(v6 ? AF_INET6 : AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *failed_step = "socket";
    return -errno;
  }
  const auto fail = [fd, failed_step](const char* step) {
    const int err = errno;
    ::close(fd);
    *failed_step = step;
    return -err;
  };
  const int one = 1, zero = 0;
  if (::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0)
    return fail("set SO_REUSEADDR");
  if (v6) {
    const int on = 1;
    if (::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof(on)) != 0)
      return fail("set IPV6_V6ONLY");
    if (::setsockopt(fd, IPPROTO_IPV6, IPV6_MULTICAST_ALL, &zero, sizeof(zero)) != 0)
      return fail("set IPV6_MULTICAST_ALL");
  } else if (::setsockopt(fd, IPPROTO_IP, IP_MULTICAST_ALL, &zero, sizeof(zero)) != 0) {
    return fail("set IP_MULTICAST_ALL");
  }
  const int bytes = kSocketBufferBytes;
  if (::setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof(bytes)) != 0)
    (void)::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
  // A link-scope group (ff02::/16) names its link through the scope ID.
  const bool link_scope = v6 && (group.bytes[1] & 0x0f) <= 2;
  SocketAddress sa = to_sockaddr(Endpoint{group, local.port});
  if (link_scope) reinterpret_cast<sockaddr_in6*>(&sa.storage)->sin6_scope_id = ifindex;
  if (::bind(fd, sa.get(), sa.len) != 0) return fail("bind");
  if (v6) {
    ipv6_mreq mreq6{};
    std::memcpy(&mreq6.ipv6mr_multiaddr, group.bytes.data(), 16);
    mreq6.ipv6mr_interface = ifindex;
    if (::setsockopt(fd, IPPROTO_IPV6, IPV6_JOIN_GROUP, &mreq6, sizeof(mreq6)) != 0)
      return fail("IPV6_JOIN_GROUP");
    return fd;
  }
  ip_mreqn mreq{};
  mreq.imr_multiaddr.s_addr = htonl(group.ipv4());
  mreq.imr_address.s_addr = htonl(local.ip.ipv4());
  if (::setsockopt(fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &mreq, sizeof(mreq)) != 0)
    return fail("IP_ADD_MEMBERSHIP");
  return fd;
}

Errc errc_for_bind(int err) {
  switch (err) {
    case EADDRINUSE:
      return Errc::address_in_use;
    case EADDRNOTAVAIL:
      return Errc::not_found;
    case EACCES:
    case EPERM:
      return Errc::access_denied;
    case EMFILE:
    case ENFILE:
    case ENOBUFS:
    case ENOMEM:
      return Errc::no_resources;
    default:
      return Errc::io_error;
  }
}

// The errors an ICMP message leaves pending on the socket (IP_RECVERR): the destination's port
// or host is unreachable.
bool is_icmp_error(int err) {
  return err == ECONNREFUSED || err == EHOSTUNREACH || err == ENETUNREACH;
}

struct RecvBatch {
  mmsghdr msgs[kRecvBatch];
  iovec iov[kRecvBatch];
  sockaddr_storage from[kRecvBatch];
  uint8_t buffers[kRecvBatch][kMaxWireDatagramLen];
};

struct GroupSocket {
  IpAddress group;  // the address it is bound to
  int fd;
};

struct UdpPort {
  UdpPort(const Endpoint& l, uint32_t scope, WireSink* s, int socket_fd, bool faults)
      : local(l),
        scope_id(scope),
        sink(s),
        fd(socket_fd),
        recv(std::make_unique_for_overwrite<RecvBatch>()) {
    if (faults) outbox = std::make_unique<MpscRing<WireFrame>>(kOutboxLog2);
  }
  ~UdpPort() {
    for (const GroupSocket& g : groups) ::close(g.fd);
    if (const int e = epoll_fd.load(std::memory_order_relaxed); e >= 0) ::close(e);
    ::close(fd);
  }
  UdpPort(const UdpPort&) = delete;
  UdpPort& operator=(const UdpPort&) = delete;

  const Endpoint local;
  const uint32_t scope_id;  // the interface of a link-local IPv6 address, else 0
  WireSink* const sink;
  const int fd;
  std::unique_ptr<MpscRing<WireFrame>> outbox;      // only when faults are configured
  HeldFrames held{kHeldLimit};                      // poller only
  std::atomic<uint64_t> earliest_held{UINT64_MAX};  // published by the poller
  std::atomic<bool> errors_queued{false};  // an ICMP error was met: the poller reads them
  EndpointRxCounters rx;
  std::unique_ptr<RecvBatch> recv;  // poller only
  // Multicast: the groups' sockets (join, leave and the poller take the mutex), whether there
  // are any (read by the poller without it), and the epoll set made at the first join.
  std::mutex groups_mu;
  std::vector<GroupSocket> groups;
  std::atomic<bool> has_groups{false};
  std::atomic<int> epoll_fd{-1};
};

class UdpWire final : public WireBase {
 public:
  UdpWire(const WireConfig& config, std::unique_ptr<PcapWriter> pcap)
      : WireBase(config, std::move(pcap)) {}
  ~UdpWire() override;

  WireKind kind() const override { return WireKind::udp; }
  Result<Endpoint> attach(Endpoint local, WireSink* sink) override;
  void detach(Endpoint local) override;
  void transmit(const Endpoint& src, const Endpoint& dst, const uint8_t* data, size_t len,
                IpClass ip) override;
  size_t poll(const Endpoint& local, size_t budget) override;
  uint64_t next_delivery_ns(const Endpoint& local) const override;
  int wait_fd(const Endpoint& local) const override;
  Status join_group(const Endpoint& local, const IpAddress& group) override;
  Status leave_group(const Endpoint& local, const IpAddress& group) override;

 private:
  void add_endpoint_counters(WireCounters* c) const override {
    ports_.for_each([c](const UdpPort& p) { p.rx.add_to(c); });
  }
  Result<int> bind_auto(Endpoint* local);
  void release_held(UdpPort& p);
  // Receives from `fd`, one of `p`'s sockets, bound to `bound` (its address or a group's).
  size_t receive(UdpPort& p, int fd, const Endpoint& bound, size_t budget);
  void read_errors(UdpPort& p);
  // sendmsg of one frame; a pending ICMP error of an earlier frame is noted and the frame
  // sent again. False if it was not sent.
  bool send_frame(UdpPort& p, const msghdr& msg);

  EndpointTable<UdpPort> ports_;
};

UdpWire::~UdpWire() {
  ports_.for_each([](UdpPort& p) { delete &p; });
}

Result<int> UdpWire::bind_auto(Endpoint* local) {
  // The first 127.0.0.x whose port is free. bind() decides atomically, so two processes
  // racing for the same address each end up with a different one.
  for (uint32_t host = kFirstAutoHost; host <= kLastAutoHost; ++host) {
    const Endpoint candidate{IpAddress::v4(kLoopbackNet | host), local->port};
    if (ports_.contains(candidate)) continue;
    const char* step = "";
    const int fd = open_bound_socket(candidate, 0, &step);
    if (fd >= 0) {
      *local = candidate;
      return fd;
    }
    if (fd == -EADDRINUSE) continue;
    return Status::error(errc_for_bind(-fd), "udp wire: attach %s: %s: %s",
                         endpoint_string(candidate).c_str(),
                         step,
                         std::strerror(-fd));
  }
  return Status::error(Errc::address_in_use,
                       "udp wire: attach: port %u is in use on every address from 127.0.0.%u "
                       "to 127.0.0.%u",
                       unsigned{local->port}, kFirstAutoHost, kLastAutoHost);
}

Result<Endpoint> UdpWire::attach(Endpoint local, WireSink* sink) {
  if (sink == nullptr)
    return Status::error(Errc::invalid_argument, "udp wire: attach %s: no sink",
                         endpoint_string(resolve(local)).c_str());
  std::lock_guard lock(control_mutex_);
  local = resolve(local);
  if (ports_.size() >= ports_.kMaxEntries)
    return Status::error(Errc::no_resources, "udp wire: attach %s: %zu endpoints attached",
                         endpoint_string(local).c_str(), ports_.size());
  int fd;
  uint32_t scope_id = 0;
  if (local.ip.is_unspecified()) {
    RNICDV_ASSIGN_OR_RETURN(fd, bind_auto(&local));
  } else {
    if (ports_.contains(local))
      return Status::error(Errc::address_in_use,
                           "udp wire: attach %s: address in use (already attached)",
                           endpoint_string(local).c_str());
    if (local.ip.is_multicast())
      return Status::error(Errc::invalid_argument,
                           "udp wire: attach %s: a multicast address names a group, not a port",
                           endpoint_string(local).c_str());
    if (local.ip.is_link_local() && (scope_id = interface_holding(local.ip)) == 0)
      return Status::error(Errc::not_found,
                           "udp wire: attach %s: no interface holds this link-local address",
                           endpoint_string(local).c_str());
    const char* step = "";
    fd = open_bound_socket(local, scope_id, &step);
    if (fd < 0) {
      if (fd == -EADDRINUSE)
        return Status::error(Errc::address_in_use, "udp wire: attach %s: address in use",
                             endpoint_string(local).c_str());
      return Status::error(errc_for_bind(-fd), "udp wire: attach %s: %s: %s",
                           endpoint_string(local).c_str(),
                           step,
                           std::strerror(-fd));
    }
  }
  std::unique_ptr<UdpPort> port;
  try {
    port = std::make_unique<UdpPort>(local, scope_id, sink, fd, may_hold_frames());
  } catch (const std::bad_alloc&) {
    ::close(fd);
    return Status::error(Errc::no_resources, "udp wire: attach %s: out of memory",
                         endpoint_string(local).c_str());
  }
  if (!ports_.insert(local, port.get()))
    return Status::error(Errc::internal, "udp wire: attach %s: endpoint table refused it",
                         endpoint_string(local).c_str());
  port.release();
  return local;
}

void UdpWire::detach(Endpoint local) {
  std::lock_guard lock(control_mutex_);
  std::unique_ptr<UdpPort> port(ports_.remove(resolve(local)));
  if (!port) return;
  // Frames still held back never left; they go with the socket.
  uint64_t lost = port->held.clear();
  if (port->outbox) {
    while (port->outbox->front() != nullptr) {
      port->outbox->pop();
      ++lost;
    }
  }
  port->rx.add_to(&retired_);
  retired_.dropped_send_error += lost;
}

void UdpWire::transmit(const Endpoint& src, const Endpoint& dst, const uint8_t* data, size_t len,
                       IpClass ip) {
  TxFrame tx;
  if (!begin_transmit(src, dst, data, len, ip, &tx)) return;
  EndpointTable<UdpPort>::Ref port;
  ports_.find(tx.src, &port);
  if (!port) [[unlikely]] {  // nothing to send from
    bump(tx_counters().dropped_send_error, tx.plan.copies);
    return;
  }
  if (tx.held()) {
    for (uint8_t copy = 0; copy < tx.plan.copies; ++copy) {
      const auto claim = port->outbox->claim();
      if (!claim) [[unlikely]] {
        bump(tx_counters().dropped_queue_full);
        continue;
      }
      tx.fill(claim.slot, copy, WireFrame::kCaptureOnRelease);
      port->outbox->publish(claim);
    }
    return;
  }
  SocketAddress to = to_sockaddr(tx.dst, port->scope_id);
  iovec parts[4];
  msghdr msg{};
  msg.msg_name = to.get();
  msg.msg_namelen = to.len;
  msg.msg_iov = parts;
  msg.msg_iovlen = static_cast<size_t>(tx.gather(parts));
  IpClassControl control;
  set_ip_class(&msg, tx.ip, tx.dst.ip.is_v6(), &control);
  for (uint8_t copy = 0; copy < tx.plan.copies; ++copy) {
    // Never blocks: the socket is non-blocking, and a full buffer is a dropped frame.
    if (!send_frame(*port, msg)) [[unlikely]] {
      bump(tx_counters().dropped_send_error);
      continue;
    }
    if (capturing()) capture(tx, now_ns());
  }
}

bool UdpWire::send_frame(UdpPort& p, const msghdr& msg) {
  if (::sendmsg(p.fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL) >= 0) [[likely]]
    return true;
  // With IP_RECVERR a failed send may also leave an entry on the error queue (EMSGSIZE on a
  // link with a smaller MTU): the poller drains it, or the socket would stay readable for
  // errors and its device thread would never sleep.
  p.errors_queued.store(true, std::memory_order_release);
  if (!is_icmp_error(errno)) return false;
  // The error was pending from an earlier frame (it is cleared now): this one goes again.
  return ::sendmsg(p.fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL) >= 0;
}

// Reads the socket's error queue: each ICMP port or host unreachable names the destination of
// the datagram it refused, which the sink learns is gone.
void UdpWire::read_errors(UdpPort& p) {
  p.errors_queued.store(false, std::memory_order_relaxed);
  for (int n = 0; n < 64; ++n) {  // bounded: the queue holds at most the socket's buffer
    sockaddr_storage dst{};
    alignas(cmsghdr) uint8_t control[CMSG_SPACE(sizeof(sock_extended_err) + sizeof(sockaddr_in6))];
    uint8_t payload[64];
    iovec iov{payload, sizeof payload};
    msghdr h{};
    h.msg_name = &dst;
    h.msg_namelen = sizeof dst;
    h.msg_iov = &iov;
    h.msg_iovlen = 1;
    h.msg_control = control;
    h.msg_controllen = sizeof control;
    if (::recvmsg(p.fd, &h, MSG_ERRQUEUE | MSG_DONTWAIT) < 0) return;  // empty (EAGAIN)
    for (cmsghdr* c = CMSG_FIRSTHDR(&h); c; c = CMSG_NXTHDR(&h, c)) {
      const bool v4 = c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_RECVERR;
      const bool v6 = c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_RECVERR;
      if (!v4 && !v6) continue;
      sock_extended_err ee;
      std::memcpy(&ee, CMSG_DATA(c), sizeof ee);
      // The original datagram's destination is msg_name (the ICMP message's quoted header).
      const bool unreachable =
          v4 ? ee.ee_origin == SO_EE_ORIGIN_ICMP : ee.ee_origin == SO_EE_ORIGIN_ICMP6;
      Endpoint peer;
      if (!unreachable || !is_icmp_error(static_cast<int>(ee.ee_errno)) ||
          !from_sockaddr(dst, h.msg_namelen, &peer))
        continue;
      p.rx.peers_unreachable.add();
      p.sink->on_unreachable(peer);
    }
  }
}

void UdpWire::release_held(UdpPort& p) {
  if (!p.outbox) return;
  for (size_t n = p.outbox->capacity(); n > 0; --n) {
    WireFrame* f = p.outbox->front();
    if (f == nullptr) break;
    if (!p.held.hold(*f)) [[unlikely]]
      p.rx.dropped_queue_full.add();
    p.outbox->pop();
  }
  if (!p.held.empty()) {
    const uint64_t now = now_ns();
    while (WireFrame* f = p.held.take_due(now)) {
      SocketAddress to = to_sockaddr(f->dst(), p.scope_id);
      iovec part{f->bytes, f->len};
      msghdr msg{};
      msg.msg_name = to.get();
      msg.msg_namelen = to.len;
      msg.msg_iov = &part;
      msg.msg_iovlen = 1;
      IpClassControl control;
      set_ip_class(&msg, f->ip(), f->dst().ip.is_v6(), &control);
      if (!send_frame(p, msg)) [[unlikely]] {
        bump(tx_counters().dropped_send_error);
      } else {
        capture(*f, now);
      }
      p.held.recycle(f);
    }
  }
  p.earliest_held.store(p.held.earliest_due(), std::memory_order_relaxed);
}

size_t UdpWire::receive(UdpPort& p, int fd, const Endpoint& bound, size_t budget) {
  RecvBatch& b = *p.recv;
  size_t delivered = 0, received = 0;
  int errors_met = 0;
  // Bounded work per call, even against a flood of datagrams that all fail the checks.
  const size_t receive_limit = budget + kRecvBatch;
  while (delivered < budget && received < receive_limit) {
    const unsigned want = static_cast<unsigned>(std::min<size_t>(kRecvBatch, budget - delivered));
    for (unsigned i = 0; i < want; ++i) {
      b.iov[i] = {b.buffers[i], sizeof(b.buffers[i])};
      b.msgs[i].msg_hdr = msghdr{};
      b.msgs[i].msg_hdr.msg_name = &b.from[i];
      b.msgs[i].msg_hdr.msg_namelen = sizeof(b.from[i]);
      b.msgs[i].msg_hdr.msg_iov = &b.iov[i];
      b.msgs[i].msg_hdr.msg_iovlen = 1;
      b.msgs[i].msg_len = 0;
    }
    const int n = ::recvmmsg(fd, b.msgs, want, MSG_DONTWAIT, nullptr);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno != EAGAIN && fd == p.fd) {  // a group's socket sends nothing
        // A pending ICMP error is reported (and cleared) before any datagram: read the queue
        // and go on receiving (a few times at most: a flood of refusals cannot hold the
        // poller here).
        const int err = errno;
        read_errors(p);
        if (is_icmp_error(err) && ++errors_met < 8) continue;
      }
      break;  // drained (EAGAIN), or an error the next poll will see again
    }
    for (int i = 0; i < n; ++i) {
      ++received;
      const msghdr& h = b.msgs[i].msg_hdr;
      Endpoint src;
      if ((h.msg_flags & MSG_TRUNC) || !from_sockaddr(b.from[i], h.msg_namelen, &src))
          [[unlikely]] {
        p.rx.dropped_malformed.add();  // oversize (truncated) or from no IP peer
        continue;
      }
      if (deliver(p.sink, src, bound, b.buffers[i], b.msgs[i].msg_len, &p.rx)) ++delivered;
    }
    if (static_cast<unsigned>(n) < want) break;  // the socket is drained
  }
  return delivered;
}

size_t UdpWire::poll(const Endpoint& local, size_t budget) {
  EndpointTable<UdpPort>::Ref ref;
  ports_.find(resolve(local), &ref);
  UdpPort* const port = ref.get();
  if (port == nullptr) return 0;
  release_held(*port);
  if (port->errors_queued.load(std::memory_order_acquire)) read_errors(*port);
  if (budget == 0) return 0;
  size_t delivered = receive(*port, port->fd, port->local, budget);
  if (port->has_groups.load(std::memory_order_acquire)) [[unlikely]] {
    std::lock_guard lock(port->groups_mu);
    for (const GroupSocket& g : port->groups) {
      if (delivered >= budget) break;
      delivered += receive(*port, g.fd, Endpoint{g.group, port->local.port}, budget - delivered);
    }
  }
  return delivered;
}

uint64_t UdpWire::next_delivery_ns(const Endpoint& local) const {
  EndpointTable<UdpPort>::Ref ref;
  ports_.find(resolve(local), &ref);
  if (!ref) return UINT64_MAX;
  uint64_t due = ref->earliest_held.load(std::memory_order_relaxed);
  if (ref->outbox && !ref->outbox->probably_empty()) due = std::min(due, now_ns());
  return due;
}

int UdpWire::wait_fd(const Endpoint& local) const {
  EndpointTable<UdpPort>::Ref ref;
  ports_.find(resolve(local), &ref);
  if (!ref) return -1;
  return ref->has_groups.load(std::memory_order_acquire) ? ref->epoll_fd.load() : ref->fd;
}

Status UdpWire::join_group(const Endpoint& local, const IpAddress& group) {
  RNICDV_TRY(check_group("udp", local, group));
  std::lock_guard lock(control_mutex_);
  const Endpoint ep = resolve(local);
  EndpointTable<UdpPort>::Ref ref;
  ports_.find(ep, &ref);
  if (!ref)
    return Status::error(Errc::not_found, "udp wire: %s joining %s: not attached",
                         endpoint_string(ep).c_str(), group.to_string().c_str());
  UdpPort& p = *ref;
  {
    std::lock_guard groups(p.groups_mu);
    for (const GroupSocket& g : p.groups)
      if (g.group == group)
        return Status::error(Errc::address_in_use, "udp wire: %s joining %s: already a member",
                             endpoint_string(ep).c_str(), group.to_string().c_str());
  }
  const auto failed = [&](const char* step, int err) {
    return Status::error(errc_for_bind(err), "udp wire: %s joining %s: %s: %s",
                         endpoint_string(ep).c_str(), group.to_string().c_str(), step,
                         std::strerror(err));
  };
  int epoll = p.epoll_fd.load(std::memory_order_relaxed);
  if (epoll < 0) {
    epoll = ::epoll_create1(EPOLL_CLOEXEC);
    if (epoll < 0) return failed("epoll_create1", errno);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = p.fd;
    if (::epoll_ctl(epoll, EPOLL_CTL_ADD, p.fd, &ev) != 0) {
      const int err = errno;
      ::close(epoll);
      return failed("epoll_ctl", err);
    }
    p.epoll_fd.store(epoll, std::memory_order_release);
  }
  const char* step = "";
  const int fd = open_group_socket(ep, group, &step);
  if (fd < 0) return failed(step, -fd);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  if (::epoll_ctl(epoll, EPOLL_CTL_ADD, fd, &ev) != 0) {
    const int err = errno;
    ::close(fd);
    return failed("epoll_ctl", err);
  }
  try {
    std::lock_guard groups(p.groups_mu);
    p.groups.push_back(GroupSocket{group, fd});
  } catch (const std::bad_alloc&) {
    ::close(fd);
    return failed("remembering the group", ENOMEM);
  }
  p.has_groups.store(true, std::memory_order_release);
  return Status::ok();
}

Status UdpWire::leave_group(const Endpoint& local, const IpAddress& group) {
  std::lock_guard lock(control_mutex_);
  const Endpoint ep = resolve(local);
  EndpointTable<UdpPort>::Ref ref;
  ports_.find(ep, &ref);
  if (!ref) return Wire::leave_group(ep, group);
  UdpPort& p = *ref;
  std::lock_guard groups(p.groups_mu);
  auto it = std::find_if(p.groups.begin(), p.groups.end(),
                         [group](const GroupSocket& g) { return g.group == group; });
  if (it == p.groups.end()) return Wire::leave_group(ep, group);
  ::close(it->fd);  // leaves the group, and the epoll set
  p.groups.erase(it);
  p.has_groups.store(!p.groups.empty(), std::memory_order_release);
  return Status::ok();
}

}  // namespace

Result<std::unique_ptr<Wire>> make_udp_wire(const WireConfig& config) {
  Status st = WireBase::validate(config, "udp");
  if (!st) return st;
  std::unique_ptr<PcapWriter> pcap;
  if (!config.pcap_path.empty()) {
    auto opened = PcapWriter::open(config.pcap_path);
    if (!opened) return opened.status().prepend("udp wire");
    pcap = std::move(*opened);
  }
  return std::unique_ptr<Wire>(new UdpWire(config, std::move(pcap)));
}

}  // namespace rnicdv::sim
