// SPDX-License-Identifier: BSD-3-Clause
// Running out of resources, through the driver's public API on the simulated HCA: too many
// QPs, CQs, SRQs, PDs or memory regions, a full send or receive queue, and a CQ that
// overflows.
// Each is refused with an error that names the object, the operation and the reason (or, for
// the CQ overrun, reported by CQ_ERR as IB requires), and nothing already accepted is lost
// or corrupted: the work before the limit completes with its data intact.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "rnicdv/rnicdv.h"
#include "rnicdv/sim/sim.h"

using namespace rnicdv;

namespace {

template <class T>
T take(Result<T> r) {
  INFO(r.status().message());
  REQUIRE(r.is_ok());
  return std::move(r).value();
}

void check(const Status& s) {
  INFO(s.message());
  REQUIRE(s.is_ok());
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

constexpr uint32_t kAccess = hw::access::local_write | hw::access::remote_write |
                             hw::access::remote_read | hw::access::remote_atomic;

struct Node {
  std::vector<uint8_t> mem;
  std::shared_ptr<sim::Device> sim;
  std::optional<Device> dev;
  std::optional<ProtectionDomain> pd;
  std::optional<CompletionQueue> scq, rcq;
  std::optional<MemoryRegion> mr;
  std::optional<QueuePair> qp;
};

QpConfig qp_config(uint32_t send_wr = 16, uint32_t recv_wr = 16) {
  QpConfig c;
  c.caps.max_send_wr = send_wr;
  c.caps.max_recv_wr = recv_wr;
  c.caps.max_send_sge = 1;
  c.caps.max_recv_sge = 1;
  c.threading = Threading::single;
  return c;
}

Node make_node(sim::Fabric& fabric, const sim::DeviceConfig& dc, uint32_t cq_entries = 64,
               const QpConfig& qc = qp_config()) {
  Node n;
  n.sim = take(fabric.add_device(dc));
  n.dev.emplace(take(Device::wrap(n.sim)));
  n.pd.emplace(take(n.dev->alloc_pd()));
  n.scq.emplace(take(n.dev->create_cq(cq_entries)));
  n.rcq.emplace(take(n.dev->create_cq(64)));
  n.mem.assign(1 << 16, 0);
  n.mr.emplace(take(n.pd->reg_mr(n.mem.data(), n.mem.size(), kAccess)));
  n.qp.emplace(take(n.dev->create_qp(*n.pd, *n.scq, *n.rcq, qc)));
  return n;
}

std::shared_ptr<sim::Fabric> deterministic_fabric() {
  sim::FabricConfig fc;
  fc.mode = sim::ExecMode::deterministic;
  fc.wire = sim::WireKind::inproc;
  return take(sim::Fabric::create(fc));
}

void connect(QueuePair& a, QueuePair& b) {
  check(a.to_init());
  check(b.to_init());
  check(a.to_rtr(b.local_endpoint(0x200), hw::Mtu::mtu1024));
  check(b.to_rtr(a.local_endpoint(0x100), hw::Mtu::mtu1024));
  check(a.to_rts(0x100));
  check(b.to_rts(0x200));
}

SendWr write(uint64_t id, const Sge* sge, uint64_t raddr, uint32_t rkey) {
  SendWr w;
  w.wr_id = id;
  w.opcode = WrOpcode::rdma_write;
  w.flags = send_flags::signaled;
  w.sg_list = sge;
  w.num_sge = 1;
  w.remote_addr = raddr;
  w.rkey = rkey;
  return w;
}

std::vector<Completion> poll_n(sim::Fabric& fabric, CompletionQueue& cq, size_t want) {
  std::vector<Completion> got;
  Completion wc[16];
  fabric.run_until(
      [&] {
        for (int n; (n = cq.poll(wc, 16)) > 0;) got.insert(got.end(), wc, wc + n);
        return got.size() >= want;
      },
      2'000'000'000ull);
  return got;
}

}  // namespace

TEST_CASE("too many QPs: no_resources naming the device and the limit; the others still work") {
  auto fabric = deterministic_fabric();
  sim::DeviceConfig dc;
  dc.caps.max_qp = 4;
  Node a = make_node(*fabric, dc);
  Node b = make_node(*fabric, {});
  std::vector<QueuePair> extra;
  Result<QueuePair> r = Status();
  while ((r = a.dev->create_qp(*a.pd, *a.scq, *a.rcq, qp_config())).is_ok())
    extra.push_back(std::move(r).value());
  CHECK(extra.size() == 3);  // with a.qp, the device's 4
  CHECK(r.status().code() == Errc::no_resources);
  const std::string msg = r.status().message();
  INFO(msg);
  CHECK(contains(msg, a.sim->info().name));
  CHECK(contains(msg, "create_qp"));
  CHECK(contains(msg, "4 QPs"));
  // The refused QP left nothing behind; one freed slot is enough for another.
  extra.pop_back();
  extra.push_back(take(a.dev->create_qp(*a.pd, *a.scq, *a.rcq, qp_config())));
  // And the first QP is unharmed: a WRITE through it lands intact.
  connect(*a.qp, *b.qp);
  std::memset(a.mem.data(), 0x3c, 512);
  const Sge sge = a.mr->sge(0, 512);
  REQUIRE(a.qp->post_send(write(1, &sge, b.mr->addr(), b.mr->rkey())) == Errc::ok);
  auto wc = poll_n(*fabric, *a.scq, 1);
  REQUIRE(wc.size() == 1);
  CHECK(wc[0].status == IBV_WC_SUCCESS);
  CHECK(std::all_of(b.mem.begin(), b.mem.begin() + 512, [](uint8_t x) { return x == 0x3c; }));
  CHECK(b.mem[512] == 0);
}

TEST_CASE("memory regions over the device limit: no_resources naming reg_mr and the limit") {
  auto fabric = deterministic_fabric();
  sim::DeviceConfig dc;
  dc.caps.max_mr = 8;
  Node a = make_node(*fabric, dc);
  Node b = make_node(*fabric, {});
  std::vector<uint8_t> arena(64 * 1024, 0);
  std::vector<MemoryRegion> mrs;
  Result<MemoryRegion> r = Status();
  for (size_t i = 0; (r = a.pd->reg_mr(arena.data() + i * 4096, 4096, kAccess)).is_ok(); ++i)
    mrs.push_back(std::move(r).value());
  CHECK(mrs.size() == 7);  // with a.mr, the device's 8
  CHECK(r.status().code() == Errc::no_resources);
  const std::string msg = r.status().message();
  INFO(msg);
  CHECK(contains(msg, a.sim->info().name));
  CHECK(contains(msg, "reg_mr"));
  CHECK(contains(msg, "8 memory regions"));
  // Every region registered before the limit still works, keys intact.
  connect(*a.qp, *b.qp);
  std::memset(b.mem.data(), 0x5a, 4096);
  for (size_t i = 0; i < mrs.size(); ++i) {
    SendWr rd;
    const Sge sge = mrs[i].sge(0, 4096);
    rd.wr_id = i;
    rd.opcode = WrOpcode::rdma_read;
    rd.flags = send_flags::signaled;
    rd.sg_list = &sge;
    rd.num_sge = 1;
    rd.remote_addr = b.mr->addr();
    rd.rkey = b.mr->rkey();
    REQUIRE(a.qp->post_send(rd) == Errc::ok);
  }
  auto wc = poll_n(*fabric, *a.scq, mrs.size());
  REQUIRE(wc.size() == mrs.size());
  for (const Completion& c : wc) CHECK(c.status == IBV_WC_SUCCESS);
  CHECK(std::all_of(arena.begin(), arena.begin() + static_cast<long>(mrs.size() * 4096),
                    [](uint8_t x) { return x == 0x5a; }));
  CHECK(std::all_of(arena.begin() + static_cast<long>(mrs.size() * 4096), arena.end(),
                    [](uint8_t x) { return x == 0; }));
  // Deregistering one makes room for exactly one more.
  mrs.pop_back();
  CHECK(a.pd->reg_mr(arena.data(), 64, kAccess).is_ok());
  // A region above the largest size is refused before the device is asked.
  auto huge = a.pd->reg_mr(arena.data(), a.sim->info().caps.max_mr_size + 1, kAccess);
  CHECK(huge.status().code() == Errc::invalid_argument);
  CHECK(contains(huge.status().message(), "reg_mr"));
}

TEST_CASE("too many CQs and PDs: no_resources naming the operation and the limit") {
  auto fabric = deterministic_fabric();
  sim::DeviceConfig dc;
  dc.caps.max_cq = 3;
  dc.caps.max_pd = 2;
  Node a = make_node(*fabric, dc);  // one PD, two CQs
  auto cq = take(a.dev->create_cq(16));
  auto no_cq = a.dev->create_cq(16);
  CHECK(no_cq.status().code() == Errc::no_resources);
  CHECK(contains(no_cq.status().message(), "create_cq"));
  CHECK(contains(no_cq.status().message(), "3 CQs"));
  auto pd = take(a.dev->alloc_pd());
  auto no_pd = a.dev->alloc_pd();
  CHECK(no_pd.status().code() == Errc::no_resources);
  CHECK(contains(no_pd.status().message(), "alloc_pd"));
  CHECK(contains(no_pd.status().message(), "2 protection domains"));
  auto too_deep = a.dev->create_cq(a.sim->info().caps.max_cqe + 1);
  CHECK(too_deep.status().code() == Errc::invalid_argument);
  CHECK(contains(too_deep.status().message(), "create_cq"));
}

TEST_CASE("too many SRQs, or one deeper than max_srq_wr: refused naming create_srq and the limit; "
          "a freed SRQ can be created again") {
  auto fabric = deterministic_fabric();
  sim::DeviceConfig dc;
  dc.caps.max_srq = 3;
  dc.caps.max_srq_wr = 100;
  Node a = make_node(*fabric, dc);
  const hw::DeviceCaps& caps = a.sim->info().caps;
  CHECK(caps.max_srq == 3);
  CHECK(caps.max_srq_wr == 100);
  std::vector<SharedReceiveQueue> srqs;
  for (int i = 0; i < 3; ++i) srqs.push_back(take(a.dev->create_srq(*a.pd, 100, 1)));
  auto no_srq = a.dev->create_srq(*a.pd, 4, 1);
  CHECK(no_srq.status().code() == Errc::no_resources);
  CHECK(contains(no_srq.status().message(), "create_srq"));
  CHECK(contains(no_srq.status().message(), "3 SRQs"));
  srqs.pop_back();
  auto again = a.dev->create_srq(*a.pd, 4, 1);
  CHECK(again.is_ok());
  srqs.clear();
  auto too_deep = a.dev->create_srq(*a.pd, 101, 1);
  CHECK(too_deep.status().code() == Errc::invalid_argument);
  CHECK(contains(too_deep.status().message(), "create_srq"));
  CHECK(contains(too_deep.status().message(), "1..100"));
}

TEST_CASE("device caps beyond what the SRQ ring can hold are refused when the device starts") {
  auto fabric = deterministic_fabric();
  sim::DeviceConfig dc;
  dc.caps.max_srq_wr = 1u << 20;
  auto dev = fabric->add_device(dc);
  REQUIRE_FALSE(dev.is_ok());
  CHECK(dev.status().code() == Errc::invalid_argument);
  CHECK(contains(dev.status().message(), "SRQ WRs"));
}

TEST_CASE("a full send queue refuses with queue_full; what was accepted completes intact") {
  auto fabric = deterministic_fabric();
  Node a = make_node(*fabric, {}, 256, qp_config(8, 8));
  Node b = make_node(*fabric, {});
  connect(*a.qp, *b.qp);
  const uint32_t depth = a.qp->caps().max_send_wr;
  for (uint32_t i = 0; i < 4 * depth; ++i) a.mem[i * 64] = static_cast<uint8_t>(i + 1);
  // A post list longer than the queue: the ones that fit are posted and rung, bad_index is
  // the first that did not fit, and it and the rest are not written.
  std::vector<Sge> sges;
  std::vector<SendWr> wrs;
  for (uint32_t i = 0; i < 4 * depth; ++i) sges.push_back(a.mr->sge(i * 64, 64));
  for (uint32_t i = 0; i < 4 * depth; ++i)
    wrs.push_back(write(i, &sges[i], b.mr->addr() + i * 64, b.mr->rkey()));
  size_t bad = SIZE_MAX;
  CHECK(a.qp->post_send(wrs, &bad) == Errc::queue_full);
  REQUIRE(bad >= depth);  // at least the requested depth fits
  REQUIRE(bad < wrs.size());
  const size_t accepted = bad;
  // Full means full, however often it is asked.
  for (int k = 0; k < 3; ++k) CHECK(a.qp->post_send(wrs[accepted]) == Errc::queue_full);
  auto wc = poll_n(*fabric, *a.scq, accepted);
  REQUIRE(wc.size() == accepted);
  for (size_t i = 0; i < accepted; ++i) {
    CHECK(wc[i].status == IBV_WC_SUCCESS);
    CHECK(wc[i].wr_id == i);
  }
  for (size_t i = 0; i < accepted; ++i) CHECK(b.mem[i * 64] == static_cast<uint8_t>(i + 1));
  CHECK(b.mem[accepted * 64] == 0);  // the refused WRITE never ran
  // Room again: the rest go through, in order, exactly once.
  CHECK(a.qp->post_send(std::span(wrs).subspan(accepted, std::min<size_t>(accepted, wrs.size() - accepted))) == Errc::ok);
  wc = poll_n(*fabric, *a.scq, std::min<size_t>(accepted, wrs.size() - accepted));
  for (size_t i = 0; i < wc.size(); ++i) CHECK(wc[i].wr_id == accepted + i);
  Completion extra[4];
  fabric->run_until([] { return false; }, 10'000'000);
  CHECK(a.scq->poll(extra, 4) == 0);
}

TEST_CASE("a full receive queue refuses with queue_full; posted receives stay intact") {
  auto fabric = deterministic_fabric();
  Node a = make_node(*fabric, {}, 64, qp_config(8, 4));
  Node b = make_node(*fabric, {});
  check(a.qp->to_init());
  const uint32_t depth = a.qp->caps().max_recv_wr;
  RecvWr r;
  const Sge sge = a.mr->sge(0, 64);
  r.sg_list = &sge;
  r.num_sge = 1;
  uint32_t accepted = 0;
  for (; accepted < 4 * depth; ++accepted) {
    r.wr_id = accepted;
    if (a.qp->post_recv(r) != Errc::ok) break;
  }
  CHECK(accepted >= depth);
  CHECK(accepted < 4 * depth);
  r.wr_id = 999;
  CHECK(a.qp->post_recv(r) == Errc::queue_full);
}

TEST_CASE("a CQ overrun raises CQ_ERR, moves its QPs to ERR, and overwrites nothing") {
  auto fabric = deterministic_fabric();
  Node a = make_node(*fabric, {}, 4);  // a send CQ of (at least) 4 entries, never polled
  Node b = make_node(*fabric, {});
  connect(*a.qp, *b.qp);
  const uint32_t entries = a.scq->entries();
  const uint32_t posted = entries + 6;
  std::vector<Sge> sges;
  for (uint32_t i = 0; i < posted; ++i) {
    a.mem[i * 64] = static_cast<uint8_t>(0x80 + i);
    sges.push_back(a.mr->sge(i * 64, 64));
  }
  for (uint32_t i = 0; i < posted; ++i)
    REQUIRE(a.qp->post_send(write(i, &sges[i], b.mr->addr() + i * 64, b.mr->rkey())) == Errc::ok);
  // Run the fabric without polling the send CQ.
  fabric->run_until([&] { return a.sim->counters().cq_overflows > 0; }, 2'000'000'000ull);
  fabric->run_until([] { return false; }, 50'000'000ull);
  CHECK(a.sim->counters().cq_overflows == 1);
  a.dev->process_events();
  CHECK(a.scq->in_error());
  CHECK(a.qp->state() == hw::QpState::err);
  CHECK_FALSE(b.rcq->in_error());
  CHECK(b.qp->state() == hw::QpState::rts);  // the peer's objects are not involved
  // The ring holds the first `entries` completions, intact and in order; nothing after them
  // overwrote them.
  Completion wc[64];
  const int n = a.scq->poll(wc, 64);
  REQUIRE(n >= static_cast<int>(entries));
  for (uint32_t i = 0; i < entries; ++i) {
    INFO("completion " << i);
    CHECK(wc[i].wr_id == i);
    CHECK(wc[i].status == IBV_WC_SUCCESS);
  }
  // The writes those completions report did happen, exactly.
  for (uint32_t i = 0; i < entries; ++i) CHECK(b.mem[i * 64] == static_cast<uint8_t>(0x80 + i));
  // Whatever else the CQ returns afterwards names only WRs of this QP, each once.
  std::vector<int> seen(posted, 0);
  for (int i = 0; i < n; ++i) {
    REQUIRE(wc[i].wr_id < posted);
    ++seen[wc[i].wr_id];
  }
  for (int k = 0; k < 8; ++k) {
    const int m = a.scq->poll(wc, 64);
    for (int i = 0; i < m; ++i) {
      REQUIRE(wc[i].wr_id < posted);
      ++seen[wc[i].wr_id];
    }
    fabric->step();
  }
  for (uint32_t i = 0; i < posted; ++i) CHECK(seen[i] <= 1);
  // A post to the failed QP is not lost silently either: it is refused or flushed.
  const Errc e = a.qp->post_send(write(500, &sges[0], b.mr->addr(), b.mr->rkey()));
  CHECK((e == Errc::ok || e == Errc::qp_in_error));
}

namespace {

struct DestroyTimes {
  double pds, mrs, cqs;  // seconds
};

// The times to destroy, in creation order, `n` PDs, `n` MRs (on one small buffer) and `n / 5`
// CQs of one device, through the driver's API.
DestroyTimes destroy_times(size_t n) {
  auto fabric = deterministic_fabric();
  sim::DeviceConfig dc;
  dc.caps.max_pd = static_cast<uint32_t>(n + 2);
  dc.caps.max_mr = static_cast<uint32_t>(n + 2);
  dc.caps.max_cq = static_cast<uint32_t>(n / 5 + 4);
  Node a = make_node(*fabric, dc);
  std::vector<std::optional<ProtectionDomain>> pds(n);
  std::vector<std::optional<MemoryRegion>> mrs(n);
  std::vector<std::optional<CompletionQueue>> cqs(n / 5);
  for (auto& pd : pds) pd.emplace(take(a.dev->alloc_pd()));
  for (auto& mr : mrs) mr.emplace(take(a.pd->reg_mr(a.mem.data(), 4096, kAccess)));
  for (auto& cq : cqs) cq.emplace(take(a.dev->create_cq(2)));
  using clock = std::chrono::steady_clock;
  const auto secs = [](clock::duration d) { return std::chrono::duration<double>(d).count(); };
  const auto start = clock::now();
  for (auto& pd : pds) pd.reset();
  const auto t_pd = clock::now();
  for (auto& mr : mrs) mr.reset();
  const auto t_mr = clock::now();
  for (auto& cq : cqs) cq.reset();
  return DestroyTimes{secs(t_pd - start), secs(t_mr - t_pd), secs(clock::now() - t_mr)};
}

}  // namespace

// Before, each destroy searched (and shifted) a vector of every object of its kind, in the
// device and in the driver: 100,000 SRQs took over 150 s to free. Ten times the objects must
// cost about ten times the time; the bound leaves room for a noisy machine and for
// AddressSanitizer's allocator (a quadratic cost is a hundred times).
TEST_CASE("destroying 100,000 objects takes time proportional to their number") {
  const DestroyTimes small = destroy_times(10'000);
  const DestroyTimes again = destroy_times(10'000);
  const DestroyTimes large = destroy_times(100'000);
  const auto check_linear = [](const char* what, double s, double l) {
    INFO(what << ": " << s * 1e3 << " ms for a tenth, " << l * 1e3 << " ms for all");
    CHECK(l < 30 * s + 0.02);
  };
  check_linear("100,000 PDs", std::min(small.pds, again.pds), large.pds);
  check_linear("100,000 MRs", std::min(small.mrs, again.mrs), large.mrs);
  check_linear("20,000 CQs", std::min(small.cqs, again.cqs), large.cqs);
}
