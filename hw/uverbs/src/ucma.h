// SPDX-License-Identifier: BSD-3-Clause
// /dev/infiniband/rdma_cm on the simulated HCAs: the kernel's rdma_ucm interface (the ucma
// ABI of rdma/rdma_user_cm.h, version 4) as librdmacm speaks it, on top of each simulated
// device's IB CM (hw/sim/src/cm), so that what travels between HCAs is what a kernel sends:
// REQ/REP/RTU/REJ/MRA/DREQ/DREP MADs with rdma_cm's service ID and private-data header.
//
// Objects, as in the kernel:
// - a File is one open of the cdev (an rdma_event_channel). Its events are read with the
//   GET_EVENT command; the descriptor is an eventfd whose count equals the number of queued
//   events, so poll, select and epoll work on it unchanged.
// - an Id is an rdma_cm_id: a handle in one process-wide table, owned by one File (MIGRATE_ID
//   moves it). It holds the CM objects of its role: listeners (one per device for a wildcard
//   address) or one connection.
// A pump thread waits on the CM objects' event descriptors and turns their events into ucma
// events on the owning File.
//
// Supported: RC over RoCE with IPv4 addresses (RDMA_PS_TCP, and RDMA_PS_IB with RC), UD QPs'
// service resolution in RDMA_PS_UDP (SIDR: the CONNECT_REQUEST and ESTABLISHED events carry
// the UD parameters), and IPv4 multicast groups for RDMA_PS_UDP IDs (JOIN_IP_MCAST,
// JOIN_MCAST, LEAVE_MCAST: a join is answered with MULTICAST_JOIN at once, as RoCE's IGMP
// join is; librdmacm then attaches the QP with ibv_attach_mcast, which joins the group on the
// wire). Refused with the errno a kernel gives and one line on stderr: RDMA_PS_IPOIB and UD in
// RDMA_PS_IB, AF_IB addressing (except the wildcard bind librdmacm probes AF_IB support
// with), IPv6 addresses and groups.
#pragma once

// netinet/in.h before the kernel headers, so that glibc's in6 definitions win.
#include <netinet/in.h>
#include <infiniband/ib.h>  // AF_IB, sockaddr_ib
#include <rdma/rdma_user_cm.h>

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "devices.h"
#include "rnicdv/hw/cm.h"

namespace rnicdv::uverbs::ucma {

inline constexpr uint32_t kAbiVersion = 4;  // RDMA_USER_CM_ABI_VERSION

// The event numbers of the ABI (librdmacm's enum rdma_cm_event_type, whose header cannot be
// included beside the kernel's: both define the port spaces).
enum : uint32_t {
  RDMA_CM_EVENT_ADDR_RESOLVED = 0,
  RDMA_CM_EVENT_ADDR_ERROR = 1,
  RDMA_CM_EVENT_ROUTE_RESOLVED = 2,
  RDMA_CM_EVENT_ROUTE_ERROR = 3,
  RDMA_CM_EVENT_CONNECT_REQUEST = 4,
  RDMA_CM_EVENT_CONNECT_RESPONSE = 5,
  RDMA_CM_EVENT_CONNECT_ERROR = 6,
  RDMA_CM_EVENT_UNREACHABLE = 7,
  RDMA_CM_EVENT_REJECTED = 8,
  RDMA_CM_EVENT_ESTABLISHED = 9,
  RDMA_CM_EVENT_DISCONNECTED = 10,
  RDMA_CM_EVENT_MULTICAST_JOIN = 12,
  RDMA_CM_EVENT_MULTICAST_ERROR = 13,
};
inline constexpr uint32_t kMiscMajor = 10;  // the misc class; the kernel's minor is dynamic
inline constexpr uint32_t kMinor = 58;
inline constexpr uint8_t kPacketLifeTime = 16;  // CMA_IBOE_PACKET_LIFETIME (RoCE paths)
// The REQ stage, as rdma_cm runs it: CM response timeout 20 (4.3 s) and 15 retries.
inline constexpr uint32_t kConnectBudgetMs = 16 * 4295;

// One queued event. `owner` is the Id whose events_reported counts it when it is read: the
// listener for a CONNECT_REQUEST, whose new Id is resp.id.
struct Event {
  rdma_ucm_event_resp resp{};
  uint32_t owner = 0;
  bool conn_req = false;
  uint32_t mc = 0;  // a multicast event: its group membership's handle (0: none)
};

class File {
 public:
  static std::shared_ptr<File> create(int open_flags);  // null with errno on failure
  ~File() = default;
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  int fd() const { return fd_; }
  void push(const Event& ev);
  // Hands the first queued event to `deliver` (GET_EVENT's copy to the application) and
  // removes it only if that succeeded, so an event whose copy failed is still the first for
  // the next GET_EVENT. 1: delivered and removed; 0: nothing queued; -1: `deliver` failed.
  int take_front(bool (*deliver)(const Event& ev, void* arg), void* arg);
  // Removes and returns the queued events of `owner`.
  std::vector<Event> take(uint32_t owner);
  // Removes and returns the queued events of multicast membership `mc`.
  std::vector<Event> take_multicast(uint32_t mc);
  void set_app_nonblocking(bool on) { app_nonblock_.store(on, std::memory_order_relaxed); }
  bool app_nonblocking() const { return app_nonblock_.load(std::memory_order_relaxed); }
  void closed();

 private:
  explicit File(int fd) : fd_(fd) {}
  template <class Pred>
  std::vector<Event> take_if(Pred pred);
  const int fd_;
  std::atomic<bool> app_nonblock_{false};
  std::mutex mu_;
  bool closed_ = false;
  std::deque<Event> events_;
};

// The kernel's rdma_cm_state, as far as this model needs it.
enum class State : uint8_t {
  idle,
  addr_bound,
  addr_resolved,
  route_resolved,
  listen,
  connect,      // REQ sent, or a request received and not yet established
  established,
  disconnected,
  failed,       // rejected, unreachable or a local error: only destroy is left
};
const char* state_name(State s) noexcept;

// An rdma_cm address: IPv4 or IPv6 (unspecified: any, of the ID's family), and the CM port.
struct Endpoint {
  hw::IpAddress ip;
  uint16_t port = 0;
  uint32_t scope_id = 0;  // a link-local IPv6 address's interface, as the application gave it
};

struct Id {
  uint32_t handle = 0;
  uint64_t uid = 0;
  std::shared_ptr<File> file;
  uint16_t ps = RDMA_PS_TCP;
  uint8_t qp_type = 2;  // IBV_QPT_RC
  State state = State::idle;
  int family = 0;       // of the bound or resolved address: AF_INET, AF_INET6 (any), AF_IB (any)
  SimDevice* dev = nullptr;  // null while unbound or bound to a wildcard address
  Endpoint src, dst;
  bool port_reserved = false;
  bool passive = false;  // created by a connect request
  bool accepted = false;
  bool have_peer = false;
  hw::CmPeerOffer peer;
  std::vector<std::pair<SimDevice*, std::unique_ptr<hw::CmListener>>> listeners;
  // The CM listeners enforce it (hw::ConnectionManager::listen): a request counts from its REQ
  // until it is accepted or rejected, a superset of what the kernel's ucma counts (connect
  // requests queued and not yet read), so the shim needs no count of its own.
  int backlog = hw::kDefaultListenBacklog;
  std::unique_ptr<hw::CmConnection> conn;
  bool disconnect_reported = false;
  // The route's path (QUERY_ROUTE) beyond the TOS: the route's own, or for a passive ID the
  // REQ's primary path, as the kernel's CM gives it (cm_format_paths_from_req), with `tos`.
  uint8_t hop_limit = 64;
  uint32_t flow_label = 0;
  uint8_t sl = 0;
  // rdma_set_option values.
  uint8_t tos = 0;
  uint8_t ack_timeout = 0;  // 0: the default, kPacketLifeTime + 1
  bool reuseaddr = false;
  bool afonly = false;
  uint32_t events_reported = 0;

  // RDMA_PS_UDP: its connect sends a SIDR_REQ, its listeners take SIDR requests.
  bool ud() const { return ps == RDMA_PS_UDP; }
};

// One multicast membership of an ID (the kernel's ucma_multicast): what LEAVE_MCAST names.
struct Multicast {
  uint32_t owner = 0;  // the Id's handle
  uint64_t uid = 0;    // librdmacm's, returned in its events
  hw::IpAddress group;
  uint32_t events_reported = 0;
};

struct Registry {
  std::mutex mu;  // guards everything below and every Id; File queues have their own locks
  std::map<int, std::shared_ptr<File>> files;
  std::map<uint32_t, std::unique_ptr<Id>> ids;
  uint32_t next_handle = 0;
  std::map<uint32_t, Multicast> mcasts;  // by handle, from 1 (the kernel's multicast table)
  uint32_t next_mc = 1;
  std::multiset<uint16_t> ports;  // CM ports held by bound IDs
  std::thread pump;
  int wake_fd = -1;
  bool stopping = false;
};
Registry& registry();

// Wakes the pump so that it waits on the CM objects created since (mu held or not).
void wake_pump();
// Queues an event on `id`'s File.
void post_event(Id& id, uint32_t event, int32_t status);
// Destroys `id` (mu held): its unread events, the IDs of its unread connect requests, its CM
// objects (a REJ or DREQ follows, as in the kernel) and its port. Returns events_reported.
uint32_t destroy_id_locked(uint32_t handle);

// Runs command `cmd` of `file` through the command table (ucma_commands.cc): 0 or a
// negative errno.
int run_command(const std::shared_ptr<File>& file, uint32_t cmd, const uint8_t* in,
                size_t in_len, size_t out_len);

}  // namespace rnicdv::uverbs::ucma
