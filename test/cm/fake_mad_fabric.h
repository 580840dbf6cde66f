// SPDX-License-Identifier: BSD-3-Clause
// A deterministic stand-in for the simulated fabric's GSI, for the CM state machine alone:
// MADs between agents with a fixed latency, a virtual clock, per-destination loss; and the
// waits and counts the CM tests make on it.
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "cm/cm_agent.h"

namespace rnicdv::test {

class FakeMadFabric {
 public:
  static constexpr uint64_t kLatencyNs = 10'000;

  struct Sent {
    hw::IpAddress src, dst;
    sim::cm::MadBytes mad;
  };

  // A new agent at `ip`.
  std::shared_ptr<sim::cm::CmAgent> add(const hw::IpAddress& ip, uint64_t guid) {
    auto node = std::make_unique<Node>(this, ip);
    sim::cm::CmAgentConfig cfg;
    cfg.address = ip;
    cfg.ca_guid = guid;
    cfg.seed = guid;
    cfg.device_name = "fake" + std::to_string(nodes_.size());
    node->agent = sim::cm::CmAgent::create(cfg, node.get());
    auto agent = node->agent;
    nodes_[ip] = std::move(node);
    return agent;
  }

  uint64_t now() const { return now_; }

  // Runs until `done()` or nothing is left to do before `limit_ns` of virtual time passes.
  bool run_until(const std::function<bool()>& done, uint64_t limit_ns = 600'000'000'000ull) {
    const uint64_t end = now_ + limit_ns;
    while (!done()) {
      if (!step(end)) return done();
    }
    return true;
  }

  // Delivers or fires the next due thing; false when nothing remains before `end`.
  bool step(uint64_t end) {
    uint64_t next = UINT64_MAX;
    if (!in_flight_.empty()) next = in_flight_.begin()->first;
    for (auto& [ip, n] : nodes_)
      if (n->wake_at < next) next = n->wake_at;
    if (next == UINT64_MAX || next > end) return false;
    now_ = std::max(now_, next);
    if (!in_flight_.empty() && in_flight_.begin()->first <= now_) {
      auto it = in_flight_.begin();
      Sent s = it->second;
      in_flight_.erase(it);
      auto dst = nodes_.find(s.dst);
      if (dst != nodes_.end()) dst->second->agent->on_mad(s.src, s.mad);
      return true;
    }
    for (auto& [ip, n] : nodes_) {
      if (n->wake_at <= now_) {
        n->wake_at = UINT64_MAX;
        n->agent->on_timer();
        return true;
      }
    }
    return true;
  }

  // Every MAD handed to the fabric, in order (including those then lost).
  const std::vector<Sent>& log() const { return log_; }
  // Loses everything sent to `ip` (a host that is not there).
  void blackhole(const hw::IpAddress& ip) { blackholes_.push_back(ip); }
  // Hands `mad` to the agent at `dst` as if `src` had sent it.
  void inject(const hw::IpAddress& src, const hw::IpAddress& dst, const sim::cm::MadBytes& mad) {
    in_flight_.emplace(now_ + kLatencyNs, Sent{src, dst, mad});
  }

 private:
  struct Node : sim::cm::MadPort {
    Node(FakeMadFabric* f, const hw::IpAddress& a) : fabric(f), ip(a) {}
    ~Node() override { agent->detach_port(); }
    void send(const hw::IpAddress& dst, const sim::cm::MadBytes& mad) override {
      fabric->log_.push_back({ip, dst, mad});
      for (const hw::IpAddress& b : fabric->blackholes_)
        if (b == dst) return;
      fabric->in_flight_.emplace(fabric->now_ + kLatencyNs, Sent{ip, dst, mad});
    }
    void schedule(uint64_t at) override {
      if (at < wake_at) wake_at = at;
    }
    uint64_t now_ns() const override { return fabric->now_; }
    FakeMadFabric* fabric;
    hw::IpAddress ip;
    uint64_t wake_at = UINT64_MAX;
    std::shared_ptr<sim::cm::CmAgent> agent;
  };

  uint64_t now_ = 1'000'000;
  std::map<hw::IpAddress, std::unique_ptr<Node>> nodes_;
  std::multimap<uint64_t, Sent> in_flight_;
  std::vector<Sent> log_;
  std::vector<hw::IpAddress> blackholes_;
};

// MADs of attribute `attr` that `src` handed to the fabric (lost ones included).
inline size_t count_sent(const FakeMadFabric& fab, sim::cm::AttrId attr,
                         const hw::IpAddress& src) {
  size_t n = 0;
  for (const auto& s : fab.log())
    if (s.src == src && ((s.mad[16] << 8) | s.mad[17]) == static_cast<int>(attr)) ++n;
  return n;
}

// Runs the fabric until `src` (a listener or a connection) has an event, at most `limit_ns`
// of virtual time, and returns it; the test fails if none came.
template <class Source>
hw::CmEvent wait_event(FakeMadFabric& fab, Source& src, uint64_t limit_ns = 600'000'000'000ull) {
  hw::CmEvent ev;
  const bool got = fab.run_until([&] { return src.next_event(&ev); }, limit_ns);
  INFO("no event arrived within " << limit_ns / 1'000'000 << " ms of virtual time");
  REQUIRE(got);
  return ev;
}

}  // namespace rnicdv::test
