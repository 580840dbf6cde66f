// SPDX-License-Identifier: BSD-3-Clause
// The simulated fabric's wire: moves RoCEv2 datagrams between simulated HCAs.
//
// The device hands the wire a RoCEv2 UDP payload *without* its ICRC: BTH, extension headers,
// payload and pad. The wire is the link layer: it appends the ICRC (computed over the
// pseudo IPv4/UDP or IPv6/UDP header the frame would carry, rxe/RoCEv2 rules: IBA Annex A17,
// Linux rxe_icrc.c),
// applies seeded faults, writes the pcap, and on receive verifies the ICRC and lengths,
// strips the ICRC and delivers the datagram to the sink attached at the destination
// address. Frames with a bad ICRC, a runt length or no sink are dropped and counted.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "rnicdv/hw/ip_address.h"
#include "rnicdv/sim/sim.h"
#include "rnicdv/status.h"

namespace rnicdv::sim {

using hw::IpAddress;
using hw::SocketAddress;

// Where a RoCE v2 datagram comes from or goes to: an IPv4 or IPv6 address and a UDP port.
struct Endpoint {
  IpAddress ip;
  uint16_t port = 0;  // UDP port (4791 for RoCEv2 destinations)
  bool operator==(const Endpoint&) const = default;
  std::string to_string() const;  // "127.0.0.2:4791", "[fd00::1]:4791"
};

// "239.1.2.3", for messages about an IPv4 address in host order.
std::string ipv4_string(uint32_t ipv4);

// The IP header's per-packet fields a QP's address vector sets: the traffic class (IPv4's TOS
// byte; DSCP in bits 7..2, ECN in 1..0), the hop limit (IPv4's TTL) and, in an IPv6 header
// only, the flow label. The ICRC masks all three (IBA A17.3.3).
struct IpClass {
  uint8_t tos = 0;
  uint8_t ttl = 64;
  uint32_t flow_label = 0;  // 20 bits; IPv6 only
  bool operator==(const IpClass&) const = default;
};

// Source of time for the wire and the engine: virtual (deterministic) or CLOCK_MONOTONIC.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual uint64_t now_ns() const = 0;
};

class WireSink {
 public:
  virtual ~WireSink() = default;
  // `data` is BTH..pad, ICRC already verified and removed. Valid only during the call.
  virtual void on_datagram(const Endpoint& src, const Endpoint& dst, const uint8_t* data,
                           size_t len) = 0;
  // Nothing receives at `peer` any more: a frame this endpoint sent there was refused (on the
  // UDP wire, an ICMP port unreachable: the socket bound to that address is closed, because
  // the process that had it ended). Called where on_datagram is, from inside poll().
  virtual void on_unreachable(const Endpoint& peer) { (void)peer; }
};

// frames_tx/bytes_tx count the datagrams transmit() accepted (BTH..pad, without ICRC);
// frames_rx/bytes_rx those delivered to a sink. In process, every accepted datagram is
// delivered, dropped by a fault (faults_dropped), counted under exactly one dropped_* counter
// (a duplicate counts as two frames from then on), or still held back. Over UDP the receive
// side counts in the receiving process, and a datagram sent to an address nobody has bound
// is lost uncounted, as the kernel drops it.
struct WireCounters {
  uint64_t frames_tx = 0, frames_rx = 0;
  uint64_t bytes_tx = 0, bytes_rx = 0;
  uint64_t dropped_icrc = 0;       // failed ICRC check
  uint64_t dropped_malformed = 0;  // runt / oversize / length mismatch (sent or received)
  uint64_t dropped_no_sink = 0;    // no device at the destination address (or it detached)
  uint64_t faults_dropped = 0, faults_duplicated = 0, faults_reordered = 0;
  uint64_t faults_corrupted = 0, faults_delayed = 0;
  uint64_t dropped_queue_full = 0;  // receive ring or holding area full (a link's buffer)
  uint64_t dropped_send_error = 0;  // the UDP socket refused the datagram (EAGAIN, ENOBUFS...)
  // UDP: ICMP unreachables for datagrams sent to an address whose port is closed (its
  // process ended), each reported to the sender's sink (WireSink::on_unreachable).
  uint64_t peers_unreachable = 0;
};

namespace faults {
class FaultSchedule;
}

struct WireConfig {
  FaultConfig faults;
  // The fabric's fault specification (faults/schedule.h), applied after `faults`; null: none.
  faults::FaultSchedule* schedule = nullptr;
  uint64_t seed = 1;
  std::string pcap_path;  // empty: no capture
  uint16_t udp_port = 4791;
  const Clock* clock = nullptr;
  std::string dpdk_args;  // DPDK wire: EAL arguments and the wire's own (dpdk_args.h)
};

// Thread safety: transmit() may be called from any thread concurrently; poll(local) for a
// given endpoint is called by one thread at a time (its device's engine); attach/detach are
// serialized with everything else by the wire.
class Wire {
 public:
  virtual ~Wire() = default;
  virtual WireKind kind() const = 0;

  // Makes `local` reachable and delivers its datagrams to `sink`. The UDP wire binds a socket
  // to local.ip:local.port (only that address; an IPv6 link-local one on the interface that
  // holds it). When local.ip is unspecified (0.0.0.0 or ::) the wire picks an IPv4
  // address (UDP: the first 127.0.0.x, x >= 2, whose port is free) and returns it.
  virtual Result<Endpoint> attach(Endpoint local, WireSink* sink) = 0;
  // Waits until no other thread is using `local`, so it must not be called from `local`'s own
  // sink. Frames still queued or held for or from `local` are dropped and counted.
  virtual void detach(Endpoint local) = 0;

  // Multicast groups (224.0.0.0/4, or ff00::/8 from an IPv6 endpoint). From join_group on,
  // datagrams sent to `group` also reach `local`'s sink, with on_datagram's `dst` the group: every
  // endpoint joined gets its own copy, the sender's own included, as a switch and the IP stack's
  // multicast loopback deliver them. An endpoint joins a group once (its device counts its QPs); a
  // second join, or a leave of a group not joined, is an error. Leaving drops what was queued
  // for the endpoint from the group no earlier than leave returns; detach leaves every group.
  // A datagram sent to a group nobody joined goes nowhere, and is not a drop. Wires that carry
  // no multicast refuse the join (Errc::unsupported).
  virtual Status join_group(const Endpoint& local, const IpAddress& group);
  virtual Status leave_group(const Endpoint& local, const IpAddress& group);

  // Sends one datagram (BTH..pad, no ICRC; at most 4096 + 64 bytes). Never blocks; a frame
  // the wire cannot queue is dropped and counted, as a link would.
  // `cls` is what the frame's IP header carries (on the UDP wire, the kernel's header).
  virtual void transmit(const Endpoint& src, const Endpoint& dst, const uint8_t* data,
                        size_t len, IpClass cls) = 0;
  void transmit(const Endpoint& src, const Endpoint& dst, const uint8_t* data, size_t len) {
    transmit(src, dst, data, len, IpClass{});
  }

  // Delivers to `local`'s sink up to `budget` datagrams addressed to `local` whose delivery
  // time has come, and sends any of `local`'s held-back (delayed) frames that are due.
  // Returns the number delivered. Each device's engine polls its own endpoint, so a sink
  // only ever runs on the thread that polls its endpoint.
  virtual size_t poll(const Endpoint& local, size_t budget) = 0;

  // Earliest time a held-back (delayed/reordered) frame to or from `local` becomes due, or
  // UINT64_MAX.
  virtual uint64_t next_delivery_ns(const Endpoint& local) const = 0;

  // A file descriptor that becomes readable when datagrams for `local` arrive (UDP: its
  // socket, or an epoll set of it and its groups' sockets), or -1 when the wire has none
  // (in-process). It may change when `local` joins a group: read it again before each wait.
  virtual int wait_fd(const Endpoint& local) const {
    (void)local;
    return -1;
  }
  // True when frames for this process can arrive without a wait fd or a kick (a DPDK port,
  // whose receive ring only a poll sees): a sleeping device must wake on its own to look.
  virtual bool polled() const { return false; }

  virtual WireCounters counters() const = 0;

  // What carries `local` beyond its address, for device descriptions (the DPDK wire: port,
  // driver and MAC), or "" when there is nothing more to say.
  virtual std::string endpoint_detail(const Endpoint& local) const {
    (void)local;
    return "";
  }
};

Result<std::unique_ptr<Wire>> make_inproc_wire(const WireConfig& config);
Result<std::unique_ptr<Wire>> make_udp_wire(const WireConfig& config);
// Whole Ethernet/IP/UDP/RoCEv2 frames on DPDK ethdev ports (dpdk_wire.cc). Without libdpdk
// it returns Errc::unsupported.
Result<std::unique_ptr<Wire>> make_dpdk_wire(const WireConfig& config);

// RoCEv2 ICRC of a datagram (BTH..pad) that travels src -> dst over IPv4/UDP with IPv4 ID 0
// and DF set (the header an unconnected DF socket produces), or over IPv6/UDP. Both addresses
// are of one family. Returned as the value to append in little-endian byte order.
uint32_t roce_icrc(const Endpoint& src, const Endpoint& dst, const uint8_t* data, size_t len);

}  // namespace rnicdv::sim
