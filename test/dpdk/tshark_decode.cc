// SPDX-License-Identifier: BSD-3-Clause
// tshark, an independent decoder, reads the frames the DPDK wire sent (its RNICDV_PCAP
// capture) as Ethernet / IPv4 / UDP / RoCE with every RC opcode and no malformed frame.
// Skipped (77) where tshark is not installed.
#include "dpdk_env.h"

#include <sys/wait.h>

#include <map>
#include <sstream>

using namespace rnicdv;
using namespace rnicdv::test;

namespace {

// stdout of tshark on `path`. SEND payload heuristics are disabled: they parse test data as
// RPC-over-RDMA, NVMe-oF, iSER... and call it malformed (softrnic.md §4.2).
std::string tshark(const std::string& path, const std::string& args) {
  const std::string cmd =
      "tshark -n -r '" + path + "'" +
      " --disable-protocol rpcordma --disable-protocol nvme-rdma --disable-protocol iser"
      " --disable-protocol smb_direct --disable-protocol lnet --disable-protocol infiniband_sdp"
      " --disable-protocol smc --disable-protocol fcoib --disable-protocol infiniband.eoib " +
      args + " 2>/dev/null";
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int status = ::pclose(p);
  INFO(cmd);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  return out;
}

std::vector<std::vector<std::string>> rows(const std::string& text) {
  std::vector<std::vector<std::string>> out;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::vector<std::string> fields;
    std::string field;
    std::istringstream cols(line);
    while (std::getline(cols, field, '\t')) fields.push_back(field);
    if (!line.empty() && line.back() == '\t') fields.emplace_back();
    out.push_back(fields);
  }
  return out;
}

}  // namespace

TEST_CASE("tshark decodes every DPDK frame as eth/ip/udp/RoCE with no malformed frame",
          "[dpdk][tshark]") {
  if (std::system("command -v tshark >/dev/null 2>&1") != 0) {
    std::printf("skipped: tshark is not installed (Debian package tshark)\n");
    std::fflush(stdout);
    std::_Exit(77);
  }
  TempPcap pcap("tshark");
  {
    Pair p = make_dpdk_pair(pcap.path);
    run_every_rc_opcode(p);
  }
  const size_t frames = read_pcap(pcap.path).size();
  const auto fields = rows(tshark(
      pcap.path, "-T fields -e frame.protocols -e ip.flags.df -e udp.dstport -e ip.checksum.status "
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
  for (int op = 0x00; op <= 0x14; ++op) {
    INFO("BTH opcode " << op);
    CHECK(opcodes.count(std::to_string(op)) == 1);
  }
  CHECK(tshark(pcap.path, "-Y _ws.malformed -T fields -e frame.number").empty());
}
