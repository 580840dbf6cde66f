// SPDX-License-Identifier: BSD-3-Clause
// The backend-side connection manager: control path only.
//
// Two backends implement it: the IB CM of the simulated fabric (hw/sim/src/cm, CM MADs on QP1
// over the simulated wire) and librdmacm for real devices (hw/mlx5/src/cm). The driver's
// connection API (rnicdv/connection.h) sits on top and owns the QP: the backend never moves a
// QP itself. It negotiates the QP's attributes and says, through qp_attr(), what to apply at
// each step (as rdma_init_qp_attr does), so that the driver's move to RTS (and with it the
// flush of work withheld in RTR) happens exactly where the IB CM flow puts it:
//
//   active:  connect() -> REQ ........ connect_response: RTR, RTS (flush), establish() -> RTU
//   passive: connect_request: INIT, RTR, accept() -> REP ... established (RTU or COMM_EST): RTS
//
// Events are queued per object (listener or connection) and read on the caller's thread with
// next_event(); event_fd() becomes readable when one may be pending (spurious wake-ups are
// possible: next_event() then returns false). Every method is thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "rnicdv/hw/device.h"
#include "rnicdv/hw/ip_address.h"
#include "rnicdv/status.h"

namespace rnicdv::hw {

// An HCA's IP address (either family) and a CM port, host order. The CM port space (rdma_cm's
// RDMA_PS_TCP or RDMA_PS_UDP) is independent of the UDP port the fabric uses. An unspecified
// address (0.0.0.0 or ::, the default) means "any address of this device" where one is bound.
struct CmAddress {
  IpAddress ip;
  uint16_t port = 0;
  bool operator==(const CmAddress&) const = default;
};
std::string cm_address_string(const CmAddress& a);  // "127.0.0.3:7471", "[fd00::2]:7471"

// Private data capacities (IBA 12.6, Tables 106-113; rdma_cm takes 36 bytes of the REQ's 92
// for its cma_hdr, Linux cma.c).
inline constexpr size_t kReqPrivateDataMax = 56;
inline constexpr size_t kRepPrivateDataMax = 196;
inline constexpr size_t kRejPrivateDataMax = 148;
// SIDR (IBA 12.11): rdma_cm takes 36 of the SIDR_REQ's 216 bytes; the SIDR_REP's 136 are the
// consumer's.
inline constexpr size_t kSidrReqPrivateDataMax = 180;
inline constexpr size_t kSidrRepPrivateDataMax = 136;

// rdma_cm's port spaces, the service ID's bits 16-31 (IBA Annex A11): a request reaches only a
// listener of its own space. `tcp` (RDMA_PS_TCP) connects RC QPs with REQ, REP and RTU; `udp`
// (RDMA_PS_UDP) resolves a UD QP's QPN and Q_Key with SIDR_REQ and SIDR_REP.
enum class CmPortSpace : uint16_t { tcp = 0x0106, udp = 0x0111 };

// The Q_Key of rdma_cm's UDP port space (RDMA_UDP_QKEY).
inline constexpr uint32_t kRdmaUdpQkey = 0x01234567;

// SIDR_REP status codes (IBA 12.11.2, Table 120; Linux ib_cm.h enum ib_cm_sidr_status).
namespace sidr_status {
inline constexpr uint8_t success = 0;
inline constexpr uint8_t unsupported = 1;  // no service at that ID
inline constexpr uint8_t reject = 2;       // the service refused
inline constexpr uint8_t no_qp = 3;
inline constexpr uint8_t redirect = 4;
inline constexpr uint8_t unsupported_version = 5;
}  // namespace sidr_status
const char* sidr_status_name(uint8_t status) noexcept;  // "service ID not supported", ...

// The listen backlog: how many connection requests may wait (REQ received, neither accepted
// nor rejected yet) before further REQs are dropped. The default and the ceiling are the
// kernel's: rdma_ucm's max_backlog (ucma.c; net.rdma_ucm.max_backlog, 1024), which ucma_listen
// also applies to a backlog of 0, a negative one or one above it.
inline constexpr int kDefaultListenBacklog = 1024;
constexpr int listen_backlog(int requested) noexcept {
  return requested > 0 && requested < kDefaultListenBacklog ? requested : kDefaultListenBacklog;
}

// IB CM REJ reason codes (IBA 12.6.7.2, Table 108; Linux ib_cm.h enum ib_cm_rej_reason).
namespace reject_reason {
inline constexpr uint16_t no_qp = 1;
inline constexpr uint16_t no_resources = 3;
inline constexpr uint16_t timeout = 4;
inline constexpr uint16_t unsupported = 5;
inline constexpr uint16_t invalid_comm_id = 6;
inline constexpr uint16_t invalid_service_id = 8;  // nothing listens on that port
inline constexpr uint16_t invalid_transport_type = 9;
inline constexpr uint16_t stale_connection = 10;
inline constexpr uint16_t invalid_mtu = 26;
inline constexpr uint16_t insufficient_responder_resources = 27;
inline constexpr uint16_t consumer_defined = 28;  // rdma_reject()
inline constexpr uint16_t invalid_class_version = 31;
}  // namespace reject_reason
const char* reject_reason_name(uint16_t reason) noexcept;  // "invalid service ID", ...

// What one side offers for its QP. The values on the wire (REQ, REP) and what the backend
// derives from the peer's offer come back through CmConnection::qp_attr().
struct CmQpOffer {
  uint32_t qpn = 0;
  Mtu path_mtu = Mtu::mtu4096;       // active side: capped by the device's active MTU
  uint8_t responder_resources = 16;  // READ/atomic this side answers (max_dest_rd_atomic)
  uint8_t initiator_depth = 16;      // READ/atomic this side issues (max_rd_atomic)
  uint8_t retry_count = 7;           // transport retries the peer should use (3 bits)
  uint8_t rnr_retry_count = 7;       // RNR retries the peer should use; 7 = infinite
  uint8_t local_ack_timeout = 14;    // active side: 4.096 us * 2^t, both sides use it
  bool srq = false;                  // the QP takes its receives from an SRQ (REQ/REP bit)
  // Active side: the primary path's traffic class (the TOS byte), hop limit (0: 64), flow
  // label (20 bits) and SL (4 bits), which the REQ carries. The passive side's qp_attr(RTR)
  // gives the REQ's, as Linux's CM does (cm_format_paths_from_req); the active side's its own.
  uint8_t traffic_class = 0;
  uint8_t hop_limit = 64;
  uint32_t flow_label = 0;
  uint8_t sl = 0;
  // SIDR only: the UD QP's Q_Key, which the SIDR_REP carries (accept on the passive side).
  uint32_t qkey = 0;
};

struct CmConnectParams {
  CmAddress remote;
  CmQpOffer qp;
  std::vector<uint8_t> private_data;  // at most kReqPrivateDataMax bytes
  // Whole budget for the REQ stage. The REQ's CM response timeout is chosen so that
  // max_cm_retries + 1 tries fit in it (IBA 12.7.27).
  uint32_t timeout_ms = 10'000;
  uint8_t max_cm_retries = 15;
  // The source CM port carried in rdma_cm's header (cma_hdr); 0: the backend picks an
  // ephemeral one, as rdma_resolve_addr does for an unbound ID.
  uint16_t local_port = 0;
  // `udp`: a SIDR_REQ instead of a REQ (private data at most kSidrReqPrivateDataMax bytes;
  // `qp` is not sent, and its QPN may be 0). Its answer is the connection's only event:
  // connect_response with the peer's QPN and Q_Key, or unreachable (a SIDR_REP that refused,
  // with its status, or none within the timeout). Nothing is held afterwards: there is no
  // establish or disconnect, and destroying the connection sends nothing.
  CmPortSpace space = CmPortSpace::tcp;
};

struct CmAcceptParams {
  CmQpOffer qp;                       // qpn, responder_resources, initiator_depth, rnr_retry_count
  std::vector<uint8_t> private_data;  // at most kRepPrivateDataMax bytes
};

// The peer's offer as it arrived (REQ or REP fields).
struct CmPeerOffer {
  uint32_t qpn = 0;
  uint32_t start_psn = 0;
  Mtu path_mtu = Mtu::mtu1024;  // REQ only
  uint8_t responder_resources = 0;
  uint8_t initiator_depth = 0;
  uint8_t retry_count = 0;  // REQ only
  uint8_t rnr_retry_count = 0;
  uint64_t ca_guid = 0;
  bool srq = false;  // the peer's QP receives from an SRQ
  uint32_t qkey = 0;  // SIDR_REP only: the peer UD QP's Q_Key
};

enum class CmEventType : uint8_t {
  // Listener: a REQ matched; `request` is the passive connection, in REQ_RCVD.
  connect_request,
  // Active: the REP arrived. The driver moves the QP to RTR and RTS, then calls establish().
  connect_response,
  // Passive: the RTU arrived, or a forwarded COMM_EST stood in for it. Exactly once.
  established,
  rejected,      // a REJ arrived; reject_reason and private_data
  unreachable,   // nothing answered: REQ retries exhausted, or no route to the address
  timeout,       // the peer answered but the handshake did not finish in time
  disconnected,  // DREQ received (the DREP is sent), DREP received, or DREQ retries exhausted
  error,         // a local failure; `detail` says what
};
const char* cm_event_type_name(CmEventType t) noexcept;  // "CONNECT_REQUEST", ...

class CmConnection;

struct CmEvent {
  CmEventType type = CmEventType::error;
  uint16_t reject_reason = 0;
  // The message's private data field as received, whole (the wire carries no length): the 56
  // consumer bytes of a REQ, 196 of a REP, 148 of a REJ; empty for other events.
  std::vector<uint8_t> private_data;
  CmPeerOffer peer;                       // connect_request, connect_response
  CmAddress remote;                       // the peer's address and CM port
  std::unique_ptr<CmConnection> request;  // connect_request only
  std::string detail;                     // readable reason, e.g. "no REP after 16 REQ attempts"
  // SIDR (a request or response of the UDP port space). For `unreachable` after a SIDR_REP,
  // sidr_status holds its status (hw::sidr_status); 0 when no SIDR_REP came.
  bool sidr = false;
  uint8_t sidr_status = 0;
};

class CmConnection {
 public:
  // Destroying a connection behaves as IB CM's destroy: a REJ while connecting, a DREQ when
  // established. The backend keeps what it needs (TIMEWAIT, DREQ retries) on its own.
  virtual ~CmConnection() = default;

  virtual int event_fd() const = 0;
  virtual bool next_event(CmEvent* out) = 0;

  // Attributes for moving the QP to `target` (INIT, RTR or RTS), from what was negotiated,
  // as rdma_init_qp_attr(): fills `attr` and sets `*mask` (qp_attr::*, including state).
  virtual Status qp_attr(QpState target, QpAttr* attr, uint32_t* mask) const = 0;

  // Passive, after connect_request and with the QP in RTR: sends the REP. For a SIDR request:
  // the SIDR_REP with status success, `params.qp.qpn` and `params.qp.qkey` (the UD QP in any
  // state), and at most kSidrRepPrivateDataMax bytes of private data.
  virtual Status accept(const CmAcceptParams& params) = 0;
  // Either side before the connection is established: sends a REJ. A SIDR request is answered
  // with a SIDR_REP of status reject (the reason is not sent), as destroying it unanswered is.
  virtual Status reject(uint16_t reason, std::span<const uint8_t> private_data) = 0;
  // Active, after connect_response and with the QP in RTS: sends the RTU (rdma_establish).
  virtual Status establish() = 0;
  // Passive: the QP raised COMM_EST. Treated as an RTU (rdma_notify, ib_cm_notify): the
  // connection reports `established` once, whichever of the two comes first. Returns ok if
  // the connection was already established.
  virtual Status notify_comm_est() = 0;
  // Passive: `fn(ctx)` is called once when the connection becomes established (the RTU
  // arrived, or notify_comm_est()), on whichever thread the backend learns it, with none of
  // the backend's locks held and before the `established` event can be read. The driver moves
  // the QP to RTS there, so that work withheld in RTR is released without waiting for the
  // application to read the event. Returns false if the backend cannot call back (the
  // driver then moves the QP when the application reads the event).
  virtual bool set_established_notifier(void (*fn)(void* ctx), void* ctx) {
    (void)fn;
    (void)ctx;
    return false;
  }
  // Sends a DREQ (or the DREP to a DREQ already received). `disconnected` follows.
  virtual Status disconnect() = 0;

  virtual CmAddress local_address() const = 0;
  virtual CmAddress remote_address() const = 0;
  // "cm 127.0.0.2:40001->127.0.0.3:7471", for error messages.
  virtual std::string name() const = 0;
};

class CmListener {
 public:
  virtual ~CmListener() = default;  // stops listening; pending requests are rejected
  virtual int event_fd() const = 0;
  virtual bool next_event(CmEvent* out) = 0;  // connect_request events
  virtual CmAddress address() const = 0;
  // A new backlog (listen_backlog() applies), as rdma_listen on a listening ID sets it.
  // Requests already waiting stay; new ones are dropped while as many wait.
  virtual Status set_backlog(int backlog) = 0;
};

class ConnectionManager {
 public:
  virtual ~ConnectionManager() = default;

  // Listens on `local.port` of this device. `local.ip` is the device's address or unspecified
  // (any address of this device). At most `backlog` requests (listen_backlog() applies) wait for
  // the application at once; REQs beyond it are dropped, as the kernel's CM drops them, so
  // that the requester's REQ retries find room later. Errors: address_in_use,
  // invalid_argument (not this device's address).
  virtual Result<std::unique_ptr<CmListener>> listen(const CmAddress& local, int backlog) = 0;
  Result<std::unique_ptr<CmListener>> listen(const CmAddress& local) {
    return listen(local, kDefaultListenBacklog);
  }
  // Listens for SIDR requests (rdma_cm's RDMA_PS_UDP) on `local.port`: connect_request events
  // with `sidr` set. The UDP port space is apart from the TCP one: the same port may have a
  // listener in each. Backends without SIDR say so (unsupported).
  virtual Result<std::unique_ptr<CmListener>> listen_ud(const CmAddress& local, int backlog) {
    (void)backlog;
    return Status::error(Errc::unsupported, "listen %s: SIDR (UD port space): not implemented",
                         cm_address_string(local).c_str());
  }
  // Sends a REQ (or a SIDR_REQ, by params.space) to `params.remote`. Events follow on the
  // returned connection.
  virtual Result<std::unique_ptr<CmConnection>> connect(const CmConnectParams& params) = 0;
  // The address connections from this device come from, IPv4 or IPv6: the CM runs over the
  // device's one IP version.
  virtual IpAddress local_address() const = 0;
};

}  // namespace rnicdv::hw
