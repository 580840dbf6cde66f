// SPDX-License-Identifier: BSD-3-Clause
// Connections: the IB CM flow (REQ, REP, RTU; REJ; DREQ, DREP) driving a QueuePair's states
// and, with them, the early-post gate (docs/driver.md, "Early posting": release
// and failure). On the simulated fabric the CM speaks IB CM MADs on QP1; on real devices it is
// librdmacm with the QP managed here, not by librdmacm. See docs/connections.md.
//
//   passive (Listener)                              active (Connection::connect)
//   CONNECT_REQUEST <-------------- REQ ----------- QP RESET -> INIT
//   accept(): QP RESET -> INIT -> RTR
//             REP ----------------------------------> QP RTR -> RTS (flush), then RTU
//   ... the QP sits in RTR: sends posted now are withheld ...          ESTABLISHED
//   RTU (or COMM_EST) <----------- RTU -------------
//   QP RTR -> RTS: one doorbell releases the batch; ESTABLISHED
//
// Any failure (REJ, CM timeout, no answer, DREQ) moves the QP to ERR, which completes every
// withheld WR with IBV_WC_WR_FLUSH_ERR, in posting order.
//
// Events are delivered on the caller's thread by poll_event()/wait_event(); event_fd() becomes
// readable (poll/epoll) when one may be pending. Each event has already moved the QP when the
// caller sees it. A connection's events are read by one thread at a time.
//
// COMM_EST (the first request reaching the passive QP while it is still in RTR, for example
// because the RTU was lost) reaches the connection through Device::process_events(): a
// passive application processes the device's async events (Device::async_fd()) alongside the
// connection's; the connection then reports ESTABLISHED, once, whichever of RTU and COMM_EST
// comes first.
//
// The QueuePair must outlive the Connection bound to it, and must not be modified by the
// application while the connection drives it (until DISCONNECTED or a failure).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "rnicdv/hw/cm.h"
#include "rnicdv/status.h"

namespace rnicdv {

class Device;
class QueuePair;

namespace detail {
struct ConnectionCore;
struct RequestCore;
struct ListenerCore;
}  // namespace detail

// What this side's QP uses and offers the peer; the CM negotiates the rest (IBA 12.7).
struct ConnectionOptions {
  // Connect: how long the REQ stage may take before UNREACHABLE/TIMEOUT (the REQ's CM
  // response timeout is chosen so that max_cm_retries + 1 tries fit in it).
  std::chrono::milliseconds timeout{10'000};
  uint8_t max_cm_retries = 15;
  hw::Mtu path_mtu = hw::Mtu::mtu4096;  // active side; capped by the device's active MTU
  uint8_t responder_resources = 16;     // READ/atomic this side answers (max_dest_rd_atomic)
  uint8_t initiator_depth = 16;         // READ/atomic this side issues (max_rd_atomic)
  uint8_t retry_count = 7;              // transport retries (active side sets both)
  uint8_t rnr_retry_count = 7;          // RNR retries the peer uses toward us; 7 = infinite
  uint8_t ack_timeout = 14;             // local ACK timeout, 4.096 us * 2^t (active sets both)
  uint8_t min_rnr_timer = 12;           // RNR NAK timer this side advertises
  // What this side's packets carry (its QP's address vector at RTR; hw::QpAttr): the IP
  // header's TOS byte (DSCP in bits 7..2, ECN in 1..0), the TTL or hop limit, the IPv6 flow
  // label (20 bits; an IPv4 header has no field for it), the service level; and the P_Key
  // index (INIT). The backend refuses what is out of range, naming the value.
  // The active side's four also go in the REQ's primary path. A passive side takes the REQ's
  // (as Linux's CM gives them to rdma_cm's passive QP, so both directions of a connection
  // carry the class the client chose) unless path_from_request is false, when it uses its own.
  uint8_t traffic_class = 0;
  uint8_t hop_limit = 64;
  uint32_t flow_label = 0;
  uint8_t sl = 0;
  bool path_from_request = true;
  uint16_t pkey_index = 0;
  uint32_t remote_access =              // INIT: what the peer may do to this QP's MRs
      hw::access::remote_write | hw::access::remote_read | hw::access::remote_atomic;
  // Passive: move the QP to RTS, releasing the work posted in RTR, the moment the backend
  // learns of the establishment (the RTU, or COMM_EST where the RTU was lost), on the thread
  // that learns it, rather than when the application reads the ESTABLISHED event. Needs a QP
  // whose threading allows another thread to move it (not Threading::single). The simulated
  // HCA calls back from its CM and its device thread; on a real device (librdmacm, which
  // delivers events only to whoever reads them) the backend starts one event thread per
  // device for as long as such connections exist (hw/mlx5/README.md). With false, RTS comes
  // with the event, and no thread is started.
  bool release_at_establishment = true;
};

enum class ConnectionEventType : uint8_t {
  connect_request,  // Listener only: `request` is set
  established,      // the QP is in RTS and withheld work has been released
  rejected,         // the peer sent a REJ: reject_reason, private_data
  unreachable,      // nobody answered the REQ
  timeout,          // the peer answered but the handshake did not finish in time
  disconnected,     // DREQ/DREP, or the peer vanished while disconnecting
  error,            // a local failure (e.g. the QP could not be moved); see status
};
const char* connection_event_name(ConnectionEventType t) noexcept;  // "ESTABLISHED", ...

enum class ConnectionState : uint8_t {
  connecting,     // active: REQ sent, waiting for the REP
  accepted,       // passive: REP sent, QP in RTR (the early-post window)
  established,    // QP in RTS
  disconnecting,  // DREQ sent, waiting for the DREP
  closed,         // disconnected, rejected, timed out or failed: the QP is in ERR
};
const char* connection_state_name(ConnectionState s) noexcept;

class Connection;

// A REQ that reached a Listener. Answer it with accept() or reject(); destroying it
// unanswered rejects it (REJ 28, as rdma_cm does).
class ConnectionRequest {
 public:
  ConnectionRequest(ConnectionRequest&&) noexcept;
  ConnectionRequest& operator=(ConnectionRequest&&) noexcept;
  ~ConnectionRequest();

  // The REQ's private data field after rdma_cm's 36-byte header: always 56 bytes (the wire
  // carries no length; unused bytes are zero).
  const std::vector<uint8_t>& private_data() const;
  hw::CmAddress remote_address() const;
  hw::CmAddress local_address() const;
  const hw::CmPeerOffer& peer() const;  // the requester's QPN, MTU, rd_atomic, ...

  // Moves `qp` (RESET or INIT) to INIT and RTR with the negotiated attributes, then sends the
  // REP. ESTABLISHED follows when the RTU (or COMM_EST) arrives. The request is consumed.
  Result<Connection> accept(QueuePair& qp, std::span<const uint8_t> private_data = {},
                            const ConnectionOptions& options = {});
  // Sends a REJ (28, consumer defined, by default) with up to 148 bytes of private data. A
  // datagram service's request is refused with a SIDR_REP of status reject instead (the
  // reason is not carried; up to 136 bytes of private data).
  Status reject(uint16_t reason = hw::reject_reason::consumer_defined,
                std::span<const uint8_t> private_data = {});

  // A request to a datagram service (Listener::listen_datagram): a SIDR_REQ, whose private
  // data is 180 bytes. It is answered with accept_datagram(), not accept().
  bool datagram() const;
  // Answers a datagram service's request with the QPN of `qp` (a UD QP of the same device)
  // and the Q_Key its senders must use, and up to 136 bytes of private data. Nothing is
  // connected: the request is consumed, and the QP's state is the application's.
  Status accept_datagram(QueuePair& qp, uint32_t qkey,
                         std::span<const uint8_t> private_data = {});

 private:
  friend class Listener;
  explicit ConnectionRequest(std::unique_ptr<detail::RequestCore> core);
  std::unique_ptr<detail::RequestCore> core_;
};

struct ConnectionEvent {
  ConnectionEventType type = ConnectionEventType::error;
  uint16_t reject_reason = 0;  // rejected: IB CM REJ reason (hw::reject_reason)
  // The message's private data field, whole: a REP's 196 bytes (established, active side), a
  // REJ's 148 (rejected); empty otherwise. On the listener, see request->private_data().
  std::vector<uint8_t> private_data;
  // Why, naming the connection: "conn qp 0x101 127.0.0.2:40001->127.0.0.3:7471: rejected
  // by 127.0.0.3:7471: invalid service ID (...) (8)". Ok for established and connect_request.
  Status status;
  std::optional<ConnectionRequest> request;  // connect_request only
};

class Connection {
 public:
  // Sends a REQ for `qp` (RESET or INIT; moved to INIT now) to CM port `port` of the HCA at
  // `address`, IPv4 or IPv6 ("127.0.0.3", "fd00::2"; of the device's own IP version). Up to 56 bytes of private data. ESTABLISHED (the QP then in
  // RTS), REJECTED, UNREACHABLE or TIMEOUT follow.
  static Result<Connection> connect(QueuePair& qp, const std::string& address, uint16_t port,
                                    std::span<const uint8_t> private_data = {},
                                    const ConnectionOptions& options = {});

  Connection(Connection&&) noexcept;
  Connection& operator=(Connection&&) noexcept;
  // Not yet closed: the QP goes to ERR (flushing its work) and the peer is told (REJ or DREQ).
  ~Connection();

  // The next event, if any. Drives the simulated engine when it needs the caller's thread.
  std::optional<ConnectionEvent> poll_event();
  // Waits up to `timeout` (real time) for the next event.
  std::optional<ConnectionEvent> wait_event(std::chrono::milliseconds timeout);
  int event_fd() const;

  // Moves the QP to ERR (every outstanding and withheld WR completes with a flush error) and
  // sends a DREQ (or answers one). DISCONNECTED follows. Closed connections: no-op.
  Status disconnect();

  ConnectionState state() const;
  const std::string& name() const;  // "conn qp 0x101 127.0.0.2:40001->127.0.0.3:7471"
  hw::CmAddress local_address() const;
  hw::CmAddress remote_address() const;
  uint32_t qpn() const;

 private:
  friend class ConnectionRequest;
  explicit Connection(std::unique_ptr<detail::ConnectionCore> core);
  std::unique_ptr<detail::ConnectionCore> core_;
};

class Listener {
 public:
  // Listens on CM port `port` of `device`. `address` is the device's address (IPv4 or IPv6),
  // "0.0.0.0" for any IPv4 address of the device, "::" for any address, or "" for any of the
  // device's own IP version. `backlog`, as rdma_listen's: how many requests may wait
  // (received, neither accepted nor rejected) at once; 0, a negative value or one above
  // hw::kDefaultListenBacklog (1024, the kernel's default) means that default. REQs beyond it,
  // and beyond one source address's share of it, are dropped (no REJ) so that the requester
  // retries; a request not accepted within a few seconds is withdrawn (docs/connections.md).
  static Result<Listener> listen(Device& device, const std::string& address, uint16_t port,
                                 int backlog = hw::kDefaultListenBacklog);
  // A datagram service: listens on CM port `port` of rdma_cm's UDP port space, which is apart
  // from the connections' (the same port may have a listener of each kind). Its
  // CONNECT_REQUEST events carry requests with datagram() set (docs/connections.md, "UD
  // services: SIDR").
  static Result<Listener> listen_datagram(Device& device, const std::string& address,
                                          uint16_t port, int backlog = hw::kDefaultListenBacklog);

  Listener(Listener&&) noexcept;
  Listener& operator=(Listener&&) noexcept;
  ~Listener();  // requests not yet taken are rejected

  // CONNECT_REQUEST events (event.request set).
  std::optional<ConnectionEvent> poll_event();
  std::optional<ConnectionEvent> wait_event(std::chrono::milliseconds timeout);
  int event_fd() const;
  hw::CmAddress address() const;

 private:
  explicit Listener(std::unique_ptr<detail::ListenerCore> core);
  std::unique_ptr<detail::ListenerCore> core_;
};

// What a datagram service answered: where a UD QP sends to reach it.
struct DatagramService {
  hw::CmAddress address;  // the service's HCA and CM port
  uint32_t qpn = 0;
  uint32_t qkey = 0;
  std::vector<uint8_t> private_data;  // the SIDR_REP's private data field, whole (136 bytes)
};

// Asks the datagram service at CM port `port` of the HCA at `address` ("127.0.0.3", "fd00::2")
// for its QPN and Q_Key (a SIDR_REQ from `device`, with up to 180 bytes of private data), and
// waits up to `timeout` for the answer, sending the request again meanwhile. Errors:
// unreachable (no answer in time, or nothing listens in the UDP port space there: the status
// says which), rejected (the service refused), invalid_argument.
Result<DatagramService> resolve_datagram_service(
    Device& device, const std::string& address, uint16_t port,
    std::span<const uint8_t> private_data = {},
    std::chrono::milliseconds timeout = std::chrono::milliseconds{10'000});

}  // namespace rnicdv
