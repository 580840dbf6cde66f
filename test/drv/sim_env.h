// SPDX-License-Identifier: BSD-3-Clause
// Test environment for the drv suite: two simulated HCAs on one in-process fabric, each with
// a PD, one CQ, one registered buffer and an RC QP, and helpers to connect them and to wait
// for completions. Deterministic fabrics advance only inside poll() (the progress hook) or
// Fabric::step(), so every test is reproducible.
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rnicdv/rnicdv.h"
#include "rnicdv/sim/sim.h"

namespace rnicdv::test {

inline hw::DeviceProfile mlx5_profile() {
  hw::DeviceProfile p;
  p.fetches_beyond_dbr = false;
  p.keeps_rtr_doorbell = true;
  return p;
}

inline hw::DeviceProfile scanning_profile() {
  hw::DeviceProfile p;
  p.fetches_beyond_dbr = true;
  p.keeps_rtr_doorbell = true;
  return p;
}

inline std::string profile_label(const hw::DeviceProfile& p) {
  return sim::profile_name(p);
}

// Where the end-to-end tests of every opcode put their buffers in a Node's memory.
inline constexpr size_t kSrc = 0x0000;     // a: payload source
inline constexpr size_t kLocal = 0x4000;   // a: READ / atomic destination
inline constexpr size_t kDst = 0x1000;     // b: WRITE / READ / receive target
inline constexpr size_t kAtomic = 0x8000;  // b: 8-byte atomic operand

// A byte pattern that differs with `seed` and along the buffer.
inline void fill(uint8_t* p, size_t n, uint8_t seed) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(seed + i * 7);
}

// Unwraps a Result, failing the test with its message otherwise.
template <class T>
T take(Result<T> r) {
  INFO(r.status().message());
  REQUIRE(r.is_ok());
  return std::move(r).value();
}

inline void check(const Status& s) {
  INFO(s.message());
  REQUIRE(s.is_ok());
}

inline std::shared_ptr<sim::Fabric> make_fabric(sim::ExecMode mode = sim::ExecMode::deterministic) {
  sim::FabricConfig config;
  config.mode = mode;
  config.wire = sim::WireKind::inproc;
  config.seed = 7;
  return take(sim::Fabric::create(config));
}

struct Node {
  std::vector<uint8_t> mem;  // first: outlives every object that lets the device touch it
  std::shared_ptr<sim::Device> sim;
  std::optional<Device> dev;
  std::optional<ProtectionDomain> pd;
  std::optional<CompletionQueue> cq;
  std::optional<QueuePair> qp;
  std::optional<MemoryRegion> mr;

  uint8_t* bytes(size_t offset = 0) { return mem.data() + offset; }
  Sge sge(size_t offset, uint32_t len) const { return mr->sge(offset, len); }
  uint64_t addr(size_t offset = 0) const { return mr->addr() + offset; }
  uint32_t rkey() const { return mr->rkey(); }
  sim::QpSnapshot snapshot() const { return take(sim->qp_snapshot(qp->qpn())); }
  sim::DeviceCounters counters() const { return sim->counters(); }
};

inline QpConfig default_qp_config() {
  QpConfig c;
  c.caps.max_send_wr = 64;
  c.caps.max_recv_wr = 64;
  c.caps.max_send_sge = 4;
  c.caps.max_recv_sge = 4;
  c.caps.max_inline_data = 64;
  c.threading = Threading::single;
  return c;
}

inline Node make_node(const std::shared_ptr<sim::Fabric>& fabric, const hw::DeviceProfile& profile,
                      const QpConfig& config, size_t mem_bytes = 1 << 16, uint32_t cq_entries = 256,
                      const hw::IpAddress& address = {}) {
  sim::DeviceConfig dc;
  dc.profile = profile;
  dc.address = address;
  Node n;
  n.sim = take(fabric->add_device(dc));
  n.dev.emplace(take(Device::wrap(n.sim)));
  n.pd.emplace(take(n.dev->alloc_pd()));
  n.cq.emplace(take(n.dev->create_cq(cq_entries)));
  n.mem.assign(mem_bytes, 0);
  n.mr.emplace(take(n.pd->reg_mr(n.mem.data(), n.mem.size(),
                                 hw::access::local_write | hw::access::remote_write |
                                     hw::access::remote_read | hw::access::remote_atomic)));
  n.qp.emplace(take(n.dev->create_qp(*n.pd, *n.cq, *n.cq, config)));
  return n;
}

struct Pair {
  std::shared_ptr<sim::Fabric> fabric;
  Node a, b;
};

inline constexpr uint32_t kPsnA = 0x1000;
inline constexpr uint32_t kPsnB = 0x2000;

// Both QPs to INIT, then to RTR facing each other. Neither reaches RTS.
inline void to_rtr(Pair& p) {
  check(p.a.qp->to_init());
  check(p.b.qp->to_init());
  check(p.a.qp->to_rtr(p.b.qp->local_endpoint(kPsnB), hw::Mtu::mtu1024));
  check(p.b.qp->to_rtr(p.a.qp->local_endpoint(kPsnA), hw::Mtu::mtu1024));
}

inline void to_rts(Node& n, uint32_t psn) {
  check(n.qp->to_rts(psn));
}

inline Pair make_pair(const hw::DeviceProfile& profile,
                      const QpConfig& config = default_qp_config(),
                      sim::ExecMode mode = sim::ExecMode::deterministic) {
  Pair p;
  p.fabric = make_fabric(mode);
  p.a = make_node(p.fabric, profile, config);
  p.b = make_node(p.fabric, profile, config);
  return p;
}

// Both sides connected and in RTS.
inline Pair make_connected_pair(const hw::DeviceProfile& profile,
                                const QpConfig& config = default_qp_config(),
                                sim::ExecMode mode = sim::ExecMode::deterministic) {
  Pair p = make_pair(profile, config, mode);
  to_rtr(p);
  to_rts(p.b, kPsnB);
  to_rts(p.a, kPsnA);
  return p;
}

// One receive of `len` bytes at `offset` of the node's memory, on its QP's own queue.
inline void post_receive(Node& n, uint64_t wr_id, size_t offset, uint32_t len) {
  const Sge sge = n.sge(offset, len);
  RecvWr wr;
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  REQUIRE(n.qp->post_recv(wr) == Errc::ok);
}

// Polls `cq` (which runs the fabric through the progress hook) until `want` completions have
// arrived or `max_virtual_ns` of virtual time has passed. Returns what arrived.
inline std::vector<Completion> poll_n(sim::Fabric& fabric, CompletionQueue& cq, size_t want,
                                      uint64_t max_virtual_ns = 2'000'000'000ull) {
  std::vector<Completion> got;
  Completion batch[16];
  // Drain everything ready on each call: run_until stops calling once the fabric is idle.
  fabric.run_until(
      [&] {
        for (int n; (n = cq.poll(batch, 16)) > 0;) got.insert(got.end(), batch, batch + n);
        return got.size() >= want;
      },
      max_virtual_ns);
  return got;
}

// Runs the fabric for a while and returns every completion that shows up meanwhile.
inline std::vector<Completion> poll_for(sim::Fabric& fabric, CompletionQueue& cq,
                                        uint64_t virtual_ns = 50'000'000ull) {
  std::vector<Completion> got;
  Completion batch[16];
  fabric.run_until(
      [&] {
        for (int n; (n = cq.poll(batch, 16)) > 0;) got.insert(got.end(), batch, batch + n);
        return false;
      },
      virtual_ns);
  for (int n; (n = cq.poll(batch, 16)) > 0;) got.insert(got.end(), batch, batch + n);
  return got;
}

// Steps the fabric `times` times without polling any CQ.
inline void step(sim::Fabric& fabric, int times = 32) {
  for (int i = 0; i < times; ++i) fabric.step();
}

inline SendWr write_wr(uint64_t wr_id, const Sge* sge, uint32_t num_sge, uint64_t remote_addr,
                       uint32_t rkey, SendFlags flags = send_flags::signaled) {
  SendWr wr;
  wr.wr_id = wr_id;
  wr.opcode = WrOpcode::rdma_write;
  wr.flags = flags;
  wr.sg_list = sge;
  wr.num_sge = num_sge;
  wr.remote_addr = remote_addr;
  wr.rkey = rkey;
  return wr;
}

inline SendWr send_wr(uint64_t wr_id, const Sge* sge, uint32_t num_sge,
                      SendFlags flags = send_flags::signaled) {
  SendWr wr;
  wr.wr_id = wr_id;
  wr.opcode = WrOpcode::send;
  wr.flags = flags;
  wr.sg_list = sge;
  wr.num_sge = num_sge;
  return wr;
}

}  // namespace rnicdv::test
