// SPDX-License-Identifier: BSD-3-Clause
// QP1, the general services interface, for the IB connection manager (IBA 13.5, 12.11).
//
// CM MADs travel as UD SEND_ONLY packets (BTH opcode 0x64, DestQP 1, P_Key 0xFFFF) with a DETH
// (Q_Key 0x80010000, the well-known GSI Q_Key, SrcQP 1), over the same wire as RC traffic.
// The connection manager registers a handler for inbound MADs and schedules its timeouts on
// the fabric's clock, so its retransmissions run in virtual time in deterministic mode.
//
// Handlers and timer callbacks run on the thread that runs the device's engine (the device
// thread, a progress hook, or Fabric::step), one at a time and never under the device lock:
// they may call any hw::Device, hw::Qp or Gsi method.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <vector>

#include "packet/packet.h"
#include "rnicdv/hw/ip_address.h"
#include "rnicdv/status.h"

namespace rnicdv::sim {

class Device;
class Hca;
using hw::IpAddress;

inline constexpr uint32_t kGsiQpn = 1;
inline constexpr uint32_t kGsiQkey = 0x80010000;
inline constexpr size_t kMadBytes = 256;

// (source address, MAD bytes, length)
using MadHandler = std::function<void(const IpAddress& src, const uint8_t* mad, size_t len)>;
using UnreachableHandler = std::function<void(const IpAddress& peer)>;
using TimerId = uint64_t;

class Gsi {
 public:
  explicit Gsi(Hca& hca) : hca_(hca) {}
  Gsi(const Gsi&) = delete;
  Gsi& operator=(const Gsi&) = delete;

  // Sends `len` (1..4096, normally kMadBytes) bytes as a UD SEND_ONLY to QP1 at `dst`, an
  // address of the device's IP version (another is refused: no frame could carry both).
  Status send_mad(const IpAddress& dst, const uint8_t* mad, size_t len = kMadBytes);

  // Replaces the handler of inbound MADs (an empty function removes it; MADs then drop).
  void set_mad_handler(MadHandler handler);
  // Replaces the handler told that the wire found nothing at an address any more (the peer's
  // port is gone: see WireSink::on_unreachable). It runs where MAD handlers run.
  void set_unreachable_handler(UnreachableHandler handler);

  // The fabric clock (virtual in deterministic mode).
  uint64_t now_ns() const;
  // Runs `fn` once the clock reaches `when_ns`. Returns an id for cancel().
  TimerId schedule_at(uint64_t when_ns, std::function<void()> fn);
  TimerId schedule_after(uint64_t delay_ns, std::function<void()> fn) {
    return schedule_at(now_ns() + delay_ns, std::move(fn));
  }
  // False when the timer already ran or was cancelled.
  bool cancel(TimerId id);

  // ---- Engine side ----
  // Queues an inbound QP1 packet (called with the device lock held). False if dropped.
  bool accept(const IpAddress& src, const pkt::Packet& p);
  // Queues the news that nothing receives at `peer` any more (any thread, any lock held).
  void peer_unreachable(const IpAddress& peer);
  // Runs queued MADs and due timers. Called without the device lock. True if anything ran.
  bool dispatch();
  uint64_t next_timer_ns() const;  // UINT64_MAX when none
  uint64_t mads_rx() const;
  uint64_t mads_tx() const;

 private:
  struct Inbound {
    IpAddress src;
    std::vector<uint8_t> mad;
    bool unreachable = false;  // no MAD: src is gone
  };
  struct Timer {
    TimerId id;
    std::function<void()> fn;
  };

  Hca& hca_;
  mutable std::mutex mu_;   // handler_, inbox_, timers_, counters
  std::mutex dispatch_mu_;  // one dispatcher at a time
  MadHandler handler_;
  UnreachableHandler unreachable_handler_;
  std::deque<Inbound> inbox_;
  std::multimap<uint64_t, Timer> timers_;
  TimerId next_id_ = 1;
  uint32_t psn_ = 0;
  uint64_t mads_rx_ = 0, mads_tx_ = 0;
};

// The GSI of a simulated device.
Gsi& gsi_of(Device& device);

}  // namespace rnicdv::sim
