// SPDX-License-Identifier: BSD-3-Clause
// rnicperf write_bw between two processes in two network namespaces joined by a veth pair,
// each simulated HCA on the UDP wire with an IPv6 address of its veth end: RoCE v2 in IPv6
// datagrams through the kernel, over a unique local address and over a link-local one (the
// socket bound on the interface that holds it). The control channel is TCP over IPv4 on the
// same link. Needs root (CI runs as root); where namespaces cannot be made it says why and is
// skipped. The namespaces are removed whatever the outcome.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <functional>
#include <sstream>
#include <string>

#include "network_namespaces.h"
#include "skip.h"
#include "subprocess.h"

namespace {

// A result row of write_bw: 4096 bytes, 300 iterations, a positive average bandwidth.
bool has_result_row(const std::string& out) {
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream cols(line);
    std::string bytes, iters;
    double peak = 0, average = 0;
    if (cols >> bytes >> iters >> peak >> average && bytes == "4096" && iters == "300")
      return average > 0;
  }
  return false;
}

// `extra(address)`: more options for the side whose HCA is on `address`.
void run_between(const rnicdv::test::NamespacePair& ns, const std::string& addr_a,
                 const std::string& addr_b,
                 const std::function<std::vector<std::string>(const std::string&)>& extra = {},
                 const std::string& server_name = "") {
  const std::string port = std::to_string(rnicperf_test::free_port());
  const auto args = [&](const std::string& netns, const std::string& address) {
    // -m 1024: a 4096-byte path MTU would not fit the veth's 1500-byte link MTU.
    return std::vector<std::string>{"/usr/bin/env",
                                    "ip",
                                    "netns",
                                    "exec",
                                    netns,
                                    "env",
                                    "RNICDV_SIM_ADDR=" + address,
                                    rnicperf_test::rnicperf_bin(),
                                    "write_bw",
                                    "-m",
                                    "1024",
                                    "-s",
                                    "4096",
                                    "-n",
                                    "300",
                                    "-p",
                                    port,
                                    "--timeout=30"};
  };
  std::vector<std::string> server = args(ns.ns_a(), addr_a);
  std::vector<std::string> client = args(ns.ns_b(), addr_b);
  if (extra) {
    for (const std::string& o : extra(addr_a)) server.push_back(o);
    for (const std::string& o : extra(addr_b)) client.push_back(o);
  }
  client.insert(client.end(),
                {"--retry-connect", server_name.empty() ? ns.addr_a() : server_name});
  rnicperf_test::Child server_child(server);
  rnicperf_test::Child client_child(client);
  const rnicperf_test::ProcessResult c = client_child.wait(120);
  const rnicperf_test::ProcessResult s = server_child.wait(60);
  INFO("server:\n" << s.out << s.err << "\nclient:\n" << c.out << c.err);
  REQUIRE(c.exit_code == 0);
  REQUIRE(s.exit_code == 0);
  CHECK(s.out.find(" Sim wire        : udp [" + addr_a + "]:4791") != std::string::npos);
  CHECK(c.out.find(" Sim wire        : udp [" + addr_b + "]:4791") != std::string::npos);
  CHECK(has_result_row(c.out));
}

}  // namespace

TEST_CASE(
    "rnicperf runs RoCE v2 over IPv6 between two namespaces, on unique local and on "
    "link-local addresses",
    "[rnicperf][ipv6][namespaces]") {
  if (::geteuid() != 0) rnicdv::test::skip_test("network namespaces need root");
  rnicdv::test::NamespacePair ns("rnicdv-v6-", "rv6", 207);
  if (std::string why = ns.create(); !why.empty()) {
    if (why == rnicdv::test::NamespacePair::kCannotCreateNamespaces) rnicdv::test::skip_test(why);
    FAIL(why);
  }
  if (std::string why = ns.add_ipv6(); !why.empty()) rnicdv::test::skip_test(why);
  SECTION("unique local addresses") {
    run_between(ns, ns.addr6_a(), ns.addr6_b());
  }
  SECTION("link-local addresses") {
    run_between(ns, "fe80::a", "fe80::b");
  }
  SECTION("-R with --ipv6, the control channel over IPv6 from each side's HCA address") {
    // --ipv6: each GID is an IPv6 one; --ipv6-addr and --bind_source_ip: the TCP exchange
    // between the two unique local addresses; -R: the QPs connected by the CM over IPv6.
    run_between(
        ns, ns.addr6_a(), ns.addr6_b(),
        [](const std::string& address) {
          return std::vector<std::string>{"-R", "--ipv6", "--ipv6-addr",
                                          "--bind_source_ip=" + address};
        },
        ns.addr6_a());
  }
}
