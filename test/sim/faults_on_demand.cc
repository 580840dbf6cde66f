// SPDX-License-Identifier: BSD-3-Clause
// Faults on demand, the frame rules: a specification picks frames by opcode, QP, direction
// and count, every injected fault is one line of the JSON log, the transport recovers from
// each, and a deterministic run replays its faults from the seed, byte for byte.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "sim_harness.h"

using namespace simtest;

namespace {

std::string temp_path(const char* tag) {
  char path[64];
  std::snprintf(path, sizeof(path), "/tmp/rnicdv-%s-XXXXXX", tag);
  const int fd = ::mkstemp(path);
  if (fd >= 0) ::close(fd);
  return path;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream all;
  all << in.rdbuf();
  return all.str();
}

std::vector<std::string> lines_with(const std::string& log, const std::string& needle) {
  std::vector<std::string> out;
  std::stringstream ss(log);
  std::string line;
  while (std::getline(ss, line))
    if (line.find(needle) != std::string::npos) out.push_back(line);
  return out;
}

constexpr uint32_t kLen = 3000;  // three packets at MTU 1024

// Two hosts under `spec`, connected with a short ACK timeout, writing `n` messages of kLen
// bytes from a to b (every one checked), then `n` SENDs. Returns the fault log's text.
struct Run {
  std::string log_path;
  Pair p;
  Buffer src, dst;

  explicit Run(const std::string& spec, uint64_t seed = 1, std::string log = temp_path("faults-log"),
               const HostOptions& ha = Pair::default_host(),
               const HostOptions& hb = Pair::default_host())
      : log_path(std::move(log)),
        p(
            [&] {
              FabricOptions fo;
              fo.seed = seed;
              fo.fault_spec = "log=" + log_path + "\n" + spec;
              return fo;
            }(),
            ha, hb) {
    ConnectOptions o;
    o.timeout = 8;
    p.connect(o, o);
    src = p.a.reg(16 * kLen);
    dst = p.b.reg(16 * kLen);
  }
  ~Run() { std::remove(log_path.c_str()); }

  void traffic(int n) {
    for (int i = 0; i < n; ++i) {
      fill_pattern(src.data() + i * kLen, kLen, static_cast<uint32_t>(i + 1));
      Sge sge{src.addr(i * kLen), kLen, src.lkey()};
      SendWr wr = make_wr(WrOpcode::rdma_write, &sge, 1, static_cast<uint64_t>(i));
      wr.remote_addr = dst.addr(i * kLen);
      wr.rkey = dst.rkey();
      REQUIRE(p.a.post_and_ring(wr) == Errc::ok);
      REQUIRE(p.wait_send(p.a).status == IBV_WC_SUCCESS);
      REQUIRE(std::memcmp(src.data() + i * kLen, dst.data() + i * kLen, kLen) == 0);
    }
    for (int i = 0; i < n; ++i) {
      REQUIRE(p.b.post_recv(dst, 0, kLen) == Errc::ok);
      Sge sge{src.addr(i * kLen), kLen, src.lkey()};
      REQUIRE(p.a.post_and_ring(make_wr(WrOpcode::send, &sge, 1)) == Errc::ok);
      REQUIRE(p.wait_send(p.a).status == IBV_WC_SUCCESS);
      Completion r = p.wait_recv(p.b);
      REQUIRE(r.status == IBV_WC_SUCCESS);
      CHECK(r.byte_len == kLen);
    }
    p.settle();
  }
  std::string log() const { return slurp(log_path); }
};

}  // namespace

TEST_CASE("drop nth=N picks the Nth frame of the chosen opcode and QP, and RC resends it") {
  Run r("drop nth=2 opcode=write dir=request");
  const uint32_t qpn_b = r.p.b.qp->view().qpn;
  r.traffic(4);
  const std::string log = r.log();
  const auto drops = lines_with(log, "\"fault\":\"drop\"");
  REQUIRE(drops.size() == 1);
  CHECK(drops[0].find("\"op\":\"write\"") != std::string::npos);
  char qpn[32];
  std::snprintf(qpn, sizeof(qpn), "\"qpn\":\"0x%x\"", qpn_b);
  CHECK(drops[0].find(qpn) != std::string::npos);  // the BTH's destination: b's QP
  CHECK(drops[0].find("\"psn\":1") != std::string::npos);  // the second packet of the stream
  CHECK(r.p.a.counters().retransmits >= 1);
  // Nothing else was touched: a selector for another QP fires on nothing.
  Run other("drop p=1 qp=0xabcdef");
  other.traffic(2);
  CHECK(lines_with(other.log(), "\"kind\":\"frame\"").empty());
  CHECK(other.p.a.counters().retransmits == 0);
}

TEST_CASE("every=N with count=M injects exactly M faults, each logged and each survived") {
  Run r("duplicate every=2 count=3 opcode=send");
  r.traffic(4);  // 12 SEND packets: the 2nd, 4th and 6th are sent twice
  const auto dups = lines_with(r.log(), "\"fault\":\"duplicate\"");
  CHECK(dups.size() == 3);
  for (const std::string& l : dups) CHECK(l.find("\"op\":\"send\"") != std::string::npos);
  CHECK(r.p.b.counters().duplicates_rx == 3);  // each copy seen, and dropped, as a duplicate
}

TEST_CASE("dir=response faults only the responder's frames, and the requester recovers") {
  Run r("drop nth=1 dir=response; delay p=0.5 max=300us dir=response; reorder p=0.3 dir=response");
  r.traffic(6);
  const std::string log = r.log();
  const auto frames = lines_with(log, "\"kind\":\"frame\"");
  REQUIRE_FALSE(frames.empty());
  for (const std::string& l : frames) CHECK(l.find("\"op\":\"ack\"") != std::string::npos);
  CHECK(lines_with(log, "\"fault\":\"drop\"").size() == 1);
}

TEST_CASE("corruption by specification is caught by the receiver's ICRC check and resent") {
  Run r("corrupt nth=3 dir=request");
  r.traffic(2);
  CHECK(lines_with(r.log(), "\"fault\":\"corrupt\"").size() == 1);
  CHECK(r.p.fabric->devices().size() == 2);
  CHECK(r.p.a.counters().retransmits >= 1);
}

TEST_CASE("one seed replays the same faults: the log is the same, byte for byte") {
  const std::string spec =
      "drop p=0.1; duplicate p=0.05; reorder p=0.05 hold=30us; corrupt p=0.03; "
      "delay p=0.05 max=100us";
  // One log path, so that the specification each log opens with is the same text.
  const std::string path = temp_path("faults-replay");
  auto run = [&](uint64_t seed) {
    Run r(spec, seed, path);
    r.traffic(8);
    return r.log();
  };
  const std::string first = run(77);
  const std::string second = run(77);
  const std::string other = run(78);
  CHECK(lines_with(first, "\"kind\":\"frame\"").size() >= 5);
  CHECK(first == second);
  CHECK(first != other);
  // The first line states the seed and the specification.
  CHECK(first.rfind("{\"t_ns\":0,\"kind\":\"start\",\"seed\":77,\"spec\":\"log=", 0) == 0);
}

TEST_CASE("the seed: seed= first, then RNICDV_SIM_SEED, then the configuration's") {
  auto seed_of = [](const std::string& spec) {
    sim::FabricConfig c;
    c.mode = sim::ExecMode::deterministic;
    c.seed = 5;
    c.fault_spec = spec;
    auto f = must(sim::Fabric::create(c));
    CHECK(f->faults_active());
    return f->fault_seed();
  };
  ::unsetenv("RNICDV_SIM_SEED");
  CHECK(seed_of("drop p=0.1") == 5);
  ::setenv("RNICDV_SIM_SEED", "0x1234", 1);
  CHECK(seed_of("drop p=0.1") == 0x1234);
  CHECK(seed_of("seed=9; drop p=0.1") == 9);
  ::setenv("RNICDV_SIM_SEED", "12x", 1);
  sim::FabricConfig c;
  c.fault_spec = "drop p=0.1";
  auto bad = sim::Fabric::create(c);
  REQUIRE_FALSE(bad);
  CHECK(bad.status().message().find("RNICDV_SIM_SEED: '12x' is not a whole number") !=
        std::string::npos);
  ::unsetenv("RNICDV_SIM_SEED");
  // No specification: no schedule, nothing stated.
  sim::FabricConfig none;
  none.mode = sim::ExecMode::deterministic;
  CHECK_FALSE(must(sim::Fabric::create(none))->faults_active());
}

TEST_CASE("a bad specification stops the fabric before anything starts, naming the field") {
  sim::FabricConfig c;
  c.mode = sim::ExecMode::deterministic;
  c.fault_spec = "drop p=0.1; reorder hold=5us";
  auto f = sim::Fabric::create(c);
  REQUIRE_FALSE(f);
  CHECK(f.status().code() == Errc::invalid_argument);
  CHECK(f.status().message() ==
        "fabric: configuration: fault spec: clause 2 'reorder hold=5us': say when: p=P (a "
        "probability), nth=N, every=N, or count=N (the first N)");
}

TEST_CASE("the fault log sits beside the pcap, named after it") {
  const std::string pcap = temp_path("faults-pcap") + ".pcap";
  {
    FabricOptions fo;
    fo.pcap_path = pcap;
    fo.fault_spec = "drop nth=1";
    Pair p(fo);
    p.connect();
    CHECK(p.fabric->fault_log_path() == pcap.substr(0, pcap.size() - 5) + ".faults.jsonl");
  }
  const std::string log = slurp(pcap.substr(0, pcap.size() - 5) + ".faults.jsonl");
  CHECK(log.find("\"kind\":\"start\"") != std::string::npos);
  std::remove(pcap.c_str());
  std::remove((pcap.substr(0, pcap.size() - 5) + ".faults.jsonl").c_str());
}

TEST_CASE("a threaded fabric's log counts time from its own start, as a deterministic one does") {
  const std::string path = temp_path("faults-threaded");
  {
    FabricOptions fo;
    fo.mode = sim::ExecMode::threaded;
    fo.fault_spec = "log=" + path + "; drop nth=1 opcode=write";
    Pair p(fo);
    p.connect();
    Buffer src = p.a.reg(4096), dst = p.b.reg(4096);
    Sge sge{src.addr(), 4096, src.lkey()};
    SendWr wr = make_wr(WrOpcode::rdma_write, &sge, 1);
    wr.remote_addr = dst.addr();
    wr.rkey = dst.rkey();
    REQUIRE(p.a.post_and_ring(wr) == Errc::ok);
    Completion c{};
    REQUIRE(wait_real([&] { return p.a.poll_send(&c); }));
    CHECK(c.status == IBV_WC_SUCCESS);
  }
  const auto drops = lines_with(slurp(path), "\"fault\":\"drop\"");
  REQUIRE(drops.size() == 1);
  const uint64_t t = std::stoull(drops[0].substr(std::strlen("{\"t_ns\":")));
  CHECK(t < 60'000'000'000ull);  // seconds into the run, not the machine's uptime
  std::remove(path.c_str());
}

TEST_CASE("addr= picks a device by its address, for wr, link and CM rules alike") {
  // The addresses are the wire's choice; a first fabric learns them, a second uses them (the
  // same configuration picks the same addresses).
  std::string ip_a, ip_b;
  {
    Pair p;
    auto ip = [](uint32_t a) {
      return std::to_string(a >> 24) + "." + std::to_string((a >> 16) & 0xff) + "." +
             std::to_string((a >> 8) & 0xff) + "." + std::to_string(a & 0xff);
    };
    ip_a = ip(p.a.dev->ipv4());
    ip_b = ip(p.b.dev->ipv4());
  }
  REQUIRE(ip_a != ip_b);
  // A responder-side status at a's address: a receives no request, so nothing fires.
  {
    Run r("wr status=remote_access opcode=send addr=" + ip_a);
    r.traffic(2);
    CHECK(lines_with(r.log(), "\"kind\":\"wr\"").empty());
  }
  // At b's address: b answers a's first SEND with the NAK.
  {
    FabricOptions fo;
    fo.fault_spec = "wr status=remote_access opcode=send addr=" + ip_b;
    Pair p(fo);
    p.connect();
    Buffer src = p.a.reg(256), dst = p.b.reg(256);
    REQUIRE(p.b.post_recv(dst, 0, 256) == Errc::ok);
    Sge sge{src.addr(), 256, src.lkey()};
    REQUIRE(p.a.post_and_ring(make_wr(WrOpcode::send, &sge, 1)) == Errc::ok);
    CHECK(p.wait_send(p.a).status == IBV_WC_REM_ACCESS_ERR);
  }
  // A link rule: only the device at that address goes down.
  {
    FabricOptions fo;
    fo.fault_spec = "port-down at=1ms addr=" + ip_b;
    Pair p(fo);
    p.fabric->run_until([] { return false; }, 2'000'000);
    CHECK(p.a.dev->port_state() == sim::PortState::active);
    CHECK(p.b.dev->port_state() == sim::PortState::down);
  }
}

TEST_CASE("from=, to= and addr= name the devices of an IPv6 fabric") {
  auto host = [](const char* address) {
    HostOptions o = Pair::default_host();
    o.device.address = must(hw::IpAddress::parse(address));
    return o;
  };
  // To b's address: the first WRITE packet is dropped, logged with both addresses, and resent.
  {
    Run r("drop nth=1 opcode=write to=fd00::2 from=fd00::1", 1, temp_path("faults-log"),
          host("fd00::1"), host("fd00::2"));
    r.traffic(2);
    const auto drops = lines_with(r.log(), "\"fault\":\"drop\"");
    REQUIRE(drops.size() == 1);
    CHECK(drops[0].find("\"src\":\"fd00::1\"") != std::string::npos);
    CHECK(drops[0].find("\"dst\":\"fd00::2\"") != std::string::npos);
    CHECK(drops[0].find("\"op\":\"write\"") != std::string::npos);
    CHECK(r.p.a.counters().retransmits >= 1);
  }
  // No WRITE goes to a, and b sends no request: rules that say so fire on nothing, and
  // neither does an IPv4 address of the same low bytes.
  {
    Run r("drop p=1 opcode=write to=fd00::1; drop p=1 from=fd00::2 dir=request; "
          "drop p=1 to=0.0.0.2",
          1, temp_path("faults-log"), host("fd00::1"), host("fd00::2"));
    r.traffic(2);
    CHECK(lines_with(r.log(), "\"kind\":\"frame\"").empty());
    CHECK(r.p.a.counters().retransmits == 0);
  }
  // A link rule: only the device at that address goes down.
  {
    FabricOptions fo;
    fo.fault_spec = "port-down at=1ms addr=fd00::2";
    Pair p(fo, host("fd00::1"), host("fd00::2"));
    p.fabric->run_until([] { return false; }, 2'000'000);
    CHECK(p.a.dev->port_state() == sim::PortState::active);
    CHECK(p.b.dev->port_state() == sim::PortState::down);
  }
}
