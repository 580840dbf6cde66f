// SPDX-License-Identifier: BSD-3-Clause
// Connections between processes over the simulated fabric's UDP wire on loopback: each
// process owns an HCA at its own 127.0.0.x:4791. The peer is tools/cm-peer, spawned here and
// always reaped; every wait has a timeout.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>

#include "child_process.h"
#include "cm_env.h"

using namespace rnicdv;
using namespace rnicdv::test;

namespace {

std::string cm_peer_path() {
  const char* p = std::getenv("RNICDV_CM_PEER");
  if (!p || access(p, X_OK) != 0) {
    std::printf("skipped: RNICDV_CM_PEER does not name the cm-peer program (tools disabled?)\n");
    std::fflush(stdout);
    std::exit(77);
  }
  return p;
}

// Starts `cm-peer server` and returns it with the address it listens on.
std::pair<Child, std::string> start_server(uint32_t messages, uint32_t greeting) {
  auto child = Child::spawn({cm_peer_path(), "server", "--port", "7471", "--messages",
                             std::to_string(messages), "--greeting", std::to_string(greeting),
                             "--timeout", "30"});
  REQUIRE(child);
  auto line = child->read_until("listening ", 20s);
  INFO("cm-peer server did not report its address");
  REQUIRE(line);
  const std::string addr = line->substr(10, line->find(':') - 10);
  return {std::move(*child), addr};
}

Side udp_side(const std::shared_ptr<sim::Fabric>& f) {
  return make_side(f);
}

// The Local Communication ID of every CM message with attribute `attr` (0x0010 REQ, 0x0013
// REP) in a pcap the fabric wrote: Ethernet, IPv4, UDP, BTH and DETH, then the MAD, whose
// attribute ID is at byte 16 and whose data (Local Communication ID first) starts at 24.
std::vector<uint32_t> comm_ids(const std::string& path, uint16_t attr) {
  std::ifstream in(path, std::ios::binary);
  const std::vector<uint8_t> f((std::istreambuf_iterator<char>(in)), {});
  std::vector<uint32_t> out;
  constexpr size_t kMad = 14 + 20 + 8 + 12 + 8;
  auto be = [&](size_t at, int n) {
    uint32_t v = 0;
    for (int i = 0; i < n; ++i) v = v << 8 | f[at + i];
    return v;
  };
  for (size_t at = 24; at + 16 <= f.size();) {
    const uint32_t len = f[at + 8] | f[at + 9] << 8 | f[at + 10] << 16 | uint32_t{f[at + 11]} << 24;
    const size_t frame = at + 16;
    if (frame + len > f.size()) break;
    const bool to_qp1 = len >= kMad + 28 && be(frame + 14 + 20 + 8 + 5, 3) == 1;
    if (to_qp1 && f[frame + kMad + 1] == 0x07 && be(frame + kMad + 16, 2) == attr)
      out.push_back(be(frame + kMad + 24, 4));
    at = frame + len;
  }
  return out;
}

}  // namespace

TEST_CASE("a client and a server in two processes connect over loopback UDP and move data") {
  auto [server, addr] = start_server(4, 3);
  auto fabric = make_fabric(sim::ExecMode::threaded, "", sim::WireKind::udp);
  Side c = udp_side(fabric);
  Connection conn = take(Connection::connect(*c.qp, addr, 7471, bytes("hello")));
  for (uint32_t i = 0; i < 7; ++i) REQUIRE(c.post_recv(100 + i, i) == Errc::ok);
  ConnectionEvent ev = wait_event(conn, 20s);
  INFO(ev.status.message());
  REQUIRE(ev.type == ConnectionEventType::established);
  CHECK(std::string(reinterpret_cast<const char*>(ev.private_data.data())) == "welcome");

  // The server's greeting was posted while its QP sat in RTR; it arrives after the RTU.
  REQUIRE(c.wait_completions(3, 20s));
  for (uint32_t i = 0; i < 3; ++i) {
    const std::string text(reinterpret_cast<const char*>(c.mem.data() + i * kMsgBytes));
    CHECK(text == "greeting " + std::to_string(i));
  }
  for (uint32_t i = 0; i < 4; ++i) {
    char* p = reinterpret_cast<char*>(c.mem.data() + (32 + i) * kMsgBytes);
    std::snprintf(p, kMsgBytes, "message %u", i);
    Sge sge = c.mr->sge((32 + i) * kMsgBytes, kMsgBytes);
    SendWr wr;
    wr.wr_id = 200 + i;
    wr.flags = send_flags::signaled;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    REQUIRE(c.qp->post_send(wr) == Errc::ok);
  }
  REQUIRE(c.wait_completions(3 + 4 + 4, 20s));  // greetings, sends, echoes
  c.check_each_once(100, 7, IBV_WC_SUCCESS);
  c.check_each_once(200, 4, IBV_WC_SUCCESS);
  CHECK(std::string(reinterpret_cast<const char*>(c.mem.data() + 3 * kMsgBytes))
            .rfind("echo: message ", 0) == 0);

  REQUIRE(conn.disconnect().is_ok());
  ConnectionEvent bye = wait_event(conn, 20s);
  CHECK(bye.type == ConnectionEventType::disconnected);
  CHECK(server.read_until("disconnected after 4 messages", 20s));
  CHECK(server.wait(20s) == 0);
}

TEST_CASE("two cm-peer processes connect, exchange messages and disconnect") {
  auto [server, addr] = start_server(8, 4);
  auto client = Child::spawn({cm_peer_path(), "client", "--peer", addr, "--port", "7471",
                              "--messages", "8", "--greeting", "4", "--timeout", "30"});
  REQUIRE(client);
  CHECK(client->read_until("received 4 greetings and 8 echoes", 30s));
  CHECK(client->wait(30s) == 0);
  CHECK(server.wait(30s) == 0);
}

TEST_CASE("a peer process killed mid-transfer: retry exhaustion, flush errors, no hang") {
  auto [server, addr] = start_server(16, 0);
  auto fabric = make_fabric(sim::ExecMode::threaded, "", sim::WireKind::udp);
  Side c = udp_side(fabric);
  Connection conn =
      take(Connection::connect(*c.qp, addr, 7471, bytes("hello"), quick_options(2000ms)));
  for (uint32_t i = 0; i < 4; ++i) REQUIRE(c.post_recv(100 + i, i) == Errc::ok);
  REQUIRE(wait_event(conn, 20s).type == ConnectionEventType::established);
  REQUIRE(c.post_send(0, 32) == Errc::ok);
  REQUIRE(c.wait_completions(2, 20s));  // the send and its echo
  c.check_each_once(0, 1, IBV_WC_SUCCESS);

  server.kill(SIGKILL);
  CHECK(server.wait(10s) == 128 + SIGKILL);
  for (uint32_t i = 1; i <= 6; ++i) REQUIRE(c.post_send(i, 32 + i) == Errc::ok);
  // 6 sends, plus the 3 receives still posted once the QP has failed and is moved to ERR.
  REQUIRE(c.wait_completions(2 + 6, 30s));
  CHECK(c.completions[1].at(0) == IBV_WC_RETRY_EXC_ERR);
  for (uint64_t id = 2; id <= 6; ++id) {
    INFO("wr_id " << id);
    REQUIRE(c.completions[id].size() == 1);
    CHECK(c.completions[id][0] == IBV_WC_WR_FLUSH_ERR);
  }
  REQUIRE(conn.disconnect().is_ok());
  ConnectionEvent ev = wait_event(conn, 30s);
  CHECK(ev.type == ConnectionEventType::disconnected);
  REQUIRE(c.wait_completions(2 + 6 + 3, 10s));
  c.check_each_once(101, 3, IBV_WC_WR_FLUSH_ERR);
}

TEST_CASE("communication IDs differ between processes and runs") {
  // The same server address, the same client fabric seed, twice: before the IDs took the OS's
  // entropy, both runs chose the same REQ and REP communication IDs.
  std::vector<uint32_t> reqs, reps;
  for (int run = 0; run < 2; ++run) {
    // Each side's capture holds the frames it sent.
    const std::string pcap = "/tmp/rnicdv-comm-ids-" + std::to_string(getpid()) + "-" +
                             std::to_string(run) + ".pcap";
    const std::string server_pcap = pcap + ".server";
    setenv("RNICDV_PCAP", server_pcap.c_str(), 1);
    auto server = Child::spawn({cm_peer_path(), "server", "--addr", "127.0.0.97", "--port",
                                "7473", "--messages", "0", "--greeting", "0", "--timeout", "30"});
    unsetenv("RNICDV_PCAP");
    REQUIRE(server);
    REQUIRE(server->read_until("listening ", 20s));
    {
      auto fabric = make_fabric(sim::ExecMode::threaded, pcap, sim::WireKind::udp);
      Side c = udp_side(fabric);
      Connection conn = take(Connection::connect(*c.qp, "127.0.0.97", 7473));
      ConnectionEvent ev = wait_event(conn, 20s);
      INFO(ev.status.message());
      REQUIRE(ev.type == ConnectionEventType::established);
      REQUIRE(conn.disconnect().is_ok());
      CHECK(wait_event(conn, 20s).type == ConnectionEventType::disconnected);
    }
    CHECK(server->wait(30s) == 0);
    const std::vector<uint32_t> q = comm_ids(pcap, 0x0010), p = comm_ids(server_pcap, 0x0013);
    std::remove(pcap.c_str());
    std::remove(server_pcap.c_str());
    REQUIRE_FALSE(q.empty());
    REQUIRE_FALSE(p.empty());
    reqs.push_back(q.front());
    reps.push_back(p.front());
  }
  INFO("REQ IDs " << reqs[0] << " and " << reqs[1] << ", REP IDs " << reps[0] << " and "
                  << reps[1]);
  CHECK(reqs[0] != reqs[1]);  // this process's two fabrics
  CHECK(reps[0] != reps[1]);  // two server processes
}
