// SPDX-License-Identifier: BSD-3-Clause
// The link events of the fault specification (port-down, port-up, fatal), deterministic mode:
// the asynchronous events at the chosen virtual time or frame, the port's state, traffic
// stopped and resumed, RC recovering from an outage shorter than its retry budget and failing
// with RETRY_EXC_ERR past it, a fatal error's dead device, and the log, byte for byte.
#include <unistd.h>

#include <catch2/catch.hpp>

#include <atomic>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "device_impl.h"
#include "gsi.h"
#include "sim_harness.h"

using namespace simtest;

namespace {

constexpr uint64_t kMs = 1'000'000;

std::string temp_log_path() {
  static std::atomic<int> n{0};
  return "/tmp/rnicdv-link-events-" + std::to_string(::getpid()) + "-" +
         std::to_string(n.fetch_add(1)) + ".jsonl";
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> lines_of_kind(const std::string& log, const std::string& kind) {
  std::vector<std::string> out;
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);)
    if (line.find("\"kind\":\"" + kind + "\"") != std::string::npos) out.push_back(line);
  return out;
}

// Two connected hosts on a deterministic fabric under a fault specification. Device 0 is a,
// device 1 is b. Every spec gets a log of its own.
struct LinkPair {
  std::string log_path;
  std::shared_ptr<sim::Fabric> fabric;
  uint64_t t0 = 0;
  Host a, b;
  Buffer abuf, bbuf;

  explicit LinkPair(const std::string& spec, ConnectOptions o = {},
                    std::string log = temp_log_path())
      : log_path(std::move(log)) {
    sim::FabricConfig c;
    c.mode = sim::ExecMode::deterministic;
    c.wire = sim::WireKind::inproc;
    c.fault_spec = spec + "; log=" + log_path;
    fabric = must(sim::Fabric::create(c));
    t0 = fabric->now_ns();
    a.init(fabric, Pair::default_host());
    b.init(fabric, Pair::default_host());
    connect(a, b, o, o);
    abuf = a.reg(4096);
    bbuf = b.reg(4096);
  }
  ~LinkPair() { ::unlink(log_path.c_str()); }

  std::string log() const { return read_file(log_path); }

  bool run_until(const std::function<bool()>& done, uint64_t max_ns = 10'000 * kMs) {
    return fabric->run_until(done, max_ns);
  }
  void settle() {
    const uint64_t start = fabric->now_ns();
    while (fabric->step() && fabric->now_ns() - start < 10'000 * kMs) {
    }
  }
  // Runs until `dev` raises an asynchronous event; returns its type and notes the time.
  hw::AsyncEventType wait_event(sim::Device& dev, uint64_t* at = nullptr) {
    hw::AsyncEvent ev{};
    REQUIRE(run_until([&] { return dev.next_async_event(&ev); }));
    if (at) *at = fabric->now_ns() - t0;
    return ev.type;
  }
  void post_send(Host& from, Buffer& buf, uint32_t len, uint64_t wr_id) {
    Sge sge{buf.addr(), len, buf.lkey()};
    REQUIRE(from.post_and_ring(make_wr(WrOpcode::send, &sge, 1, wr_id)) == Errc::ok);
  }
};

std::vector<hw::AsyncEventType> drain_events(sim::Device& dev) {
  std::vector<hw::AsyncEventType> out;
  hw::AsyncEvent ev{};
  while (dev.next_async_event(&ev)) out.push_back(ev.type);
  return out;
}

// ~4.2 ms local ACK timeout (4.096 us * 2^10), 7 retries: the requester gives up about
// 8 * 4.2 = 34 ms after the last time it heard from its peer.
ConnectOptions retry_budget_34ms() {
  ConnectOptions o;
  o.timeout = 10;
  o.retry_cnt = 7;
  return o;
}

}  // namespace

TEST_CASE("port-down at= raises PORT_ERR at that virtual time, the port reads DOWN, and no frame "
          "passes in either direction",
          "[link]") {
  LinkPair p("port-down at=5ms device=0");
  CHECK(p.a.dev->port_state() == sim::PortState::active);
  uint64_t at = 0;
  CHECK(p.wait_event(*p.a.dev, &at) == hw::AsyncEventType::port_err);
  CHECK(at == 5 * kMs);
  CHECK(p.a.dev->port_state() == sim::PortState::down);
  CHECK(p.a.dev->dump().find("port DOWN, link_down_drops") != std::string::npos);
  CHECK(p.b.dev->port_state() == sim::PortState::active);  // device=0 only
  CHECK(p.b.dev->dump().find("port DOWN") == std::string::npos);
  CHECK(drain_events(*p.b.dev).empty());
  CHECK_FALSE(p.a.dev->fatal());

  // a sends into a down port: nothing reaches b. b sends to a: a takes nothing in.
  const sim::DeviceCounters a0 = p.a.counters(), b0 = p.b.counters();
  REQUIRE(p.b.post_recv(p.bbuf, 0, 64) == Errc::ok);
  REQUIRE(p.a.post_recv(p.abuf, 0, 64) == Errc::ok);
  p.post_send(p.a, p.abuf, 64, 1);
  p.post_send(p.b, p.bbuf, 64, 2);
  p.run_until([] { return false; }, 20 * kMs);  // shorter than the retry budget
  const sim::DeviceCounters a1 = p.a.counters(), b1 = p.b.counters();
  CHECK(b1.packets_rx == b0.packets_rx);
  CHECK(a1.packets_rx == a0.packets_rx);
  CHECK(a1.packets_tx == a0.packets_tx);
  CHECK(a1.link_down_drops > a0.link_down_drops);  // a's SEND, and b's SEND arriving at a
  CHECK(b1.packets_tx > b0.packets_tx);            // b's port is up: its frames leave
  Completion c;
  CHECK_FALSE(p.b.rcq->poll(&c));
  CHECK_FALSE(p.a.rcq->poll(&c));

  const std::vector<std::string> lines = lines_of_kind(p.log(), "link");
  REQUIRE(lines.size() == 1);
  CHECK(lines[0] == "{\"t_ns\":" + std::to_string(p.t0 + 5 * kMs) +
                        ",\"kind\":\"link\",\"action\":\"port-down\",\"rule\":1,\"device\":0,"
                        "\"trigger\":\"at\",\"at_ns\":5000000,\"event\":\"PORT_ERR\"}");
}

TEST_CASE("port-down after=N takes the port down as the device's Nth frame goes out",
          "[link]") {
  LinkPair p("port-down after=3 device=0");
  for (int i = 0; i < 5; ++i) REQUIRE(p.b.post_recv(p.bbuf, 0, 64) == Errc::ok);
  for (int i = 0; i < 5; ++i) {
    Sge sge{p.abuf.addr(), 64, p.abuf.lkey()};
    REQUIRE(p.a.post(make_wr(WrOpcode::send, &sge, 1, static_cast<uint64_t>(i))) == Errc::ok);
  }
  p.a.ring();
  CHECK(p.wait_event(*p.a.dev) == hw::AsyncEventType::port_err);
  p.run_until([] { return false; }, 10 * kMs);
  CHECK(p.a.counters().packets_tx == 3);  // the 4th and 5th SEND never left
  CHECK(p.b.counters().packets_rx == 3);
  int received = 0;
  Completion c;
  while (p.b.rcq->poll(&c)) {
    CHECK(c.status == IBV_WC_SUCCESS);
    ++received;
  }
  CHECK(received == 3);
  const std::vector<std::string> lines = lines_of_kind(p.log(), "link");
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].find("\"action\":\"port-down\",\"rule\":1,\"device\":0,\"trigger\":\"after\","
                      "\"frames\":3,\"event\":\"PORT_ERR\"") != std::string::npos);
}

TEST_CASE("port-down after=N counts the connection manager's QP1 frames too, and a down port "
          "neither sends nor takes in MADs",
          "[link]") {
  sim::FabricConfig c;
  c.mode = sim::ExecMode::deterministic;
  c.fault_spec = "port-down after=2 device=0";
  auto fabric = must(sim::Fabric::create(c));
  auto a = must(fabric->add_device());
  auto b = must(fabric->add_device());
  int to_b = 0, to_a = 0;
  sim::gsi_of(*b).set_mad_handler([&](const hw::IpAddress&, const uint8_t*, size_t) { ++to_b; });
  sim::gsi_of(*a).set_mad_handler([&](const hw::IpAddress&, const uint8_t*, size_t) { ++to_a; });
  uint8_t mad[sim::kMadBytes] = {};
  // The third is lost: as on a port that went down, the sender is not told.
  for (int i = 0; i < 3; ++i) REQUIRE(sim::gsi_of(*a).send_mad(b->address(), mad));
  REQUIRE(sim::gsi_of(*b).send_mad(a->address(), mad));
  fabric->run_until([] { return false; }, 10 * kMs);
  CHECK(to_b == 2);
  CHECK(to_a == 0);
  CHECK(a->port_state() == sim::PortState::down);
  CHECK(a->counters().packets_tx == 2);
  CHECK(a->counters().link_down_drops == 2);  // one MAD not sent, one not taken in
  hw::AsyncEvent ev{};
  REQUIRE(a->next_async_event(&ev));
  CHECK(ev.type == hw::AsyncEventType::port_err);
}

TEST_CASE("port-down for= shorter than the retry budget: PORT_ACTIVE when it ends, and the RC "
          "SEND in flight completes successfully by retransmission",
          "[link]") {
  LinkPair p("port-down at=1ms for=15ms device=0", retry_budget_34ms());
  uint64_t down_at = 0, up_at = 0;
  CHECK(p.wait_event(*p.a.dev, &down_at) == hw::AsyncEventType::port_err);
  REQUIRE(p.b.post_recv(p.bbuf, 0, 64) == Errc::ok);
  fill_pattern(p.abuf.data(), 64, 7);
  p.post_send(p.a, p.abuf, 64, 42);
  CHECK(p.wait_event(*p.a.dev, &up_at) == hw::AsyncEventType::port_active);
  CHECK(down_at == 1 * kMs);
  CHECK(up_at == 16 * kMs);
  CHECK(p.a.dev->port_state() == sim::PortState::active);
  Completion s{};
  REQUIRE(p.run_until([&] { return p.a.poll_send(&s); }));
  CHECK(s.status == IBV_WC_SUCCESS);
  Completion r{};
  REQUIRE(p.run_until([&] { return p.b.rcq->poll(&r); }));
  CHECK(r.status == IBV_WC_SUCCESS);
  CHECK(std::memcmp(p.abuf.data(), p.bbuf.data(), 64) == 0);
  CHECK(p.a.counters().retransmits > 0);
  CHECK(p.a.counters().link_down_drops > 0);

  const std::vector<std::string> lines = lines_of_kind(p.log(), "link");
  REQUIRE(lines.size() == 2);
  CHECK(lines[0].find("\"action\":\"port-down\",\"rule\":1,\"device\":0,\"trigger\":\"at\","
                      "\"at_ns\":1000000,\"for_ns\":15000000,\"event\":\"PORT_ERR\"") !=
        std::string::npos);
  CHECK(lines[1].find("\"action\":\"port-up\",\"rule\":1,\"device\":0,\"trigger\":\"for\","
                      "\"at_ns\":16000000,\"event\":\"PORT_ACTIVE\"") != std::string::npos);
}

TEST_CASE("port-down for= longer than the retry budget: the RC SEND in flight completes with "
          "RETRY_EXC_ERR while the port is down",
          "[link]") {
  LinkPair p("port-down at=1ms for=500ms device=0", retry_budget_34ms());
  CHECK(p.wait_event(*p.a.dev) == hw::AsyncEventType::port_err);
  REQUIRE(p.b.post_recv(p.bbuf, 0, 64) == Errc::ok);
  p.post_send(p.a, p.abuf, 64, 43);
  Completion s{};
  REQUIRE(p.run_until([&] { return p.a.poll_send(&s); }));
  CHECK(s.status == IBV_WC_RETRY_EXC_ERR);
  CHECK(p.fabric->now_ns() - p.t0 < 501 * kMs);  // before the port came back
  CHECK(p.a.dev->port_state() == sim::PortState::down);
  Completion r{};
  CHECK_FALSE(p.b.rcq->poll(&r));
  // The outage still ends on time.
  uint64_t up_at = 0;
  CHECK(p.wait_event(*p.a.dev, &up_at) == hw::AsyncEventType::port_active);
  CHECK(up_at == 501 * kMs);
}

TEST_CASE("a link rule without device= applies to every device, and port-up at= brings one "
          "back with PORT_ACTIVE",
          "[link]") {
  LinkPair p("port-down at=1ms; port-up at=3ms device=1; port-up at=4ms device=1");
  uint64_t t = 0;
  CHECK(p.wait_event(*p.a.dev, &t) == hw::AsyncEventType::port_err);
  CHECK(t == 1 * kMs);
  CHECK(p.wait_event(*p.b.dev, &t) == hw::AsyncEventType::port_err);
  CHECK(p.wait_event(*p.b.dev, &t) == hw::AsyncEventType::port_active);
  CHECK(t == 3 * kMs);
  p.run_until([] { return false; }, 10 * kMs);
  CHECK(p.a.dev->port_state() == sim::PortState::down);
  CHECK(p.b.dev->port_state() == sim::PortState::active);
  // The second port-up found the port up: no second PORT_ACTIVE, and the log says so.
  CHECK(drain_events(*p.b.dev).empty());
  CHECK(drain_events(*p.a.dev).empty());
  const std::vector<std::string> lines = lines_of_kind(p.log(), "link");
  REQUIRE(lines.size() == 4);
  CHECK(lines[0].find("\"rule\":1,\"device\":0,") != std::string::npos);
  CHECK(lines[1].find("\"rule\":1,\"device\":1,") != std::string::npos);
  CHECK(lines[2].find("\"action\":\"port-up\",\"rule\":2,\"device\":1,\"trigger\":\"at\","
                      "\"at_ns\":3000000,\"event\":\"PORT_ACTIVE\"") != std::string::npos);
  CHECK(lines[3].find("\"action\":\"port-up\",\"rule\":3,\"device\":1,\"trigger\":\"at\","
                      "\"at_ns\":4000000,\"event\":\"none\"") != std::string::npos);
}

TEST_CASE("fatal raises DEVICE_FATAL only, and the device is dead: port DOWN for good, QPs in "
          "ERR, outstanding WRs never complete, nothing sent or taken in",
          "[link]") {
  LinkPair p("fatal at=2ms device=0; port-up at=3ms device=0", retry_budget_34ms());
  // A SEND that b cannot take yet (no receive posted: RNR, retried forever) is outstanding.
  p.post_send(p.a, p.abuf, 64, 1);
  uint64_t at = 0;
  CHECK(p.wait_event(*p.a.dev, &at) == hw::AsyncEventType::device_fatal);
  CHECK(at == 2 * kMs);
  CHECK(p.a.dev->fatal());
  CHECK(p.a.dev->port_state() == sim::PortState::down);
  CHECK(p.a.qp->state() == hw::QpState::err);
  CHECK(p.a.dev->dump().find("port DOWN (the device had a fatal error") != std::string::npos);
  // The control path creates and changes nothing any more (EIO, as mlx5_core answers).
  Result<std::unique_ptr<hw::Pd>> pd = p.a.dev->alloc_pd();
  REQUIRE_FALSE(pd);
  CHECK(pd.status().code() == Errc::io_error);
  CHECK(pd.status().message().find("alloc_pd: the device had a fatal error") != std::string::npos);
  CHECK_FALSE(p.a.dev->create_cq(16));
  std::vector<uint8_t> region(64);
  CHECK_FALSE(p.a.dev->reg_mr(*p.a.pd, region.data(), region.size(), all_remote()));
  hw::QpAttr reset;
  reset.state = hw::QpState::reset;
  const Status modified = p.a.modify(reset, hw::qp_attr::state);
  CHECK(modified.code() == Errc::io_error);
  CHECK(p.a.qp->state() == hw::QpState::err);
  CHECK_FALSE(p.b.dev->fatal());
  CHECK(p.b.dev->port_state() == sim::PortState::active);

  const sim::DeviceCounters a0 = p.a.counters();
  // b's SEND to the dead device is never answered: b's requester gives up.
  REQUIRE(p.a.post_recv(p.abuf, 0, 64) == Errc::ok);
  p.post_send(p.b, p.bbuf, 64, 2);
  Completion s{};
  REQUIRE(p.run_until([&] { return p.b.poll_send(&s); }));
  CHECK(s.status == IBV_WC_RETRY_EXC_ERR);
  // The dead device wrote nothing: no CQE for a's SEND, nor for b's SEND in a's receive.
  Completion c{};
  CHECK_FALSE(p.a.poll_send(&c));
  CHECK_FALSE(p.a.rcq->poll(&c));
  // A doorbell is not acted on.
  p.post_send(p.a, p.abuf, 64, 3);
  p.settle();
  CHECK_FALSE(p.a.poll_send(&c));
  const sim::DeviceCounters a1 = p.a.counters();
  CHECK(a1.packets_tx == a0.packets_tx);
  CHECK(a1.packets_rx == a0.packets_rx);
  CHECK(a1.cqes_written == a0.cqes_written);
  CHECK(a1.link_down_drops > a0.link_down_drops);
  // Nothing brings it back: the port-up finds a dead device, and the only event was
  // DEVICE_FATAL (mlx5 raises no PORT_ERR with it).
  CHECK(p.a.dev->port_state() == sim::PortState::down);
  CHECK(drain_events(*p.a.dev).empty());
  const std::vector<std::string> lines = lines_of_kind(p.log(), "link");
  REQUIRE(lines.size() == 2);
  CHECK(lines[0].find("\"action\":\"fatal\",\"rule\":1,\"device\":0,\"trigger\":\"at\","
                      "\"at_ns\":2000000,\"event\":\"DEVICE_FATAL\"") != std::string::npos);
  CHECK(lines[1].find("\"action\":\"port-up\",\"rule\":2,\"device\":0,\"trigger\":\"at\","
                      "\"at_ns\":3000000,\"event\":\"none\"") != std::string::npos);
}

TEST_CASE("fatal after=N: the device dies as its Nth frame leaves, and writes nothing after",
          "[link]") {
  LinkPair p("fatal after=3 device=0");
  for (int i = 0; i < 5; ++i) REQUIRE(p.b.post_recv(p.bbuf, 0, 64) == Errc::ok);
  for (int i = 0; i < 5; ++i) {
    Sge sge{p.abuf.addr(), 64, p.abuf.lkey()};
    REQUIRE(p.a.post(make_wr(WrOpcode::send, &sge, 1, static_cast<uint64_t>(i))) == Errc::ok);
  }
  p.a.ring();
  CHECK(p.wait_event(*p.a.dev) == hw::AsyncEventType::device_fatal);
  p.settle();
  CHECK(p.a.counters().packets_tx == 3);
  CHECK(p.a.counters().cqes_written == 0);  // b's ACKs never taken in; no flush either
  CHECK(p.b.counters().packets_rx == 3);
  Completion c{};
  CHECK_FALSE(p.a.poll_send(&c));
  const std::vector<std::string> lines = lines_of_kind(p.log(), "link");
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].find("\"action\":\"fatal\",\"rule\":1,\"device\":0,\"trigger\":\"after\","
                      "\"frames\":3,\"event\":\"DEVICE_FATAL\"") != std::string::npos);
}

TEST_CASE("link events: the same specification and seed give the same log, byte for byte",
          "[link]") {
  const std::string log = temp_log_path();  // the same text of the spec, both times
  const auto run = [&log] {
    LinkPair p("seed=11; port-down at=1ms for=15ms device=0; drop p=0.2; fatal after=40 device=1",
               retry_budget_34ms(), log);
    for (int i = 0; i < 8; ++i) REQUIRE(p.b.post_recv(p.bbuf, 0, 64) == Errc::ok);
    for (int i = 0; i < 8; ++i) p.post_send(p.a, p.abuf, 64, static_cast<uint64_t>(i));
    for (int i = 0; i < 8; ++i) {
      Completion s{};
      REQUIRE(p.run_until([&] { return p.a.poll_send(&s); }));
    }
    p.settle();
    return p.log();
  };
  const std::string first = run();
  const std::string second = run();
  CHECK(lines_of_kind(first, "link").size() >= 2);
  CHECK(first == second);
}
