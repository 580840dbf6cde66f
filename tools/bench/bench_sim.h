// SPDX-License-Identifier: BSD-3-Clause
// What the benchmark programs that drive simulated HCAs through rnicdv share: set-up helpers
// (failures end the program: this is the control path of a benchmark), a connected QP pair
// on a deterministic in-process fabric, and `measure`, which alternates the repetitions of a
// case and of its baseline.
#pragma once

#include <errno.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "bench_util.h"
#include "rnicdv/rnicdv.h"
#include "rnicdv/sim/sim.h"

namespace rnicdv::bench {

// ---- Set-up helpers (the control path; failures end the program) ----------------------------

[[noreturn]] inline void fail(const std::string& what) {
  std::fprintf(stderr, "%s: %s\n", program_invocation_short_name, what.c_str());
  std::exit(1);
}

template <class T>
T must(Result<T> r, const char* what) {
  if (!r) fail(std::string(what) + ": " + r.status().message());
  return std::move(r).value();
}

inline void must(const Status& s, const char* what) {
  if (!s) fail(std::string(what) + ": " + s.message());
}

struct Options {
  bool smoke = false;
  bool callgrind = false;
  std::set<std::string> only;
  bool wants(const char* group) const { return only.empty() || only.count(group) != 0; }
};

// Escapes the optimiser: the pointed-to memory may be read by someone.
inline void clobber(const void* p) {
  asm volatile("" : : "r"(p) : "memory");
}

// Two simulated HCAs on an in-process fabric (deterministic unless told otherwise): `a` is
// measured, `b` only gives its QPs an endpoint to connect to.
struct SimPair {
  std::shared_ptr<sim::Fabric> fabric;
  std::shared_ptr<sim::Device> hw_a, hw_b;
  std::optional<Device> a, b;
  std::optional<ProtectionDomain> pd_a, pd_b;
  std::vector<uint8_t> buf_a = std::vector<uint8_t>(1 << 16), buf_b = std::vector<uint8_t>(1 << 16);
  std::optional<MemoryRegion> mr_a, mr_b;

  explicit SimPair(sim::ExecMode mode = sim::ExecMode::deterministic) {
    sim::FabricConfig fc;
    fc.mode = mode;
    fc.wire = sim::WireKind::inproc;
    fabric = must(sim::Fabric::create(fc), "fabric");
    hw_a = must(fabric->add_device(), "device a");
    hw_b = must(fabric->add_device(), "device b");
    a.emplace(must(Device::wrap(hw_a), "wrap a"));
    b.emplace(must(Device::wrap(hw_b), "wrap b"));
    pd_a.emplace(must(a->alloc_pd(), "pd a"));
    pd_b.emplace(must(b->alloc_pd(), "pd b"));
    const uint32_t all = hw::access::local_write | hw::access::remote_write |
                         hw::access::remote_read | hw::access::remote_atomic;
    mr_a.emplace(must(pd_a->reg_mr(buf_a.data(), buf_a.size(), all), "mr a"));
    mr_b.emplace(must(pd_b->reg_mr(buf_b.data(), buf_b.size(), all), "mr b"));
  }
};

// A QP on `a` in RTS (or RTR when `stop_in_rtr`) connected to a fresh QP on `b`.
struct Conn {
  std::optional<CompletionQueue> cq, peer_cq;
  std::optional<QueuePair> qp, peer;
};

inline Conn connect(SimPair& s, const QpConfig& config, uint32_t cq_entries, bool stop_in_rtr) {
  Conn c;
  c.cq.emplace(must(s.a->create_cq(cq_entries), "cq"));
  c.peer_cq.emplace(must(s.b->create_cq(cq_entries), "peer cq"));
  c.qp.emplace(must(s.a->create_qp(*s.pd_a, *c.cq, *c.cq, config), "qp"));
  QpConfig peer_config = config;
  peer_config.early_post = EarlyPost::automatic;
  peer_config.doorbell = doorbell::DoorbellMode::automatic;
  c.peer.emplace(must(s.b->create_qp(*s.pd_b, *c.peer_cq, *c.peer_cq, peer_config), "peer qp"));
  must(c.qp->to_init(), "qp INIT");
  must(c.peer->to_init(), "peer INIT");
  must(c.qp->to_rtr(c.peer->local_endpoint(200), hw::Mtu::mtu1024), "qp RTR");
  must(c.peer->to_rtr(c.qp->local_endpoint(100), hw::Mtu::mtu1024), "peer RTR");
  must(c.peer->to_rts(200), "peer RTS");
  if (!stop_in_rtr) must(c.qp->to_rts(100), "qp RTS");
  return c;
}

// ---- Measurement -------------------------------------------------------------------------------

// Alternates the driver's and the baseline's repetitions so that noise hits both alike; each
// repetition runs `ops` operations between two clock reads. `prepare` runs untimed before
// every repetition of either. Under --callgrind, one repetition of each is counted instead.
struct Pairing {
  std::string name, baseline_name, unit;
  uint32_t ops = 0;  // operations per repetition (the divisor)
  std::function<void()> prepare;
  std::function<void()> driver;
  std::function<void()> baseline;
};

inline void measure(const Pairing& p, const Options& o, std::vector<Record>* out) {
  static const Timer timer;
  const int warmup = o.smoke ? 2 : 50;
  const int reps = o.smoke ? 5 : 401;
  for (int i = 0; i < warmup; ++i) {
    p.prepare();
    p.driver();
    p.prepare();
    p.baseline();
  }
  if (o.callgrind) {
    p.prepare();
    count_begin();
    p.driver();
    count_end(p.name, p.ops);
    p.prepare();
    count_begin();
    p.baseline();
    count_end(p.baseline_name, p.ops);
    return;
  }
  std::vector<double> drv, base;
  for (int i = 0; i < reps; ++i) {
    p.prepare();
    uint64_t t0 = timer.now();
    p.driver();
    uint64_t t1 = timer.now();
    drv.push_back(timer.ns(t0, t1) / p.ops);
    p.prepare();
    t0 = timer.now();
    p.baseline();
    t1 = timer.now();
    base.push_back(timer.ns(t0, t1) / p.ops);
  }
  out->push_back({p.name, median(drv), p.unit, p.baseline_name, median(base)});
}

}  // namespace rnicdv::bench
