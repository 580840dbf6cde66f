// SPDX-License-Identifier: BSD-3-Clause
// rnicperf write_bw between two processes in two network namespaces joined by a veth pair,
// each simulated HCA on DPDK's net_af_packet port over its end of the veth: real RoCEv2
// frames through the kernel's veth, the control channel over TCP on the same link. Needs
// root (CI runs as root); where namespaces cannot be created it says why and exits 77. The
// namespaces are removed whatever the outcome.
#include "dpdk_env.h"

#include <chrono>
#include <sstream>

#include "child_process.h"
#include "network_namespaces.h"
#include "skip.h"

using namespace rnicdv::test;
using namespace std::chrono_literals;

namespace {

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
  if (rnicperf == nullptr || *rnicperf == '\0')
    skip_test("rnicperf was not built (tools disabled)");
  if (::geteuid() != 0) skip_test("network namespaces need root");
  NamespacePair ns("rnicdv-dpdk-", "rdp", 203);
  if (std::string why = ns.create(); !why.empty()) skip_test(why);

  const std::string port = std::to_string(20000 + ::getpid() % 20000);
  auto run = [&](const std::string& netns, const std::string& veth, bool client) {
    std::vector<std::string> argv{"ip", "netns", "exec", netns, rnicperf, "write_bw",
                                  "--wire", "dpdk",
                                  "--dpdk-args", "--vdev=net_af_packet0,iface=" + veth,
                                  "-m", "1024", "-s", "4096", "-n", "500", "-p", port,
                                  "--timeout", "60", "-F"};
    if (client) argv.push_back(ns.addr_a());
    auto c = Child::spawn(argv);
    REQUIRE(c.has_value());
    return std::move(*c);
  };
  Child server = run(ns.ns_a(), ns.veth_a(), false);
  // The server prints its banner once it listens.
  REQUIRE(server.read_until("****", 60s).has_value());
  Child client = run(ns.ns_b(), ns.veth_b(), true);
  const std::string client_out = read_all(client, 120s);
  const std::string server_out = read_all(server, 30s);
  INFO("client:\n" << client_out << "server:\n" << server_out);
  REQUIRE(client.wait(30s) == 0);
  REQUIRE(server.wait(30s) == 0);
  CHECK(client_out.find("Sim wire        : dpdk " + ns.addr_b() +
                        ":4791 port 0 net_af_packet0 (net_af_packet) mac 02:00:") !=
        std::string::npos);
  CHECK(server_out.find("Sim wire        : dpdk " + ns.addr_a() + ":4791 port 0 net_af_packet0") !=
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
