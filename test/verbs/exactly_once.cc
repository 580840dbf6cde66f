// SPDX-License-Identifier: BSD-3-Clause
// Exactly once at the responder and the requester, as an application that polls its buffers
// sees it: two processes of exactly-once-peer (exactly_once_peer.cc), each on its own
// simulated HCA over the UDP wire, store into buffers the device writes and check that their
// stores stay. RNICDV_EXACTLY_ONCE_ROUNDS sets the round trips per case (the stress step of
// .ci/run runs many more than the suite's default).
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "child_process.h"

namespace {

using rnicdv::test::Child;
using namespace std::chrono_literals;

long rounds() {
  const char* r = std::getenv("RNICDV_EXACTLY_ONCE_ROUNDS");
  return r && *r ? std::atol(r) : 2000;
}

// Runs a server and a client of `mode` on port `port` (and the address pair derived from
// it); both must finish every round with no violation.
void run_pair(const std::string& mode, uint32_t bytes, int port) {
  const char* peer = std::getenv("RNICDV_EXACTLY_ONCE_PEER");
  const char* shim = std::getenv("RNICDV_UVERBS_SHIM");
  REQUIRE(peer);
  REQUIRE(shim);
  const std::string n = std::to_string(rounds());
  const std::string net = "127.0." + std::to_string(port % 200 + 20) + ".";
  const auto command = [&](const char* role, const std::string& addr) {
    return std::vector<std::string>{"env", std::string("LD_PRELOAD=") + shim,
                                    "RNICDV_SIM_ADDR=" + addr, "RNICDV_SIM_WIRE=udp",
                                    "RNICDV_UVERBS_DEVICES=1", peer, role,
                                    "--port", std::to_string(port), "--mode", mode,
                                    "--rounds", n, "--bytes", std::to_string(bytes)};
  };
  std::optional<Child> server = Child::spawn(command("server", net + "1"));
  REQUIRE(server);
  REQUIRE(server->read_until("listening", 60s));
  std::optional<Child> client = Child::spawn(command("client", net + "2"));
  REQUIRE(client);
  const std::string expected = "rounds " + n + " violations 0";
  const auto budget = std::chrono::milliseconds(60'000 + rounds() * 5);
  const std::optional<std::string> client_says = client->read_until("rounds", budget);
  const std::optional<std::string> server_says = server->read_until("rounds", 60s);
  INFO(mode << ", " << bytes << " bytes: the client said '" << client_says.value_or("nothing")
            << "', the server '" << server_says.value_or("nothing") << "'");
  CHECK(client_says == expected);
  CHECK(server_says == expected);
  CHECK(client->wait(30s) == 0);
  CHECK(server->wait(30s) == 0);
}

}  // namespace

TEST_CASE("an incoming inline RDMA WRITE is placed once: each side's stores survive until the peer answers") {
  run_pair("write-inline", 64, 18900);
}

TEST_CASE("an incoming 64-byte RDMA WRITE from a registered buffer is placed once") {
  run_pair("write", 64, 18901);
}

TEST_CASE("an incoming one-MTU RDMA WRITE is placed once, its last bytes last") {
  run_pair("write", 4096, 18902);
}

TEST_CASE("a READ response is placed once into the requester's memory") {
  run_pair("read", 64, 18903);
  run_pair("read", 4096, 18904);
}

TEST_CASE("an atomic executes once, and its result is placed once") {
  run_pair("atomic", 8, 18905);
}
