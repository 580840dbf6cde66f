// SPDX-License-Identifier: BSD-3-Clause
// One RoCEv2 datagram in flight inside the wire (datagram + ICRC, as on the link), and the
// holding area where frames wait out a delay or reorder fault.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#include "wire/icrc.h"
#include "wire/wire.h"

namespace rnicdv::sim {

// Raw storage, reused in rings without construction: fields are set by whoever fills it.
struct WireFrame {
  static constexpr uint8_t kCaptureOnRelease = 1;  // held back: capture when it goes out

  uint64_t due_ns;    // earliest time the frame goes on (or comes off) the link
  uint64_t sequence;  // transmit order; breaks ties between equal due times
  uint8_t src_ip[16], dst_ip[16];
  uint16_t src_port, dst_port;
  uint8_t ip_tos, ip_ttl;  // the IpClass it was sent with
  uint32_t ip_flow_label;
  uint32_t len;  // bytes used in `bytes`: datagram + ICRC
  uint8_t flags;
  uint8_t bytes[kMaxWireDatagramLen];

  Endpoint src() const noexcept { return Endpoint{IpAddress::from_bytes(src_ip), src_port}; }
  Endpoint dst() const noexcept { return Endpoint{IpAddress::from_bytes(dst_ip), dst_port}; }
  IpClass ip() const noexcept { return IpClass{ip_tos, ip_ttl, ip_flow_label}; }
  void set_route(const Endpoint& s, const Endpoint& d) noexcept {
    std::memcpy(src_ip, s.ip.bytes.data(), 16);
    src_port = s.port;
    std::memcpy(dst_ip, d.ip.bytes.data(), 16);
    dst_port = d.port;
  }
};
static_assert(std::is_trivially_default_constructible_v<WireFrame>);
static_assert(std::is_trivially_copyable_v<WireFrame>);

// Frames held back by a fault, released in order of (due time, sequence). Owned by one
// thread (the one that polls the endpoint); memory is allocated on first use and recycled.
class HeldFrames {
 public:
  explicit HeldFrames(size_t limit) noexcept : limit_(limit) {}
  HeldFrames(const HeldFrames&) = delete;
  HeldFrames& operator=(const HeldFrames&) = delete;

  // Copies `frame` in. False, and nothing held, when `limit` frames are already held.
  bool hold(const WireFrame& frame);

  bool empty() const noexcept { return heap_.empty(); }
  size_t size() const noexcept { return heap_.size(); }
  uint64_t earliest_due() const noexcept;  // UINT64_MAX when empty

  // Takes out the earliest frame if it is due at `now_ns`, else nullptr. Hand it back with
  // recycle() once used.
  WireFrame* take_due(uint64_t now_ns);
  void recycle(WireFrame* frame) { free_.push_back(frame); }

  // Drops everything held; returns how many frames that was.
  size_t clear() noexcept;

 private:
  size_t limit_;
  std::vector<WireFrame*> heap_;  // min-heap on (due_ns, sequence)
  std::vector<WireFrame*> free_;
  std::vector<std::unique_ptr<WireFrame>> storage_;
};

}  // namespace rnicdv::sim
