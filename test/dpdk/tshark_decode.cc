// SPDX-License-Identifier: BSD-3-Clause
// tshark, an independent decoder, reads the frames the DPDK wire sent (its RNICDV_PCAP
// capture) as Ethernet / IPv4 / UDP / RoCE, and as Ethernet / IPv6 / UDP / RoCE between
// devices with IPv6 addresses, with every RC opcode and no malformed frame.
// Skipped (77) where tshark is not installed.
#include "dpdk_env.h"

#include <map>

#include "tshark.h"

using namespace rnicdv;
using namespace rnicdv::test;

namespace {

// run_every_rc_opcode sends each RC opcode, 0x00 to 0x14; tshark saw each exactly once.
void check_every_rc_opcode_once(const std::map<std::string, int>& seen) {
  for (int op = 0x00; op <= 0x14; ++op) {
    INFO("BTH opcode " << op);
    CHECK(seen.count(std::to_string(op)) == 1);
  }
}

}  // namespace

TEST_CASE("tshark decodes every DPDK frame as eth/ip/udp/RoCE with no malformed frame",
          "[dpdk][tshark]") {
  skip_without_tshark();
  TempPcap pcap("tshark");
  {
    Pair p = make_dpdk_pair(pcap.path);
    run_every_rc_opcode(p);
  }
  const size_t frames = read_pcap(pcap.path).size();
  const auto fields = tshark_rows(
      tshark(pcap.path,
             "-T fields -e frame.protocols -e ip.flags.df -e udp.dstport -e ip.checksum.status "
             "-e udp.checksum.status -e infiniband.bth.opcode -e _ws.malformed "
             "-o ip.check_checksum:TRUE -o udp.check_checksum:TRUE"));
  REQUIRE(fields.size() == frames);
  std::map<std::string, int> opcodes;
  for (size_t i = 0; i < fields.size(); ++i) {
    const auto& row = fields[i];
    INFO("frame " << i + 1);
    REQUIRE(row.size() >= 6);
    CHECK(row[0].rfind("eth:ethertype:ip:udp:infiniband", 0) == 0);
    CHECK(row[1] == "1");     // DF
    CHECK(row[2] == "4791");  // RoCEv2
    CHECK(row[3] == "1");     // IPv4 header checksum: good (0 bad, 2 unverified)
    CHECK(row[4] == "1");     // UDP checksum: good
    ++opcodes[row[5]];
    if (row.size() >= 7) CHECK(row[6].empty());
  }
  check_every_rc_opcode_once(opcodes);
  CHECK(tshark(pcap.path, "-Y _ws.malformed -T fields -e frame.number").empty());
}

TEST_CASE("tshark decodes every DPDK frame between IPv6 devices as eth/ipv6/udp/RoCE, none "
          "malformed",
          "[dpdk][tshark][ipv6]") {
  skip_without_tshark();
  TempPcap pcap("tshark-ipv6");
  {
    Pair p = make_dpdk_pair(pcap.path, {}, take(hw::IpAddress::parse("fd00:77::1")),
                            take(hw::IpAddress::parse("fd00:77::2")));
    run_every_rc_opcode(p);
  }
  const size_t frames = read_pcap(pcap.path).size();
  const auto fields = tshark_rows(
      tshark(pcap.path,
             "-T fields -e frame.protocols -e ipv6.src -e ipv6.dst -e udp.dstport "
             "-e udp.checksum.status -e infiniband.bth.opcode -o udp.check_checksum:TRUE"));
  REQUIRE(fields.size() == frames);
  std::map<std::string, int> opcodes;
  for (size_t i = 0; i < fields.size(); ++i) {
    const auto& row = fields[i];
    INFO("frame " << i + 1);
    REQUIRE(row.size() >= 6);
    CHECK(row[0].rfind("eth:ethertype:ipv6:udp:infiniband", 0) == 0);
    CHECK((row[1] == "fd00:77::1" || row[1] == "fd00:77::2"));
    CHECK(row[1] != row[2]);
    CHECK(row[3] == "4791");
    CHECK(row[4] == "1");  // UDP checksum: good, as IPv6 requires one
    ++opcodes[row[5]];
  }
  check_every_rc_opcode_once(opcodes);
  CHECK(tshark(pcap.path, "-Y _ws.malformed -T fields -e frame.number").empty());
}
