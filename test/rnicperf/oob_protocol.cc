// SPDX-License-Identifier: BSD-3-Clause
// The control channel: perftest's peer record, parameter negotiation (mismatches named on
// both sides), barriers, results, and its errors (unreachable server, port in use).
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "oob_channel.h"
#include "oob_protocol.h"

using namespace rnicperf;
using rnicdv::Errc;
using rnicdv::Result;

TEST_CASE("the peer record is perftest's 108-byte colon-separated hex format", "[oob]") {
  PeerRecord r;
  r.lid = 0;
  r.out_reads = 16;
  r.qpn = 0x48;
  r.psn = 0xf5aed1;
  r.rkey = 0x1fd4bc;
  r.vaddr = 0x7f0e0c8aa000;
  r.gid[10] = 0xff;
  r.gid[11] = 0xff;
  r.gid[12] = 127;
  r.gid[15] = 2;
  std::string text = encode_record(r);
  REQUIRE(text.size() == kPeerRecordSize);
  CHECK(std::string(text.c_str()) ==
        "0000:0010:000048:f5aed1:001fd4bc:00007f0e0c8aa000:"
        "00:00:00:00:00:00:00:00:00:00:ff:ff:7f:00:00:02:00000000:");
  auto back = decode_record(text.data(), text.size());
  REQUIRE(back.is_ok());
  CHECK(back->qpn == r.qpn);
  CHECK(back->psn == r.psn);
  CHECK(back->rkey == r.rkey);
  CHECK(back->vaddr == r.vaddr);
  CHECK(back->out_reads == 16);
  CHECK(std::memcmp(back->gid, r.gid, 16) == 0);
}

TEST_CASE("with -c XRC the record's last field is the side's XRC SRQ number, as perftest "
          "writes and reads it",
          "[oob][xrc]") {
  PeerRecord r;
  r.out_reads = 16;
  r.qpn = 0x101;
  r.psn = 0x3f1222;
  r.rkey = 0x849df557;
  r.vaddr = 0x5567da740000;
  r.gid[10] = 0xff;
  r.gid[11] = 0xff;
  r.gid[12] = 127;
  r.gid[15] = 3;
  r.srqn = 0xabc40;
  // KEY_PRINT_FMT_GID: the SRQN is "%08x:" after the GID's last byte, and ends the record.
  const std::string expected =
      "0000:0010:000101:3f1222:849df557:00005567da740000:"
      "00:00:00:00:00:00:00:00:00:00:ff:ff:7f:00:00:03:000abc40:";
  const std::string text = encode_record(r);
  REQUIRE(text.size() == kPeerRecordSize);
  CHECK(std::string(text.c_str()) == expected);
  CHECK(text.substr(expected.size()) == std::string(kPeerRecordSize - expected.size(), '\0'));
  // perftest's ethernet_read_keys takes the SRQN from the nine characters after the GID's last
  // byte: a record written by hand, as perftest's sprintf does, decodes to it.
  std::string from_perftest = expected;
  from_perftest.resize(kPeerRecordSize, '\0');
  from_perftest.replace(from_perftest.find(":000abc40:") + 1, 8, "00ffffff");
  auto back = decode_record(from_perftest.data(), from_perftest.size());
  REQUIRE(back.is_ok());
  CHECK(back->srqn == 0xffffff);
  CHECK(back->qpn == 0x101);
  CHECK(back->rkey == 0x849df557);
  back = decode_record(text.data(), text.size());
  REQUIRE(back.is_ok());
  CHECK(back->srqn == 0xabc40);

  // The binary record (-z): the SRQN at offset 48, big-endian.
  uint8_t out[kPerftestDestSize];
  encode_perftest_dest(r, 3, out);
  const uint8_t srqn_bytes[4] = {0x00, 0x0a, 0xbc, 0x40};
  CHECK(std::memcmp(out + 48, srqn_bytes, 4) == 0);
  CHECK(decode_perftest_dest(out).srqn == 0xabc40);

  // Two rnicperf ends agree on the connection type, XRC included.
  Options o;
  o.test = {Verb::send, Kind::bandwidth};
  o.size = 1024;
  o.iterations = 100;
  o.xrc = true;
  TestParams a = params_from_options(o, 1024);
  CHECK(a.connection == 3);
  uint8_t wire[kTestParamsWireSize];
  encode_params(a, wire);
  CHECK(decode_params(wire).connection == 3);
  o.xrc = false;
  CHECK(params_mismatch(a, params_from_options(o, 1024)) ==
        "connection type (-c) local=XRC remote=RC");
}

TEST_CASE("malformed peer records are rejected", "[oob]") {
  std::string text = encode_record(PeerRecord{});
  std::string bad = text;
  bad[3] = 'g';
  auto r = decode_record(bad.data(), bad.size());
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().code() == Errc::protocol_error);
  bad = text;
  bad[4] = '-';
  CHECK_FALSE(decode_record(bad.data(), bad.size()).is_ok());
  CHECK_FALSE(decode_record(text.data(), text.size() - 1).is_ok());
}

TEST_CASE("parameter mismatches name the parameter and both values", "[oob]") {
  Options o;
  o.test = {Verb::write, Kind::latency};
  o.size = 2;
  o.iterations = 1000;
  TestParams a = params_from_options(o, 1024);
  TestParams b = a;
  CHECK(params_mismatch(a, b).empty());
  b.verb = static_cast<uint32_t>(Verb::read);
  CHECK(params_mismatch(a, b) == "test local=write_lat remote=read_lat");
  b = a;
  b.size = 64;
  CHECK(params_mismatch(a, b) == "size local=2 remote=64");
  b = a;
  b.iterations = 50;
  CHECK(params_mismatch(a, b) == "iterations local=1000 remote=50");
  b = a;
  b.reversed = 1;  // one side sends with --reversed, the other would too: both would wait
  CHECK(params_mismatch(a, b) == "reversed (--reversed) local=off remote=on");
  b = a;
  b.mtu = 4096;  // negotiated, not a mismatch
  CHECK(params_mismatch(a, b).empty());
  uint8_t wire[kTestParamsWireSize];
  encode_params(a, wire);
  TestParams c = decode_params(wire);
  CHECK(params_mismatch(a, c).empty());
  CHECK(c.mtu == 1024);
  // --reversed crosses the wire.
  a.reversed = 1;
  encode_params(a, wire);
  CHECK(decode_params(wire).reversed == 1);
}

namespace {
struct SessionPair {
  OobSession client, server;
};
SessionPair make_pair() {
  auto p = OobChannel::pair();
  REQUIRE(p.is_ok());
  auto [a, b] = std::move(p.value());
  return {OobSession(std::move(a), true, 5000), OobSession(std::move(b), false, 5000)};
}
}  // namespace

TEST_CASE("both ends report a parameter mismatch", "[oob]") {
  auto [client, server] = make_pair();
  Options o;
  o.test = {Verb::write, Kind::latency};
  o.size = 2;
  o.iterations = 1000;
  TestParams cp = params_from_options(o, 4096);
  o.test.verb = Verb::read;
  TestParams sp = params_from_options(o, 1024);
  rnicdv::Status server_status;
  std::thread t([&, &server = server] {
    TestParams remote;
    uint32_t mtu = 0;
    server_status = server.hello().status();
    if (server_status) server_status = server.negotiate(sp, &remote, &mtu);
  });
  rnicdv::Status s = client.hello().status();
  REQUIRE(s.is_ok());
  TestParams remote;
  uint32_t mtu = 0;
  s = client.negotiate(cp, &remote, &mtu);
  t.join();
  CHECK(s.message() == "parameter mismatch: test local=write_lat remote=read_lat");
  CHECK(server_status.message() == "parameter mismatch: test local=read_lat remote=write_lat");
}

TEST_CASE("a matching negotiation agrees on the smaller MTU and exchanges records", "[oob]") {
  auto [client, server] = make_pair();
  Options o;
  o.test = {Verb::send, Kind::bandwidth};
  o.size = 4096;
  o.iterations = 100;
  PeerRecord mine, theirs;
  mine.qpn = 0x11;
  theirs.qpn = 0x22;
  std::vector<PeerRecord> server_got;
  uint32_t server_mtu = 0;
  BandwidthResult server_bw;
  std::thread t([&, &server = server] {
    TestParams remote;
    REQUIRE(server.hello());
    REQUIRE(server.negotiate(params_from_options(o, 1024), &remote, &server_mtu));
    REQUIRE(server.exchange_records({theirs}, &server_got));
    REQUIRE(server.barrier(1));
    REQUIRE(server.recv_bw(&server_bw, 0));
  });
  REQUIRE(client.hello());
  TestParams remote;
  uint32_t mtu = 0;
  REQUIRE(client.negotiate(params_from_options(o, 4096), &remote, &mtu));
  std::vector<PeerRecord> got;
  REQUIRE(client.exchange_records({mine}, &got));
  REQUIRE(client.barrier(1));
  REQUIRE(client.send_bw(BandwidthResult{4096, 100, 1.5, 1.25, 0.5}));
  t.join();
  CHECK(mtu == 1024);
  CHECK(server_mtu == 1024);
  REQUIRE(got.size() == 1);
  CHECK(got[0].qpn == 0x22);
  REQUIRE(server_got.size() == 1);
  CHECK(server_got[0].qpn == 0x11);
  CHECK(server_bw.bw_avg == 1.25);
  CHECK(server_bw.size == 4096);
}

TEST_CASE("a peer's failure reaches the waiting side", "[oob]") {
  auto [client, server] = make_pair();
  client.send_abort("write_lat: no completion for 20 s");
  auto s = server.barrier(3);
  CHECK(s.code() == Errc::disconnected);
  CHECK(s.message() == "peer failed: write_lat: no completion for 20 s");
}

TEST_CASE("a closed peer and a silent peer give clear errors", "[oob]") {
  SECTION("closed") {
    auto p = OobChannel::pair();
    REQUIRE(p.is_ok());
    OobChannel a = std::move(p->first);
    { OobChannel b = std::move(p->second); }
    OobSession s(std::move(a), false, 2000);
    auto st = s.barrier(1);
    CHECK(st.code() == Errc::disconnected);
    CHECK(st.message() == "loopback peer closed the connection");
  }
  SECTION("silent") {
    auto p = OobChannel::pair();
    REQUIRE(p.is_ok());
    OobSession s(std::move(p->first), false, 200);
    auto st = s.barrier(1);
    CHECK(st.code() == Errc::timeout);
    CHECK(st.message() == "no answer from loopback peer for 200 ms");
  }
}

TEST_CASE("a refused connection fails at once, naming the address and the way to wait", "[oob]") {
  // Port 1 on loopback: nothing listens there, connect is refused. Without retrying, the
  // client gives up on the first refusal (as perftest does) rather than at the deadline.
  auto r = OobChannel::connect("127.0.0.1", 1, 20'000, false);
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().code() == Errc::unreachable);
  CHECK(r.status().message() ==
        "cannot reach server 127.0.0.1:1: Connection refused (no server is listening there: "
        "start the server first, or pass --retry-connect to wait for it)");
}

TEST_CASE("with retrying, a refused connection is retried until the deadline and announced",
          "[oob]") {
  std::vector<std::string> notices;
  auto r = OobChannel::connect("127.0.0.1", 1, 1'500, true,
                               [&](const std::string& n) { notices.push_back(n); });
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().message() ==
        "cannot reach server 127.0.0.1:1: Connection refused (gave up after 1500 ms)");
  REQUIRE(notices.size() == 1);
  CHECK(notices[0] ==
        "waiting for the server at 127.0.0.1:1 (Connection refused); giving up after 1 s "
        "(--timeout)");
}

TEST_CASE("with retrying, a client started before its server connects once it listens",
          "[oob]") {
  // Find a free port, then start listening on it only after the client began trying.
  uint16_t port = 0;
  {
    auto probe = OobListener::listen(0);
    REQUIRE(probe.is_ok());
    port = probe->port();
  }
  std::optional<Result<OobChannel>> client;
  std::thread t([&] { client.emplace(OobChannel::connect("127.0.0.1", port, 20'000, true)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto listener = OobListener::listen(port);
  REQUIRE(listener.is_ok());
  auto accepted = listener->accept(20'000);
  t.join();
  REQUIRE(accepted.is_ok());
  REQUIRE(client.has_value());
  CHECK(client->is_ok());
}

TEST_CASE("a port in use is reported, and a listener accepts a client", "[oob]") {
  auto first = OobListener::listen(0);
  REQUIRE(first.is_ok());
  uint16_t port = first->port();
  auto second = OobListener::listen(port);
  REQUIRE_FALSE(second.is_ok());
  CHECK(second.status().code() == Errc::address_in_use);
  CHECK(second.status().message() ==
        "cannot listen on TCP port " + std::to_string(port) + ": Address already in use");

  std::thread t([port] {
    auto c = OobChannel::connect("127.0.0.1", port, 2000, false);
    REQUIRE(c.is_ok());
    OobSession s(std::move(c.value()), true, 2000);
    REQUIRE(s.hello());
  });
  auto ch = first->accept(2000);
  REQUIRE(ch.is_ok());
  CHECK(ch->peer().rfind("client 127.0.0.1:", 0) == 0);
  OobSession s(std::move(ch.value()), false, 2000);
  CHECK(s.hello().is_ok());
  t.join();

  auto none = first->accept(100);
  REQUIRE_FALSE(none.is_ok());
  CHECK(none.status().code() == Errc::timeout);
}

TEST_CASE("a peer that speaks neither rnicperf's nor perftest's exchange is named", "[oob]") {
  auto p = OobChannel::pair();
  REQUIRE(p.is_ok());
  OobChannel a = std::move(p->first);
  std::thread t([b = std::move(p->second)]() mutable {
    char junk[16] = "GET / HTTP/1.1";
    (void)b.send_all(junk, sizeof junk, 1000);
    char sink[16];
    (void)b.recv_all(sink, sizeof sink, 1000);
  });
  OobSession s(std::move(a), false, 1000);
  auto st = s.hello();
  t.join();
  CHECK(st.status().message() ==
        "loopback peer speaks neither rnicperf's nor perftest's exchange (first 16 bytes "
        "'GET / HTTP/1.1..'; perftest sends its version, 5.70 or later)");
}

// ---- perftest's exchange, byte for byte (perftest_communication.c at 4.5-0.17) -------------

namespace {
// The other end as perftest: raw bytes on the channel.
struct RawPeer {
  OobChannel ch;
  std::string read(size_t n) {
    std::string s(n, '\0');
    REQUIRE(ch.recv_all(s.data(), n, 5000).is_ok());
    return s;
  }
  void write(const std::string& s) { REQUIRE(ch.send_all(s.data(), s.size(), 5000).is_ok()); }
};
std::string bytes(std::initializer_list<int> b) {
  std::string s;
  for (int c : b) s += static_cast<char>(c);
  return s;
}
}  // namespace

TEST_CASE("rnicperf knows a perftest peer by its version and answers it with perftest's alone",
          "[oob][perftest]") {
  auto p = OobChannel::pair();
  REQUIRE(p.is_ok());
  RawPeer perftest{std::move(p->second)};
  OobSession server(std::move(p->first), false, 5000);
  std::optional<Result<PeerKind>> kind;
  std::thread t([&] { kind.emplace(server.hello()); });
  // What Debian's perftest 4.5 sends: VERSION "6.06" in a 16-byte field (exchange_versions).
  perftest.write(std::string("6.06") + std::string(12, '\0'));
  const std::string answer = perftest.read(16);
  t.join();
  REQUIRE(kind->is_ok());
  CHECK(**kind == PeerKind::perftest);
  CHECK(answer == std::string("6.06") + std::string(12, '\0'));  // no rnicperf mark
}

TEST_CASE("rnicperf's own versions carry its mark after perftest's, and find each other",
          "[oob][perftest]") {
  auto [client, server] = make_pair();
  std::optional<Result<PeerKind>> server_kind;
  std::thread t([&, &server = server] { server_kind.emplace(server.hello()); });
  Result<PeerKind> client_kind = client.hello();
  t.join();
  REQUIRE(client_kind.is_ok());
  CHECK(*client_kind == PeerKind::rnicperf);
  REQUIRE(server_kind->is_ok());
  CHECK(**server_kind == PeerKind::rnicperf);
  // perftest reads this field with atof: 6.06, above its 5.70 minimum.
  char hello[16] = {};
  std::memcpy(hello, kPerftestVersion, 4);
  CHECK(std::atof(hello) >= 5.70);
}

TEST_CASE("a perftest older than 5.70 is refused, as perftest refuses it", "[oob][perftest]") {
  auto p = OobChannel::pair();
  REQUIRE(p.is_ok());
  RawPeer old{std::move(p->second)};
  OobSession client(std::move(p->first), true, 5000);
  std::optional<Result<PeerKind>> kind;
  std::thread t([&] { kind.emplace(client.hello()); });
  (void)old.read(16);
  old.write(std::string("5.60") + std::string(12, '\0'));
  t.join();
  REQUIRE_FALSE(kind->is_ok());
  CHECK(kind->status().code() == Errc::protocol_error);
}

TEST_CASE("perftest's prologue: page and cache-line sizes big-endian, the MTU as its code",
          "[oob][perftest]") {
  auto p = OobChannel::pair();
  REQUIRE(p.is_ok());
  RawPeer perftest{std::move(p->second)};
  OobSession client(std::move(p->first), true, 5000);
  uint32_t cycle = 4096, line = 64;
  uint8_t mtu = 0;
  rnicdv::Status sys, m;
  std::thread t([&] {
    sys = client.perftest_sys_data(&cycle, &line);
    if (sys) m = client.perftest_mtu(5, &mtu);
  });
  // The client writes first at every step (ctx_xchg_data).
  CHECK(perftest.read(4) == bytes({0, 0, 0x10, 0}));
  perftest.write(bytes({0, 0, 0x20, 0}));  // the peer's 8 KiB page: the larger is kept
  CHECK(perftest.read(4) == bytes({0, 0, 0, 0x40}));
  perftest.write(bytes({0, 0, 0, 0x40}));
  CHECK(perftest.read(2) == bytes({'5', 0}));  // 4096 is IBV_MTU_4096 = 5
  perftest.write(bytes({'3', 0}));             // 1024: the smaller is kept
  t.join();
  REQUIRE(sys.is_ok());
  REQUIRE(m.is_ok());
  CHECK(cycle == 8192);
  CHECK(line == 64);
  CHECK(mtu == 3);
}

TEST_CASE("perftest's handshake is the 108-byte record, the server reading first; its bandwidth "
          "report is five big-endian 8-byte fields",
          "[oob][perftest]") {
  auto p = OobChannel::pair();
  REQUIRE(p.is_ok());
  RawPeer perftest{std::move(p->second)};
  OobSession server(std::move(p->first), false, 5000);
  PeerRecord mine;
  mine.qpn = 0x101;
  mine.psn = 0xabcdef;
  mine.out_reads = 16;
  PeerRecord theirs_in;
  theirs_in.qpn = 0x222;
  theirs_in.rkey = 0x1234;
  theirs_in.vaddr = 0x7f0000001000;
  PeerRecord got;
  BandwidthResult report;
  rnicdv::Status hs, rep;
  std::thread t([&] {
    hs = server.perftest_handshake(mine, &got);
    BandwidthResult zero;
    if (hs) rep = server.perftest_reports(zero, &report);
  });
  perftest.write(encode_record(theirs_in));
  const std::string answer = perftest.read(kPeerRecordSize);
  CHECK(std::string(answer.c_str()) ==
        "0000:0010:000101:abcdef:00000000:0000000000000000:"
        "00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00000000:");
  CHECK(answer.back() == '\0');
  // A write_bw client's report: size 65536, 100 iterations, peak 34.43, average 33.46 and
  // 0.000535 Mpps, as the doubles' bits in network order (xchg_bw_reports).
  const std::string fields[5] = {
      bytes({0, 0, 0, 0, 0, 1, 0, 0}), bytes({0, 0, 0, 0, 0, 0, 0, 0x64}),
      bytes({0x40, 0x41, 0x37, 0xa7, 0x44, 0x33, 0xc3, 0x75}),
      bytes({0x40, 0x40, 0xbb, 0x39, 0xc2, 0xf2, 0x02, 0xea}),
      bytes({0x3f, 0x41, 0x8b, 0x49, 0xa0, 0x18, 0xa7, 0x4a})};
  for (const std::string& f : fields) {
    perftest.write(f);
    CHECK(perftest.read(8).size() == 8);  // the server's answer, which perftest ignores
  }
  t.join();
  REQUIRE(hs.is_ok());
  CHECK(got.qpn == 0x222);
  CHECK(got.rkey == 0x1234);
  CHECK(got.vaddr == 0x7f0000001000);
  REQUIRE(rep.is_ok());
  CHECK(report.size == 65536);
  CHECK(report.iterations == 100);
  CHECK(report.bw_peak == Approx(34.43).epsilon(1e-3));
  CHECK(report.bw_avg == Approx(33.46).epsilon(1e-3));
  CHECK(report.msg_rate == Approx(0.000535).epsilon(1e-2));
}

TEST_CASE("signs of life without progress do not hold a waiting side past its timeout", "[oob]") {
  auto p = OobChannel::pair();
  REQUIRE(p.is_ok());
  OobSession waiting(std::move(p->first), false, 300);
  OobSession peer(std::move(p->second), true, 300);
  std::atomic<bool> stop{false};
  // The peer says it is alive every 50 ms, always with the same count, and never sends DONE.
  std::thread t([&] {
    while (!stop.load()) {
      if (!peer.send_alive(7)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  uint64_t count = 0;
  rnicdv::Status st = waiting.recv_done(&count, 0);
  stop = true;
  t.join();
  CHECK(st.code() == Errc::timeout);
  CHECK(st.message().find("no progress from loopback peer") != std::string::npos);
}

TEST_CASE("signs of life with progress keep a waiting side waiting", "[oob]") {
  auto p = OobChannel::pair();
  REQUIRE(p.is_ok());
  OobSession waiting(std::move(p->first), false, 1000);
  OobSession peer(std::move(p->second), true, 1000);
  // Fifteen signs of life 100 ms apart, each with more done: longer in all than the 1 s
  // wait, then DONE.
  std::thread t([&] {
    for (uint64_t i = 1; i <= 15; ++i) {
      (void)peer.send_alive(i * 1000);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    (void)peer.send_done(12345);
  });
  uint64_t count = 0;
  rnicdv::Status st = waiting.recv_done(&count, 0);
  t.join();
  INFO(st.message());
  CHECK(st.is_ok());
  CHECK(count == 12345);
}

namespace {

// One end of a message channel, as -z's QP carries it: each send_all is one message, kept
// whole; recv_all reads what the other end sent as one stream.
struct MessageQueue {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::string> messages;
  std::string stream;  // taken from messages, not yet read
};

class QueueTransport final : public OobTransport {
 public:
  QueueTransport(std::shared_ptr<MessageQueue> out, std::shared_ptr<MessageQueue> in)
      : out_(std::move(out)), in_(std::move(in)) {}
  rnicdv::Status send_all(const void* data, size_t len, uint32_t) override {
    std::lock_guard<std::mutex> lock(out_->mu);
    out_->messages.emplace_back(static_cast<const char*>(data), len);
    out_->cv.notify_all();
    return rnicdv::Status::ok();
  }
  rnicdv::Status recv_all(void* data, size_t len, uint32_t timeout_ms) override {
    std::unique_lock<std::mutex> lock(in_->mu);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (in_->stream.size() < len) {
      if (!in_->messages.empty()) {
        in_->stream += in_->messages.front();
        in_->messages.pop_front();
        continue;
      }
      if (in_->cv.wait_until(lock, deadline) == std::cv_status::timeout)
        return rnicdv::Status::error(Errc::timeout, "nothing arrived");
    }
    std::memcpy(data, in_->stream.data(), len);
    in_->stream.erase(0, len);
    return rnicdv::Status::ok();
  }
  Result<bool> readable(uint32_t) override {
    std::lock_guard<std::mutex> lock(in_->mu);
    return !in_->stream.empty() || !in_->messages.empty();
  }

 private:
  std::shared_ptr<MessageQueue> out_, in_;
};

}  // namespace

TEST_CASE("over rdma_cm perftest's record is its 56-byte struct pingpong_dest, big-endian",
          "[oob][perftest]") {
  PeerRecord r;
  r.lid = 0x12;
  r.out_reads = 16;
  r.qpn = 0x000101;
  r.psn = 0xabcdef;
  r.rkey = 0x40c43a5c;
  r.vaddr = 0x00007fe3ab513000;
  r.gid[10] = 0xff;
  r.gid[11] = 0xff;
  r.gid[12] = 127;
  r.gid[15] = 2;
  r.srqn = 0x77;
  uint8_t out[kPerftestDestSize];
  encode_perftest_dest(r, 3, out);
  // perftest 4.5-0.17's struct pingpong_dest on x86-64, each field htobe32/htobe64 as
  // rdma_write_keys converts it: lid, out_reads, qpn, psn, rkey, 4 bytes of padding, vaddr,
  // the GID's 16 bytes, srqn, gid_index.
  const uint8_t expected[kPerftestDestSize] = {
      0x00, 0x00, 0x00, 0x12, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x01, 0x01, 0x00, 0xab,
      0xcd, 0xef, 0x40, 0xc4, 0x3a, 0x5c, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x7f, 0xe3,
      0xab, 0x51, 0x30, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
      0xff, 0xff, 0x7f, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x77, 0x00, 0x00, 0x00, 0x03};
  CHECK(std::memcmp(out, expected, kPerftestDestSize) == 0);
  const PeerRecord back = decode_perftest_dest(expected);
  CHECK(back.lid == 0x12);
  CHECK(back.out_reads == 16);
  CHECK(back.qpn == 0x101);
  CHECK(back.psn == 0xabcdef);
  CHECK(back.rkey == 0x40c43a5c);
  CHECK(back.vaddr == 0x00007fe3ab513000);
  CHECK(std::memcmp(back.gid, r.gid, 16) == 0);
  CHECK(back.srqn == 0x77);
}

TEST_CASE("over rdma_cm each perftest message is one SEND: the handshake's 56 bytes, and no "
          "closing \"done\"",
          "[oob][perftest]") {
  auto to_server = std::make_shared<MessageQueue>();
  auto to_client = std::make_shared<MessageQueue>();
  OobSession server(OobChannel(std::make_unique<QueueTransport>(to_client, to_server), "peer"),
                    false, 5000);
  REQUIRE(server.channel().over_rdma_cm());
  server.set_perftest_gid_index(3);
  PeerRecord mine;
  mine.qpn = 0x101;
  PeerRecord theirs;
  theirs.qpn = 0x222;
  theirs.rkey = 0x1234;
  uint8_t in[kPerftestDestSize];
  encode_perftest_dest(theirs, 3, in);
  {
    std::lock_guard<std::mutex> lock(to_server->mu);
    to_server->messages.emplace_back(reinterpret_cast<const char*>(in), sizeof in);
  }
  PeerRecord got;
  REQUIRE(server.perftest_handshake(mine, &got).is_ok());
  CHECK(got.qpn == 0x222);
  CHECK(got.rkey == 0x1234);
  REQUIRE(to_client->messages.size() == 1);
  CHECK(to_client->messages.front().size() == kPerftestDestSize);
  const PeerRecord sent =
      decode_perftest_dest(reinterpret_cast<const uint8_t*>(to_client->messages.front().data()));
  CHECK(sent.qpn == 0x101);
  CHECK(static_cast<uint8_t>(to_client->messages.front()[55]) == 3);  // the GID index
  // perftest's ctx_close_connection writes "done" on its socket only.
  REQUIRE(server.perftest_done().is_ok());
  CHECK(to_client->messages.size() == 1);
}

TEST_CASE("-O and --report-per-port cross rnicperf's negotiation, and a mismatch names them "
          "before the QP count -O doubles",
          "[oob][dual_port]") {
  Options o;
  o.test = {Verb::write, Kind::bandwidth};
  o.size = 4096;
  o.duration_s = 2;
  o.num_qps = 2;
  o.dual_port = true;
  o.report_per_port = true;
  const TestParams a = params_from_options(o, 1024);
  CHECK(a.dual_port == 1);
  CHECK(a.report_per_port == 1);
  uint8_t wire[kTestParamsWireSize];
  encode_params(a, wire);
  const TestParams back = decode_params(wire);
  CHECK(back.dual_port == 1);
  CHECK(back.report_per_port == 1);
  CHECK(params_mismatch(a, back).empty());
  Options single = o;
  single.dual_port = false;
  single.report_per_port = false;
  single.num_qps = 1;
  CHECK(params_mismatch(a, params_from_options(single, 1024)) ==
        "dual port (-O) local=on remote=off");
  Options no_ports = o;
  no_ports.report_per_port = false;
  CHECK(params_mismatch(params_from_options(no_ports, 1024), a) ==
        "report per port (--report-per-port) local=off remote=on");
}

TEST_CASE("rnicperf's bandwidth result carries each port's share", "[oob][dual_port]") {
  auto [client, server] = make_pair();
  BandwidthResult sent{4096, 1000, 0.0, 300.5, 0.0769};
  sent.port[0] = {150.25, 0.0385};
  sent.port[1] = {150.125, 0.0384};
  BandwidthResult got;
  std::thread t([&, &server = server] { REQUIRE(server.recv_bw(&got, 0)); });
  REQUIRE(client.send_bw(sent));
  t.join();
  CHECK(got.bw_avg == 300.5);
  CHECK(got.port[0].bw_avg == 150.25);
  CHECK(got.port[0].msg_rate == 0.0385);
  CHECK(got.port[1].bw_avg == 150.125);
  CHECK(got.port[1].msg_rate == 0.0384);
}

TEST_CASE("with --report-per-port perftest's report goes on with each port's average and rate, "
          "port 1's first",
          "[oob][perftest][dual_port]") {
  auto p = OobChannel::pair();
  REQUIRE(p.is_ok());
  RawPeer perftest{std::move(p->second)};
  OobSession client(std::move(p->first), true, 5000);
  BandwidthResult mine{4096, 46600, 0.0, 181.87, 0.046559};
  mine.port[0] = {93.28, 0.023879};
  mine.port[1] = {88.59, 0.02268};
  BandwidthResult theirs;
  rnicdv::Status st;
  std::thread t([&] { st = client.perftest_reports(mine, &theirs, true); });
  // xchg_bw_reports: size, iters, peak, average, rate, then (report_per_port) bw_avg_p1,
  // msgRate_avg_p1, bw_avg_p2, msgRate_avg_p2; each 8 bytes, the client's first.
  const auto be = [](double d) {
    uint64_t u;
    std::memcpy(&u, &d, 8);
    std::string s(8, '\0');
    for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(u >> (56 - 8 * i));
    return s;
  };
  const double client_fields[4] = {93.28, 0.023879, 88.59, 0.02268};
  const double server_fields[4] = {1.5, 0.25, 2.5, 0.125};
  for (int i = 0; i < 5; ++i) {
    CHECK(perftest.read(8).size() == 8);
    perftest.write(std::string(8, '\0'));
  }
  for (int i = 0; i < 4; ++i) {
    CHECK(perftest.read(8) == be(client_fields[i]));
    perftest.write(be(server_fields[i]));
  }
  t.join();
  REQUIRE(st.is_ok());
  CHECK(theirs.port[0].bw_avg == 1.5);
  CHECK(theirs.port[0].msg_rate == 0.25);
  CHECK(theirs.port[1].bw_avg == 2.5);
  CHECK(theirs.port[1].msg_rate == 0.125);
}

TEST_CASE("over rdma_cm each record carries its own port's GID index (perftest's gid_index2 on "
          "port 2's QPs)",
          "[oob][perftest][dual_port]") {
  auto to_server = std::make_shared<MessageQueue>();
  auto to_client = std::make_shared<MessageQueue>();
  OobSession server(OobChannel(std::make_unique<QueueTransport>(to_client, to_server), "peer"),
                    false, 5000);
  server.set_perftest_gid_index(3);
  uint8_t in[kPerftestDestSize];
  PeerRecord theirs;
  theirs.qpn = 0x222;
  encode_perftest_dest(theirs, 5, in);
  CHECK(decode_perftest_dest(in).gid_index == 5);
  for (int i = 0; i < 2; ++i) {
    std::lock_guard<std::mutex> lock(to_server->mu);
    to_server->messages.emplace_back(reinterpret_cast<const char*>(in), sizeof in);
  }
  PeerRecord port2;
  port2.qpn = 0x101;
  port2.gid_index = 1;
  PeerRecord unset;  // no index of its own: the session's
  unset.qpn = 0x100;
  PeerRecord got;
  REQUIRE(server.perftest_handshake(port2, &got).is_ok());
  REQUIRE(server.perftest_handshake(unset, &got).is_ok());
  REQUIRE(to_client->messages.size() == 2);
  CHECK(static_cast<uint8_t>(to_client->messages[0][55]) == 1);
  CHECK(static_cast<uint8_t>(to_client->messages[1][55]) == 3);
}
