// SPDX-License-Identifier: BSD-3-Clause
// rnicperf write_bw between two processes in two network namespaces joined by a veth pair,
// each simulated HCA on DPDK's net_af_packet port over its end of the veth: real RoCEv2
// frames through the kernel's veth, the control channel over TCP on the same link. Needs
// root (CI runs as root); where namespaces cannot be created it says why and exits 77. The
// namespaces are removed whatever the outcome.
#include "dpdk_env.h"

#include <chrono>
#include <sstream>

#include "../cm/child_process.h"

using namespace rnicdv::test;
using namespace std::chrono_literals;

namespace {

[[noreturn]] void skip(const std::string& why) {
  std::printf("skipped: %s\n", why.c_str());
  std::fflush(stdout);
  std::_Exit(77);
}

bool ip(const std::vector<std::string>& args) {
  std::vector<std::string> argv{"ip"};
  argv.insert(argv.end(), args.begin(), args.end());
  auto c = Child::spawn(argv);
  return c && c->wait(30s) == 0;
}

class NamespacePair {
 public:
  NamespacePair() {
    const std::string id = std::to_string(::getpid());
    a_ = "rnicdv-dpdk-" + id + "-a";
    b_ = "rnicdv-dpdk-" + id + "-b";
    const unsigned subnet = 1 + static_cast<unsigned>(::getpid()) % 250;
    addr_a_ = "10.203." + std::to_string(subnet) + ".1";
    addr_b_ = "10.203." + std::to_string(subnet) + ".2";
    veth_a_ = "rdp" + id + "a";
    veth_b_ = "rdp" + id + "b";
  }
  ~NamespacePair() {
    // Deleting a namespace destroys its end of the veth pair, and with it the other end.
    if (made_a_) ip({"netns", "del", a_});
    if (made_b_) ip({"netns", "del", b_});
  }

  std::string create() {
    if (!(made_a_ = ip({"netns", "add", a_}))) return "cannot create network namespaces";
    if (!(made_b_ = ip({"netns", "add", b_}))) return "cannot create a second namespace";
    const std::vector<std::vector<std::string>> steps = {
        {"link", "add", veth_a_, "type", "veth", "peer", "name", veth_b_},
        {"link", "set", veth_a_, "netns", a_},
        {"link", "set", veth_b_, "netns", b_},
        {"-n", a_, "addr", "add", addr_a_ + "/24", "dev", veth_a_},
        {"-n", b_, "addr", "add", addr_b_ + "/24", "dev", veth_b_},
        {"-n", a_, "link", "set", "lo", "up"},
        {"-n", b_, "link", "set", "lo", "up"},
        {"-n", a_, "link", "set", veth_a_, "up"},
        {"-n", b_, "link", "set", veth_b_, "up"},
    };
    for (const auto& s : steps) {
      if (!ip(s)) {
        std::string cmd = "ip";
        for (const auto& w : s) cmd += " " + w;
        return "\"" + cmd + "\" failed";
      }
    }
    return "";
  }

  std::string a_, b_, addr_a_, addr_b_, veth_a_, veth_b_;
  bool made_a_ = false, made_b_ = false;
};

std::string read_all(Child& c, std::chrono::milliseconds timeout) {
  std::string out;
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    auto line = c.read_line(1000ms);
    if (!line) {
      if (c.wait(0ms) >= 0) break;
      continue;
    }
    out += *line + "\n";
  }
  return out;
}

}  // namespace

TEST_CASE("rnicperf write_bw runs between two namespaces over net_af_packet on veth",
          "[dpdk][namespaces]") {
  const char* rnicperf = std::getenv("RNICDV_RNICPERF");
  if (rnicperf == nullptr || *rnicperf == '\0') skip("rnicperf was not built (tools disabled)");
  if (::geteuid() != 0) skip("network namespaces need root");
  NamespacePair ns;
  if (std::string why = ns.create(); !why.empty()) skip(why);

  const std::string port = std::to_string(20000 + ::getpid() % 20000);
  auto run = [&](const std::string& netns, const std::string& veth, bool client) {
    std::vector<std::string> argv{"ip", "netns", "exec", netns, rnicperf, "write_bw",
                                  "--wire", "dpdk",
                                  "--dpdk-args", "--vdev=net_af_packet0,iface=" + veth,
                                  "-m", "1024", "-s", "4096", "-n", "500", "-p", port,
                                  "--timeout", "60", "-F"};
    if (client) argv.push_back(ns.addr_a_);
    auto c = Child::spawn(argv);
    REQUIRE(c.has_value());
    return std::move(*c);
  };
  Child server = run(ns.a_, ns.veth_a_, false);
  // The server prints its banner once it listens.
  REQUIRE(server.read_until("****", 60s).has_value());
  Child client = run(ns.b_, ns.veth_b_, true);
  const std::string client_out = read_all(client, 120s);
  const std::string server_out = read_all(server, 30s);
  INFO("client:\n" << client_out << "server:\n" << server_out);
  REQUIRE(client.wait(30s) == 0);
  REQUIRE(server.wait(30s) == 0);
  CHECK(client_out.find("Sim wire        : dpdk " + ns.addr_b_ +
                        ":4791 port 0 net_af_packet0 (net_af_packet) mac 02:00:") !=
        std::string::npos);
  CHECK(server_out.find("Sim wire        : dpdk " + ns.addr_a_ + ":4791 port 0 net_af_packet0") !=
        std::string::npos);
  // The result row: 4096 bytes, 500 iterations, a positive bandwidth.
  bool row = false;
  std::istringstream lines(client_out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream cols(line);
    std::string bytes, iters;
    double peak = 0, average = 0;
    if (cols >> bytes >> iters >> peak >> average && bytes == "4096" && iters == "500")
      row = average > 0;
  }
  CHECK(row);
}
