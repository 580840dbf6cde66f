// SPDX-License-Identifier: BSD-3-Clause
// tshark, an independent decoder, reads the wires' captures as RoCEv2 with the right fields.
// Skipped (exit code 77, which meson reports as SKIP) where tshark is not installed.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "tshark.h"
#include "wire/wire.h"
#include "wire_test_util.h"

using namespace rnicdv;
using namespace rnicdv::sim;
using namespace rnicdv::sim::test;
using namespace rnicdv::test;

namespace {

struct Sample {
  std::vector<uint8_t> bytes;
  const char* protocols;  // frame.protocols: payload bytes show as "data"
  const char* opcode;     // as tshark prints it (decimal)
  const char* destqp;     // hex, as tshark prints it
  const char* psn;
};

// An RC SEND_ONLY with payload, an RDMA WRITE_ONLY with RETH, an ACKNOWLEDGE with AETH.
std::vector<Sample> samples() {
  return {
      {datagram(0x04, 0x000011, 100, {}, {'h', 'e', 'l', 'l', 'o', ' ', 'r', 'o', 'c', 'e'}),
       "eth:ethertype:ip:udp:infiniband:data", "4", "0x000011", "100"},
      {datagram(0x0A, 0x0000AB, 0xFFFFFE, reth(0x00007F0012340000ull, 0xCAFE, 16),
                std::vector<uint8_t>(16, 0x42)),
       "eth:ethertype:ip:udp:infiniband:data", "10", "0x0000ab", "16777214"},
      {datagram(0x11, 0x000022, 7, aeth(0x1F, 3), {}), "eth:ethertype:ip:udp:infiniband", "17",
       "0x000022", "7"},
  };
}

void check_capture(const std::string& path, size_t expected_frames) {
  const auto fields = tshark_rows(
      tshark(path,
             "-T fields -e frame.protocols -e infiniband.bth.opcode -e infiniband.bth.destqp "
             "-e infiniband.bth.psn -e infiniband.reth.r_key -e infiniband.reth.dmalen "
             "-e infiniband.aeth.msn -e _ws.malformed"));
  const auto expect = samples();
  REQUIRE(fields.size() == expected_frames);
  for (size_t i = 0; i < fields.size(); ++i) {
    const auto& row = fields[i];
    const Sample& s = expect[i % expect.size()];
    INFO("frame " << i + 1);
    REQUIRE(row.size() >= 4);
    CHECK(row[0] == s.protocols);
    CHECK(row[1] == s.opcode);
    CHECK(row[2] == s.destqp);
    CHECK(row[3] == s.psn);
    if (i % expect.size() == 1) {
      REQUIRE(row.size() >= 6);
      CHECK(row[4] == "0x0000cafe");
      CHECK(row[5] == "16");
    }
    if (i % expect.size() == 2) {
      REQUIRE(row.size() >= 7);
      CHECK(row[6] == "3");
    }
    if (row.size() >= 8) CHECK(row[7].empty());  // not malformed
  }
  // And nothing anywhere in the capture is flagged malformed.
  CHECK(tshark(path, "-Y _ws.malformed -T fields -e frame.number").empty());
}

}  // namespace

TEST_CASE("tshark decodes the in-process wire's capture as RoCEv2", "[pcap][tshark]") {
  skip_without_tshark();
  TempDir dir;
  WireConfig config;
  config.pcap_path = dir.file("inproc.pcap");
  auto made = make_inproc_wire(config);
  REQUIRE(made.is_ok());
  Wire& wire = **made;
  RecordingSink a, b;
  const Endpoint ea{v4(127, 0, 0, 2), 4791}, eb{v4(127, 0, 0, 3), 4791};
  REQUIRE(wire.attach(ea, &a).is_ok());
  REQUIRE(wire.attach(eb, &b).is_ok());
  for (const Sample& s : samples()) wire.transmit(ea, eb, s.bytes.data(), s.bytes.size());
  CHECK(wire.poll(eb, 16) == 3);
  check_capture(config.pcap_path, 3);
}

TEST_CASE("tshark decodes the UDP wire's capture, written to a per-process path",
          "[pcap][tshark][udp]") {
  skip_without_tshark();
  TempDir dir;
  WireConfig config;
  config.pcap_path = dir.file("udp-%p.pcap");
  config.udp_port = 4791;  // tshark's RoCEv2 port; the endpoints below choose their own
  auto made = make_udp_wire(config);
  REQUIRE(made.is_ok());
  Wire& wire = **made;
  RecordingSink a, b;
  auto ea = wire.attach(Endpoint{IpAddress{}, free_udp_port()}, &a);
  REQUIRE(ea.is_ok());
  auto eb = wire.attach(Endpoint{IpAddress{}, ea->port}, &b);
  REQUIRE(eb.is_ok());
  for (const Sample& s : samples()) wire.transmit(*ea, *eb, s.bytes.data(), s.bytes.size());
  const std::string path = dir.file("udp-" + std::to_string(::getpid()) + ".pcap");
  // The endpoints use a free port, not 4791: tell tshark it is RoCEv2 too.
  const std::string port_arg = "-d udp.port==" + std::to_string(ea->port) + ",infiniband ";
  const auto fields =
      tshark_rows(tshark(path, port_arg + "-T fields -e frame.protocols "
                                          "-e infiniband.bth.opcode -e _ws.malformed"));
  REQUIRE(fields.size() == 3);
  const auto expect = samples();
  for (size_t i = 0; i < 3; ++i) {
    CHECK(fields[i].at(0) == expect[i].protocols);
    CHECK(fields[i].at(1) == expect[i].opcode);
  }
  CHECK(tshark(path, port_arg + "-Y _ws.malformed -T fields -e frame.number").empty());
}
