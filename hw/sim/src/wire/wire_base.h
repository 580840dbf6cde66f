// SPDX-License-Identifier: BSD-3-Clause
// What the in-process and UDP wires share: configuration, clock, ICRC on transmit, the seeded
// fault plan, pcap capture and counters.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "faults/schedule.h"
#include "wire/fault_injector.h"
#include "wire/icrc.h"
#include "rnicdv/sim/mpsc_ring.h"
#include "wire/pcap_writer.h"
#include "wire/wire.h"
#include "wire/wire_frame.h"

namespace rnicdv::sim {

// CLOCK_MONOTONIC, for wires configured without a clock.
const Clock& monotonic_clock() noexcept;

// "127.0.0.2:4791", "[fd00::1]:4791", for messages.
inline std::string endpoint_string(const Endpoint& ep) {
  return ep.to_string();
}

// A counter with one writer (an endpoint's poller) that other threads may read.
class OwnedCounter {
 public:
  void add(uint64_t n = 1) noexcept {
    value_.store(value_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  uint64_t get() const noexcept { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> value_{0};
};

// Receive-side counters of one endpoint, written by the thread that polls it.
struct EndpointRxCounters {
  OwnedCounter frames, bytes, dropped_icrc, dropped_malformed, dropped_queue_full;
  OwnedCounter peers_unreachable;
  void add_to(WireCounters* c) const noexcept;
};

// A datagram accepted by transmit(), described in place: the caller's bytes, the ICRC and
// the faults drawn for it. The on-link bytes are data[0..len) + icrc[0..4) with at most one
// byte changed by a corruption fault.
struct TxFrame {
  Endpoint src, dst;  // ports resolved (0 means the wire's UDP port)
  IpClass ip;
  const uint8_t* data = nullptr;
  size_t len = 0;
  uint8_t icrc[kIcrcLen] = {};
  FaultPlan plan;
  uint64_t sequence = 0;  // transmit order (copies of a duplicate get sequence, sequence + 1)
  uint64_t due_ns = 0;    // time the frame may go on the link; 0 without faults

  size_t wire_len() const noexcept { return len + kIcrcLen; }
  bool held() const noexcept { return plan.hold_ns != 0; }
  // The on-link bytes as at most 4 pieces (a corrupted byte inside `data` splits it).
  int gather(iovec* parts) const noexcept;
  // Writes the on-link bytes to `out` (wire_len() bytes).
  void copy_to(uint8_t* out) const noexcept;
  // Fills a WireFrame: route, due time, sequence + copy, bytes.
  void fill(WireFrame* frame, uint8_t copy, uint8_t flags) const noexcept;

 private:
  friend class WireBase;
  uint8_t corrupted_byte_ = 0;  // the replacement when the corruption falls inside `data`
};

class WireBase : public Wire {
 public:
  WireCounters counters() const final;

  // Checks what both wires share (fault probabilities, port). Errors name `wire_name`.
  static Status validate(const WireConfig& config, const char* wire_name);
  // An invalid_argument error unless `group` is a multicast address.
  static Status check_group(const char* wire_name, const Endpoint& local, const IpAddress& group);

 protected:
  WireBase(const WireConfig& config, std::unique_ptr<PcapWriter> pcap);

  const WireConfig& config() const noexcept { return config_; }
  uint64_t now_ns() const noexcept { return clock_->now_ns(); }
  Endpoint resolve(Endpoint ep) const noexcept {
    if (ep.port == 0) ep.port = config_.udp_port;
    return ep;
  }
  bool capturing() const noexcept { return pcap_ != nullptr; }
  // Whether any frame may be held back (delay, reorder): by the fabric's FaultConfig or by
  // frame rules of its fault specification. Endpoints then need somewhere to hold them.
  bool may_hold_frames() const noexcept { return config_.faults.any() || schedule_ != nullptr; }

  // The transmit() prologue: checks the length and that both addresses are of one family,
  // counts, computes the ICRC and draws faults. False when the frame goes no further
  // (malformed or dropped by a fault); it is counted.
  bool begin_transmit(const Endpoint& src, const Endpoint& dst, const uint8_t* data, size_t len,
                      IpClass ip, TxFrame* tx) noexcept;

  // Writes a frame going on the link to the pcap (no-op without one).
  void capture(const TxFrame& tx, uint64_t timestamp_ns) noexcept;
  void capture(const WireFrame& frame, uint64_t timestamp_ns) noexcept;
  // Writes a whole frame exactly as it went on the link (wires that build their own frames).
  void capture_frame(const uint8_t* frame, size_t len, uint64_t timestamp_ns) noexcept;

  // Delivers a received datagram+ICRC to `sink` after the length and ICRC checks; counts.
  // Returns true when delivered.
  static bool deliver(WireSink* sink, const Endpoint& src, const Endpoint& local,
                      const uint8_t* bytes, size_t len, EndpointRxCounters* rx);

  // Per-endpoint counters of the derived wire, added under control_mutex_.
  virtual void add_endpoint_counters(WireCounters* c) const = 0;

  // Transmit-side counters, any thread.
  struct TxCounters {
    std::atomic<uint64_t> frames{0}, bytes{0}, dropped_malformed{0}, dropped_no_sink{0};
    std::atomic<uint64_t> dropped_queue_full{0}, dropped_send_error{0};
    std::atomic<uint64_t> faults_dropped{0}, faults_duplicated{0}, faults_reordered{0};
    std::atomic<uint64_t> faults_corrupted{0}, faults_delayed{0};
  };
  static void bump(std::atomic<uint64_t>& c, uint64_t n = 1) noexcept {
    c.fetch_add(n, std::memory_order_relaxed);
  }
  TxCounters& tx_counters() noexcept { return tx_; }

  // Serializes attach, detach and counters(); guards `retired_`.
  mutable std::mutex control_mutex_;
  // Receive counters of detached endpoints, so totals never go backwards.
  WireCounters retired_;

 private:
  WireConfig config_;
  const Clock* clock_;
  FaultInjector faults_;
  faults::FaultSchedule* schedule_;  // null without frame rules
  std::unique_ptr<PcapWriter> pcap_;
  alignas(kWireCacheLine) std::atomic<uint64_t> next_frame_index_{0};
  alignas(kWireCacheLine) TxCounters tx_;
};

}  // namespace rnicdv::sim
