// SPDX-License-Identifier: BSD-3-Clause
// The QP attributes a RoCE deployment sets, as the simulated HCA honours them: the address
// vector's traffic class and hop limit in every frame's IP header (checked in tshark's
// decoding of the capture), the values it refuses, the retry and RNR counts exhausted after
// the time their timers imply, and the send rate limit (packet pacing). Times are the
// deterministic fabric's virtual clock, so the bounds are exact, whatever the machine's load.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <map>
#include <sstream>
#include <vector>

#include "rc/pacer.h"
#include "sim_harness.h"
#include "tshark.h"

using namespace simtest;
using rnicdv::test::skip_without_tshark;
using rnicdv::test::tshark;

namespace {

std::string temp_dir() {
  char dir[] = "/tmp/rnicdv-qos-XXXXXX";
  REQUIRE(::mkdtemp(dir) != nullptr);
  return dir;
}

// One WRITE of `len` bytes from a to b, waited for; returns the virtual time it took.
uint64_t timed_write(Pair& p, Buffer& src, Buffer& dst, uint32_t len) {
  Sge sge{src.addr(), len, src.lkey()};
  SendWr w = make_wr(WrOpcode::rdma_write, &sge, 1);
  w.remote_addr = dst.addr();
  w.rkey = dst.rkey();
  const uint64_t start = p.fabric->now_ns();
  REQUIRE(p.a.post_and_ring(w) == Errc::ok);
  REQUIRE(p.wait_send(p.a).status == IBV_WC_SUCCESS);
  return p.fabric->now_ns() - start;
}

// The bytes of Ethernet frames a WRITE of `len` bytes at MTU 1024 puts on the link: per
// packet 14 + 20 + 8 (Ethernet, IPv4, UDP), 12 BTH, 4 ICRC, the payload, and a 16-byte RETH
// on the first.
uint64_t write_frame_bytes(uint32_t len) {
  const uint32_t packets = (len + 1023) / 1024;
  return uint64_t{len} + packets * (14 + 20 + 8 + 12 + 4) + 16;
}

}  // namespace

TEST_CASE("the traffic class and hop limit are the TOS and TTL of every frame the QP sends") {
  skip_without_tshark();
  const std::string dir = temp_dir();
  const std::string pcap = dir + "/qos.pcap";
  uint32_t a_ip = 0, b_ip = 0;
  {
    FabricOptions fo;
    fo.pcap_path = pcap;
    Pair p(fo);
    ConnectOptions oa, ob;
    oa.mtu = ob.mtu = hw::Mtu::mtu1024;
    oa.traffic_class = 0xB9;  // DSCP 46 (EF), ECN 01 (ECT(1))
    oa.hop_limit = 7;
    ob.traffic_class = 0x68;  // DSCP 26 (AF31), not ECN-capable
    ob.hop_limit = 0;         // 0: the default, 64
    p.connect(oa, ob);
    a_ip = p.a.dev->ipv4();
    b_ip = p.b.dev->ipv4();
    Buffer src = p.a.reg(8192, all_remote(), 0x5a);
    Buffer dst = p.b.reg(8192);
    timed_write(p, src, dst, 5000);  // five packets one way, ACKs the other
    Sge sge{src.addr(), 3000, src.lkey()};
    SendWr r = make_wr(WrOpcode::rdma_read, &sge, 1);
    r.remote_addr = dst.addr();
    r.rkey = dst.rkey();
    REQUIRE(p.a.post_and_ring(r) == Errc::ok);  // READ responses come from b's QP
    REQUIRE(p.wait_send(p.a).status == IBV_WC_SUCCESS);
    p.settle();
  }
  const std::string out = tshark(pcap, "-T fields -e ip.src -e ip.dsfield.dscp -e ip.dsfield.ecn "
                                       "-e ip.ttl -e infiniband.bth.opcode");
  std::istringstream lines(out);
  std::string line;
  std::map<std::string, int> seen;  // "src dscp ecn ttl" -> frames
  int frames = 0;
  while (std::getline(lines, line)) {
    std::istringstream f(line);
    std::string src, dscp, ecn, ttl, opcode;
    f >> src >> dscp >> ecn >> ttl >> opcode;
    if (opcode.empty()) continue;
    ++seen[src + " " + dscp + " " + ecn + " " + ttl];
    ++frames;
  }
  auto dotted = [](uint32_t ip) {
    return std::to_string(ip >> 24) + "." + std::to_string((ip >> 16) & 255) + "." +
           std::to_string((ip >> 8) & 255) + "." + std::to_string(ip & 255);
  };
  INFO(out);
  REQUIRE(frames >= 10);
  REQUIRE(seen.size() == 2);  // each side's frames all carry its own class
  CHECK(seen.count(dotted(a_ip) + " 46 1 7") == 1);
  CHECK(seen.count(dotted(b_ip) + " 26 0 64") == 1);
  ::unlink(pcap.c_str());
  ::rmdir(dir.c_str());
}

TEST_CASE("address vector values out of range are refused, naming the value") {
  Pair p;
  to_init(p.a);
  hw::QpAttr a;
  a.state = hw::QpState::rtr;
  a.path_mtu = hw::Mtu::mtu1024;
  a.dest_qpn = p.b.qpn();
  a.remote_gid = hw::Gid::from_ipv4(p.b.dev->ipv4());
  const uint32_t mask = hw::qp_attr::state | hw::qp_attr::av | hw::qp_attr::path_mtu |
                        hw::qp_attr::dest_qpn | hw::qp_attr::rq_psn |
                        hw::qp_attr::max_dest_rd_atomic | hw::qp_attr::min_rnr_timer;
  a.sl = 16;
  Status st = p.a.modify(a, mask);
  CHECK(st.code() == Errc::invalid_argument);
  CHECK_THAT(st.message(), Catch::Contains("sl 16 is not 0..15"));
  a.sl = 15;
  a.flow_label = 0x100000;
  st = p.a.modify(a, mask);
  CHECK(st.code() == Errc::invalid_argument);
  CHECK_THAT(st.message(), Catch::Contains("flow_label 1048576 is wider than 20 bits"));
  CHECK(p.a.snapshot().state == hw::QpState::init);  // nothing was half applied
  a.flow_label = 0xFFFFF;  // kept, though the IPv4 header has no field for it
  a.traffic_class = 0xFF;
  a.hop_limit = 255;
  REQUIRE(p.a.modify(a, mask));
}

TEST_CASE("retry_cnt is exhausted after retry_cnt + 1 local ACK timeouts") {
  // Every frame is lost: the requester sends, waits 4.096 us * 2^timeout, and tries again
  // retry_cnt times before RETRY_EXC_ERR.
  FabricOptions fo;
  fo.fault_spec = "drop p=1";
  Pair p(fo);
  ConnectOptions o;
  o.timeout = 12;  // 16.8 ms
  o.retry_cnt = 3;
  p.connect(o, o);
  Buffer src = p.a.reg(4096);
  Buffer dst = p.b.reg(4096);
  Sge sge{src.addr(), 64, src.lkey()};
  SendWr w = make_wr(WrOpcode::rdma_write, &sge, 1);
  w.remote_addr = dst.addr();
  w.rkey = dst.rkey();
  const uint64_t start = p.fabric->now_ns();
  REQUIRE(p.a.post_and_ring(w) == Errc::ok);
  const Completion c = p.wait_send(p.a);
  const uint64_t elapsed = p.fabric->now_ns() - start;
  CHECK(c.status == IBV_WC_RETRY_EXC_ERR);
  const uint64_t timeout_ns = uint64_t{4096} << 12;
  INFO("elapsed " << elapsed << " ns, one timeout " << timeout_ns << " ns");
  CHECK(elapsed >= 4 * timeout_ns);
  CHECK(elapsed < 4 * timeout_ns + timeout_ns / 2);
}

TEST_CASE("rnr_retry is exhausted after rnr_retry waits of the responder's RNR timer") {
  // No receive is ever posted: each SEND draws an RNR NAK carrying b's min_rnr_timer (code
  // 14, 1.28 ms), which a waits out before sending again, rnr_retry times.
  Pair p;
  ConnectOptions oa, ob;
  oa.rnr_retry = 3;
  ob.min_rnr_timer = 14;
  p.connect(oa, ob);
  Buffer src = p.a.reg(4096);
  Sge sge{src.addr(), 64, src.lkey()};
  const uint64_t start = p.fabric->now_ns();
  REQUIRE(p.a.post_and_ring(make_wr(WrOpcode::send, &sge, 1)) == Errc::ok);
  const Completion c = p.wait_send(p.a);
  const uint64_t elapsed = p.fabric->now_ns() - start;
  CHECK(c.status == IBV_WC_RNR_RETRY_EXC_ERR);
  CHECK(p.a.snapshot().rnr_naks_rx == 4);
  INFO("elapsed " << elapsed << " ns");
  CHECK(elapsed >= 3 * 1'280'000u);
  CHECK(elapsed < 3 * 1'280'000u + 640'000u);
}

TEST_CASE("a rate-limited QP sends at its limit, and lifting the limit lets it run free") {
  Pair p;
  ConnectOptions o;
  o.mtu = hw::Mtu::mtu1024;
  p.connect(o, o);
  Buffer src = p.a.reg(1 << 20, all_remote(), 1);
  Buffer dst = p.b.reg(1 << 20);
  const uint32_t len = 256 * 1024;
  const uint64_t free_ns = timed_write(p, src, dst, len);
  for (uint32_t kbps : {10'000u, 100'000u, 1'000'000u}) {
    REQUIRE(p.a.qp->set_rate_limit(hw::RateLimit{kbps, 0, 0}));
    const uint64_t ns = timed_write(p, src, dst, len);
    // Frame bytes * 8 bits at kbps * 1000 bits/s; the first frame goes at once.
    const double expected = static_cast<double>(write_frame_bytes(len)) * 8e6 / kbps;
    INFO(kbps << " kb/s: " << ns << " ns, expected about " << expected << " ns");
    CHECK(ns > expected * 0.95);
    CHECK(ns < expected * 1.05);
  }
  REQUIRE(p.a.qp->set_rate_limit(hw::RateLimit{}));
  CHECK(timed_write(p, src, dst, len) <= free_ns * 2);
}

TEST_CASE("a burst allowance lets an idle rate-limited QP send that much at once") {
  Pair p;
  ConnectOptions o;
  o.mtu = hw::Mtu::mtu1024;
  p.connect(o, o);
  Buffer src = p.a.reg(65536, all_remote(), 1);
  Buffer dst = p.b.reg(65536);
  // 16 KiB at 10 Mb/s takes about 13 ms one frame at a time; with a 64 KiB burst the whole
  // WRITE leaves at once.
  REQUIRE(p.a.qp->set_rate_limit(hw::RateLimit{10'000, 0, 0}));
  const uint64_t paced = timed_write(p, src, dst, 16384);
  REQUIRE(p.a.qp->set_rate_limit(hw::RateLimit{10'000, 65536, 0}));
  p.fabric->run_until([] { return false; }, 100'000'000);  // idle: the credit fills
  const uint64_t burst = timed_write(p, src, dst, 16384);
  INFO("paced " << paced << " ns, with a burst " << burst << " ns");
  CHECK(paced > 12'500'000);  // every frame but the first waits its turn
  CHECK(burst < paced / 10);
}

TEST_CASE("rate limits outside the device's range are refused, naming the range") {
  Pair p;
  const hw::DeviceCaps& caps = p.a.dev->info().caps;
  REQUIRE(caps.rate_limit_min_kbps == 1000);
  REQUIRE(caps.rate_limit_max_kbps == 100'000'000);
  Status st = p.a.qp->set_rate_limit(hw::RateLimit{999, 0, 0});
  CHECK(st.code() == Errc::invalid_argument);
  CHECK_THAT(st.message(), Catch::Contains("999 kb/s is outside the device's 1000..100000000"));
  st = p.a.qp->set_rate_limit(hw::RateLimit{100'000'001, 0, 0});
  CHECK(st.code() == Errc::invalid_argument);
  st = p.a.qp->set_rate_limit(hw::RateLimit{1000, (1u << 20) + 1, 0});
  CHECK(st.code() == Errc::invalid_argument);
  CHECK_THAT(st.message(), Catch::Contains("burst of 1048577 bytes"));
  CHECK(p.a.qp->set_rate_limit(hw::RateLimit{1000, 1u << 20, 0}));
}

// The pacer alone, driven as a device that runs `late_ns` after each deadline it files.
namespace {

struct PacedRun {
  uint64_t end_ns = 0;
  std::vector<uint64_t> sent_at;
};

PacedRun run_pacer(rnicdv::sim::Pacer& pacer, uint32_t frames, uint32_t len, uint64_t late_ns) {
  PacedRun run;
  uint64_t t = 0;
  for (uint32_t i = 0; i < frames; ++i) {
    const uint64_t ready = pacer.ready_at();
    if (ready > t) {
      pacer.hold();
      t = ready + late_ns;
    }
    pacer.sent(len, t);
    run.sent_at.push_back(t);
  }
  run.end_ns = t;
  return run;
}

}  // namespace

TEST_CASE("a frame the pacer held is charged from when it was due, so a late device keeps the "
          "rate and never sends more than the rate, the late allowance, the burst and a frame") {
  using rnicdv::sim::Pacer;
  const uint32_t kbps = 100'000;  // 100 Mb/s
  const uint32_t len = 1024 + 12 + 4;
  const uint64_t frame_ns = uint64_t{len + Pacer::kFrameOverhead} * 8'000'000 / kbps;
  const uint32_t frames = 2000;
  for (uint64_t late_ns : {uint64_t{0}, frame_ns / 2, 3 * frame_ns, 40 * frame_ns}) {
    INFO("the device runs " << late_ns << " ns after each deadline; a frame takes " << frame_ns
                            << " ns");
    Pacer pacer;
    pacer.set(kbps, 0, 0);
    const PacedRun run = run_pacer(pacer, frames, len, late_ns);
    // Charged from when each frame was due, the run takes its frames' time at the limit,
    // whatever the lateness (below the allowance): were lateness charged, 40 frame times of it
    // on every deadline would leave a fortieth of the rate.
    const double expected = static_cast<double>(frames - 1) * frame_ns;
    CHECK(static_cast<double>(run.end_ns) > expected * 0.99);
    CHECK(static_cast<double>(run.end_ns) < expected * 1.01 + static_cast<double>(late_ns));
    // No window holds more than its worth at the rate plus the allowance and one frame.
    for (size_t i = 0; i < run.sent_at.size(); i += 7)
      for (size_t j = i; j < run.sent_at.size(); j += 13) {
        const uint64_t window = run.sent_at[j] - run.sent_at[i];
        const uint64_t count = j - i + 1;
        REQUIRE(count * frame_ns <= window + Pacer::kLateAllowanceNs + frame_ns);
      }
  }
}

TEST_CASE("an idle QP gains no late allowance, and lateness beyond the allowance is not made up") {
  using rnicdv::sim::Pacer;
  const uint32_t kbps = 10'000;  // 10 Mb/s
  const uint32_t len = 1024 + 12 + 4;
  const uint64_t frame_ns = uint64_t{len + Pacer::kFrameOverhead} * 8'000'000 / kbps;
  Pacer pacer;
  pacer.set(kbps, 0, 0);
  (void)run_pacer(pacer, 10, len, 0);

  // Held, run 5 ms late, one frame sent (the QP is still behind), and then its send queue
  // runs empty. A second later it sends again: the next frame waits its full turn.
  pacer.hold();
  const uint64_t behind = pacer.ready_at() + 5'000'000;
  pacer.sent(len, behind);
  REQUIRE(pacer.ready_at() < behind);  // still behind: more could go at once
  pacer.drop_hold();                   // the requester found nothing more to send
  const uint64_t t = behind + 1'000'000'000;
  pacer.sent(len, t);
  CHECK(pacer.ready_at() == t + frame_ns);

  // Held, and the device runs far beyond the allowance: what goes at once is the allowance's
  // worth, not the whole delay's.
  pacer.hold();
  const uint64_t late = pacer.ready_at() + Pacer::kLateAllowanceNs + 50 * frame_ns;
  uint32_t at_once = 0;
  do {
    pacer.sent(len, late);
    ++at_once;
  } while (pacer.ready_at() <= late);
  const uint64_t allowance_frames = Pacer::kLateAllowanceNs / frame_ns;
  CHECK(at_once >= allowance_frames);
  CHECK(at_once <= allowance_frames + 1);
}
