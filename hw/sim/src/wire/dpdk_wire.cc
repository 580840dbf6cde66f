// SPDX-License-Identifier: BSD-3-Clause
// The DPDK wire: every datagram leaves as a whole Ethernet/IPv4/UDP/RoCEv2 frame on an ethdev
// port, and every frame received on one is checked before its datagram reaches a device.
//
// Each simulated HCA attached to the wire gets its own port (attach order; dpdk_args.h) and
// its own MAC. Transmit builds the frame in an mbuf: Ethernet to the peer's MAC (02:00:a:b:c:d
// for a.b.c.d, or a --peer entry: there is no ARP), IPv4 with ID 0, DF, the sending QP's TOS
// and TTL (0 and 64 unless it sets them) and a header checksum, UDP to port 4791 with a
// checksum, then BTH..pad and the ICRC (computed over that very IPv4/UDP header: roce_icrc's pseudo header is the header sent). Receive keeps frames
// for the device's MAC, parses them (parse_roce_frame: lengths, checksums, fragments) and
// checks the ICRC against the headers actually received. Malformed frames and ICRC failures
// are dropped and counted; frames for other MACs, and other protocols (ARP, IPv6 neighbour
// discovery on a veth), are ignored as a NIC's filter would.
//
// Port queues: one RX queue polled only by its endpoint's engine, one TX queue behind a
// spinlock (transmit may run on any thread). Seeded faults work as on the UDP wire: the
// sender holds back delayed frames and sends them from poll(sender). The pcap receives the
// exact bytes of every frame the port accepted.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <rte_ethdev.h>
#include <rte_mbuf.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>

#include "wire/dpdk_args.h"
#include "wire/dpdk_eal.h"
#include "wire/dpdk_port.h"
#include "wire/dpdk_provider.h"
#include "wire/endpoint_table.h"
#include "wire/frame.h"
#include "wire/wire_base.h"

namespace rnicdv::sim {
namespace {

constexpr unsigned kOutboxLog2 = 8;
constexpr size_t kHeldLimit = 1024;
constexpr uint16_t kRxBurst = 32;
constexpr uint32_t kLinkNet = 0x0A4D0000u;  // 10.77.0.0: the in-process link's addresses

class SpinLock {
 public:
  void lock() noexcept {
    while (flag_.test_and_set(std::memory_order_acquire)) {
      while (flag_.test(std::memory_order_relaxed)) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
      }
    }
  }
  void unlock() noexcept { flag_.clear(std::memory_order_release); }

 private:
  std::atomic_flag flag_;
};

struct DpdkEndpoint {
  DpdkEndpoint(const Endpoint& l, WireSink* s, const DpdkPort* p, size_t index, MacAddress m,
               bool faults)
      : local(l), sink(s), port(p), port_index(index), mac(m) {
    if (faults) outbox = std::make_unique<MpscRing<WireFrame>>(kOutboxLog2);
  }
  DpdkEndpoint(const DpdkEndpoint&) = delete;
  DpdkEndpoint& operator=(const DpdkEndpoint&) = delete;

  const Endpoint local;
  WireSink* const sink;
  const DpdkPort* const port;
  const size_t port_index;
  const MacAddress mac;
  SpinLock tx_lock;  // the port's TX queue 0
  std::unique_ptr<MpscRing<WireFrame>> outbox;
  HeldFrames held{kHeldLimit};
  std::atomic<uint64_t> earliest_held{UINT64_MAX};
  EndpointRxCounters rx;
  OwnedCounter rx_no_sink;  // our MAC, another address or UDP port
};

// The IPv4 address of kernel interface `if_index` in this network namespace, or 0.
uint32_t interface_ipv4(uint32_t if_index) {
  if (if_index == 0) return 0;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return 0;
  uint32_t found = 0;
  for (ifaddrs* a = list; a != nullptr && found == 0; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    if (::if_nametoindex(a->ifa_name) != if_index) continue;
    found = ntohl(reinterpret_cast<const sockaddr_in*>(a->ifa_addr)->sin_addr.s_addr);
  }
  ::freeifaddrs(list);
  return found;
}

class DpdkWire final : public WireBase {
 public:
  DpdkWire(const WireConfig& config, std::unique_ptr<PcapWriter> pcap, DpdkWireOptions options,
           std::vector<DpdkPort> ports)
      : WireBase(config, std::move(pcap)),
        options_(std::move(options)),
        ports_(std::move(ports)),
        port_used_(ports_.size(), false) {}
  ~DpdkWire() override;

  WireKind kind() const override { return WireKind::dpdk; }
  bool polled() const override { return true; }  // a port's receive ring has no fd here
  Result<Endpoint> attach(Endpoint local, WireSink* sink) override;
  void detach(Endpoint local) override;
  void transmit(const Endpoint& src, const Endpoint& dst, const uint8_t* data, size_t len,
                IpClass ip) override;
  size_t poll(const Endpoint& local, size_t budget) override;
  uint64_t next_delivery_ns(const Endpoint& local) const override;
  std::string endpoint_detail(const Endpoint& local) const override;

 private:
  void add_endpoint_counters(WireCounters* c) const override {
    endpoints_.for_each([c](const DpdkEndpoint& e) {
      e.rx.add_to(c);
      c->dropped_no_sink += e.rx_no_sink.get();
    });
  }
  MacAddress peer_mac(const IpAddress& peer) const noexcept {
    for (const auto& [ip, mac] : options_.peers)
      if (ip == peer) return mac;
    return mac_for_ip(peer);
  }
  Result<IpAddress> pick_address(size_t port_index) const;
  // Builds and sends one frame carrying `wire_len` bytes (datagram + ICRC) that `fill` writes.
  template <class Fill>
  void send_frame(DpdkEndpoint& ep, const Endpoint& src, const Endpoint& dst, IpClass ip,
                  size_t wire_len, Fill&& fill);
  void release_held(DpdkEndpoint& ep);
  void receive_one(DpdkEndpoint& ep, rte_mbuf* m, size_t* delivered);
  void forget(DpdkEndpoint* ep);

  const DpdkWireOptions options_;
  const std::vector<DpdkPort> ports_;
  std::vector<bool> port_used_;  // under control_mutex_
  EndpointTable<DpdkEndpoint> endpoints_;
};

DpdkWire::~DpdkWire() {
  std::vector<DpdkEndpoint*> left;
  endpoints_.for_each([&left](DpdkEndpoint& e) { left.push_back(&e); });
  for (DpdkEndpoint* e : left) delete endpoints_.remove(e->local);
  for (const DpdkPort& p : ports_) stop_dpdk_port(p);
  release_dpdk_ports(ports_);
}

Result<IpAddress> DpdkWire::pick_address(size_t k) const {
  if (k < options_.ips.size()) return options_.ips[k];
  const DpdkPort& p = ports_[k];
  if (p.in_process_link) return IpAddress::v4(kLinkNet | (p.link_index + 1));
  if (uint32_t ip = interface_ipv4(p.if_index)) return IpAddress::v4(ip);
  return Status::error(Errc::invalid_argument,
                       "dpdk wire: attach on %s: no IPv4 address for the device: give one with "
                       "--ip= in the DPDK arguments, in the device configuration, or on the "
                       "port's kernel interface",
                       p.describe().c_str());
}

Result<Endpoint> DpdkWire::attach(Endpoint local, WireSink* sink) {
  if (sink == nullptr)
    return Status::error(Errc::invalid_argument, "dpdk wire: attach %s: no sink",
                         endpoint_string(resolve(local)).c_str());
  std::lock_guard lock(control_mutex_);
  local = resolve(local);
  size_t k = 0;
  while (k < ports_.size() && port_used_[k]) ++k;
  if (k == ports_.size())
    return Status::error(Errc::no_resources,
                         "dpdk wire: attach %s: all %zu ports have a device (one device per port; "
                         "give EAL more ports)",
                         endpoint_string(local).c_str(), ports_.size());
  if (local.ip.is_unspecified()) {
    RNICDV_ASSIGN_OR_RETURN(local.ip, pick_address(k));
  }
  if (endpoints_.contains(local))
    return Status::error(Errc::address_in_use, "dpdk wire: attach %s: address in use",
                         endpoint_string(local).c_str());
  const MacAddress mac = k < options_.macs.size() ? options_.macs[k] : mac_for_ip(local.ip);
  std::unique_ptr<DpdkEndpoint> ep;
  try {
    ep = std::make_unique<DpdkEndpoint>(local, sink, &ports_[k], k, mac, may_hold_frames());
  } catch (const std::bad_alloc&) {
    return Status::error(Errc::no_resources, "dpdk wire: attach %s: out of memory",
                         endpoint_string(local).c_str());
  }
  drain_dpdk_port(ports_[k]);  // nothing sent before the device existed is for it
  if (!endpoints_.insert(local, ep.get()))
    return Status::error(Errc::internal, "dpdk wire: attach %s: endpoint table refused it",
                         endpoint_string(local).c_str());
  port_used_[k] = true;
  const DpdkPort& p = ports_[k];
  // A RoCEv2 frame at the largest path MTU is 4096 + 58..106 bytes.
  const size_t encap = roce_encap_len(local.ip);
  if (p.max_frame < encap + 4096 + 32 + kIcrcLen)
    std::fprintf(stderr,
                 "rnicdv: dpdk: %s carries frames up to %u bytes: use a path MTU of %u or less, "
                 "or raise the link's MTU\n",
                 p.describe().c_str(), p.max_frame,
                 p.max_frame >= encap + 2048 + 32 + kIcrcLen   ? 2048u
                 : p.max_frame >= encap + 1024 + 32 + kIcrcLen ? 1024u
                                                               : 256u);
  ep.release();
  return local;
}

void DpdkWire::forget(DpdkEndpoint* ep) {
  uint64_t lost = ep->held.clear();
  if (ep->outbox) {
    while (ep->outbox->front() != nullptr) {
      ep->outbox->pop();
      ++lost;
    }
  }
  ep->rx.add_to(&retired_);
  retired_.dropped_no_sink += ep->rx_no_sink.get();
  retired_.dropped_send_error += lost;
  drain_dpdk_port(*ep->port);
  port_used_[ep->port_index] = false;
  delete ep;
}

void DpdkWire::detach(Endpoint local) {
  std::lock_guard lock(control_mutex_);
  DpdkEndpoint* ep = endpoints_.remove(resolve(local));
  if (ep != nullptr) forget(ep);
}

template <class Fill>
void DpdkWire::send_frame(DpdkEndpoint& ep, const Endpoint& src, const Endpoint& dst,
                          IpClass ip, size_t wire_len, Fill&& fill) {
  const size_t encap_len = roce_encap_len(src.ip);
  const size_t frame_len = encap_len + wire_len;
  if (frame_len > ep.port->max_frame) [[unlikely]] {
    bump(tx_counters().dropped_send_error);  // longer than the link carries
    return;
  }
  rte_mbuf* m = rte_pktmbuf_alloc(ep.port->pool);
  if (m == nullptr) [[unlikely]] {
    bump(tx_counters().dropped_queue_full);
    return;
  }
  auto* frame = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(m, static_cast<uint16_t>(frame_len)));
  if (frame == nullptr) [[unlikely]] {
    rte_pktmbuf_free(m);
    bump(tx_counters().dropped_send_error);
    return;
  }
  uint8_t* payload = frame + encap_len;
  fill(payload);
  write_roce_encap(frame, src, dst, wire_len, UdpChecksum::compute, payload, ip);
  const MacAddress to = peer_mac(dst.ip);
  std::memcpy(frame, to.data(), 6);
  std::memcpy(frame + 6, ep.mac.data(), 6);

  // Capturing keeps a reference, as the receiver may free the mbuf before the pcap write.
  const bool capture = capturing();
  if (capture) rte_mbuf_refcnt_update(m, 1);
  ep.tx_lock.lock();
  const uint16_t sent = rte_eth_tx_burst(ep.port->id, 0, &m, 1);
  ep.tx_lock.unlock();
  if (sent == 0) [[unlikely]] {
    bump(tx_counters().dropped_queue_full);
    rte_pktmbuf_free(m);
    if (capture) rte_pktmbuf_free(m);
    return;
  }
  if (capture) {
    capture_frame(frame, frame_len, now_ns());
    rte_pktmbuf_free(m);
  }
}

void DpdkWire::transmit(const Endpoint& src, const Endpoint& dst, const uint8_t* data,
                        size_t len, IpClass ip) {
  TxFrame tx;
  if (!begin_transmit(src, dst, data, len, ip, &tx)) return;
  EndpointTable<DpdkEndpoint>::Ref ep;
  endpoints_.find(tx.src, &ep);
  if (!ep) [[unlikely]] {
    bump(tx_counters().dropped_send_error, tx.plan.copies);
    return;
  }
  if (tx.held()) {
    for (uint8_t copy = 0; copy < tx.plan.copies; ++copy) {
      const auto claim = ep->outbox->claim();
      if (!claim) [[unlikely]] {
        bump(tx_counters().dropped_queue_full);
        continue;
      }
      tx.fill(claim.slot, copy, 0);
      ep->outbox->publish(claim);
    }
    return;
  }
  for (uint8_t copy = 0; copy < tx.plan.copies; ++copy)
    send_frame(*ep, tx.src, tx.dst, tx.ip, tx.wire_len(),
               [&tx](uint8_t* out) { tx.copy_to(out); });
}

void DpdkWire::release_held(DpdkEndpoint& ep) {
  if (!ep.outbox) return;
  for (size_t n = ep.outbox->capacity(); n > 0; --n) {
    WireFrame* f = ep.outbox->front();
    if (f == nullptr) break;
    if (!ep.held.hold(*f)) [[unlikely]]
      ep.rx.dropped_queue_full.add();
    ep.outbox->pop();
  }
  if (!ep.held.empty()) {
    const uint64_t now = now_ns();
    while (WireFrame* f = ep.held.take_due(now)) {
      send_frame(ep, f->src(), f->dst(), f->ip(), f->len,
                 [f](uint8_t* out) { std::memcpy(out, f->bytes, f->len); });
      ep.held.recycle(f);
    }
  }
  ep.earliest_held.store(ep.held.earliest_due(), std::memory_order_relaxed);
}

void DpdkWire::receive_one(DpdkEndpoint& ep, rte_mbuf* m, size_t* delivered) {
  if (m->nb_segs != 1) [[unlikely]] {
    ep.rx.dropped_malformed.add();  // larger than any RoCEv2 frame
    return;
  }
  const auto* frame = rte_pktmbuf_mtod(m, const uint8_t*);
  const size_t len = m->data_len;
  if (len < kEthHeaderLen || std::memcmp(frame, ep.mac.data(), 6) != 0) return;  // not ours
  ParsedRoceFrame f;
  const FrameError err = parse_roce_frame(frame, len, &f);
  if (err == FrameError::not_ip || err == FrameError::not_udp) return;  // other protocols
  if (err != FrameError::ok) [[unlikely]] {
    ep.rx.dropped_malformed.add();
    return;
  }
  if (f.dst != ep.local) [[unlikely]] {
    ep.rx_no_sink.add();
    return;
  }
  if (!roce_frame_icrc_ok(f)) [[unlikely]] {
    ep.rx.dropped_icrc.add();
    return;
  }
  ep.rx.frames.add();
  ep.rx.bytes.add(f.datagram_len);
  ep.sink->on_datagram(f.src, ep.local, f.datagram, f.datagram_len);
  ++*delivered;
}

size_t DpdkWire::poll(const Endpoint& local, size_t budget) {
  EndpointTable<DpdkEndpoint>::Ref ref;
  endpoints_.find(resolve(local), &ref);
  DpdkEndpoint* const ep = ref.get();
  if (ep == nullptr) return 0;
  release_held(*ep);
  size_t delivered = 0, received = 0;
  // Bounded work per call, even against a flood of frames that all fail the checks.
  const size_t receive_limit = budget + kRxBurst;
  rte_mbuf* mbufs[kRxBurst];
  while (delivered < budget && received < receive_limit) {
    const auto want = static_cast<uint16_t>(std::min<size_t>(kRxBurst, budget - delivered));
    const uint16_t n = rte_eth_rx_burst(ep->port->id, 0, mbufs, want);
    for (uint16_t i = 0; i < n; ++i) {
      receive_one(*ep, mbufs[i], &delivered);
      rte_pktmbuf_free(mbufs[i]);
    }
    received += n;
    if (n < want) break;
  }
  return delivered;
}

uint64_t DpdkWire::next_delivery_ns(const Endpoint& local) const {
  EndpointTable<DpdkEndpoint>::Ref ref;
  endpoints_.find(resolve(local), &ref);
  if (!ref) return UINT64_MAX;
  uint64_t due = ref->earliest_held.load(std::memory_order_relaxed);
  if (ref->outbox && !ref->outbox->probably_empty()) due = std::min(due, now_ns());
  return due;
}

std::string DpdkWire::endpoint_detail(const Endpoint& local) const {
  EndpointTable<DpdkEndpoint>::Ref ref;
  endpoints_.find(resolve(local), &ref);
  if (!ref) return "";
  return ref->port->describe() + " mac " + mac_string(ref->mac) + " max frame " +
         std::to_string(ref->port->max_frame);
}

}  // namespace

Result<std::unique_ptr<Wire>> dpdk_wire_create(const WireConfig& config) {
  RNICDV_TRY(WireBase::validate(config, "dpdk"));
  RNICDV_ASSIGN_OR_RETURN(DpdkWireOptions options, parse_dpdk_args(config.dpdk_args));
  std::unique_ptr<PcapWriter> pcap;
  if (!config.pcap_path.empty()) {
    auto opened = PcapWriter::open(config.pcap_path);
    if (!opened) return opened.status().prepend("dpdk wire");
    pcap = std::move(*opened);
  }
  RNICDV_TRY(eal_start(options.eal_args));
  RNICDV_ASSIGN_OR_RETURN(std::vector<DpdkPort> ports,
                          claim_dpdk_ports(options.ports, options.eal_args));
  for (size_t i = 0; i < ports.size(); ++i) {
    if (Status started = start_dpdk_port(ports[i]); !started) {
      for (size_t j = 0; j < i; ++j) stop_dpdk_port(ports[j]);
      release_dpdk_ports(ports);
      return started;
    }
  }
  return std::unique_ptr<Wire>(
      new DpdkWire(config, std::move(pcap), std::move(options), std::move(ports)));
}

}  // namespace rnicdv::sim
