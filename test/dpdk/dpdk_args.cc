// SPDX-License-Identifier: BSD-3-Clause
// The DPDK wire's argument string and the EAL arguments planned from it: pure functions,
// checked without starting EAL.
#include "dpdk_env.h"

#include "wire/dpdk_args.h"
#include "wire/dpdk_eal.h"

using namespace rnicdv;
using namespace rnicdv::sim;

namespace {

bool has(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

}  // namespace

TEST_CASE("the wire's options are taken out and everything else goes to EAL in order",
          "[dpdk][args]") {
  auto o = rnicdv::test::take(parse_dpdk_args(
      "--vdev=net_af_packet0,iface=veth0 --port=0,net_tap1 -l 1 --ip=10.0.0.1,10.0.0.2 "
      "--mac=02:aa:bb:cc:dd:ee --peer=10.0.0.9=02:00:00:00:00:09 --log-level=7"));
  CHECK(o.eal_args ==
        std::vector<std::string>{"--vdev=net_af_packet0,iface=veth0", "-l", "1", "--log-level=7"});
  CHECK(o.ports == std::vector<std::string>{"0", "net_tap1"});
  CHECK(o.ips ==
        std::vector<hw::IpAddress>{hw::IpAddress::v4(0x0A000001u), hw::IpAddress::v4(0x0A000002u)});
  REQUIRE(o.macs.size() == 1);
  CHECK(mac_string(o.macs[0]) == "02:aa:bb:cc:dd:ee");
  REQUIRE(o.peers.size() == 1);
  CHECK(o.peers[0].first == hw::IpAddress::v4(0x0A000009u));
  CHECK(mac_string(o.peers[0].second) == "02:00:00:00:00:09");
}

TEST_CASE("quotes and backslashes group DPDK arguments", "[dpdk][args]") {
  auto words = rnicdv::test::take(split_dpdk_args("  a 'b c'  \"d \\\" e\" f\\ g  "));
  CHECK(words == std::vector<std::string>{"a", "b c", "d \" e", "f g"});
  CHECK(rnicdv::test::take(split_dpdk_args("")).empty());
  auto bad = split_dpdk_args("--vdev='net_ring0");
  REQUIRE_FALSE(bad);
  CHECK(bad.status().message().find("unterminated") != std::string::npos);
}

TEST_CASE("bad wire options are refused, naming the option and the value", "[dpdk][args]") {
  struct Case {
    const char* args;
    const char* says;
  };
  for (const Case& c :
       {Case{"--ip=10.0.0", "--ip: '10.0.0' is not an IPv4 or IPv6 address"},
        Case{"--ip=0.0.0.0", "0.0.0.0 is not a device address"},
        Case{"--mac=02:00:00:00:00", "'02:00:00:00:00' is not a MAC address"},
        Case{"--mac=01:00:5e:00:00:01", "multicast"},
        Case{"--peer=10.0.0.1", "expected <address>=<mac>"},
        Case{"--port=", "--port needs a value"}, Case{"--port=1,,2", "empty port name"}}) {
    auto r = parse_dpdk_args(c.args);
    INFO(c.args);
    REQUIRE_FALSE(r);
    INFO(r.status().message());
    CHECK(r.status().code() == Errc::invalid_argument);
    CHECK(r.status().message().find(c.says) != std::string::npos);
  }
}

TEST_CASE("EAL defaults: no hugepages means --no-huge with a notice", "[dpdk][eal]") {
  const EalPlan plan = plan_eal_args({}, false, 1);
  CHECK(plan.no_huge_added);
  CHECK(has(plan.args, "-l1"));
  CHECK(has(plan.args, "--no-pci"));
  CHECK(has(plan.args, "--no-telemetry"));
  CHECK(has(plan.args, "--no-huge"));
  CHECK(has(plan.args, "--no-shconf"));
  CHECK(has(plan.args, "-m"));
  CHECK_FALSE(has(plan.args, "--in-memory"));
}

TEST_CASE("EAL defaults: free hugepages are used, in memory", "[dpdk][eal]") {
  const EalPlan plan = plan_eal_args({}, true, 0);
  CHECK_FALSE(plan.no_huge_added);
  CHECK(has(plan.args, "--in-memory"));
  CHECK_FALSE(has(plan.args, "--no-huge"));
}

TEST_CASE("EAL arguments the user gives win over the defaults", "[dpdk][eal]") {
  const std::vector<std::string> user{"-l", "3", "-a", "0000:03:00.0", "--file-prefix=x",
                                      "--log-level=8", "--telemetry"};
  const EalPlan plan = plan_eal_args(user, false, 0);
  CHECK_FALSE(plan.no_huge_added);
  CHECK_FALSE(has(plan.args, "-l0"));
  CHECK_FALSE(has(plan.args, "--no-pci"));
  CHECK_FALSE(has(plan.args, "--no-huge"));
  CHECK_FALSE(has(plan.args, "--no-telemetry"));
  CHECK_FALSE(has(plan.args, "--log-level=5"));
  // The user's arguments come last, unchanged.
  REQUIRE(plan.args.size() >= user.size());
  CHECK(std::equal(user.begin(), user.end(), plan.args.end() - static_cast<long>(user.size())));
}

TEST_CASE("the wire's addresses and peers may be IPv6", "[dpdk][args][ipv6]") {
  auto r = parse_dpdk_args("--ip=fd00::1,10.0.0.2 --peer=fd00::9=02:00:00:00:00:09");
  REQUIRE(r);
  const DpdkWireOptions& o = *r;
  REQUIRE(o.ips.size() == 2);
  CHECK(o.ips[0].to_string() == "fd00::1");
  CHECK(o.ips[1] == hw::IpAddress::v4(0x0A000002u));
  REQUIRE(o.peers.size() == 1);
  CHECK(o.peers[0].first.to_string() == "fd00::9");
  CHECK(mac_string(o.peers[0].second) == "02:00:00:00:00:09");
  auto multicast = parse_dpdk_args("--ip=ff02::1");
  REQUIRE_FALSE(multicast);
  CHECK(multicast.status().message().find("ff02::1 is not a device address") != std::string::npos);
}
