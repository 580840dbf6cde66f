// SPDX-License-Identifier: BSD-3-Clause
// Two simulated HCAs in two network namespaces joined by a veth pair: the server in one, the
// client in the other, each bound to its veth address on UDP 4791. Needs root (CI runs as
// root); where namespaces cannot be created it says why and exits 77 (skipped). The
// namespaces are removed whatever the outcome.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "child_process.h"

using namespace rnicdv::test;
using namespace std::chrono_literals;

namespace {

[[noreturn]] void skip(const std::string& why) {
  std::printf("skipped: %s\n", why.c_str());
  std::fflush(stdout);
  std::exit(77);
}

// Runs `ip ARGS...`; true on exit status 0.
bool ip(const std::vector<std::string>& args) {
  std::vector<std::string> argv{"ip"};
  argv.insert(argv.end(), args.begin(), args.end());
  auto c = Child::spawn(argv);
  return c && c->wait(30s) == 0;
}

// Two namespaces and a veth pair between them, torn down by the destructor.
class NamespacePair {
 public:
  NamespacePair() {
    const std::string id = std::to_string(getpid());
    a_ = "rnicdv-cm-" + id + "-a";
    b_ = "rnicdv-cm-" + id + "-b";
    const unsigned subnet = 1 + static_cast<unsigned>(getpid()) % 250;
    addr_a_ = "10.201." + std::to_string(subnet) + ".1";
    addr_b_ = "10.201." + std::to_string(subnet) + ".2";
    veth_a_ = "rcm" + id + "a";
    veth_b_ = "rcm" + id + "b";
  }
  ~NamespacePair() {
    // Deleting a namespace destroys its end of the veth pair, and with it the other end.
    if (made_a_) ip({"netns", "del", a_});
    if (made_b_) ip({"netns", "del", b_});
  }

  // Returns an empty string, or why the pair could not be made.
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

  const std::string& ns_a() const { return a_; }
  const std::string& ns_b() const { return b_; }
  const std::string& addr_a() const { return addr_a_; }
  const std::string& addr_b() const { return addr_b_; }

 private:
  std::string a_, b_, addr_a_, addr_b_, veth_a_, veth_b_;
  bool made_a_ = false, made_b_ = false;
};

}  // namespace

TEST_CASE("a server and a client in two network namespaces joined by veth connect and talk") {
  const char* peer = std::getenv("RNICDV_CM_PEER");
  if (!peer || access(peer, X_OK) != 0)
    skip("RNICDV_CM_PEER does not name the cm-peer program (tools disabled?)");
  if (geteuid() != 0) skip("network namespaces need root");
  {
    auto probe = Child::spawn({"ip", "-V"});
    if (!probe || probe->wait(10s) != 0) skip("the ip command (iproute2) is not available");
  }

  NamespacePair ns;
  if (std::string why = ns.create(); !why.empty()) {
    if (why == "cannot create network namespaces") skip(why);
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
