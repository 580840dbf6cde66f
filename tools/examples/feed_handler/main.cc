// SPDX-License-Identifier: BSD-3-Clause
// examples-feed-handler: a market-data feed handler on rnicdv's UD multicast (feed.h), run on
// simulated HCAs.
//
//   examples-feed-handler [--messages N] [--subscribers K] [--payload BYTES] [--loss PERCENT]
//                       [--seed S]
//
// An exchange (the first device) publishes N sequenced messages to 239.1.1.1; the feed
// handler (the second device) receives them, accounts for their sequence numbers, and
// republishes every message it accepts, in order, to 239.1.1.2; K subscribers (one device
// each) receive that. --loss drops that percentage of the exchange's frames, drawn from the
// seed (the fault rule `drop p=... device=0`), so the handler sees gaps, and reports them;
// the subscribers must see exactly the handler's gaps. Deterministic: the same seed gives the
// same gaps.
//
// Prints one line per member (accepted, missing, stale, gaps) and the gaps, and exits 0 when
// the handler's missing messages are exactly the exchange frames the fabric dropped and every
// subscriber received, in order, exactly what the handler accepted; 1 otherwise; 2 on bad
// arguments.
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "feed.h"
#include "rnicdv/sim/sim.h"

namespace {

struct Options {
  uint64_t messages = 10000;
  uint32_t subscribers = 2;
  uint32_t payload = 64;
  double loss_percent = 0;
  uint64_t seed = 1;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "examples-feed-handler: %s\n"
               "usage: examples-feed-handler [--messages N] [--subscribers K] [--payload BYTES] "
               "[--loss PERCENT] [--seed S]\n",
               why);
  std::exit(2);
}

uint64_t number(const char* opt, const char* v, uint64_t lo, uint64_t hi) {
  char* end = nullptr;
  const unsigned long long n = std::strtoull(v, &end, 10);
  if (!*v || *end || n < lo || n > hi)
    usage((std::string(opt) + ": expected " + std::to_string(lo) + ".." + std::to_string(hi) +
           ", got '" + v + "'")
              .c_str());
  return n;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) usage((a + ": a value is missing").c_str());
    const char* v = argv[++i];
    if (a == "--messages") {
      o.messages = number("--messages", v, 1, 100'000'000);
    } else if (a == "--subscribers") {
      o.subscribers = static_cast<uint32_t>(number("--subscribers", v, 1, 16));
    } else if (a == "--payload") {
      o.payload = static_cast<uint32_t>(number("--payload", v, 0, 1024));
    } else if (a == "--seed") {
      o.seed = number("--seed", v, 0, UINT64_MAX);
    } else if (a == "--loss") {
      char* end = nullptr;
      o.loss_percent = std::strtod(v, &end);
      if (!*v || *end || !(o.loss_percent >= 0 && o.loss_percent <= 50))
        usage((std::string("--loss: expected a percentage in 0..50, got '") + v + "'").c_str());
    } else {
      usage(("unknown option " + a).c_str());
    }
  }
  return o;
}

template <class T>
T must(rnicdv::Result<T> r, const char* what) {
  if (!r) {
    std::fprintf(stderr, "examples-feed-handler: %s: %s\n", what, r.status().message().c_str());
    std::exit(1);
  }
  return std::move(r).value();
}

// The payload of message `seq`: bytes a subscriber can check.
void fill_payload(uint8_t* p, uint32_t n, uint64_t seq) {
  for (uint32_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(seq * 31 + i);
}

bool payload_ok(const feed::Message& m) {
  for (uint32_t i = 0; i < m.header.length; ++i)
    if (m.payload[i] != static_cast<uint8_t>(m.header.seq * 31 + i)) return false;
  return true;
}

std::string gap_list(const std::vector<feed::Gap>& gaps, size_t max = 12) {
  std::string s;
  for (size_t i = 0; i < gaps.size() && i < max; ++i) {
    if (!s.empty()) s += ", ";
    s += std::to_string(gaps[i].first);
    if (gaps[i].last != gaps[i].first) s += "-" + std::to_string(gaps[i].last);
  }
  if (gaps.size() > max) s += ", ... (" + std::to_string(gaps.size() - max) + " more)";
  return s.empty() ? "none" : s;
}

struct Downstream {
  std::unique_ptr<feed::Subscriber> sub;
  feed::GapTracker tracker;
  uint64_t bad_payloads = 0;
};

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  rnicdv::sim::FabricConfig fc;
  fc.mode = rnicdv::sim::ExecMode::deterministic;  // the same seed, the same gaps
  fc.wire = rnicdv::sim::WireKind::inproc;
  fc.seed = o.seed;
  if (o.loss_percent > 0) {
    char rule[64];
    std::snprintf(rule, sizeof rule, "drop p=%.6f device=0", o.loss_percent / 100);
    fc.fault_spec = rule;
  }
  auto fabric = must(rnicdv::sim::Fabric::create(fc), "simulated fabric");
  std::vector<std::shared_ptr<rnicdv::sim::Device>> hws;
  std::vector<std::optional<rnicdv::Device>> devices(2 + o.subscribers);
  for (auto& d : devices) {
    hws.push_back(must(fabric->add_device(), "simulated device"));
    d.emplace(must(rnicdv::Device::wrap(hws.back()), "device"));
  }

  const std::string exchange_group = "239.1.1.1", internal_group = "239.1.1.2";
  auto exchange = must(feed::Publisher::create(*devices[0], exchange_group, 1), "exchange");
  auto handler =
      must(feed::FeedHandler::create(*devices[1], exchange_group, internal_group, 2), "handler");
  std::vector<Downstream> subs(o.subscribers);
  for (uint32_t k = 0; k < o.subscribers; ++k)
    subs[k].sub = std::make_unique<feed::Subscriber>(
        must(feed::Subscriber::create(*devices[2 + k], internal_group), "subscriber"));

  // Everything runs on this thread: each poll steps the deterministic fabric. The exchange
  // sends in bursts no larger than a receive queue; between bursts the others catch up.
  const auto pump = [&] {
    for (int idle = 0; idle < 64;) {
      int n = handler.run_once(0);
      if (n < 0) {
        std::fprintf(stderr, "examples-feed-handler: republishing: %s\n",
                     rnicdv::errc_name(handler.last_error()));
        std::exit(1);
      }
      for (Downstream& d : subs)
        n += d.sub->poll([&](const feed::Message& m) {
          if (d.tracker.see(m.header.seq) != feed::GapTracker::Verdict::stale && !payload_ok(m))
            ++d.bad_payloads;
        });
      idle = n ? 0 : idle + 1;
    }
  };
  std::vector<uint8_t> payload(o.payload);
  constexpr uint64_t kBurst = 128;
  for (uint64_t seq = 1; seq <= o.messages; ++seq) {
    fill_payload(payload.data(), o.payload, seq);
    if (rnicdv::Errc e = exchange.publish(seq, payload.data(), o.payload, 0); e != rnicdv::Errc::ok) {
      std::fprintf(stderr, "examples-feed-handler: publishing %" PRIu64 ": %s\n", seq,
                   rnicdv::errc_name(e));
      return 1;
    }
    if (seq % kBurst == 0 || seq == o.messages) pump();
  }
  // The last messages' absence shows only against the count the exchange published.
  handler.tracker().finish(o.messages);
  for (Downstream& d : subs) d.tracker.finish(o.messages);

  // The exchange's frames that never reached the handler's device: what the fault rule dropped.
  const uint64_t dropped = hws[0]->counters().packets_tx - hws[1]->counters().packets_rx;
  std::printf("exchange    published %" PRIu64 " messages of %u bytes to %s; the fabric dropped "
              "%" PRIu64 " of its frames (--loss %.3g%%, seed %" PRIu64 ")\n",
              o.messages, o.payload, exchange_group.c_str(), dropped, o.loss_percent, o.seed);
  const feed::GapTracker& h = handler.tracker();
  std::printf("handler     accepted %" PRIu64 ", missing %" PRIu64 " in %zu gaps, stale %" PRIu64
              "; republished to %s\n",
              h.accepted(), h.missing(), h.gaps().size(), h.stale(), internal_group.c_str());
  std::printf("handler     gaps: %s\n", gap_list(h.gaps()).c_str());
  bool ok = h.missing() == dropped && h.stale() == 0;
  if (!ok)
    std::printf("handler     missing %" PRIu64 " (stale %" PRIu64 ") is NOT what the fabric "
                "dropped\n", h.missing(), h.stale());
  for (uint32_t k = 0; k < o.subscribers; ++k) {
    const Downstream& d = subs[k];
    const bool same = d.tracker.accepted() == h.accepted() && d.tracker.gaps() == h.gaps() &&
                      d.tracker.stale() == 0 && d.bad_payloads == 0 && d.sub->errors() == 0;
    ok &= same;
    std::printf("subscriber %u received %" PRIu64 " in order, missing %" PRIu64 " in %zu gaps, "
                "stale %" PRIu64 ", bad payloads %" PRIu64 ": %s\n",
                k + 1, d.tracker.accepted(), d.tracker.missing(), d.tracker.gaps().size(),
                d.tracker.stale(), d.bad_payloads,
                same ? "exactly what the handler accepted" : "NOT what the handler accepted");
  }
  return ok ? 0 : 1;
}
