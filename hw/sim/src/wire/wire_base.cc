// SPDX-License-Identifier: BSD-3-Clause
#include "wire/wire_base.h"

#include <time.h>

#include <cstdio>
#include <cstring>

#include "wire/frame.h"

namespace rnicdv::sim {
namespace {

class MonotonicClock final : public Clock {
 public:
  uint64_t now_ns() const override {
    timespec ts;
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
  }
};

}  // namespace

const Clock& monotonic_clock() noexcept {
  static const MonotonicClock clock;
  return clock;
}

std::string Endpoint::to_string() const {
  const std::string port_text = ":" + std::to_string(port);
  return ip.is_v4() ? ip.to_string() + port_text : "[" + ip.to_string() + "]" + port_text;
}

std::string ipv4_string(uint32_t ipv4) {
  char text[16];
  std::snprintf(text, sizeof(text), "%u.%u.%u.%u", ipv4 >> 24, (ipv4 >> 16) & 0xFF,
                (ipv4 >> 8) & 0xFF, ipv4 & 0xFF);
  return text;
}

Status Wire::join_group(const Endpoint& local, const IpAddress& group) {
  return Status::error(Errc::unsupported, "%s wire: %s joining %s: this wire carries no multicast",
                       wire_kind_name(kind()), endpoint_string(local).c_str(),
                       group.to_string().c_str());
}

Status Wire::leave_group(const Endpoint& local, const IpAddress& group) {
  return Status::error(Errc::not_found, "%s wire: %s leaving %s: it never joined",
                       wire_kind_name(kind()), endpoint_string(local).c_str(),
                       group.to_string().c_str());
}

Status WireBase::check_group(const char* wire_name, const Endpoint& local, const IpAddress& group) {
  if (!group.is_multicast())
    return Status::error(Errc::invalid_argument,
                         "%s wire: %s joining %s: not a multicast address (%s)", wire_name,
                         endpoint_string(local).c_str(), group.to_string().c_str(),
                         group.is_v4() ? "224.0.0.0/4" : "ff00::/8");
  if (local.ip.is_v4() != group.is_v4())
    return Status::error(Errc::invalid_argument, "%s wire: %s joining %s: an %s group, from an %s "
                         "endpoint",
                         wire_name, endpoint_string(local).c_str(), group.to_string().c_str(),
                         group.is_v4() ? "IPv4" : "IPv6", local.ip.is_v4() ? "IPv4" : "IPv6");
  return Status::ok();
}

void EndpointRxCounters::add_to(WireCounters* c) const noexcept {
  c->frames_rx += frames.get();
  c->bytes_rx += bytes.get();
  c->dropped_icrc += dropped_icrc.get();
  c->dropped_malformed += dropped_malformed.get();
  c->dropped_queue_full += dropped_queue_full.get();
  c->peers_unreachable += peers_unreachable.get();
}

int TxFrame::gather(iovec* parts) const noexcept {
  auto* bytes = const_cast<uint8_t*>(data);  // iovec is not const-correct; nothing writes
  int n = 0;
  if (plan.corrupt && plan.corrupt_offset < len) {
    const size_t off = plan.corrupt_offset;
    if (off > 0) parts[n++] = {bytes, off};
    parts[n++] = {const_cast<uint8_t*>(&corrupted_byte_), 1};
    if (off + 1 < len) parts[n++] = {bytes + off + 1, len - off - 1};
  } else {
    parts[n++] = {bytes, len};
  }
  parts[n++] = {const_cast<uint8_t*>(icrc), kIcrcLen};
  return n;
}

void TxFrame::copy_to(uint8_t* out) const noexcept {
  std::memcpy(out, data, len);
  std::memcpy(out + len, icrc, kIcrcLen);
  if (plan.corrupt && plan.corrupt_offset < len) out[plan.corrupt_offset] = corrupted_byte_;
}

void TxFrame::fill(WireFrame* frame, uint8_t copy, uint8_t flags) const noexcept {
  frame->due_ns = due_ns;
  frame->sequence = sequence + copy;
  frame->set_route(src, dst);
  frame->ip_tos = ip.tos;
  frame->ip_ttl = ip.ttl;
  frame->ip_flow_label = ip.flow_label;
  frame->len = static_cast<uint32_t>(wire_len());
  frame->flags = flags;
  copy_to(frame->bytes);
}

Status WireBase::validate(const WireConfig& config, const char* wire_name) {
  Status st = FaultInjector::validate(config.faults);
  if (!st) return st.prepend(std::string(wire_name) + " wire");
  if (config.udp_port == 0)
    return Status::error(Errc::invalid_argument, "%s wire: UDP port 0 is not a RoCEv2 port",
                         wire_name);
  return Status::ok();
}

WireBase::WireBase(const WireConfig& config, std::unique_ptr<PcapWriter> pcap)
    : config_(config),
      clock_(config.clock ? config.clock : &monotonic_clock()),
      faults_(config.faults, config.seed),
      schedule_(config.schedule != nullptr && config.schedule->has_frame_rules() ? config.schedule
                                                                                  : nullptr),
      pcap_(std::move(pcap)) {}

bool WireBase::begin_transmit(const Endpoint& src, const Endpoint& dst, const uint8_t* data,
                              size_t len, IpClass ip, TxFrame* tx) noexcept {
  if (data == nullptr || len < kBthLen || len > kMaxDatagramLen || src.ip.is_v4() != dst.ip.is_v4())
      [[unlikely]] {
    bump(tx_.dropped_malformed);
    return false;
  }
  bump(tx_.frames);
  bump(tx_.bytes, len);
  tx->src = resolve(src);
  tx->dst = resolve(dst);
  tx->ip = ip;
  tx->data = data;
  tx->len = len;
  store_icrc(tx->icrc, roce_icrc(tx->src, tx->dst, data, len));
  if (!faults_.active() && schedule_ == nullptr) return true;

  const uint64_t index = next_frame_index_.fetch_add(1, std::memory_order_relaxed);
  tx->plan = faults_.plan(index, tx->wire_len());
  if (schedule_ != nullptr)
    schedule_->plan_frame(index, schedule_->device_at(tx->src.ip), tx->src, tx->dst, data, len,
                          tx->wire_len(), &tx->plan);
  if (tx->plan.drop) {
    bump(tx_.faults_dropped);
    return false;
  }
  if (tx->plan.corrupt) {
    bump(tx_.faults_corrupted);
    if (tx->plan.corrupt_offset < len)
      tx->corrupted_byte_ = data[tx->plan.corrupt_offset] ^ tx->plan.corrupt_mask;
    else
      tx->icrc[tx->plan.corrupt_offset - len] ^= tx->plan.corrupt_mask;
  }
  if (tx->plan.copies > 1) bump(tx_.faults_duplicated);
  if (tx->plan.reordered) bump(tx_.faults_reordered);
  if (tx->plan.delayed) bump(tx_.faults_delayed);
  tx->sequence = index * 2;
  tx->due_ns = now_ns() + tx->plan.hold_ns;
  return true;
}

void WireBase::capture(const TxFrame& tx, uint64_t timestamp_ns) noexcept {
  if (!pcap_) return;
  uint8_t encap[kMaxRoceEncapLen];
  if (tx.src.ip.is_v6()) {
    // The UDP checksum an IPv6 frame must carry covers the payload: gather it first.
    uint8_t payload[kMaxWireDatagramLen];
    tx.copy_to(payload);
    const size_t n = write_roce_encap(encap, tx.src, tx.dst, tx.wire_len(), UdpChecksum::compute,
                                      payload, tx.ip);
    iovec parts[2] = {{encap, n}, {payload, tx.wire_len()}};
    pcap_->write(timestamp_ns, parts, 2);
    return;
  }
  const size_t n =
      write_roce_encap(encap, tx.src, tx.dst, tx.wire_len(), UdpChecksum::zero, nullptr, tx.ip);
  iovec parts[1 + 4];
  parts[0] = {encap, n};
  const int count = 1 + tx.gather(parts + 1);
  pcap_->write(timestamp_ns, parts, count);
}

void WireBase::capture(const WireFrame& frame, uint64_t timestamp_ns) noexcept {
  if (!pcap_) return;
  uint8_t encap[kMaxRoceEncapLen];
  const size_t n = write_roce_encap(encap, frame.src(), frame.dst(), frame.len, UdpChecksum::zero,
                                    frame.bytes, frame.ip());
  iovec parts[2] = {{encap, n}, {const_cast<uint8_t*>(frame.bytes), frame.len}};
  pcap_->write(timestamp_ns, parts, 2);
}

void WireBase::capture_frame(const uint8_t* frame, size_t len, uint64_t timestamp_ns) noexcept {
  if (!pcap_) return;
  iovec part{const_cast<uint8_t*>(frame), len};
  pcap_->write(timestamp_ns, &part, 1);
}

bool WireBase::deliver(WireSink* sink, const Endpoint& src, const Endpoint& local,
                       const uint8_t* bytes, size_t len, EndpointRxCounters* rx) {
  if (len < kMinWireDatagramLen || len > kMaxWireDatagramLen) [[unlikely]] {
    rx->dropped_malformed.add();
    return false;
  }
  if (!icrc_matches(src, local, bytes, len)) [[unlikely]] {
    rx->dropped_icrc.add();
    return false;
  }
  const size_t datagram_len = len - kIcrcLen;
  rx->frames.add();
  rx->bytes.add(datagram_len);
  sink->on_datagram(src, local, bytes, datagram_len);
  return true;
}

WireCounters WireBase::counters() const {
  WireCounters c;
  {
    std::lock_guard lock(control_mutex_);
    c = retired_;
    add_endpoint_counters(&c);
  }
  auto get = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  c.frames_tx += get(tx_.frames);
  c.bytes_tx += get(tx_.bytes);
  c.dropped_malformed += get(tx_.dropped_malformed);
  c.dropped_no_sink += get(tx_.dropped_no_sink);
  c.dropped_queue_full += get(tx_.dropped_queue_full);
  c.dropped_send_error += get(tx_.dropped_send_error);
  c.faults_dropped += get(tx_.faults_dropped);
  c.faults_duplicated += get(tx_.faults_duplicated);
  c.faults_reordered += get(tx_.faults_reordered);
  c.faults_corrupted += get(tx_.faults_corrupted);
  c.faults_delayed += get(tx_.faults_delayed);
  return c;
}

}  // namespace rnicdv::sim
