// SPDX-License-Identifier: BSD-3-Clause
// Two simulated HCAs with a QP each, for connection tests: posting helpers, completion
// accounting (every WR completes exactly once) and event waits with timeouts.
#pragma once

#include <catch2/catch.hpp>

#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cm/sim_cm.h"
#include "rnicdv/connection.h"
#include "rnicdv/cq.h"
#include "rnicdv/device.h"
#include "rnicdv/pd.h"
#include "rnicdv/qp.h"
#include "rnicdv/sim/sim.h"

namespace rnicdv::test {

using namespace std::chrono_literals;

inline constexpr uint16_t kCmPort = 7471;
inline constexpr uint32_t kMsgBytes = 256;  // as tools/cm-peer

template <class T>
T take(Result<T> r) {
  INFO(r.status().message());
  REQUIRE(r.is_ok());
  return std::move(r).value();
}

inline std::span<const uint8_t> bytes(const char* s) {
  return {reinterpret_cast<const uint8_t*>(s), std::strlen(s)};
}

struct Side {
  std::shared_ptr<sim::Device> sim;
  std::optional<Device> dev;
  std::optional<ProtectionDomain> pd;
  std::optional<CompletionQueue> cq;
  std::optional<QueuePair> qp;
  std::vector<uint8_t> mem;
  std::optional<MemoryRegion> mr;
  // wr_id -> statuses seen (every WR must see exactly one).
  std::map<uint64_t, std::vector<int>> completions;

  std::string ip() const { return sim->address().to_string(); }
  sim::cm::CmAgent& cm() { return sim::cm::cm_agent_of(*sim); }
  sim::QpSnapshot snapshot() const { return sim->qp_snapshot(qp->qpn()).value(); }

  Errc post_send(uint64_t wr_id, uint32_t slot, SendFlags flags = send_flags::signaled) {
    std::memset(mem.data() + slot * kMsgBytes, static_cast<int>(0x40 + wr_id % 64), kMsgBytes);
    Sge sge = mr->sge(slot * kMsgBytes, kMsgBytes);
    SendWr wr;
    wr.wr_id = wr_id;
    wr.opcode = WrOpcode::send;
    wr.flags = flags;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    return qp->post_send(wr);
  }

  Errc post_recv(uint64_t wr_id, uint32_t slot) {
    Sge sge = mr->sge(slot * kMsgBytes, kMsgBytes);
    RecvWr wr;
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    return qp->post_recv(wr);
  }

  // Polls once, recording every completion.
  int poll() {
    Completion wc[32];
    const int n = cq->poll(wc, 32);
    for (int i = 0; i < n; ++i) completions[wc[i].wr_id].push_back(wc[i].status);
    return n;
  }

  size_t completed() const {
    size_t n = 0;
    for (const auto& [id, v] : completions) n += v.size();
    return n;
  }

  // Polls (driving the fabric) until `n` completions in all were seen or `timeout` passes.
  // Polls the CQ (which drives the device) until `n` completions arrived; with `read_async`,
  // the device's asynchronous events are processed too (Device::process_events).
  bool wait_completions(size_t n, std::chrono::milliseconds timeout = 10s, bool read_async = true) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (completed() < n && std::chrono::steady_clock::now() < end) {
      poll();
      if (read_async) dev->process_events();
    }
    return completed() >= n;
  }

  // Every wr_id in [first, first + count) completed exactly once with `status`.
  void check_each_once(uint64_t first, uint64_t count, int status) const {
    for (uint64_t id = first; id < first + count; ++id) {
      INFO("wr_id " << id);
      auto it = completions.find(id);
      REQUIRE(it != completions.end());
      REQUIRE(it->second.size() == 1);
      CHECK(it->second[0] == status);
    }
  }
};

inline std::shared_ptr<sim::Fabric> make_fabric(sim::ExecMode mode = sim::ExecMode::deterministic,
                                                const std::string& pcap = "",
                                                sim::WireKind wire = sim::WireKind::inproc) {
  sim::FabricConfig fc;
  fc.mode = mode;
  fc.wire = wire;
  fc.seed = 7;
  fc.pcap_path = pcap;
  return take(sim::Fabric::create(fc));
}

// `address`: the device's, IPv4 or IPv6 (unspecified: the fabric's next IPv4 one).
inline Side make_side(const std::shared_ptr<sim::Fabric>& fabric, hw::DeviceProfile profile = {},
                      const hw::IpAddress& address = {}) {
  Side s;
  sim::DeviceConfig dc;
  dc.profile = profile;
  dc.address = address;
  s.sim = take(fabric->add_device(dc));
  s.dev.emplace(take(Device::wrap(s.sim)));
  s.pd.emplace(take(s.dev->alloc_pd()));
  s.cq.emplace(take(s.dev->create_cq(256)));
  s.mem.assign(64 * kMsgBytes, 0);
  s.mr.emplace(take(
      s.pd->reg_mr(s.mem.data(), s.mem.size(),
                   hw::access::local_write | hw::access::remote_write | hw::access::remote_read)));
  QpConfig qc;
  qc.caps.max_send_wr = 64;
  qc.caps.max_recv_wr = 64;
  s.qp.emplace(take(s.dev->create_qp(*s.pd, *s.cq, *s.cq, qc)));
  return s;
}

// Fast CM timers for fault tests (virtual time makes the defaults free, but the UDP and
// threaded tests run in real time).
inline ConnectionOptions quick_options(std::chrono::milliseconds timeout = 2000ms) {
  ConnectionOptions o;
  o.timeout = timeout;
  o.max_cm_retries = 4;
  o.ack_timeout = 10;  // 4 ms
  o.retry_count = 3;
  return o;
}

template <class Source>
ConnectionEvent wait_event(Source& src, std::chrono::milliseconds timeout = 10s) {
  std::optional<ConnectionEvent> ev = src.wait_event(timeout);
  INFO("no connection event within the timeout");
  REQUIRE(ev.has_value());
  return std::move(*ev);
}

// Waits on a connection while also processing the device's async events (COMM_EST), one
// engine step at a time: in virtual time an idle wait would otherwise let the CM's timers run
// ahead of the application.
inline std::optional<ConnectionEvent> wait_event_with_async(Connection& c, Device& dev,
                                                            std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    dev.process_events();
    if (auto ev = c.poll_event()) return ev;
  }
  return std::nullopt;
}

}  // namespace rnicdv::test
