// SPDX-License-Identifier: BSD-3-Clause
// The state behind Connection, ConnectionRequest and Listener (connection*.cc only).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "device_core.h"
#include "rnicdv/connection.h"
#include "rnicdv/detail/qp_core.h"
#include "rnicdv/hw/cm.h"

namespace rnicdv::detail {

struct ConnectionCore {
  ~ConnectionCore();

  // Applies one backend event to the QP and turns it into what the application sees; nullopt
  // for an event the application does not see.
  std::optional<ConnectionEvent> apply(hw::CmEvent& ev);
  // Moves the QP to `target` with the backend's attributes (and the options' local ones).
  Status move_qp(hw::QpState target);
  // Any failure: the QP to ERR (flush), the connection closed. Returns the move's status.
  Status fail_qp();
  ConnectionEvent failure(ConnectionEventType type, Errc code, const std::string& why);

  std::shared_ptr<DeviceCore> device;
  QpCore* qp = nullptr;
  std::unique_ptr<hw::CmConnection> cm;
  ConnectionOptions options;
  bool active = false;
  ConnectionState state = ConnectionState::connecting;
  uint64_t comm_est_token = 0;  // registered while the passive QP may raise COMM_EST
  std::string name;

  // Release at establishment (ConnectionOptions::release_at_establishment): the backend's
  // notifier moves the QP to RTS from its own thread; apply() then only reports the event.
  // move_mu orders the two moves.
  Status release_at_establishment();
  uint64_t established_token = 0;
  std::mutex move_mu;
  bool rts_reached = false;  // under move_mu
};

struct RequestCore {
  std::shared_ptr<DeviceCore> device;
  std::unique_ptr<hw::CmConnection> cm;
  std::vector<uint8_t> private_data;
  hw::CmPeerOffer peer;
  hw::CmAddress remote;
  bool datagram = false;  // a SIDR request (Listener::listen_datagram)
};

struct ListenerCore {
  std::shared_ptr<DeviceCore> device;
  std::unique_ptr<hw::CmListener> cm;
};

// "conn qp 0x101 127.0.0.2:40001->127.0.0.3:7471"
std::string connection_name(uint32_t qpn, const hw::CmConnection& cm);

// "127.0.0.3:7471", "[fd00::2]:7471": an address as given and a port, for messages.
std::string address_port(const std::string& address, uint16_t port);

// Parses an IPv4 or IPv6 address ("127.0.0.3", "fd00::2"). "" (and "0.0.0.0" or "::") give
// the unspecified address when `allow_any`, and are refused otherwise.
Result<hw::IpAddress> parse_address(const std::string& address, bool allow_any,
                                    const char* what);

bool wait_readable(int fd, int timeout_ms);

// Runs `try_get` (returning an optional) until it yields or `timeout` (real time) passes,
// driving the device's progress hook and sleeping on `fd` in between.
template <class TryGet>
auto wait_for(DeviceCore& dev, int fd, std::chrono::milliseconds timeout, TryGet try_get)
    -> decltype(try_get()) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (int spins = 0;; ++spins) {
    if (auto got = try_get()) return got;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return std::nullopt;
    // A backend with a progress hook (the simulator) advances on this thread: spin a little
    // before sleeping; hardware only needs the fd.
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1;
    const int slice =
        dev.progress.fn ? (spins < 64 ? 0 : 1) : static_cast<int>(std::min<int64_t>(left, 100));
    wait_readable(fd, slice);
  }
}

// COMM_EST forwarding: the driver calls a QP's handler with a void* context, possibly
// concurrently with the connection's destruction, so the context is a token looked up in a
// registry under a lock rather than a pointer.
uint64_t register_comm_est(hw::CmConnection* cm);
void unregister_comm_est(uint64_t token);
void forward_comm_est(void* token);

// Release at establishment: the same kind of registry, of passive connections.
uint64_t register_established(ConnectionCore* core);
void unregister_established(uint64_t token);
void on_established(void* token);

// The connection manager connects RC QPs only: a UD or UC QP is refused, naming `what`.
Status check_connectable(const QpCore& q, const char* what);

}  // namespace rnicdv::detail
