// SPDX-License-Identifier: BSD-3-Clause
// The device interface: control path only.
//
// A backend (hw/mlx5 for a real ConnectX through rdma-core, hw/sim for the software HCA)
// creates objects and hands the driver views of the memory the hardware reads: the shape of
// mlx5dv_qp and mlx5dv_cq. The fast path (post, ring, poll) never calls through this
// interface; it writes and reads those views directly. Every method here is thread-safe.
#pragma once

#include <infiniband/mlx5dv.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rnicdv/hw/ip_address.h"
#include "rnicdv/status.h"

namespace rnicdv::hw {

// IB QP states (IBA 10.3.1).
enum class QpState : uint8_t { reset, init, rtr, rts, sqd, sqe, err };
const char* qp_state_name(QpState s) noexcept;  // "RESET", "INIT", "RTR", ...

// IB path MTU codes (IBA 9.6.1, ibv_mtu values).
enum class Mtu : uint8_t { mtu256 = 1, mtu512 = 2, mtu1024 = 3, mtu2048 = 4, mtu4096 = 5 };
constexpr uint32_t mtu_bytes(Mtu m) noexcept { return 128u << static_cast<uint8_t>(m); }

// Memory access rights; values are ibv_access_flags.
namespace access {
inline constexpr uint32_t local_write = 1u << 0;
inline constexpr uint32_t remote_write = 1u << 1;
inline constexpr uint32_t remote_read = 1u << 2;
inline constexpr uint32_t remote_atomic = 1u << 3;
}  // namespace access

// What the hardware guarantees about send queue fetching. It decides how the driver withholds
// work posted in RTR (docs/driver.md, "Early posting").
struct DeviceProfile {
  // The device may execute valid-looking WQEs beyond the SQ doorbell record (a scanning
  // device). Withholding in place is unsafe: the driver uses a shadow queue.
  bool fetches_beyond_dbr = false;
  // A doorbell rung while the QP is in RTR is remembered and executed after RTS (observed
  // mlx5 behaviour). The driver must withhold both the doorbell record and the UAR write.
  bool keeps_rtr_doorbell = true;
};
// The profile's name: "mlx5" {keeps_rtr_doorbell}, "scanning" {fetches_beyond_dbr,
// keeps_rtr_doorbell}, "forgetful" {neither}, "scanning-forgetful" {fetches_beyond_dbr}.
const char* device_profile_name(const DeviceProfile& p) noexcept;
// The profile of that name; false for an unknown one.
bool device_profile_from_name(const char* name, DeviceProfile* out) noexcept;

struct DeviceCaps {
  uint32_t max_qp = 0;
  uint32_t max_qp_wr = 0;        // WQEs per send or receive queue
  uint32_t max_send_sge = 0;
  uint32_t max_recv_sge = 0;
  uint32_t max_inline_data = 0;
  uint32_t max_cq = 0;
  uint32_t max_cqe = 0;
  uint32_t max_mr = 0;
  uint64_t max_mr_size = 0;
  uint32_t max_pd = 0;
  uint32_t max_msg_size = 0;
  uint8_t max_qp_rd_atom = 0;      // outstanding READ/atomic as responder
  uint8_t max_qp_init_rd_atom = 0; // ... as initiator
  Mtu max_mtu = Mtu::mtu4096;
  Mtu active_mtu = Mtu::mtu1024;
  uint32_t max_srq = 0;
  uint32_t max_srq_wr = 0;         // receive WQEs an SRQ may hold
  // Packet pacing (Qp::set_rate_limit): the rates a limit may take, in kb/s; 0 and 0 when
  // the device has none.
  uint32_t rate_limit_min_kbps = 0;
  uint32_t rate_limit_max_kbps = 0;
  // UD multicast (Qp::attach_multicast): groups the device can hold, QPs attached to one
  // group, and attachments in all.
  uint32_t max_mcast_grp = 0;
  uint32_t max_mcast_qp_attach = 0;
  uint32_t max_total_mcast_qp_attach = 0;
};

// A 16-byte GID. On RoCE v2 it is the port's IP address: an IPv6 address as it is, an IPv4
// one in the IPv4-mapped form ::ffff:a.b.c.d.
struct Gid {
  uint8_t raw[16] = {};
  static Gid from_ipv4(uint32_t ipv4_host_order) noexcept;
  static Gid from_ip(const IpAddress& ip) noexcept;
  IpAddress ip() const noexcept { return IpAddress::from_bytes(raw); }
  bool is_ipv4_mapped() const noexcept;
  uint32_t ipv4() const noexcept;  // host order; valid when is_ipv4_mapped()
  std::string to_string() const;   // "::ffff:127.0.0.2" or full hex form
};

// One port of a device: the GID it sends from and that GID's index in its table.
struct PortInfo {
  Gid gid;
  uint8_t gid_index = 0;
};

struct DeviceInfo {
  std::string name;        // "sim0", "mlx5_0"
  std::string kind;        // "sim" or "mlx5"
  std::string transport;   // e.g. "sim udp 127.0.0.2:4791", "mlx5 RoCE v2"
  uint64_t node_guid = 0;
  Gid gid;                 // port 1, the GID the device sends from
  uint8_t gid_index = 0;
  DeviceProfile profile;
  DeviceCaps caps;
  // Every port, from port 1 (ports[0] is gid and gid_index above). A QP sends and receives
  // through the port its INIT transition names (QpAttr::port_num).
  std::vector<PortInfo> ports;
};

// Mirrors the subset of ibv_qp_attr a RoCEv2 RC QP needs. Which fields apply is given by a
// mask of qp_attr::* bits, as in ibv_modify_qp.
struct QpAttr {
  QpState state = QpState::reset;
  Mtu path_mtu = Mtu::mtu1024;        // RTR
  uint32_t dest_qpn = 0;              // RTR
  uint32_t rq_psn = 0;                // RTR: first expected inbound PSN
  uint32_t sq_psn = 0;                // RTS: first outbound PSN
  uint32_t access_flags = 0;          // INIT: remote access to this QP (access::remote_*)
  uint8_t max_rd_atomic = 1;          // RTS: outstanding READ/atomic as initiator
  uint8_t max_dest_rd_atomic = 1;     // RTR: as responder
  uint8_t min_rnr_timer = 12;         // RTR: 5-bit IB RNR timer code sent in RNR NAKs
  uint8_t timeout = 14;               // RTS: local ACK timeout 4.096 us * 2^timeout; 0 = none
  uint8_t retry_cnt = 7;              // RTS: transport retries (0..7)
  uint8_t rnr_retry = 7;              // RTS: RNR retries, 7 = infinite
  Gid remote_gid;                     // RTR: the peer's address
  // RTR, with remote_gid (qp_attr::av), as in ibv_ah_attr's GRH and SL:
  uint8_t traffic_class = 0;          // the IP header's TOS byte: DSCP (bits 7..2), ECN (1..0)
  uint8_t hop_limit = 64;             // IPv4 TTL (IPv6 hop limit); 0 = 64
  uint32_t flow_label = 0;            // IPv6 flow label, 20 bits (kept on an IPv4 path)
  uint8_t sl = 0;                     // service level 0..15 (on RoCE, a VLAN tag's priority)
  uint16_t pkey_index = 0;            // INIT
  uint8_t port_num = 1;               // INIT
  uint32_t qkey = 0;                  // INIT (UD QPs only): the Q_Key datagrams must carry
};

namespace qp_attr {
inline constexpr uint32_t state = 1u << 0;
inline constexpr uint32_t access_flags = 1u << 1;
inline constexpr uint32_t port = 1u << 2;        // pkey_index, port_num
inline constexpr uint32_t path_mtu = 1u << 3;
inline constexpr uint32_t dest_qpn = 1u << 4;
inline constexpr uint32_t rq_psn = 1u << 5;
inline constexpr uint32_t sq_psn = 1u << 6;
inline constexpr uint32_t max_rd_atomic = 1u << 7;
inline constexpr uint32_t max_dest_rd_atomic = 1u << 8;
inline constexpr uint32_t min_rnr_timer = 1u << 9;
inline constexpr uint32_t timeout = 1u << 10;
inline constexpr uint32_t retry_cnt = 1u << 11;
inline constexpr uint32_t rnr_retry = 1u << 12;
inline constexpr uint32_t av = 1u << 13;         // remote_gid, traffic_class, hop_limit, flow_label, sl
inline constexpr uint32_t qkey = 1u << 14;       // UD QPs only
}  // namespace qp_attr

// A QP's send rate limit (mlx5's packet pacing; ibv_modify_qp_rate_limit). The device paces
// the QP's request packets so that their Ethernet frames (header to ICRC) leave at no more
// than `kbps` kilobits per second, sending at most `max_burst_bytes` at once. 0 kbps: no limit.
struct RateLimit {
  uint32_t kbps = 0;
  uint32_t max_burst_bytes = 0;  // 0: the device's default (one path-MTU packet)
  uint16_t typical_pkt_bytes = 0;  // a hint; 0: none
};

// The transport service of a QP (IBA 9.8): reliable connected; unreliable datagram, whose
// send WQEs carry their own address vector (mlx5_wqe_datagram_seg); or unreliable connected:
// SEND and RDMA WRITE to one peer, without acknowledgments, retries or RNR (a message that
// loses a packet is dropped whole at the responder, and the next one is received). Or XRC
// (IBA Annex A14): an initiator (xrc_send) is an RC QP whose every request names an SRQ of
// the responder's device (SendWr::remote_srqn, the WQE's XRC segment, the packet's XRCETH);
// it has no receive queue. A target (xrc_recv) has neither queue: it answers an initiator's
// requests, and each SEND takes its receive from the XRC SRQ the request names, which must be
// of the target's XRC domain; the receive completes on that SRQ's CQ, and memory accesses are
// checked against that SRQ's PD.
enum class QpType : uint8_t { rc, ud, uc, xrc_send, xrc_recv };

// Where a UD send goes (ibv_ah_attr's GRH on RoCE): the destination's GID and what its
// packets carry. The destination QP and Q_Key go with each send (SendWr::remote_qpn,
// remote_qkey).
struct AhAttr {
  Gid remote_gid;
  uint8_t traffic_class = 0;  // the IP header's TOS byte
  uint8_t hop_limit = 64;     // IPv4 TTL; 0 = 64
  uint32_t flow_label = 0;    // 20 bits
  uint8_t sl = 0;             // 0..7 on RoCE (the VLAN priority)
  uint8_t port = 1;           // the port whose GID the datagrams leave from (the QP's port)
};

// An address handle: the address vector (mlx5dv's mlx5_wqe_av) that a UD send WQE's datagram
// segment carries, resolved once (on RoCE the destination MAC too). Valid while it lives.
class Ah {
 public:
  virtual ~Ah() = default;
  virtual const mlx5_wqe_av& av() const = 0;
};

// Requested queue sizes; the backend may round up (reported back in QpView).
struct QpCaps {
  uint32_t max_send_wr = 128;
  uint32_t max_recv_wr = 128;
  uint32_t max_send_sge = 1;
  uint32_t max_recv_sge = 1;
  uint32_t max_inline_data = 0;
  // UD only, a creation flag: what the QP sends to a multicast group it is attached to does
  // not come back to it (IBV_QP_CREATE_BLOCK_SELF_MCAST_LB). Other QPs, on its device or
  // elsewhere, still receive it.
  bool block_self_multicast_loopback = false;
};

// A device in software sleeps between doorbells (a ConnectX does not need this): while it
// sleeps `*asleep` is non-zero, and a driver that rings it writes the eventfd `kick_fd` after
// its register write (doorbell/device_wake.h). Null for hardware. Valid while the device is.
struct DeviceWakeView {
  const std::atomic<uint32_t>* asleep = nullptr;
  int kick_fd = -1;
};

// What the driver needs to post to a QP: the mlx5dv_qp view and what was granted.
struct QpView {
  mlx5dv_qp dv{};            // dbrec, sq{buf,wqe_cnt,stride}, rq{...}, bf{reg,size}
  uint32_t qpn = 0;
  bool bf_shared = false;    // the doorbell register is shared with other QPs
  QpCaps granted;            // after rounding
  DeviceWakeView wake;       // after every register write (doorbell)
};

struct CqView {
  mlx5dv_cq dv{};            // buf, dbrec, cqe_cnt, cqe_size, cq_uar, cqn
  DeviceWakeView wake;       // after every register write (arm)
};

// A shared receive queue (wqe/srq_wqe.h): its ring, doorbell record and number.
struct SrqView {
  mlx5dv_srq dv{};  // buf, dbrec, stride, head, tail, srqn
  uint32_t wqe_cnt = 0;
};

enum class AsyncEventType : uint8_t {
  comm_est,          // first inbound request on a QP in RTR (IBV_EVENT_COMM_EST)
  sq_drained,        // SQD reached with the SQ empty
  last_wqe_reached,
  qp_fatal,          // local work queue catastrophic error (IBV_EVENT_QP_FATAL)
  qp_req_err,        // invalid request local work queue error
  qp_access_err,     // local access violation work queue error
  cq_err,            // CQ overrun (IBV_EVENT_CQ_ERR)
  device_fatal,      // IBV_EVENT_DEVICE_FATAL
  port_active,
  port_err,
  srq_limit_reached,  // an armed SRQ fell below its limit (IBV_EVENT_SRQ_LIMIT_REACHED)
};
const char* async_event_name(AsyncEventType t) noexcept;

struct AsyncEvent {
  AsyncEventType type;
  uint32_t qpn = 0;  // QP events
  uint32_t cqn = 0;  // CQ events
  uint32_t srqn = 0;  // SRQ events
};

// Called by the driver's poll and by blocking helpers; lets a backend without hardware make
// progress on the caller's thread (deterministic tests). Null for real hardware.
struct ProgressHook {
  void (*fn)(void* ctx) = nullptr;
  void* ctx = nullptr;
  void operator()() const {
    if (fn) fn(ctx);
  }
};

class Pd {
 public:
  virtual ~Pd() = default;
  virtual uint32_t pdn() const = 0;
};

class Mr {
 public:
  virtual ~Mr() = default;
  virtual uint32_t lkey() const = 0;
  virtual uint32_t rkey() const = 0;
  virtual void* addr() const = 0;
  virtual size_t length() const = 0;
};

class Cq {
 public:
  virtual ~Cq() = default;
  virtual const CqView& view() const = 0;
};

class Srq {
 public:
  virtual ~Srq() = default;
  virtual const SrqView& view() const = 0;
  // Arms the limit event: SRQ_LIMIT_REACHED once fewer than `limit` WQEs remain posted
  // (ibv_modify_srq with IBV_SRQ_LIMIT); 0 disarms.
  virtual Status arm_limit(uint32_t limit) = 0;
};

class Qp {
 public:
  virtual ~Qp() = default;
  virtual const QpView& view() const = 0;
  // Performs one IB state transition with the attributes in `mask`. The error names the QP,
  // the transition and the reason: "qp 0x1c: modify RTR->RTS: sq_psn not set".
  virtual Status modify(const QpAttr& attr, uint32_t mask) = 0;
  virtual QpState state() const = 0;  // the device's view
  // Sets or clears (kbps 0) the QP's send rate limit, in any state. The error names the QP
  // and the bound a value broke; a backend without packet pacing says so (Errc::unsupported).
  virtual Status set_rate_limit(const RateLimit& limit) = 0;
  // UD multicast (ibv_attach_mcast): from attach on, the QP receives the datagrams sent to
  // the group `mgid` names, in any state that receives; detach (or destroying the QP) ends
  // it. On RoCE v2 an IPv4 group's GID is its IPv4-mapped address (::ffff:239.1.2.3), an
  // IPv6 group's the address itself (ff0e::1:2). Attaching twice is not an error; a QP that is
  // not UD, a GID that is not a group's, a group of the other IP version than the device's
  // and a detach of a group not attached are (Errc::invalid_argument), and the device's limits
  // (DeviceCaps::max_mcast_*) give Errc::no_resources.
  virtual Status attach_multicast(const Gid& mgid) = 0;
  virtual Status detach_multicast(const Gid& mgid) = 0;
  // COMM_EST where it is learnt (IBA 11.6.3.1: the first request reached the QP in RTR):
  // `fn(ctx)` is called once per COMM_EST the QP raises, on the thread that learns it, with
  // none of the backend's locks held (it may modify the QP), besides the asynchronous event
  // the application reads. Null `fn` stops the calls; one already under way may still
  // happen, so `ctx` must stay valid or be a token the callee looks up (the driver's is).
  // Returns false if the backend cannot call back (the event then reaches the driver only
  // through Device::next_async_event).
  virtual bool set_comm_est_notifier(void (*fn)(void* ctx), void* ctx) {
    (void)fn;
    (void)ctx;
    return false;
  }
};

// Completion events (IBA 11.4.2.2, "Request Completion Notification"; ibv_comp_channel). A
// channel gathers the events of the CQs created on it (Device::create_evented_cq). The
// consumer arms a CQ itself, with mlx5's arm sequence (doorbell::arm_cq: the arm word in
// dbrec[MLX5_CQ_ARM_DB], then the same word and the CQN at cq_uar + MLX5_CQ_DOORBELL), and
// the device raises one event per arm: at once if a CQE at or past the armed consumer index
// is already in the ring, else with the first such CQE.
class CompletionChannel {
 public:
  virtual ~CompletionChannel() = default;
  // Readable (poll, epoll) while an event is pending.
  virtual int fd() const = 0;
  // Takes one pending event: the CQN of the CQ that raised it. False when none is pending.
  virtual bool next_event(uint32_t* cqn) = 0;
  // Drops the events of `cqn` still pending (its CQ was destroyed).
  virtual void forget(uint32_t cqn) = 0;
};

// An XRC domain (ibv_xrcd): what ties XRC target QPs to the XRC SRQs their requests may name.
class Xrcd {
 public:
  virtual ~Xrcd() = default;
  virtual uint32_t xrcdn() const = 0;
};

class ConnectionManager;  // rnicdv/hw/cm.h

class Device {
 public:
  virtual ~Device() = default;
  virtual const DeviceInfo& info() const = 0;

  virtual Result<std::unique_ptr<Pd>> alloc_pd() = 0;
  // Registers [addr, addr+length) with `access` (access::*). Local read is always allowed.
  virtual Result<std::unique_ptr<Mr>> reg_mr(Pd& pd, void* addr, size_t length,
                                             uint32_t access) = 0;
  // A CQ of at least `min_cqe` entries (rounded up to a power of two).
  virtual Result<std::unique_ptr<Cq>> create_cq(uint32_t min_cqe) = 0;
  // Completion events: a channel, and a CQ whose events go to it (a channel of this device).
  virtual Result<std::unique_ptr<CompletionChannel>> create_completion_channel() = 0;
  virtual Result<std::unique_ptr<Cq>> create_evented_cq(uint32_t min_cqe,
                                                        CompletionChannel& channel) = 0;
  // An RC QP in RESET.
  virtual Result<std::unique_ptr<Qp>> create_qp(Pd& pd, Cq& send_cq, Cq& recv_cq,
                                                const QpCaps& caps) = 0;
  // A shared receive queue of at least `max_wr` WQEs of `max_sge` entries, and an RC QP that
  // takes its receives from one (its own receive queue is empty; caps.max_recv_* ignored).
  virtual Result<std::unique_ptr<Srq>> create_srq(Pd& pd, uint32_t max_wr, uint32_t max_sge) = 0;
  virtual Result<std::unique_ptr<Qp>> create_qp_on_srq(Pd& pd, Cq& send_cq, Cq& recv_cq,
                                                       Srq& srq, const QpCaps& caps) = 0;
  // A UD QP in RESET: its send WQEs carry a datagram segment (an Ah's address vector, the
  // destination QP and Q_Key), and each receive starts with the packet's 40-byte GRH.
  virtual Result<std::unique_ptr<Qp>> create_ud_qp(Pd& pd, Cq& send_cq, Cq& recv_cq,
                                                   const QpCaps& caps) = 0;
  // A UC QP in RESET, with its receives from `srq` if not null (then caps.max_recv_* are
  // ignored). Its send WQEs are RC's SEND and WRITE layouts; a READ or an atomic on it
  // completes with a local QP operation error.
  virtual Result<std::unique_ptr<Qp>> create_uc_qp(Pd& pd, Cq& send_cq, Cq& recv_cq, Srq* srq,
                                                   const QpCaps& caps) = 0;
  // XRC (QpType): a domain; an SRQ of it whose receives complete on `cq`, its memory that of
  // `pd`; an initiator QP (send queue only, completing on `send_cq`); and a target QP of the
  // domain. A backend without XRC refuses each with unsupported, naming the device. Defined
  // here, so that the class keeps no key function (its vtable is emitted where it is used, as
  // before these were added).
  virtual Result<std::unique_ptr<Xrcd>> open_xrcd() { return no_xrc("open_xrcd"); }
  virtual Result<std::unique_ptr<Srq>> create_xrc_srq(Xrcd&, Pd&, Cq&, uint32_t, uint32_t) {
    return no_xrc("create_xrc_srq");
  }
  virtual Result<std::unique_ptr<Qp>> create_xrc_send_qp(Pd&, Cq&, const QpCaps&) {
    return no_xrc("create_xrc_send_qp");
  }
  virtual Result<std::unique_ptr<Qp>> create_xrc_recv_qp(Xrcd&) {
    return no_xrc("create_xrc_recv_qp");
  }
  // An address handle towards `attr.remote_gid` on port 1. The error names the device and
  // what the destination lacks (e.g. an address the fabric cannot reach).
  virtual Result<std::unique_ptr<Ah>> create_ah(Pd& pd, const AhAttr& attr) = 0;

  // Asynchronous events. `async_fd()` is readable (poll/epoll) while events are pending.
  virtual int async_fd() const = 0;
  virtual bool next_async_event(AsyncEvent* out) = 0;

  virtual ProgressHook progress_hook() { return {}; }

  // A port counter now, named as the kernel's sysfs names it under ports/<port>/
  // ("counters/port_xmit_data", "hw_counters/out_of_buffer"; perftest's -W takes these
  // names). A port or name the device does not have is invalid_argument, and the message
  // names the device and port, and for a simulated HCA lists the counters it keeps.
  virtual Result<uint64_t> read_port_counter(uint8_t port, const std::string& name) = 0;

  // The connection manager for this device's fabric (IB CM on the simulated fabric,
  // librdmacm on real devices). Owned by the device.
  virtual ConnectionManager* connection_manager() = 0;

 private:
  Status no_xrc(const char* op) const {
    return Status::error(Errc::unsupported, "%s: %s: this backend has no XRC", info().name.c_str(),
                         op);
  }
};

}  // namespace rnicdv::hw
