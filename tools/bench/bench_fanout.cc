// SPDX-License-Identifier: BSD-3-Clause
// rnicdv-bench-fanout: one publisher to N subscribers over UD, by multicast beside the same
// fan-out by unicast (docs/performance.md, "Multicast fan-out").
//
//   rnicdv-bench-fanout [--smoke] [--subscribers N] [--messages M]
//
// N + 1 threaded simulated HCAs on the in-process wire: a publisher and N subscribers (4 by
// default), each subscriber a UD QP attached to one group with 512 receives posted, reposted
// as they are consumed (tools/examples/feed_handler/feed.h). The case sends each message once,
// to the group, and the fabric replicates it; the baseline sends it N times, one datagram to
// each subscriber's QP (staged, with one doorbell for the N). Messages are 64-byte inline
// datagrams. One thread posts and polls every CQ (each poll also lets the devices run a pass
// on it).
//
//   latency  one message at a time: the time from its post until the last subscriber's CQ
//            holds it, over M messages (after a warm-up); p50 and p99.
//   rate     M messages in bursts of 16, each burst waited for at every subscriber: messages
//            delivered to all N per second.
//
// The two alternate, in 5 rounds (1 with --smoke), so that noise hits both alike; each figure
// is the median of the rounds. Prints JSON records on stdout (bench_util.h); every wait gives
// up after 20 s without progress.
#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench_sim.h"
#include "clock.h"
#include "feed.h"

namespace {

using namespace rnicdv;
using rnicdv::bench::fail;
using rnicdv::bench::must;

constexpr uint32_t kBurst = 16;
constexpr uint32_t kMessageBytes = 64;
constexpr auto kGiveUp = std::chrono::seconds(20);

struct Fanout {
  std::shared_ptr<sim::Fabric> fabric;
  std::vector<std::shared_ptr<sim::Device>> hws;
  std::vector<std::optional<Device>> devices;
  std::optional<feed::Member> pub;
  std::optional<AddressHandle> to_group;
  std::vector<AddressHandle> to_sub;
  std::vector<uint32_t> sub_qpn;
  std::vector<std::unique_ptr<feed::Subscriber>> subs;
  std::vector<uint64_t> got;  // messages each subscriber has received
  uint64_t posted = 0, unreaped = 0;
  uint8_t message[kMessageBytes] = {};

  explicit Fanout(uint32_t n) {
    sim::FabricConfig fc;
    fc.mode = sim::ExecMode::threaded;
    fc.wire = sim::WireKind::inproc;
    fabric = must(sim::Fabric::create(fc), "fabric");
    devices.resize(n + 1);
    for (auto& d : devices) {
      hws.push_back(must(fabric->add_device(), "device"));
      d.emplace(must(Device::wrap(hws.back()), "wrap"));
    }
    pub.emplace(must(feed::Member::create(*devices[0], 256, 4096), "publisher"));
    hw::AhAttr attr;
    attr.remote_gid = must(multicast_gid("239.3.0.1"), "group");
    to_group.emplace(must(pub->pd().create_ah(attr), "group AH"));
    for (uint32_t k = 0; k < n; ++k) {
      subs.push_back(std::make_unique<feed::Subscriber>(
          must(feed::Subscriber::create(*devices[k + 1], "239.3.0.1"), "subscriber")));
      attr.remote_gid = devices[k + 1]->info().gid;
      to_sub.push_back(must(pub->pd().create_ah(attr), "subscriber AH"));
      sub_qpn.push_back(subs.back()->member().qp().qpn());
    }
    got.assign(n, 0);
  }

  // Posts one message: once to the group, or once to each subscriber (one doorbell).
  void post(bool multicast, uint64_t seq) {
    const feed::MessageHeader h{seq, 0, kMessageBytes - sizeof h, 0};
    std::memcpy(message, &h, sizeof h);
    QueuePair& qp = pub->qp();
    const uint32_t copies = multicast ? 1 : static_cast<uint32_t>(subs.size());
    while (unreaped + copies > 256 - 2 * feed::kSignalEvery) reap();
    for (uint32_t k = 0; k < copies; ++k) {
      const SendFlags flags = (posted++ % feed::kSignalEvery == feed::kSignalEvery - 1)
                                  ? send_flags::signaled
                                  : SendFlags{};
      const bool last = k + 1 == copies;
      const Errc e =
          multicast
              ? qp.post_datagram_inline(seq, message, kMessageBytes, *to_group, kMulticastQpn,
                                        feed::kFeedQkey, flags)
              : (last ? qp.post_datagram_inline(seq, message, kMessageBytes, to_sub[k], sub_qpn[k],
                                                feed::kFeedQkey, flags)
                      : qp.stage_datagram_inline(seq, message, kMessageBytes, to_sub[k],
                                                 sub_qpn[k], feed::kFeedQkey, flags));
      if (e != Errc::ok) fail(std::string("post: ") + errc_name(e));
      ++unreaped;
    }
  }

  void reap() {
    Completion wc[16];
    const int n = pub->cq().poll(wc, 16);
    for (int i = 0; i < n; ++i) {
      if (wc[i].status != IBV_WC_SUCCESS) fail("a datagram completed in error");
      unreaped -= std::min<uint64_t>(unreaped, feed::kSignalEvery);
    }
  }

  // Polls every subscriber until each has received `target` messages in all.
  void wait_all(uint64_t target) {
    auto last_progress = std::chrono::steady_clock::now();
    for (;;) {
      bool all = true, moved = false;
      for (size_t k = 0; k < subs.size(); ++k) {
        if (got[k] < target) {
          const int n = subs[k]->poll([](const feed::Message&) {});
          got[k] += static_cast<uint64_t>(n);
          moved |= n > 0;
        }
        all &= got[k] >= target;
      }
      if (all) return;
      reap();
      const auto now = std::chrono::steady_clock::now();
      if (moved) {
        last_progress = now;
      } else if (now - last_progress > kGiveUp) {
        fail("a subscriber received nothing for 20 s");
      }
    }
  }
};

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  return v[i];
}

double median(std::vector<double> v) { return percentile(std::move(v), 0.5); }

struct Round {
  double p50_ns, p99_ns, msgs_per_sec;
};

Round run_round(Fanout& f, bool multicast, uint32_t messages, uint64_t* seq) {
  const rnicperf::Clock& clock = rnicperf::Clock::get();
  const double ns_per_tick = 1e3 / clock.ticks_per_us();
  std::vector<double> lat;
  lat.reserve(messages);
  const uint32_t warmup = std::max<uint32_t>(messages / 10, 10);
  for (uint32_t i = 0; i < warmup + messages; ++i) {
    const uint64_t t0 = clock.now();
    f.post(multicast, ++*seq);
    f.wait_all(*seq);
    if (i >= warmup) lat.push_back(static_cast<double>(clock.now() - t0) * ns_per_tick);
  }
  const uint64_t t0 = clock.now();
  for (uint32_t sent = 0; sent < messages; sent += kBurst) {
    for (uint32_t j = 0; j < kBurst; ++j) f.post(multicast, ++*seq);
    f.wait_all(*seq);
  }
  const double secs = static_cast<double>(clock.now() - t0) * ns_per_tick / 1e9;
  const uint32_t sent = (messages + kBurst - 1) / kBurst * kBurst;
  return Round{percentile(lat, 0.5), percentile(lat, 0.99), sent / secs};
}

}  // namespace

int main(int argc, char** argv) {
  bool smoke = false;
  uint32_t n = 4, messages = 20000;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--smoke") {
      smoke = true;
      messages = 500;
    } else if (a == "--subscribers" && i + 1 < argc) {
      n = rnicdv::bench::parse_count("--subscribers", argv[++i], 16);
    } else if (a == "--messages" && i + 1 < argc) {
      messages = rnicdv::bench::parse_count("--messages", argv[++i], 10'000'000);
    } else {
      fail("usage: rnicdv-bench-fanout [--smoke] [--subscribers N] [--messages M]");
    }
  }
  Fanout f(n);
  uint64_t seq = 0;
  std::vector<double> m50, m99, mrate, u50, u99, urate;
  for (int r = 0; r < (smoke ? 1 : 5); ++r) {
    const Round m = run_round(f, true, messages, &seq);
    const Round u = run_round(f, false, messages, &seq);
    m50.push_back(m.p50_ns);
    m99.push_back(m.p99_ns);
    mrate.push_back(m.msgs_per_sec);
    u50.push_back(u.p50_ns);
    u99.push_back(u.p99_ns);
    urate.push_back(u.msgs_per_sec);
  }
  const std::string mc = "fanout_mcast_" + std::to_string(n), uc = "fanout_unicast_" + std::to_string(n);
  std::vector<rnicdv::bench::Record> out;
  out.push_back({mc + "_lat_p50", median(m50), "ns", uc + "_lat_p50", median(u50)});
  out.push_back({mc + "_lat_p99", median(m99), "ns", uc + "_lat_p99", median(u99)});
  out.push_back({mc + "_msgs_per_sec", median(mrate), "msg/s", uc + "_msgs_per_sec", median(urate)});
  rnicdv::bench::print_records(out, stdout);
  return 0;
}
