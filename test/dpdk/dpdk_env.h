// SPDX-License-Identifier: BSD-3-Clause
// Test environment for the dpdk suite: two simulated HCAs on a fabric whose wire is the DPDK
// ethdev wire (the in-process net_ring link unless told otherwise), the traffic that puts
// every RC opcode on it, and a reader for the capture it writes.
//
// Every test in the suite skips (exit 77, with the reason on stdout) where rnicdv was built
// without libdpdk: the check runs before main.
#pragma once

#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "../drv/sim_env.h"
#include "rnicdv_config.h"

namespace rnicdv::test {

inline bool skip_without_dpdk() {
  if (!RNICDV_HAVE_DPDK) {
    std::printf("skipped: rnicdv was built without libdpdk (install libdpdk-dev, reconfigure)\n");
    std::fflush(stdout);
    std::_Exit(77);
  }
  return true;
}
inline const bool kDpdkBuilt = skip_without_dpdk();

// A capture file path unique to this process, removed by the destructor.
struct TempPcap {
  explicit TempPcap(const std::string& tag)
      : path("/tmp/rnicdv-dpdk-" + tag + "-" + std::to_string(::getpid()) + ".pcap") {}
  ~TempPcap() { std::remove(path.c_str()); }
  std::string path;
};

inline std::shared_ptr<sim::Fabric> make_dpdk_fabric(const std::string& pcap_path = "",
                                                     const sim::FaultConfig& faults = {},
                                                     const std::string& dpdk_args = "") {
  sim::FabricConfig config;
  config.mode = sim::ExecMode::deterministic;
  config.wire = sim::WireKind::dpdk;
  config.seed = 11;
  config.faults = faults;
  config.pcap_path = pcap_path;
  config.dpdk_args = dpdk_args;
  return take(sim::Fabric::create(config));
}

// `address_a` and `address_b` (unspecified: the link's own 10.77.0.x) are the devices'.
inline Pair make_dpdk_pair(const std::string& pcap_path = "", const sim::FaultConfig& faults = {},
                           const hw::IpAddress& address_a = {},
                           const hw::IpAddress& address_b = {}) {
  Pair p;
  p.fabric = make_dpdk_fabric(pcap_path, faults);
  p.a = make_node(p.fabric, mlx5_profile(), default_qp_config(), 1 << 16, 256, address_a);
  p.b = make_node(p.fabric, mlx5_profile(), default_qp_config(), 1 << 16, 256, address_b);
  to_rtr(p);  // MTU 1024
  to_rts(p.b, kPsnB);
  to_rts(p.a, kPsnA);
  return p;
}

// The frames of a pcap file (LINKTYPE_ETHERNET, either timestamp resolution, host order).
inline std::vector<std::vector<uint8_t>> read_pcap(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  std::vector<uint8_t> file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(file.size() >= 24);
  uint32_t magic, linktype;
  std::memcpy(&magic, file.data(), 4);
  std::memcpy(&linktype, file.data() + 20, 4);
  REQUIRE((magic == 0xA1B23C4Du || magic == 0xA1B2C3D4u));
  REQUIRE(linktype == 1);
  std::vector<std::vector<uint8_t>> frames;
  size_t at = 24;
  while (at + 16 <= file.size()) {
    uint32_t incl, orig;
    std::memcpy(&incl, file.data() + at + 8, 4);
    std::memcpy(&orig, file.data() + at + 12, 4);
    REQUIRE(incl == orig);
    REQUIRE(at + 16 + incl <= file.size());
    frames.emplace_back(file.begin() + static_cast<long>(at + 16),
                        file.begin() + static_cast<long>(at + 16 + incl));
    at += 16 + incl;
  }
  REQUIRE(at == file.size());
  return frames;
}

inline void fill_pattern(uint8_t* p, size_t n, uint8_t seed) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(seed + i * 13);
}

inline Completion one_completion(Pair& p, Node& n) {
  auto got = poll_n(*p.fabric, *n.cq, 1);
  REQUIRE(got.size() == 1);
  INFO("wr_id " << got[0].wr_id << " status " << int{got[0].status});
  REQUIRE(got[0].status == IBV_WC_SUCCESS);
  return got[0];
}

// Runs every RC operation the driver posts, single-packet and (at MTU 1024) three-packet,
// checking data and completions. Between them they put every RC opcode from SEND_FIRST
// (0x00) to FETCH_ADD (0x14) on the wire.
inline void run_every_rc_opcode(Pair& p) {
  Node& a = p.a;
  Node& b = p.b;
  uint64_t id = 1;
  for (const uint32_t len : {100u, 3000u}) {
    INFO("message length " << len);
    // SEND, SEND with immediate.
    for (const WrOpcode op : {WrOpcode::send, WrOpcode::send_imm}) {
      fill_pattern(a.bytes(kSrc), len, static_cast<uint8_t>(id));
      post_receive(b, 1000 + id, kDst, 4096);
      const Sge sge = a.sge(kSrc, len);
      SendWr wr = send_wr(id, &sge, 1);
      wr.opcode = op;
      wr.imm_data = 0xC0DE0000u + static_cast<uint32_t>(id);
      REQUIRE(a.qp->post_send(wr) == Errc::ok);
      CHECK(one_completion(p, a).wr_id == id);
      const Completion r = one_completion(p, b);
      CHECK(r.wr_id == 1000 + id);
      CHECK(r.byte_len == len);
      if (op == WrOpcode::send_imm) {
        CHECK((r.flags & wc_flags::with_imm) != 0);
        CHECK(r.imm_data == wr.imm_data);
      }
      CHECK(std::memcmp(b.bytes(kDst), a.bytes(kSrc), len) == 0);
      ++id;
    }
    // RDMA WRITE, RDMA WRITE with immediate (consumes a receive).
    for (const WrOpcode op : {WrOpcode::rdma_write, WrOpcode::rdma_write_imm}) {
      fill_pattern(a.bytes(kSrc), len, static_cast<uint8_t>(id));
      if (op == WrOpcode::rdma_write_imm) post_receive(b, 1000 + id, kDst, 16);
      const Sge sge = a.sge(kSrc, len);
      SendWr wr = write_wr(id, &sge, 1, b.addr(kDst), b.rkey());
      wr.opcode = op;
      wr.imm_data = 0xBEEF0000u + static_cast<uint32_t>(id);
      REQUIRE(a.qp->post_send(wr) == Errc::ok);
      CHECK(one_completion(p, a).wr_id == id);
      if (op == WrOpcode::rdma_write_imm) {
        const Completion r = one_completion(p, b);
        CHECK(r.imm_data == wr.imm_data);
      } else {
        // The ACK has come back, so the data has been placed.
      }
      CHECK(std::memcmp(b.bytes(kDst), a.bytes(kSrc), len) == 0);
      ++id;
    }
    // RDMA READ.
    fill_pattern(b.bytes(kDst), len, static_cast<uint8_t>(id));
    const Sge sge = a.sge(kLocal, len);
    SendWr rd = write_wr(id, &sge, 1, b.addr(kDst), b.rkey());
    rd.opcode = WrOpcode::rdma_read;
    REQUIRE(a.qp->post_send(rd) == Errc::ok);
    const Completion c = one_completion(p, a);
    CHECK(c.byte_len == len);
    CHECK(std::memcmp(a.bytes(kLocal), b.bytes(kDst), len) == 0);
    ++id;
  }
  // Atomics: compare-and-swap, then fetch-and-add.
  uint64_t operand = 41;
  std::memcpy(b.bytes(kAtomic), &operand, 8);
  const Sge result = a.sge(kLocal, 8);
  SendWr cas = write_wr(id, &result, 1, b.addr(kAtomic), b.rkey());
  cas.opcode = WrOpcode::atomic_cmp_swap;
  cas.compare_add = 41;
  cas.swap = 1000;
  REQUIRE(a.qp->post_send(cas) == Errc::ok);
  one_completion(p, a);
  uint64_t got = 0;
  std::memcpy(&got, a.bytes(kLocal), 8);
  CHECK(got == 41);
  SendWr fadd = write_wr(++id, &result, 1, b.addr(kAtomic), b.rkey());
  fadd.opcode = WrOpcode::atomic_fetch_add;
  fadd.compare_add = 5;
  REQUIRE(a.qp->post_send(fadd) == Errc::ok);
  one_completion(p, a);
  std::memcpy(&got, a.bytes(kLocal), 8);
  CHECK(got == 1000);
  std::memcpy(&got, b.bytes(kAtomic), 8);
  CHECK(got == 1005);
}

// BTH opcodes (byte 42 of a RoCEv2 frame over IPv4) seen in `frames`.
inline std::set<int> bth_opcodes(const std::vector<std::vector<uint8_t>>& frames) {
  std::set<int> seen;
  for (const auto& f : frames)
    if (f.size() > 42) seen.insert(f[42]);
  return seen;
}

}  // namespace rnicdv::test
