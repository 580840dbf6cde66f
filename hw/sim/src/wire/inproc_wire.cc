// SPDX-License-Identifier: BSD-3-Clause
// The in-process wire: each attached endpoint has a bounded lock-free MPSC ring that any
// thread transmits into and the endpoint's poller drains. Frames are copied into the ring
// with their ICRC and checked against it on delivery, exactly as the UDP wire does.
//
// Frames held back by a delay or reorder fault travel in the same ring, stamped with their
// due time; the poller moves them to a private holding area (ordered by due time, then
// transmit order) and releases them when the clock reaches that time. While anything is
// held, newly arrived frames pass through the holding area too, so frames come out in exact
// (due time, transmit order) order.
//
// Multicast: a datagram sent to a group is copied into the ring of every endpoint joined to
// it, with the group as its destination, as a switch replicates it; faults are drawn once,
// before the copies are made. The membership map is guarded by a mutex that transmit takes
// only for a group address.
//
// Capture: a frame is written to the pcap when it goes on the link, at transmit or, when
// held back, at the end of its hold. Frames lost on the receiving side (no sink, full ring,
// bad ICRC) were on the link and are captured; frames lost before leaving (fault drop, full
// holding area, endpoint detached during the hold) are not.
#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

#include "wire/endpoint_table.h"
#include "rnicdv/sim/mpsc_ring.h"
#include "wire/wire_base.h"

namespace rnicdv::sim {
namespace {

constexpr unsigned kRingLog2 = 9;    // 512 frames in flight per endpoint
constexpr size_t kHeldLimit = 1024;  // frames held back per endpoint

struct InprocPort {
  InprocPort(const Endpoint& l, WireSink* s) : local(l), sink(s), ring(kRingLog2) {}

  const Endpoint local;
  WireSink* const sink;
  MpscRing<WireFrame> ring;
  HeldFrames held{kHeldLimit};                      // poller only
  std::atomic<uint64_t> earliest_held{UINT64_MAX};  // published by the poller
  EndpointRxCounters rx;
};

class InprocWire final : public WireBase {
 public:
  InprocWire(const WireConfig& config, std::unique_ptr<PcapWriter> pcap)
      : WireBase(config, std::move(pcap)) {}
  ~InprocWire() override;

  WireKind kind() const override { return WireKind::inproc; }
  Result<Endpoint> attach(Endpoint local, WireSink* sink) override;
  void detach(Endpoint local) override;
  void transmit(const Endpoint& src, const Endpoint& dst, const uint8_t* data, size_t len,
                IpClass ip) override;
  size_t poll(const Endpoint& local, size_t budget) override;
  uint64_t next_delivery_ns(const Endpoint& local) const override;
  Status join_group(const Endpoint& local, const IpAddress& group) override;
  Status leave_group(const Endpoint& local, const IpAddress& group) override;

 private:
  void add_endpoint_counters(WireCounters* c) const override {
    ports_.for_each([c](const InprocPort& p) { p.rx.add_to(c); });
  }
  Result<Endpoint> pick_address(uint16_t port) const;
  void hold(InprocPort& p, const WireFrame& frame);
  size_t release_one(InprocPort& p, WireFrame* frame, uint64_t now);
  // Queues the copies of `tx` for `dst` (a copy per fault copy); `capture_held` marks held
  // copies for capture when they leave. Counts what cannot be queued.
  void enqueue(const TxFrame& tx, const Endpoint& dst, bool capture_held, uint64_t capture_ts);
  void transmit_group(const TxFrame& tx);

  EndpointTable<InprocPort> ports_;
  // Group address -> the endpoints joined to it.
  std::mutex groups_mu_;
  std::map<IpAddress, std::vector<Endpoint>> groups_;
};

InprocWire::~InprocWire() {
  ports_.for_each([](InprocPort& p) { delete &p; });
}

Result<Endpoint> InprocWire::pick_address(uint16_t port) const {
  // 127.0.0.2 upwards through 127/8, skipping .0, .1 and .255 host bytes, like the UDP wire.
  for (uint32_t host = 2; host < (1u << 24); ++host) {
    const uint8_t last = host & 0xFF;
    if (last == 0 || last == 1 || last == 255) continue;
    const Endpoint candidate{IpAddress::v4(0x7F000000u | host), port};
    if (!ports_.contains(candidate)) return candidate;
  }
  return Status::error(Errc::no_resources, "inproc wire: attach: no free 127/8 address");
}

Result<Endpoint> InprocWire::attach(Endpoint local, WireSink* sink) {
  if (sink == nullptr)
    return Status::error(Errc::invalid_argument, "inproc wire: attach %s: no sink",
                         endpoint_string(resolve(local)).c_str());
  std::lock_guard lock(control_mutex_);
  local = resolve(local);
  if (ports_.size() >= ports_.kMaxEntries)
    return Status::error(Errc::no_resources, "inproc wire: attach %s: %zu endpoints attached",
                         endpoint_string(local).c_str(), ports_.size());
  if (local.ip.is_unspecified()) {
    Result<Endpoint> picked = pick_address(local.port);
    if (!picked) return picked;
    local = *picked;
  } else if (ports_.contains(local)) {
    return Status::error(Errc::address_in_use, "inproc wire: attach %s: address in use",
                         endpoint_string(local).c_str());
  }
  std::unique_ptr<InprocPort> port;
  try {
    port = std::make_unique<InprocPort>(local, sink);
  } catch (const std::bad_alloc&) {
    return Status::error(Errc::no_resources, "inproc wire: attach %s: out of memory",
                         endpoint_string(local).c_str());
  }
  if (!ports_.insert(local, port.get()))
    return Status::error(Errc::internal, "inproc wire: attach %s: endpoint table refused it",
                         endpoint_string(local).c_str());
  port.release();
  return local;
}

void InprocWire::detach(Endpoint local) {
  std::lock_guard lock(control_mutex_);
  local = resolve(local);
  {
    std::lock_guard groups(groups_mu_);
    for (auto it = groups_.begin(); it != groups_.end();) {
      std::erase(it->second, local);
      it = it->second.empty() ? groups_.erase(it) : std::next(it);
    }
  }
  std::unique_ptr<InprocPort> port(ports_.remove(local));
  if (!port) return;
  // No transmitter or poller holds the port any more. Whatever it had not delivered is
  // lost with it: queued frames were on the link (and captured), held ones never left.
  uint64_t lost = port->held.clear();
  while (port->ring.front() != nullptr) {
    port->ring.pop();
    ++lost;
  }
  port->rx.add_to(&retired_);
  retired_.dropped_no_sink += lost;
}

void InprocWire::transmit(const Endpoint& src, const Endpoint& dst, const uint8_t* data,
                          size_t len, IpClass ip) {
  TxFrame tx;
  if (!begin_transmit(src, dst, data, len, ip, &tx)) return;
  if (tx.dst.ip.is_multicast()) [[unlikely]]
    return transmit_group(tx);
  // A held frame is captured when its hold ends, unless it is lost on arrival (below).
  const uint64_t capture_ts = capturing() ? (tx.held() ? tx.due_ns : now_ns()) : 0;
  enqueue(tx, tx.dst, true, capture_ts);
}

void InprocWire::enqueue(const TxFrame& tx, const Endpoint& dst, bool capture_held,
                         uint64_t capture_ts) {
  EndpointTable<InprocPort>::Ref port;
  ports_.find(dst, &port);
  const bool held = tx.held();
  for (uint8_t copy = 0; copy < tx.plan.copies; ++copy) {
    if (!port) [[unlikely]] {
      if (capture_held) capture(tx, capture_ts);
      bump(tx_counters().dropped_no_sink);
      continue;
    }
    const auto claim = port->ring.claim();
    if (!claim) [[unlikely]] {
      if (capture_held) capture(tx, capture_ts);
      bump(tx_counters().dropped_queue_full);
      continue;
    }
    if (!held && capture_held) capture(tx, capture_ts);
    tx.fill(claim.slot, copy, held && capture_held ? WireFrame::kCaptureOnRelease : 0);
    port->ring.publish(claim);
  }
}

// The link carries the frame once (captured once, by the first member's copy when it is
// held); every member's ring gets its own copy.
void InprocWire::transmit_group(const TxFrame& tx) {
  const uint64_t capture_ts = capturing() ? (tx.held() ? tx.due_ns : now_ns()) : 0;
  std::lock_guard lock(groups_mu_);
  auto it = groups_.find(tx.dst.ip);
  if (it == groups_.end()) {
    for (uint8_t copy = 0; copy < tx.plan.copies; ++copy) capture(tx, capture_ts);
    return;
  }
  bool first = true;
  for (const Endpoint& member : it->second) {
    enqueue(tx, member, first, capture_ts);
    first = false;
  }
}

Status InprocWire::join_group(const Endpoint& local, const IpAddress& group) {
  RNICDV_TRY(check_group("inproc", local, group));
  std::lock_guard lock(control_mutex_);
  const Endpoint ep = resolve(local);
  if (!ports_.contains(ep))
    return Status::error(Errc::not_found, "inproc wire: %s joining %s: not attached",
                         endpoint_string(ep).c_str(), group.to_string().c_str());
  std::lock_guard groups(groups_mu_);
  std::vector<Endpoint>& members = groups_[group];
  if (std::find(members.begin(), members.end(), ep) != members.end())
    return Status::error(Errc::address_in_use, "inproc wire: %s joining %s: already a member",
                         endpoint_string(ep).c_str(), group.to_string().c_str());
  members.push_back(ep);
  return Status::ok();
}

Status InprocWire::leave_group(const Endpoint& local, const IpAddress& group) {
  std::lock_guard lock(control_mutex_);
  const Endpoint ep = resolve(local);
  std::lock_guard groups(groups_mu_);
  auto it = groups_.find(group);
  if (it == groups_.end() || std::erase(it->second, ep) == 0)
    return Wire::leave_group(ep, group);
  if (it->second.empty()) groups_.erase(it);
  return Status::ok();
}

void InprocWire::hold(InprocPort& p, const WireFrame& frame) {
  if (!p.held.hold(frame)) [[unlikely]]
    p.rx.dropped_queue_full.add();
}

size_t InprocWire::release_one(InprocPort& p, WireFrame* frame, uint64_t now) {
  if (frame->flags & WireFrame::kCaptureOnRelease) capture(*frame, now);
  // The frame's destination is this endpoint, or a group it joined.
  return deliver(p.sink, frame->src(), frame->dst(), frame->bytes, frame->len, &p.rx) ? 1 : 0;
}

size_t InprocWire::poll(const Endpoint& local, size_t budget) {
  EndpointTable<InprocPort>::Ref ref;
  ports_.find(resolve(local), &ref);
  InprocPort* const port = ref.get();
  if (port == nullptr || budget == 0) return 0;
  InprocPort& p = *port;

  // The clock is read only when a frame carries a due time (faults on) or for capture.
  uint64_t now = 0;
  bool have_now = false;
  auto clock = [&] {
    if (!have_now) {
      now = now_ns();
      have_now = true;
    }
    return now;
  };

  // Bounded work per call even if producers never stop.
  constexpr size_t scan_limit = size_t{1} << kRingLog2;  // the ring's capacity
  size_t delivered = 0, scanned = 0;
  while (delivered < budget) {
    if (!p.held.empty()) {
      for (WireFrame* f; scanned < scan_limit && (f = p.ring.front()) != nullptr; ++scanned) {
        hold(p, *f);
        p.ring.pop();
      }
      WireFrame* f = p.held.take_due(clock());
      if (f == nullptr) break;
      delivered += release_one(p, f, clock());
      p.held.recycle(f);
      continue;
    }
    if (scanned >= scan_limit) break;
    WireFrame* f = p.ring.front();
    if (f == nullptr) break;
    ++scanned;
    if (f->due_ns != 0 && f->due_ns > clock()) {
      hold(p, *f);
    } else {
      delivered += release_one(p, f, capturing() ? clock() : 0);
    }
    p.ring.pop();
  }
  p.earliest_held.store(p.held.earliest_due(), std::memory_order_relaxed);
  return delivered;
}

uint64_t InprocWire::next_delivery_ns(const Endpoint& local) const {
  EndpointTable<InprocPort>::Ref ref;
  ports_.find(resolve(local), &ref);
  if (!ref) return UINT64_MAX;
  uint64_t due = ref->earliest_held.load(std::memory_order_relaxed);
  // Frames waiting in the ring may be due now; the next poll sorts them out.
  if (!ref->ring.probably_empty()) due = std::min(due, now_ns());
  return due;
}

}  // namespace

Result<std::unique_ptr<Wire>> make_inproc_wire(const WireConfig& config) {
  Status st = WireBase::validate(config, "inproc");
  if (!st) return st;
  std::unique_ptr<PcapWriter> pcap;
  if (!config.pcap_path.empty()) {
    auto opened = PcapWriter::open(config.pcap_path);
    if (!opened) return opened.status().prepend("inproc wire");
    pcap = std::move(*opened);
  }
  return std::unique_ptr<Wire>(new InprocWire(config, std::move(pcap)));
}

}  // namespace rnicdv::sim
