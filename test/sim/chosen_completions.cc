// SPDX-License-Identifier: BSD-3-Clause
// Chosen error completions (wr status=NAME, docs/faults.md): the fault specification picks a
// WR, and the device fails it the way it fails a genuine error of that kind, so the requester
// completes exactly that WR with exactly that status. Local statuses are given by the
// requester as it fetches the WQE; remote ones by the responder, which answers the chosen
// request message (NAK, RNR NAK, or silence) on every copy of it that arrives and counts it
// once.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "sim_harness.h"

using namespace simtest;

namespace {

// A log file of this test process, removed at the end of the test case.
struct LogFile {
  std::string path;
  explicit LogFile(const std::string& name)
      : path((std::filesystem::temp_directory_path() /
              ("rnicdv-chosen-" + std::to_string(::getpid()) + "-" + name + ".jsonl"))
                 .string()) {}
  ~LogFile() { std::remove(path.c_str()); }
  LogFile(const LogFile&) = delete;
  LogFile& operator=(const LogFile&) = delete;

  std::string text() const {
    std::ifstream in(path, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  // The lines of injected chosen completions.
  std::vector<std::string> wr_lines() const {
    std::vector<std::string> out;
    std::istringstream in(text());
    for (std::string line; std::getline(in, line);)
      if (line.find("\"kind\":\"wr\"") != std::string::npos) out.push_back(line);
    return out;
  }
  size_t lines_with(const std::string& needle) const {
    size_t n = 0;
    std::istringstream in(text());
    for (std::string line; std::getline(in, line);)
      if (line.find(needle) != std::string::npos) ++n;
    return n;
  }
};

FabricOptions with_faults(const LogFile& log, const std::string& rules) {
  FabricOptions f;
  f.fault_spec = "log=" + log.path + "; " + rules;
  return f;
}

// Short timers, few retries: exhaustion takes a few virtual milliseconds.
ConnectOptions quick() {
  ConnectOptions o;
  o.timeout = 8;  // ~1 ms
  o.retry_cnt = 2;
  o.rnr_retry = 2;
  o.min_rnr_timer = 1;  // 10 us
  return o;
}

std::vector<hw::AsyncEvent> drain_events(Host& h) {
  std::vector<hw::AsyncEvent> out;
  hw::AsyncEvent ev;
  while (h.dev->next_async_event(&ev)) out.push_back(ev);
  return out;
}

std::string hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%x", v);
  return buf;
}

// Four signaled 64-byte SENDs from a to b, with a receive posted for each, under a rule that
// chooses the third. Records each WQE's index and each completion, in order.
struct FourSends {
  LogFile log;
  Pair p;
  Buffer src, dst;
  std::vector<uint32_t> pis;
  std::vector<Completion> sends;
  std::vector<wqe::CqeFields> fields;
  std::vector<Completion> recvs;

  FourSends(const std::string& name, const std::string& status)
      : log(name), p(with_faults(log, "wr status=" + status + " nth=3 opcode=send")) {
    p.connect(quick(), quick());
    src = p.a.reg(4 * 64, all_remote(), 0x5a);
    dst = p.b.reg(4 * 64);
    for (uint32_t i = 0; i < 4; ++i) REQUIRE(p.b.post_recv(dst, i * 64, 64, i) == Errc::ok);
    for (uint32_t i = 0; i < 4; ++i) {
      Sge sge{src.addr(i * 64), 64, src.lkey()};
      pis.push_back(p.a.sq_pi);
      REQUIRE(p.a.post(make_wr(WrOpcode::send, &sge, 1, i)) == Errc::ok);
    }
    p.a.ring();
    for (int i = 0; i < 4; ++i) {
      wqe::CqeFields f{};
      sends.push_back(p.wait_send(p.a, &f));
      fields.push_back(f);
    }
    p.settle();
    Completion c;
    while (p.b.rcq->poll(&c)) recvs.push_back(c);
  }

  // The two SENDs before the chosen one completed, the chosen one failed with `status` and
  // `syndrome`, the one after it was flushed; the requester is in ERR; one log line.
  void expect_third_failed(ibv_wc_status status, uint8_t syndrome, const char* name,
                           const char* site) {
    REQUIRE(sends.size() == 4);
    CHECK(sends[0].status == IBV_WC_SUCCESS);
    CHECK(fields[0].wqe_counter == static_cast<uint16_t>(pis[0]));
    CHECK(sends[1].status == IBV_WC_SUCCESS);
    CHECK(fields[1].wqe_counter == static_cast<uint16_t>(pis[1]));
    CHECK(sends[2].status == status);
    CHECK(fields[2].cqe_opcode == MLX5_CQE_REQ_ERR);
    CHECK(fields[2].syndrome == syndrome);
    CHECK(fields[2].wqe_counter == static_cast<uint16_t>(pis[2]));
    CHECK(sends[3].status == IBV_WC_WR_FLUSH_ERR);
    CHECK(fields[3].wqe_counter == static_cast<uint16_t>(pis[3]));
    CHECK(p.a.qp->state() == hw::QpState::err);
    const std::vector<std::string> lines = log.wr_lines();
    REQUIRE(lines.size() == 1);
    CHECK(lines[0].find(std::string("\"status\":\"") + name + "\"") != std::string::npos);
    CHECK(lines[0].find(std::string("\"site\":\"") + site + "\"") != std::string::npos);
    CHECK(lines[0].find("\"op\":\"send\"") != std::string::npos);
    CHECK(lines[0].find("\"match\":3") != std::string::npos);
    CHECK(lines[0].find("\"psn\":2") != std::string::npos);  // both sides start at PSN 0
    // The responder's own QP at the responder, the requester's at the requester.
    const uint32_t qpn = std::string(site) == "responder" ? p.b.qpn() : p.a.qpn();
    CHECK(lines[0].find("\"qpn\":\"" + hex(qpn) + "\"") != std::string::npos);
  }

  // The responder received the first two SENDs and nothing of the chosen one.
  void expect_two_received(size_t flushed) {
    REQUIRE(recvs.size() == 2 + flushed);
    CHECK(recvs[0].status == IBV_WC_SUCCESS);
    CHECK(recvs[1].status == IBV_WC_SUCCESS);
    for (size_t i = 2; i < recvs.size(); ++i) CHECK(recvs[i].status == IBV_WC_WR_FLUSH_ERR);
    CHECK(std::memcmp(dst.data(), src.data(), 2 * 64) == 0);
    const std::vector<uint8_t> zero(2 * 64, 0);
    CHECK(std::memcmp(dst.data() + 2 * 64, zero.data(), zero.size()) == 0);
  }
};

}  // namespace

TEST_CASE("wr status=remote_access: the chosen SEND gets a Remote Access Error NAK") {
  FourSends r("remote_access", "remote_access");
  r.expect_third_failed(IBV_WC_REM_ACCESS_ERR, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR,
                        "remote_access", "responder");
  // The responder fails as for an rkey violation: ERR, QP_ACCESS_ERR, receives flushed.
  CHECK(r.p.b.qp->state() == hw::QpState::err);
  const std::vector<hw::AsyncEvent> ev = drain_events(r.p.b);
  REQUIRE(ev.size() == 1);
  CHECK(ev[0].type == hw::AsyncEventType::qp_access_err);
  CHECK(ev[0].qpn == r.p.b.qpn());
  CHECK(r.p.b.counters().naks_tx == 1);
  r.expect_two_received(2);
}

TEST_CASE("wr status=remote_operation: the chosen SEND gets a Remote Operational Error NAK") {
  FourSends r("remote_operation", "remote_operation");
  r.expect_third_failed(IBV_WC_REM_OP_ERR, MLX5_CQE_SYNDROME_REMOTE_OP_ERR, "remote_operation",
                        "responder");
  CHECK(r.p.b.qp->state() == hw::QpState::err);
  const std::vector<hw::AsyncEvent> ev = drain_events(r.p.b);
  REQUIRE(ev.size() == 1);
  CHECK(ev[0].type == hw::AsyncEventType::qp_fatal);
  CHECK(ev[0].qpn == r.p.b.qpn());
  CHECK(r.p.b.counters().naks_tx == 1);
  r.expect_two_received(2);
}

TEST_CASE("wr status=rnr_retry: the chosen SEND is RNR NAKed until rnr_retry runs out") {
  FourSends r("rnr_retry", "rnr_retry");
  r.expect_third_failed(IBV_WC_RNR_RETRY_EXC_ERR, MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR,
                        "rnr_retry", "responder");
  // rnr_retry 2: the first try and two retries, each NAKed. RNR is no error for the
  // responder, whose receive WQEs stay posted.
  CHECK(r.p.a.counters().rnr_naks_rx == 3);
  CHECK(r.p.b.counters().rnr_naks_tx == 3);
  CHECK(r.p.b.qp->state() == hw::QpState::rts);
  CHECK(drain_events(r.p.b).empty());
  CHECK(r.p.b.snapshot().rq_consumed == 2);
  r.expect_two_received(0);
}

TEST_CASE("wr status=retry: the chosen SEND is never answered until retry_cnt runs out") {
  FourSends r("retry", "retry");
  r.expect_third_failed(IBV_WC_RETRY_EXC_ERR, MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR, "retry",
                        "responder");
  // retry_cnt 2: three local ACK timeouts, the last one ends it.
  CHECK(r.p.a.counters().timeouts == 3);
  CHECK(r.p.b.qp->state() == hw::QpState::rts);
  CHECK(drain_events(r.p.b).empty());
  CHECK(r.p.b.counters().naks_tx == 0);
  CHECK(r.p.b.snapshot().expected_psn == 2);
  r.expect_two_received(0);
}

TEST_CASE("wr status=local_protection: the chosen SEND fails at fetch with LOC_PROT_ERR") {
  FourSends r("local_protection", "local_protection");
  r.expect_third_failed(IBV_WC_LOC_PROT_ERR, MLX5_CQE_SYNDROME_LOCAL_PROT_ERR, "local_protection",
                        "requester");
  // Nothing of it reached the wire; the responder is untouched.
  CHECK(r.p.b.qp->state() == hw::QpState::rts);
  CHECK(r.p.b.snapshot().expected_psn == 2);
  CHECK(drain_events(r.p.b).empty());
  r.expect_two_received(0);
}

TEST_CASE("wr status=local_length: the chosen SEND fails at fetch with LOC_LEN_ERR") {
  FourSends r("local_length", "local_length");
  r.expect_third_failed(IBV_WC_LOC_LEN_ERR, MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR, "local_length",
                        "requester");
  CHECK(r.p.b.qp->state() == hw::QpState::rts);
  CHECK(r.p.b.snapshot().expected_psn == 2);
  r.expect_two_received(0);
}

TEST_CASE("wr status=retry: the requester retransmits retry_cnt times, then RETRY_EXC_ERR") {
  LogFile log("retry_count");
  Pair p(with_faults(log, "wr status=retry"));
  ConnectOptions o = quick();
  o.retry_cnt = 5;
  p.connect(o, o);
  Buffer src = p.a.reg(64), dst = p.b.reg(64);
  REQUIRE(p.b.post_recv(dst, 0, 64) == Errc::ok);
  Sge sge{src.addr(), 64, src.lkey()};
  REQUIRE(p.a.post_and_ring(make_wr(WrOpcode::send, &sge, 1)) == Errc::ok);
  CHECK(p.wait_send(p.a).status == IBV_WC_RETRY_EXC_ERR);
  p.settle();
  CHECK(p.a.counters().timeouts == 6);     // retry_cnt + 1
  CHECK(p.a.counters().retransmits == 5);  // retry_cnt
  CHECK(p.a.snapshot().retransmits == 5);
  CHECK(p.b.counters().rx_dropped == 6);  // every copy, ignored
  CHECK(p.b.counters().packets_tx == 0);
  CHECK(log.wr_lines().size() == 1);  // counted once, however many copies came
}

TEST_CASE("wr status=rnr_retry: the requester retries rnr_retry times, then RNR_RETRY_EXC_ERR") {
  LogFile log("rnr_count");
  Pair p(with_faults(log, "wr status=rnr_retry"));
  ConnectOptions o = quick();
  o.rnr_retry = 4;
  p.connect(o, o);
  Buffer src = p.a.reg(64), dst = p.b.reg(64);
  REQUIRE(p.b.post_recv(dst, 0, 64) == Errc::ok);
  Sge sge{src.addr(), 64, src.lkey()};
  REQUIRE(p.a.post_and_ring(make_wr(WrOpcode::send, &sge, 1)) == Errc::ok);
  CHECK(p.wait_send(p.a).status == IBV_WC_RNR_RETRY_EXC_ERR);
  p.settle();
  CHECK(p.a.counters().rnr_naks_rx == 5);  // rnr_retry + 1
  CHECK(p.a.snapshot().rnr_naks_rx == 5);
  CHECK(p.a.counters().retransmits == 4);  // rnr_retry
  CHECK(p.b.counters().rnr_naks_tx == 5);
  CHECK(p.b.snapshot().rq_consumed == 0);  // the receive posted was never taken
  CHECK(p.a.counters().timeouts == 0);
  CHECK(log.wr_lines().size() == 1);
}

TEST_CASE("wr status=rnr_retry with rnr_retry 7 retries forever, as hardware does") {
  LogFile log("rnr_forever");
  Pair p(with_faults(log, "wr status=rnr_retry"));
  ConnectOptions o = quick();
  o.rnr_retry = 7;
  p.connect(o, o);
  Buffer src = p.a.reg(64), dst = p.b.reg(64);
  REQUIRE(p.b.post_recv(dst, 0, 64) == Errc::ok);
  Sge sge{src.addr(), 64, src.lkey()};
  REQUIRE(p.a.post_and_ring(make_wr(WrOpcode::send, &sge, 1)) == Errc::ok);
  REQUIRE(p.run_until([&] { return p.a.counters().rnr_naks_rx >= 40; }));
  Completion c;
  CHECK_FALSE(p.a.poll_send(&c));
  CHECK(p.a.qp->state() == hw::QpState::rts);
  CHECK(log.wr_lines().size() == 1);
}

TEST_CASE("a SEND retried after a genuine RNR NAK is counted once by wr rules") {
  // The first SEND finds no receive and is retried; its retransmissions are the same message
  // and must not count as the second: the second SEND is the one chosen.
  LogFile log("genuine_rnr");
  Pair p(with_faults(log, "wr status=remote_access nth=2 opcode=send"));
  ConnectOptions o = quick();
  o.rnr_retry = 7;
  p.connect(o, o);
  Buffer src = p.a.reg(128, all_remote(), 0x11), dst = p.b.reg(128);
  Sge first{src.addr(), 64, src.lkey()};
  REQUIRE(p.a.post_and_ring(make_wr(WrOpcode::send, &first, 1)) == Errc::ok);
  REQUIRE(p.run_until([&] { return p.b.counters().rnr_naks_tx >= 3; }));
  REQUIRE(p.b.post_recv(dst, 0, 64) == Errc::ok);
  REQUIRE(p.b.post_recv(dst, 64, 64) == Errc::ok);
  CHECK(p.wait_send(p.a).status == IBV_WC_SUCCESS);
  CHECK(p.wait_recv(p.b).status == IBV_WC_SUCCESS);
  CHECK(log.wr_lines().empty());
  Sge second{src.addr(64), 64, src.lkey()};
  REQUIRE(p.a.post_and_ring(make_wr(WrOpcode::send, &second, 1)) == Errc::ok);
  CHECK(p.wait_send(p.a).status == IBV_WC_REM_ACCESS_ERR);
  const std::vector<std::string> lines = log.wr_lines();
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].find("\"match\":2") != std::string::npos);
  CHECK(lines[0].find("\"psn\":1") != std::string::npos);
}

TEST_CASE("a chosen message whose first copy is lost is chosen when it arrives, once") {
  LogFile log("first_copy_lost");
  Pair p(with_faults(log, "drop nth=1 dir=request; wr status=remote_operation nth=1"));
  p.connect(quick(), quick());
  Buffer src = p.a.reg(64), dst = p.b.reg(64);
  REQUIRE(p.b.post_recv(dst, 0, 64) == Errc::ok);
  Sge sge{src.addr(), 64, src.lkey()};
  REQUIRE(p.a.post_and_ring(make_wr(WrOpcode::send, &sge, 1)) == Errc::ok);
  CHECK(p.wait_send(p.a).status == IBV_WC_REM_OP_ERR);
  CHECK(p.a.counters().timeouts == 1);  // the lost first copy
  CHECK(log.lines_with("\"fault\":\"drop\"") == 1);
  CHECK(log.wr_lines().size() == 1);
}

TEST_CASE("a duplicate of a completed request is not counted by wr rules") {
  // The ACK of the first SEND is lost: its retransmission reaches the responder as a
  // duplicate, which is acknowledged again and not counted; the second SEND is chosen.
  LogFile log("duplicate");
  Pair p(with_faults(log, "drop nth=1 dir=response; wr status=remote_operation nth=2"));
  p.connect(quick(), quick());
  Buffer src = p.a.reg(128), dst = p.b.reg(128);
  REQUIRE(p.b.post_recv(dst, 0, 64) == Errc::ok);
  REQUIRE(p.b.post_recv(dst, 64, 64) == Errc::ok);
  Sge first{src.addr(), 64, src.lkey()};
  REQUIRE(p.a.post_and_ring(make_wr(WrOpcode::send, &first, 1)) == Errc::ok);
  CHECK(p.wait_send(p.a).status == IBV_WC_SUCCESS);
  CHECK(p.b.counters().duplicates_rx >= 1);
  Sge second{src.addr(64), 64, src.lkey()};
  REQUIRE(p.a.post_and_ring(make_wr(WrOpcode::send, &second, 1)) == Errc::ok);
  CHECK(p.wait_send(p.a).status == IBV_WC_REM_OP_ERR);
  const std::vector<std::string> lines = log.wr_lines();
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].find("\"psn\":1") != std::string::npos);
}

TEST_CASE("wr opcode=write chooses the WRITE among a SEND, a READ and a WRITE") {
  LogFile log("opcode_write");
  Pair p(with_faults(log, "wr status=remote_access opcode=write"));
  p.connect(quick(), quick());
  Buffer local = p.a.reg(256, all_remote(), 0x42), remote = p.b.reg(256, all_remote(), 0x24);
  REQUIRE(p.b.post_recv(remote, 0, 64) == Errc::ok);
  Sge s0{local.addr(0), 64, local.lkey()};
  REQUIRE(p.a.post(make_wr(WrOpcode::send, &s0, 1)) == Errc::ok);
  Sge s1{local.addr(64), 64, local.lkey()};
  SendWr read = make_wr(WrOpcode::rdma_read, &s1, 1);
  read.remote_addr = remote.addr(128);
  read.rkey = remote.rkey();
  REQUIRE(p.a.post(read) == Errc::ok);
  Sge s2{local.addr(128), 64, local.lkey()};
  SendWr write = make_wr(WrOpcode::rdma_write, &s2, 1);
  write.remote_addr = remote.addr(192);
  write.rkey = remote.rkey();
  REQUIRE(p.a.post(write) == Errc::ok);
  p.a.ring();
  CHECK(p.wait_send(p.a).status == IBV_WC_SUCCESS);
  CHECK(p.wait_send(p.a).status == IBV_WC_SUCCESS);
  CHECK(p.wait_send(p.a).status == IBV_WC_REM_ACCESS_ERR);
  CHECK(local.data()[64] == 0x24);    // the READ was answered
  CHECK(remote.data()[192] == 0x24);  // the WRITE placed nothing
  const std::vector<std::string> lines = log.wr_lines();
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].find("\"op\":\"write\"") != std::string::npos);
  CHECK(lines[0].find("\"match\":1") != std::string::npos);
}

TEST_CASE("wr opcode=read and opcode=atomic choose only those requests") {
  SECTION("local_length on the READ") {
    LogFile log("opcode_read");
    Pair p(with_faults(log, "wr status=local_length opcode=read"));
    p.connect(quick(), quick());
    Buffer local = p.a.reg(128), remote = p.b.reg(128, all_remote(), 0x31);
    Sge s0{local.addr(0), 64, local.lkey()};
    SendWr write = make_wr(WrOpcode::rdma_write, &s0, 1);
    write.remote_addr = remote.addr(0);
    write.rkey = remote.rkey();
    REQUIRE(p.a.post(write) == Errc::ok);
    Sge s1{local.addr(64), 64, local.lkey()};
    SendWr read = make_wr(WrOpcode::rdma_read, &s1, 1);
    read.remote_addr = remote.addr(64);
    read.rkey = remote.rkey();
    REQUIRE(p.a.post(read) == Errc::ok);
    p.a.ring();
    CHECK(p.wait_send(p.a).status == IBV_WC_SUCCESS);
    CHECK(p.wait_send(p.a).status == IBV_WC_LOC_LEN_ERR);
    CHECK(local.data()[64] == 0);  // nothing read
    REQUIRE(log.wr_lines().size() == 1);
    CHECK(log.wr_lines()[0].find("\"op\":\"read\"") != std::string::npos);
  }
  SECTION("remote_operation on the fetch-and-add") {
    LogFile log("opcode_atomic");
    Pair p(with_faults(log, "wr status=remote_operation opcode=atomic"));
    p.connect(quick(), quick());
    Buffer local = p.a.reg(64), remote = p.b.reg(64);
    Sge s0{local.addr(0), 8, local.lkey()};
    SendWr write = make_wr(WrOpcode::rdma_write, &s0, 1);
    write.remote_addr = remote.addr(8);
    write.rkey = remote.rkey();
    REQUIRE(p.a.post(write) == Errc::ok);
    Sge s1{local.addr(16), 8, local.lkey()};
    SendWr fa = make_wr(WrOpcode::atomic_fetch_add, &s1, 1);
    fa.remote_addr = remote.addr(0);
    fa.rkey = remote.rkey();
    fa.compare_add = 5;
    REQUIRE(p.a.post(fa) == Errc::ok);
    p.a.ring();
    CHECK(p.wait_send(p.a).status == IBV_WC_SUCCESS);
    CHECK(p.wait_send(p.a).status == IBV_WC_REM_OP_ERR);
    uint64_t target = 1;
    std::memcpy(&target, remote.data(), 8);
    CHECK(target == 0);  // never applied
    REQUIRE(log.wr_lines().size() == 1);
    CHECK(log.wr_lines()[0].find("\"op\":\"atomic\"") != std::string::npos);
  }
}

namespace {

// Two connections between two devices whose QP numbers differ on each side: device A has
// QPs 0x100 and 0x101, device B a spare 0x100, then 0x101 and 0x102. The connections are
// 0x100 <-> 0x101 and 0x101 <-> 0x102.
struct TwoConnections {
  std::shared_ptr<sim::Fabric> fabric;
  Host a1, a2, spare, b1, b2;
  Buffer a1buf, a2buf, b1buf, b2buf;

  explicit TwoConnections(const FabricOptions& f) : fabric(make_fabric(f)) {
    const HostOptions o = Pair::default_host();
    a1.init(fabric, o);
    spare.init(fabric, o);
    a2.init_on(a1.dev, o);
    b1.init_on(spare.dev, o);
    b2.init_on(spare.dev, o);
    REQUIRE(a1.qpn() == 0x100);
    REQUIRE(a2.qpn() == 0x101);
    REQUIRE(b1.qpn() == 0x101);
    REQUIRE(b2.qpn() == 0x102);
    connect(a1, b1, quick(), quick());
    connect(a2, b2, quick(), quick());
    a1buf = a1.reg(64);
    a2buf = a2.reg(64);
    b1buf = b1.reg(64);
    b2buf = b2.reg(64);
    REQUIRE(b1.post_recv(b1buf, 0, 64) == Errc::ok);
    REQUIRE(b2.post_recv(b2buf, 0, 64) == Errc::ok);
  }

  // One SEND on each connection; their send completions' statuses.
  std::pair<int, int> send_both() {
    Sge s1{a1buf.addr(), 64, a1buf.lkey()};
    REQUIRE(a1.post_and_ring(make_wr(WrOpcode::send, &s1, 1)) == Errc::ok);
    Sge s2{a2buf.addr(), 64, a2buf.lkey()};
    REQUIRE(a2.post_and_ring(make_wr(WrOpcode::send, &s2, 1)) == Errc::ok);
    Completion c1{}, c2{};
    REQUIRE(fabric->run_until([&] { return a1.poll_send(&c1); }, 60'000'000'000ull));
    REQUIRE(fabric->run_until([&] { return a2.poll_send(&c2); }, 60'000'000'000ull));
    return {c1.status, c2.status};
  }
};

}  // namespace

TEST_CASE("wr qp= at the requester names the requester's own QP") {
  LogFile log("qp_requester");
  TwoConnections t(with_faults(log, "wr status=local_protection qp=0x101"));
  const auto [first, second] = t.send_both();
  CHECK(first == IBV_WC_SUCCESS);  // QP 0x100, whose peer is 0x101
  CHECK(second == IBV_WC_LOC_PROT_ERR);
  CHECK(t.a1.qp->state() == hw::QpState::rts);
  CHECK(t.a2.qp->state() == hw::QpState::err);
  REQUIRE(log.wr_lines().size() == 1);
  CHECK(log.wr_lines()[0].find("\"qpn\":\"0x101\"") != std::string::npos);
}

TEST_CASE("wr qp= at the responder names the responder's own QP") {
  LogFile log("qp_responder");
  TwoConnections t(with_faults(log, "wr status=remote_access qp=0x102"));
  const auto [first, second] = t.send_both();
  CHECK(first == IBV_WC_SUCCESS);  // requester 0x100 -> responder 0x101
  CHECK(second == IBV_WC_REM_ACCESS_ERR);  // requester 0x101 -> responder 0x102
  CHECK(t.b1.qp->state() == hw::QpState::rts);
  CHECK(t.b2.qp->state() == hw::QpState::err);
  REQUIRE(log.wr_lines().size() == 1);
  CHECK(log.wr_lines()[0].find("\"qpn\":\"0x102\"") != std::string::npos);
}

TEST_CASE("wr device= chooses only that device's WRs") {
  LogFile log("device");
  Pair p(with_faults(log, "wr status=local_length device=1"));
  p.connect(quick(), quick());
  Buffer abuf = p.a.reg(64), bbuf = p.b.reg(64);
  REQUIRE(p.a.post_recv(abuf, 0, 64) == Errc::ok);
  REQUIRE(p.b.post_recv(bbuf, 0, 64) == Errc::ok);
  Sge sa{abuf.addr(), 64, abuf.lkey()};
  Sge sb{bbuf.addr(), 64, bbuf.lkey()};
  // Device 0's SEND first: the failure moves device 1's QP, its responder, to ERR.
  REQUIRE(p.a.post_and_ring(make_wr(WrOpcode::send, &sa, 1)) == Errc::ok);
  CHECK(p.wait_send(p.a).status == IBV_WC_SUCCESS);
  REQUIRE(p.b.post_and_ring(make_wr(WrOpcode::send, &sb, 1)) == Errc::ok);
  CHECK(p.wait_send(p.b).status == IBV_WC_LOC_LEN_ERR);
  REQUIRE(log.wr_lines().size() == 1);
  CHECK(log.wr_lines()[0].find("\"device\":1") != std::string::npos);
}

TEST_CASE("wr every= and count= fire on every Nth WR, at most count times") {
  // local statuses move the QP to ERR: one QP per WR, on one device, counted together.
  LogFile log("every");
  Pair p(with_faults(log, "wr status=local_protection every=2 count=2"));
  std::vector<std::unique_ptr<Host>> extra;
  std::vector<int> got;
  p.connect(quick(), quick());
  for (int i = 0; i < 6; ++i) {
    Host* h = &p.a;
    Host* peer = &p.b;
    if (i != 0) {
      extra.push_back(std::make_unique<Host>());
      extra.back()->init_on(p.a.dev, Pair::default_host());
      h = extra.back().get();
      extra.push_back(std::make_unique<Host>());
      extra.back()->init_on(p.b.dev, Pair::default_host());
      peer = extra.back().get();
      connect(*h, *peer, quick(), quick());
    }
    Buffer buf = h->reg(64);
    Sge sge{buf.addr(), 64, buf.lkey()};
    SendWr wr = make_wr(WrOpcode::rdma_write, &sge, 1);
    Buffer target = peer->reg(64);
    wr.remote_addr = target.addr();
    wr.rkey = target.rkey();
    REQUIRE(h->post_and_ring(wr) == Errc::ok);
    got.push_back(p.wait_send(*h).status);
  }
  const std::vector<int> want = {IBV_WC_SUCCESS, IBV_WC_LOC_PROT_ERR, IBV_WC_SUCCESS,
                                           IBV_WC_LOC_PROT_ERR, IBV_WC_SUCCESS, IBV_WC_SUCCESS};
  CHECK(got == want);
  CHECK(log.wr_lines().size() == 2);
}

namespace {

// A lossy run with a chosen completion: SENDs until one fails. Returns the log's bytes.
std::string lossy_run(const std::string& name) {
  LogFile log(name);
  Pair p(with_faults(log, "seed=11; drop p=0.15 dir=request; duplicate p=0.1; "
                          "wr status=retry nth=5 opcode=send"));
  p.connect(quick(), quick());
  Buffer src = p.a.reg(64 * 8), dst = p.b.reg(64 * 8);
  for (uint32_t i = 0; i < 8; ++i) REQUIRE(p.b.post_recv(dst, i * 64, 64) == Errc::ok);
  for (uint32_t i = 0; i < 8; ++i) {
    Sge sge{src.addr(i * 64), 64, src.lkey()};
    REQUIRE(p.a.post(make_wr(WrOpcode::send, &sge, 1)) == Errc::ok);
  }
  p.a.ring();
  std::vector<int> got;
  for (int i = 0; i < 8; ++i) got.push_back(p.wait_send(p.a).status);
  p.settle();
  CHECK(got[3] == IBV_WC_SUCCESS);
  CHECK(got[4] == IBV_WC_RETRY_EXC_ERR);
  CHECK(log.wr_lines().size() == 1);
  return log.text();
}

}  // namespace

TEST_CASE("the same spec and seed give the same fault log, byte for byte") {
  const std::string first = lossy_run("same_seed");
  const std::string second = lossy_run("same_seed");  // the same path: the spec is the same text
  CHECK(first.find("\"kind\":\"wr\"") != std::string::npos);
  CHECK(first.find("\"fault\":\"drop\"") != std::string::npos);
  CHECK(first == second);
}

TEST_CASE("chosen completions in threaded mode: the third SEND fails, the two before succeed") {
  // Device threads, not stepping: the count is exact whatever the threads' timing.
  LogFile log("threaded");
  FabricOptions f = with_faults(log, "wr status=remote_operation nth=3 opcode=send");
  f.mode = sim::ExecMode::threaded;
  Pair p(f);
  // Real time: quick()'s 1 ms ACK timeout and two retries run out on a loaded machine before
  // the device threads get a core; patient timers leave the chosen error the only one.
  ConnectOptions patient;
  patient.timeout = 14;  // ~67 ms, seven retries
  p.connect(patient, patient);
  Buffer src = p.a.reg(3 * 64), dst = p.b.reg(3 * 64);
  for (uint32_t i = 0; i < 3; ++i) REQUIRE(p.b.post_recv(dst, i * 64, 64) == Errc::ok);
  std::vector<int> got;
  for (uint32_t i = 0; i < 3; ++i) {
    Sge sge{src.addr(i * 64), 64, src.lkey()};
    REQUIRE(p.a.post_and_ring(make_wr(WrOpcode::send, &sge, 1)) == Errc::ok);
  }
  REQUIRE(wait_real([&] {
    Completion c;
    while (p.a.poll_send(&c)) got.push_back(c.status);
    return got.size() == 3;
  }));
  CHECK(got == std::vector<int>{IBV_WC_SUCCESS, IBV_WC_SUCCESS, IBV_WC_REM_OP_ERR});
  CHECK(wait_real([&] { return p.b.qp->state() == hw::QpState::err; }));
  CHECK(log.wr_lines().size() == 1);
}
