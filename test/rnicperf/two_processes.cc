// SPDX-License-Identifier: BSD-3-Clause
// A server and a client as two processes on the simulated HCA over UDP loopback: each picks
// its own 127.0.0.x; the client learns the server's HCA address from the peer record. Also
// the errors: parameter mismatch (on both sides), unreachable server, port in use.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>

#include "json_check.h"
#include "subprocess.h"

using namespace rnicperf_test;

namespace {

struct Pair {
  ProcessResult server, client;
};

Pair run_pair(std::vector<std::string> server_args, std::vector<std::string> client_args) {
  const std::string port = std::to_string(free_port());
  server_args.insert(server_args.end(), {"-p", port, "--timeout=20"});
  // Both start together: the client waits for the server to listen.
  client_args.insert(client_args.end(),
                     {"-p", port, "--timeout=20", "--retry-connect", "127.0.0.1"});
  server_args.insert(server_args.begin(), rnicperf_bin());
  client_args.insert(client_args.begin(), rnicperf_bin());
  Child server(server_args);
  // The client retries while the server is not listening yet.
  Child client(client_args);
  Pair p;
  p.client = client.wait(120);
  p.server = server.wait(120);
  return p;
}

void check_pair(const std::string& test, std::vector<std::string> extra, bool server_prints_row) {
  std::vector<std::string> args = {test};
  args.insert(args.end(), extra.begin(), extra.end());
  Pair p = run_pair(args, args);
  INFO(test << "\nserver:\n"
            << p.server.out << p.server.err << "\nclient:\n"
            << p.client.out << p.client.err);
  REQUIRE(p.client.exit_code == 0);
  REQUIRE(p.server.exit_code == 0);
  CHECK(p.server.out.find("* Waiting for client to connect... *") != std::string::npos);
  CHECK(p.client.out.find(" Sim wire        : udp 127.0.0.") != std::string::npos);
  // Each side's remote GID is the other's local GID.
  auto gid_after = [](const std::string& out, const char* side) {
    auto at = out.find(std::string(" ") + side + " address:");
    auto gid = out.find(" GID: ", at);
    return out.substr(gid, out.find('\n', gid) - gid);
  };
  CHECK(gid_after(p.client.out, "remote") == gid_after(p.server.out, "local"));
  CHECK(gid_after(p.server.out, "remote") == gid_after(p.client.out, "local"));
  CHECK(gid_after(p.client.out, "local") != gid_after(p.server.out, "local"));
  CHECK(count_lines_starting(p.client.out, " 2 ") + count_lines_starting(p.client.out, " 8 ") +
            count_lines_starting(p.client.out, " 4096 ") ==
        1);
  int server_rows = count_lines_starting(p.server.out, " 2 ") +
                    count_lines_starting(p.server.out, " 8 ") +
                    count_lines_starting(p.server.out, " 4096 ");
  CHECK(server_rows == (server_prints_row ? 1 : 0));
}

}  // namespace

TEST_CASE("write_lat runs as two processes", "[e2e][udp]") {
  check_pair("write_lat", {"-n", "50"}, true);
}
TEST_CASE("send_lat runs as two processes", "[e2e][udp]") {
  check_pair("send_lat", {"-n", "50"}, true);
}
TEST_CASE("read_lat runs as two processes; the server stays passive", "[e2e][udp]") {
  check_pair("read_lat", {"-n", "50"}, false);
}
TEST_CASE("atomic_lat runs as two processes", "[e2e][udp]") {
  check_pair("atomic_lat", {"-n", "50"}, false);
}
TEST_CASE("write_bw runs as two processes; the server prints the client's row", "[e2e][udp]") {
  check_pair("write_bw", {"-n", "100", "-s", "4096"}, true);
}
TEST_CASE("send_bw runs as two processes; the server measures what it receives", "[e2e][udp]") {
  check_pair("send_bw", {"-n", "100", "-s", "4096"}, true);
}
TEST_CASE("read_bw runs as two processes", "[e2e][udp]") {
  check_pair("read_bw", {"-n", "100", "-s", "4096"}, true);
}
TEST_CASE("atomic_bw runs as two processes", "[e2e][udp]") {
  check_pair("atomic_bw", {"-n", "100"}, true);
}
TEST_CASE("send_bw and send_lat sweep every size (-a) as two processes", "[e2e][udp]") {
  for (const char* test : {"send_bw", "send_lat"}) {
    const std::vector<std::string> args = {test, "-a", "--sweep-max=64", "-n", "20"};
    Pair p = run_pair(args, args);
    INFO(test << "\nserver:\n"
              << p.server.out << p.server.err << "\nclient:\n"
              << p.client.out << p.client.err);
    REQUIRE(p.client.exit_code == 0);
    REQUIRE(p.server.exit_code == 0);
    for (const char* size : {" 2 ", " 4 ", " 8 ", " 16 ", " 32 ", " 64 "})
      CHECK(count_lines_starting(p.client.out, size) == 1);
  }
}

TEST_CASE("-c XRC runs as two processes: each side's records name its SRQ, which the other's "
          "sends reach",
          "[e2e][udp][xrc]") {
  check_pair("send_bw", {"-c", "XRC", "-n", "100", "-s", "4096"}, true);
  const std::vector<std::string> args = {"send_lat", "-c", "XRC", "-n", "20"};
  Pair p = run_pair(args, args);
  INFO("server:\n" << p.server.out << p.server.err << "\nclient:\n" << p.client.out << p.client.err);
  REQUIRE(p.client.exit_code == 0);
  REQUIRE(p.server.exit_code == 0);
  // Each side prints its two records, then the peer's: the initiator's and the target's SRQ
  // number is the side's one SRQ, and what one side prints as remote the other printed as local.
  const auto srqns = [](const std::string& out, const char* side) {
    std::vector<std::string> found;
    for (size_t at = out.find(std::string(" ") + side + " address:"); at != std::string::npos;
         at = out.find(std::string(" ") + side + " address:", at + 1)) {
      const size_t srqn = out.find(" SRQn ", at);
      REQUIRE(srqn < out.find('\n', at));
      found.push_back(out.substr(srqn, out.find('\n', srqn) - srqn));
    }
    return found;
  };
  const auto server_local = srqns(p.server.out, "local");
  REQUIRE(server_local.size() == 2);
  CHECK(server_local[0] == server_local[1]);
  CHECK(srqns(p.client.out, "remote") == server_local);
  CHECK(srqns(p.server.out, "remote") == srqns(p.client.out, "local"));
}

TEST_CASE("-c XRC on one side only is a mismatch named on both sides", "[e2e][errors][xrc]") {
  Pair p = run_pair({"write_bw", "-c", "XRC"}, {"write_bw"});
  CHECK(p.server.exit_code == 1);
  CHECK(p.client.exit_code == 1);
  CHECK(p.server.err == "rnicperf: parameter mismatch: connection type (-c) local=XRC remote=RC\n");
  CHECK(p.client.err == "rnicperf: parameter mismatch: connection type (-c) local=RC remote=XRC\n");
}

TEST_CASE("mismatched tests are named on both sides and both exit non-zero", "[e2e][errors]") {
  Pair p = run_pair({"write_lat"}, {"read_lat"});
  CHECK(p.server.exit_code == 1);
  CHECK(p.client.exit_code == 1);
  CHECK(p.server.err == "rnicperf: parameter mismatch: test local=write_lat remote=read_lat\n");
  CHECK(p.client.err == "rnicperf: parameter mismatch: test local=read_lat remote=write_lat\n");

  Pair sizes = run_pair({"write_bw", "-s", "64"}, {"write_bw", "-s", "128"});
  CHECK(sizes.server.exit_code == 1);
  CHECK(sizes.server.err == "rnicperf: parameter mismatch: size local=64 remote=128\n");
  CHECK(sizes.client.err == "rnicperf: parameter mismatch: size local=128 remote=64\n");
}

TEST_CASE("a client with no server fails at once, saying nobody listens there",
          "[e2e][errors]") {
  const std::string port = std::to_string(free_port());
  // --timeout=20: the client must not wait it out.
  ProcessResult r = run_rnicperf({"write_lat", "-p", port, "--timeout=20", "127.0.0.1"}, 15);
  CHECK(r.exit_code == 1);
  CHECK(r.err == "rnicperf: cannot reach server 127.0.0.1:" + port +
                     ": Connection refused (no server is listening there: start the server "
                     "first, or pass --retry-connect to wait for it)\n");
}

TEST_CASE("a client asked to retry says what it waits for, then gives up at --timeout",
          "[e2e][errors]") {
  const std::string port = std::to_string(free_port());
  ProcessResult r = run_rnicperf(
      {"write_lat", "-p", port, "--timeout=2", "--retry-connect", "127.0.0.1"}, 30);
  CHECK(r.exit_code == 1);
  CHECK(r.err == "rnicperf: waiting for the server at 127.0.0.1:" + port +
                     " (Connection refused); giving up after 2 s (--timeout)\n"
                     "rnicperf: cannot reach server 127.0.0.1:" + port +
                     ": Connection refused (gave up after 2000 ms)\n");
}

TEST_CASE("a server whose port is taken says so and exits", "[e2e][errors]") {
  const std::string port = std::to_string(free_port());
  Child first({rnicperf_bin(), "write_lat", "-p", port, "--timeout=3"});
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  ProcessResult second = run_rnicperf({"write_lat", "-p", port, "--timeout=3"}, 30);
  CHECK(second.exit_code == 1);
  CHECK(second.err == "rnicperf: cannot listen on TCP port " + port + ": Address already in use\n");
  ProcessResult lonely = first.wait(30);
  CHECK(lonely.exit_code == 1);
  CHECK(lonely.err == "rnicperf: no client connected to TCP port " + port + " within 3 s\n");
}

TEST_CASE("bad command lines are one-line errors with a non-zero exit", "[e2e][errors]") {
  ProcessResult unknown = run_rnicperf({"write_lat", "--bogus"});
  CHECK(unknown.exit_code == 1);
  CHECK(unknown.err == "rnicperf: unknown option '--bogus' (try 'rnicperf -h')\n");
  ProcessResult big = run_rnicperf({"write_bw", "-s", "16M"});
  CHECK(big.exit_code == 1);
  CHECK(big.err == "rnicperf: -s 16777216: message size above the maximum 8388608\n");
  ProcessResult dev = run_rnicperf({"write_lat", "--loopback", "-d", "mlx5_9"});
  CHECK(dev.exit_code == 1);
  CHECK(dev.err.rfind("rnicperf: open mlx5_9: no such device; found: ", 0) == 0);
  ProcessResult help = run_rnicperf({"-h"});
  CHECK(help.exit_code == 0);
  CHECK(help.out.rfind("Usage:\n", 0) == 0);
}

TEST_CASE("-R connects two processes through the IB CM on the simulated fabric", "[e2e][udp][cm]") {
  check_pair("send_lat", {"-n", "50", "-R"}, true);
}

namespace {

// Holds TCP port `port` listening, without accepting, for as long as it lives.
class TcpHolder {
 public:
  explicit TcpHolder(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    const int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    ok_ = ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && ::listen(fd_, 1) == 0;
  }
  ~TcpHolder() { ::close(fd_); }
  bool ok() const { return ok_; }

 private:
  int fd_ = -1;
  bool ok_ = false;
};

// -z: each process's HCA at an address of the test's own (so the client can name the
// server's), the client naming the server's HCA address.
Pair run_rdma_cm_pair(const std::vector<std::string>& args) {
  const int port = free_port();
  const std::string net = "127.0." + std::to_string(port % 200 + 20) + ".";
  const auto command = [&](const std::string& address) {
    std::vector<std::string> c = {"/usr/bin/env", "RNICDV_SIM_ADDR=" + address, rnicperf_bin()};
    c.insert(c.end(), args.begin(), args.end());
    c.insert(c.end(), {"-z", "-p", std::to_string(port), "--timeout=20"});
    return c;
  };
  // The TCP port is taken: a run that fell back to TCP would fail ("port in use").
  TcpHolder tcp(port);
  REQUIRE(tcp.ok());
  Child server(command(net + "1"));
  std::vector<std::string> client_args = command(net + "2");
  client_args.insert(client_args.end(), {"--retry-connect", net + "1"});
  Child client(client_args);
  Pair p;
  p.client = client.wait(120);
  p.server = server.wait(120);
  return p;
}

}  // namespace

TEST_CASE("with -z two processes exchange over rdma_cm, the client naming the server's HCA; with -R "
          "the test QP is the CM's too",
          "[e2e][udp][cm]") {
  for (const bool cm : {false, true}) {
    std::vector<std::string> args = {"write_bw", "-n", "100", "-s", "4096"};
    if (cm) args.push_back("-R");
    Pair p = run_rdma_cm_pair(args);
    INFO("-R " << cm << "\nserver:\n"
               << p.server.out << p.server.err << "\nclient:\n"
               << p.client.out << p.client.err);
    REQUIRE(p.client.exit_code == 0);
    REQUIRE(p.server.exit_code == 0);
    for (const std::string* out : {&p.client.out, &p.server.out}) {
      CHECK(out->find(" Data ex. method : rdma_cm\n") != std::string::npos);
      CHECK(out->find(std::string(" rdma_cm QPs\t : ") + (cm ? "ON" : "OFF")) !=
            std::string::npos);
      CHECK(count_lines_starting(*out, " 4096 ") == 1);
    }
  }
}

TEST_CASE("with -z a client whose server's HCA has no listener on the port is refused at once, "
          "told how to wait; a wrong --bind_source_ip is named",
          "[e2e][errors][cm]") {
  const int port = free_port();
  const std::string net = "127.0." + std::to_string(port % 200 + 20) + ".";
  // A TCP server: its HCA exists, but nothing listens on the CM port.
  Child server({"/usr/bin/env", "RNICDV_SIM_ADDR=" + net + "1", rnicperf_bin(), "send_lat", "-p",
                std::to_string(port), "--timeout=20"});
  // Its banner comes once it listens on TCP, after its HCA is up.
  for (int i = 0; i < 400 && server.out_so_far().find("Waiting for client") == std::string::npos;
       ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  REQUIRE(server.out_so_far().find("Waiting for client") != std::string::npos);
  const auto client = [&](std::vector<std::string> extra) {
    std::vector<std::string> c = {"/usr/bin/env", "RNICDV_SIM_ADDR=" + net + "2", rnicperf_bin(),
                                  "send_lat", "-z", "-p", std::to_string(port), "--timeout=5"};
    c.insert(c.end(), extra.begin(), extra.end());
    c.push_back(net + "1");
    return Child(c).wait(60);
  };
  ProcessResult refused = client({});
  INFO(refused.out << refused.err);
  CHECK(refused.exit_code == 1);
  CHECK(refused.err.find("rnicperf: -z: control connection: ") == 0);
  CHECK(refused.err.find("rejected by " + net + "1:" + std::to_string(port)) != std::string::npos);
  CHECK(refused.err.find("(start the server first, or pass --retry-connect to wait for it)") !=
        std::string::npos);
  ProcessResult wrong = client({"--bind_source_ip", net + "9"});
  CHECK(wrong.exit_code == 1);
  CHECK(wrong.err == "rnicperf: --bind_source_ip " + net + "9 with -z: the connection manager "
                     "runs on sim0's own address, " + net + "2\n");
  server.signal(SIGINT);
  server.wait(30);
}

TEST_CASE("an endless write_bw: the client prints interval rows, its server 'Client closed "
          "connection'",
          "[two_processes][run_infinitely]") {
  const std::vector<std::string> args = {"write_bw", "--run_infinitely", "-D", "1", "-s", "2048"};
  std::vector<std::string> client = args;
  client.push_back("--stop-after=2");
  Pair p = run_pair(args, client);
  INFO("server:\n" << p.server.out << p.server.err << "\nclient:\n" << p.client.out << p.client.err);
  REQUIRE(p.client.exit_code == 0);
  REQUIRE(p.server.exit_code == 0);
  CHECK(count_lines_starting(p.client.out, " 2048 ") == 2);
  CHECK(p.client.out.find("\n User stopped traffic\n") != std::string::npos);
  // perftest's write_bw server prints the table header and this line, no row.
  CHECK(p.server.out.find("MsgRate[Mpps]\n Client closed connection\n---") != std::string::npos);
  CHECK(count_lines_starting(p.server.out, " 2048 ") == 0);
}

TEST_CASE("--reversed as two processes: the server posts and prints its row, the client prints "
          "the row it is sent",
          "[e2e][udp][reversed]") {
  for (bool cm : {false, true}) {
    std::vector<std::string> args = {"write_bw", "--reversed", "-n", "100", "-s", "4096"};
    if (cm) args.push_back("-R");  // the CM roles stay the TCP roles
    Pair p = run_pair(args, args);
    INFO("-R " << cm << "\nserver:\n"
               << p.server.out << p.server.err << "\nclient:\n"
               << p.client.out << p.client.err);
    REQUIRE(p.client.exit_code == 0);
    REQUIRE(p.server.exit_code == 0);
    CHECK(p.server.out.find("* Waiting for client to connect... *") != std::string::npos);
    CHECK(p.server.out.find(" TX depth        : 100\n") != std::string::npos);
    CHECK(p.client.out.find(" TX depth ") == std::string::npos);
    CHECK(count_lines_starting(p.server.out, " 4096 ") == 1);
    CHECK(count_lines_starting(p.client.out, " 4096 ") == 1);
  }
}

TEST_CASE("--reversed send_bw: the client receives, in lists with --recv_post_list",
          "[e2e][udp][reversed][recv_post_list]") {
  const std::string server_json = tmp_json("reversed_server");
  const std::string client_json = tmp_json("reversed_client");
  const std::vector<std::string> args = {"send_bw", "--reversed", "-n", "100", "-s", "1024",
                                         "-r", "20", "--recv_post_list=4"};
  std::vector<std::string> server = args, client = args;
  server.push_back("--out_json_file=" + server_json);
  client.push_back("--out_json_file=" + client_json);
  Pair p = run_pair(server, client);
  INFO("server:\n" << p.server.out << p.server.err << "\nclient:\n" << p.client.out << p.client.err);
  REQUIRE(p.client.exit_code == 0);
  REQUIRE(p.server.exit_code == 0);
  CHECK(p.client.out.find(" Recv Post List  : 4\n RX depth        : 20\n") != std::string::npos);
  CHECK(p.server.out.find(" RX depth ") == std::string::npos);
  // 20 receives in 5 lists at the start, then 80 in 20 lists as they are consumed.
  CHECK(json_query(client_json, "d['test_info']['Receive_post_calls']") == "25");
  CHECK(json_query(client_json, "d['results'][0]['n_iterations']") == "100");
  CHECK(json_query(server_json, "'Receive_post_calls' in d['test_info']") == "False");
  CHECK(count_lines_starting(p.server.out, " 1024 ") == 1);
  CHECK(count_lines_starting(p.client.out, " 1024 ") == 1);
  std::remove(server_json.c_str());
  std::remove(client_json.c_str());
}

TEST_CASE("--reversed on one side only is a mismatch named on both sides", "[e2e][errors]") {
  Pair p = run_pair({"write_bw", "--reversed"}, {"write_bw"});
  CHECK(p.server.exit_code == 1);
  CHECK(p.client.exit_code == 1);
  CHECK(p.server.err == "rnicperf: parameter mismatch: reversed (--reversed) local=on remote=off\n");
  CHECK(p.client.err == "rnicperf: parameter mismatch: reversed (--reversed) local=off remote=on\n");
}

TEST_CASE("an endless --reversed write_bw: the server stops cleanly on SIGINT, its client "
          "prints 'Client closed connection'",
          "[two_processes][run_infinitely][reversed]") {
  const std::string port = std::to_string(free_port());
  Child server({rnicperf_bin(), "write_bw", "--reversed", "--run_infinitely", "-D", "1", "-s",
                "2048", "-p", port, "--timeout=20"});
  Child client({rnicperf_bin(), "write_bw", "--reversed", "--run_infinitely", "-D", "1", "-s",
                "2048", "-p", port, "--timeout=20", "--retry-connect", "127.0.0.1"});
  // The server posts and prints the interval rows: two of them, then the signal.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  while (count_lines_starting(server.out_so_far(), " 2048 ") < 2 &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  server.signal(SIGINT);
  ProcessResult s = server.wait(60);
  ProcessResult c = client.wait(60);
  INFO("server:\n" << s.out << s.err << "\nclient:\n" << c.out << c.err);
  REQUIRE_FALSE(s.timed_out);
  CHECK(s.exit_code == 0);
  CHECK(c.exit_code == 0);
  CHECK(count_lines_starting(s.out, " 2048 ") >= 2);
  CHECK(s.out.find("\n User stopped traffic\n") != std::string::npos);
  CHECK(c.out.find("MsgRate[Mpps]\n Client closed connection\n---") != std::string::npos);
}

namespace {
// Starts an endless server and client of `args` (-D 1, -s 2048, JSON reports), waits until
// each has printed two interval rows, then sends SIGINT to one of them. The signalled side
// prints perftest's "User stopped traffic"; its peer, told over the control channel, ends
// too and prints who stopped the run. Both end with status 0 and keep every row in the JSON.
void check_endless_pair(std::vector<std::string> args, bool stop_the_client) {
  const std::string port = std::to_string(free_port());
  const std::string server_json = tmp_json("endless_server");
  const std::string client_json = tmp_json("endless_client");
  args.insert(args.end(), {"--run_infinitely", "-D", "1", "-s", "2048", "-p", port,
                           "--timeout=20"});
  std::vector<std::string> server = args, client = args;
  server.insert(server.begin(), rnicperf_bin());
  server.push_back("--out_json_file=" + server_json);
  client.insert(client.begin(), rnicperf_bin());
  client.insert(client.end(), {"--out_json_file=" + client_json, "--retry-connect", "127.0.0.1"});
  Child s(server), c(client);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  while ((count_lines_starting(s.out_so_far(), " 2048 ") < 2 ||
          count_lines_starting(c.out_so_far(), " 2048 ") < 2) &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  (stop_the_client ? c : s).signal(SIGINT);
  ProcessResult sr = s.wait(60), cr = c.wait(60);
  INFO("SIGINT to the " << (stop_the_client ? "client" : "server") << "\nserver:\n"
                        << sr.out << sr.err << "\nclient:\n"
                        << cr.out << cr.err);
  REQUIRE_FALSE(sr.timed_out);
  REQUIRE_FALSE(cr.timed_out);
  CHECK(sr.exit_code == 0);
  CHECK(cr.exit_code == 0);
  const ProcessResult& stopped = stop_the_client ? cr : sr;
  const ProcessResult& told = stop_the_client ? sr : cr;
  CHECK(stopped.out.find("\n User stopped traffic\n---") != std::string::npos);
  CHECK(told.out.find(stop_the_client ? "\n Client closed connection\n---"
                                      : "\n Server closed connection\n---") !=
        std::string::npos);
  CHECK(told.out.find("User stopped traffic") == std::string::npos);
  for (const auto& [r, json] : {std::pair{&sr, server_json}, std::pair{&cr, client_json}}) {
    const int rows = count_lines_starting(r->out, " 2048 ");
    CHECK(rows >= 2);
    CHECK(json_query(json, "len(d['results'])") == std::to_string(rows));
    CHECK(json_query(json, "all(x['BW_average'] > 0 and x['BW_peak'] == 0 for x in "
                           "d['results'])") == "True");
    std::remove(json.c_str());
  }
}
}  // namespace

TEST_CASE("an endless send_bw: the sender and the receiver print rows, a SIGINT on either "
          "ends both",
          "[two_processes][run_infinitely]") {
  check_endless_pair({"send_bw"}, true);
  check_endless_pair({"send_bw"}, false);
}

TEST_CASE("an endless send_bw --reversed: the server sends, a SIGINT on the receiving client "
          "ends both",
          "[two_processes][run_infinitely][reversed]") {
  check_endless_pair({"send_bw", "--reversed"}, true);
}

TEST_CASE("an endless -b write_bw: both sides post and print rows, a SIGINT on either ends both",
          "[two_processes][run_infinitely]") {
  check_endless_pair({"write_bw", "-b"}, false);
  check_endless_pair({"write_bw", "-b"}, true);
}

TEST_CASE("an endless send_bw or -b run whose peer is killed ends with an error, not a hang",
          "[two_processes][run_infinitely][errors]") {
  for (const std::vector<std::string>& test :
       {std::vector<std::string>{"send_bw"}, std::vector<std::string>{"write_bw", "-b"}}) {
    INFO(test.back());
    const std::string port = std::to_string(free_port());
    std::vector<std::string> args = {rnicperf_bin()};
    args.insert(args.end(), test.begin(), test.end());
    args.insert(args.end(), {"--run_infinitely", "-D", "1", "-s", "2048", "-p", port,
                             "--timeout=10"});
    Child server(args);
    args.insert(args.end(), {"--retry-connect", "127.0.0.1"});
    Child client(args);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
    while (count_lines_starting(server.out_so_far(), " 2048 ") < 1 &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    client.signal(SIGKILL);
    client.wait(60);
    ProcessResult s = server.wait(60);
    INFO("server:\n" << s.out << s.err);
    REQUIRE_FALSE(s.timed_out);
    CHECK(count_lines_starting(s.out, " 2048 ") >= 1);
    CHECK(s.exit_code == 1);
    // One line, naming the test: the control channel's end or the QP's, whichever is seen
    // first.
    CHECK(s.err.rfind("rnicperf: " + test.front() + ": ", 0) == 0);
    CHECK(std::count(s.err.begin(), s.err.end(), '\n') == 1);
  }
}
