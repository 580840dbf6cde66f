// SPDX-License-Identifier: BSD-3-Clause
// Two network namespaces joined by a veth pair, one address of a /24 at each end, made with
// iproute2's `ip` and removed by the destructor whatever the test's outcome. Needs root.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "child_process.h"

namespace rnicdv::test {

// Runs `ip ARGS...`; true on exit status 0.
inline bool ip(const std::vector<std::string>& args) {
  std::vector<std::string> argv{"ip"};
  argv.insert(argv.end(), args.begin(), args.end());
  auto c = Child::spawn(argv);
  return c && c->wait(std::chrono::seconds(30)) == 0;
}

class NamespacePair {
 public:
  // Namespaces "<ns_prefix><pid>-a" and "-b", veth ends "<veth_prefix><pid>a" and "b"
  // (interface names have 15 characters at most: keep veth_prefix short), addresses
  // 10.<second_octet>.<1 + pid % 250>.1 and .2: one pair per process, so concurrent test
  // processes do not collide.
  NamespacePair(const std::string& ns_prefix, const std::string& veth_prefix,
                unsigned second_octet) {
    const std::string id = std::to_string(::getpid());
    a_ = ns_prefix + id + "-a";
    b_ = ns_prefix + id + "-b";
    const std::string subnet = "10." + std::to_string(second_octet) + "." +
                               std::to_string(1 + static_cast<unsigned>(::getpid()) % 250);
    addr_a_ = subnet + ".1";
    addr_b_ = subnet + ".2";
    veth_a_ = veth_prefix + id + "a";
    veth_b_ = veth_prefix + id + "b";
    second_octet_ = second_octet;
  }
  NamespacePair(const NamespacePair&) = delete;
  NamespacePair& operator=(const NamespacePair&) = delete;
  ~NamespacePair() {
    // Deleting a namespace destroys its end of the veth pair, and with it the other end.
    if (made_a_) ip({"netns", "del", a_});
    if (made_b_) ip({"netns", "del", b_});
  }

  // What create() returns where not even the first namespace can be made (no privilege, no
  // namespace support): a reason to skip rather than fail.
  static constexpr const char* kCannotCreateNamespaces = "cannot create network namespaces";

  // Returns an empty string, or why the pair could not be made.
  std::string create() {
    if (!(made_a_ = ip({"netns", "add", a_}))) return kCannotCreateNamespaces;
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

  // IPv6 on the veth ends, without duplicate address detection so that both are usable at
  // once: a unique local address each (fd00:<second_octet>:<pid % 65536>::1 and ::2, in hex)
  // and a
  // link-local one (fe80::a and fe80::b: each pair is a link of its own). Returns an empty
  // string, or why not.
  std::string add_ipv6() {
    char prefix[32];
    std::snprintf(prefix, sizeof prefix, "fd00:%x:%x::", second_octet_,
                  static_cast<unsigned>(::getpid()) % 65536);
    addr6_a_ = std::string(prefix) + "1";
    addr6_b_ = std::string(prefix) + "2";
    const std::vector<std::vector<std::string>> steps = {
        {"-n", a_, "-6", "addr", "add", addr6_a_ + "/64", "dev", veth_a_, "nodad"},
        {"-n", b_, "-6", "addr", "add", addr6_b_ + "/64", "dev", veth_b_, "nodad"},
        {"-n", a_, "-6", "addr", "add", "fe80::a/64", "dev", veth_a_, "nodad"},
        {"-n", b_, "-6", "addr", "add", "fe80::b/64", "dev", veth_b_, "nodad"},
    };
    for (const auto& s : steps)
      if (!ip(s)) return "cannot add IPv6 addresses (is IPv6 disabled?)";
    return "";
  }
  const std::string& addr6_a() const { return addr6_a_; }
  const std::string& addr6_b() const { return addr6_b_; }

  const std::string& ns_a() const { return a_; }
  const std::string& ns_b() const { return b_; }
  const std::string& addr_a() const { return addr_a_; }
  const std::string& addr_b() const { return addr_b_; }
  const std::string& veth_a() const { return veth_a_; }
  const std::string& veth_b() const { return veth_b_; }

 private:
  std::string a_, b_, addr_a_, addr_b_, veth_a_, veth_b_, addr6_a_, addr6_b_;
  unsigned second_octet_ = 0;
  bool made_a_ = false, made_b_ = false;
};

}  // namespace rnicdv::test
