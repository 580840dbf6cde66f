// SPDX-License-Identifier: BSD-3-Clause
// Two simulated HCAs in two network namespaces joined by a veth pair: the server in one, the
// client in the other, each bound to its veth address on UDP 4791. Needs root (CI runs as
// root); where namespaces cannot be created it says why and exits 77 (skipped). The
// namespaces are removed whatever the outcome.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdlib>
#include <string>

#include "child_process.h"
#include "network_namespaces.h"
#include "skip.h"

using namespace rnicdv::test;
using namespace std::chrono_literals;

TEST_CASE("a server and a client in two network namespaces joined by veth connect and talk") {
  const char* peer = std::getenv("RNICDV_CM_PEER");
  if (!peer || access(peer, X_OK) != 0)
    skip_test("RNICDV_CM_PEER does not name the cm-peer program (tools disabled?)");
  if (geteuid() != 0) skip_test("network namespaces need root");
  {
    auto probe = Child::spawn({"ip", "-V"});
    if (!probe || probe->wait(10s) != 0) skip_test("the ip command (iproute2) is not available");
  }

  NamespacePair ns("rnicdv-cm-", "rcm", 201);
  if (std::string why = ns.create(); !why.empty()) {
    if (why == NamespacePair::kCannotCreateNamespaces) skip_test(why);
    FAIL(why);
  }

  auto server =
      Child::spawn({"ip", "netns", "exec", ns.ns_a(), peer, "server", "--addr", ns.addr_a(),
                    "--port", "7471", "--messages", "8", "--greeting", "4", "--timeout", "30"});
  REQUIRE(server);
  auto listening = server->read_until("listening ", 20s);
  INFO("the server in " << ns.ns_a() << " did not start");
  REQUIRE(listening);
  CHECK(*listening == "listening " + ns.addr_a() + ":7471");

  auto client = Child::spawn({"ip", "netns", "exec", ns.ns_b(), peer, "client", "--addr",
                              ns.addr_b(), "--peer", ns.addr_a(), "--port", "7471", "--messages",
                              "8", "--greeting", "4", "--timeout", "30"});
  REQUIRE(client);
  auto connecting = client->read_until("connecting ", 20s);
  REQUIRE(connecting);
  CHECK(connecting->find(ns.addr_b()) != std::string::npos);
  CHECK(client->read_until("received 4 greetings and 8 echoes", 30s));
  CHECK(client->wait(30s) == 0);
  CHECK(server->read_until("disconnected after 8 messages", 30s));
  CHECK(server->wait(30s) == 0);
}
