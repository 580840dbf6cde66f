// SPDX-License-Identifier: BSD-3-Clause
// The CM exchange as a third party sees it: the wire's pcap, decoded by tshark's InfiniBand
// dissector (an oracle this project did not write). Skipped (77) where tshark is missing.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <sstream>

#include "child_process.h"
#include "cm_env.h"

using namespace rnicdv;
using namespace rnicdv::test;

namespace {

std::vector<std::string> tshark(const std::string& pcap, const std::vector<std::string>& args) {
  std::vector<std::string> argv{"tshark", "-n", "-r", pcap};
  argv.insert(argv.end(), args.begin(), args.end());
  auto c = Child::spawn(argv);
  REQUIRE(c);
  std::vector<std::string> lines;
  while (auto line = c->read_line(30s)) lines.push_back(*line);
  CHECK(c->wait(30s) == 0);
  return lines;
}

void skip_without_tshark() {
  auto probe = Child::spawn({"tshark", "-v"});
  if (!probe || probe->wait(30s) != 0) {
    std::printf("skipped: tshark is not installed\n");
    std::fflush(stdout);
    std::exit(77);
  }
}

// A capture file of this test's own, removed at the end.
struct TempPcap {
  char path[32] = "/tmp/rnicdv-cm-XXXXXX.pcap";
  TempPcap() {
    const int fd = mkstemps(path, 5);
    REQUIRE(fd >= 0);
    ::close(fd);
  }
  ~TempPcap() { ::unlink(path); }
};

}  // namespace

TEST_CASE("tshark decodes the CM exchange in the wire's pcap as InfiniBand CM messages") {
  skip_without_tshark();
  TempPcap pcap;
  const char* path = pcap.path;

  uint32_t qpn_a = 0, qpn_b = 0;
  std::string ip_b;
  {
    auto fabric = make_fabric(sim::ExecMode::deterministic, path);
    Side a = make_side(fabric);
    Side b = make_side(fabric);
    qpn_a = a.qp->qpn();
    qpn_b = b.qp->qpn();
    ip_b = b.ip();
    Listener l = take(Listener::listen(*b.dev, "", kCmPort));
    Connection ca = take(Connection::connect(*a.qp, b.ip(), kCmPort, bytes("hello")));
    ConnectionEvent req = wait_event(l);
    Connection cb = take(req.request->accept(*b.qp));
    REQUIRE(wait_event(ca).type == ConnectionEventType::established);
    REQUIRE(wait_event(cb).type == ConnectionEventType::established);
    REQUIRE(ca.disconnect().is_ok());
    REQUIRE(wait_event(cb).type == ConnectionEventType::disconnected);
    REQUIRE(wait_event(ca).type == ConnectionEventType::disconnected);
    // And a REQ nobody listens for.
    Side c = make_side(fabric);
    Connection cc = take(Connection::connect(*c.qp, b.ip(), 9999));
    REQUIRE(wait_event(cc).type == ConnectionEventType::rejected);
  }  // the fabric closes the capture

  // One pass over every MAD: the message name, the transport fields, and the fields of each
  // message that this exchange is about.
  const auto rows = tshark(path, {"-Y", "infiniband.mad",
                                  "-T", "fields",
                                  "-E", "separator=|",
                                  "-e", "_ws.col.Info",
                                  "-e", "infiniband.bth.destqp",
                                  "-e", "infiniband.deth.q_key",
                                  "-e", "infiniband.deth.srcqp",
                                  "-e", "infiniband.mad.transactionid",
                                  "-e", "infiniband.cm.req.serviceid.dport",
                                  "-e", "infiniband.cm.req.localqpn",
                                  "-e", "infiniband.cm.req.ip_cm.dip4",
                                  "-e", "infiniband.cm.rep.localqpn",
                                  "-e", "infiniband.cm.rej.reason"});
  std::vector<std::vector<std::string>> f;
  for (const auto& row : rows) {
    std::vector<std::string> cols;
    std::stringstream ss(row);
    for (std::string col; std::getline(ss, col, '|');) cols.push_back(col);
    cols.resize(10);
    f.push_back(cols);
  }
  const std::vector<std::string> want = {
      "CM: ConnectRequest",  "CM: ConnectReply",   "CM: ReadyToUse",   "CM: DisconnectRequest",
      "CM: DisconnectReply", "CM: ConnectRequest", "CM: ConnectReject"};
  REQUIRE(f.size() == want.size());
  for (size_t i = 0; i < f.size(); ++i) {
    INFO("MAD " << i);
    CHECK(f[i][0] == want[i]);
    // UD on QP1 with the GSI Q_Key (IBA 13.5.1).
    CHECK(f[i][1] == "0x000001");
    CHECK(f[i][2] == "0x0000000080010000");
    CHECK(f[i][3] == "0x00000001");
  }
  char qpn_hex[32];
  std::snprintf(qpn_hex, sizeof qpn_hex, "0x%06x", qpn_a);
  CHECK(f[0][5] == "0x1d2f");  // service ID port 7471
  CHECK(f[0][6] == qpn_hex);
  CHECK(f[0][7] == ip_b);
  std::snprintf(qpn_hex, sizeof qpn_hex, "0x%06x", qpn_b);
  CHECK(f[1][8] == qpn_hex);
  CHECK(f[6][9] == "0x0008");  // invalid service ID
  // The REP and the RTU echo the REQ's TID; the REJ echoes the second REQ's.
  CHECK(f[1][4] == f[0][4]);
  CHECK(f[2][4] == f[0][4]);
  CHECK(f[6][4] == f[5][4]);
}

TEST_CASE("the REQ carries the active side's traffic class, hop limit, flow label and SL, and "
          "the passive QP takes them unless it asks for its own") {
  skip_without_tshark();
  TempPcap pcap;
  const char* path = pcap.path;

  std::string ip_a, ip_c;
  {
    auto fabric = make_fabric(sim::ExecMode::deterministic, path);
    Side a = make_side(fabric);
    Side b = make_side(fabric);
    Side c = make_side(fabric);
    Side d = make_side(fabric);
    ip_a = a.ip();
    ip_c = c.ip();
    Listener l = take(Listener::listen(*b.dev, "", kCmPort));
    Listener ld = take(Listener::listen(*d.dev, "", kCmPort));
    ConnectionOptions client;
    client.traffic_class = 0xb8;  // DSCP 46 (EF)
    client.hop_limit = 9;
    client.flow_label = 0x12345;
    client.sl = 3;
    // b takes the REQ's path; d, which set path_from_request = false, its own class.
    Connection ca = take(Connection::connect(*a.qp, b.ip(), kCmPort, {}, client));
    Connection cb = take(wait_event(l).request->accept(*b.qp));
    Connection cc = take(Connection::connect(*c.qp, d.ip(), kCmPort, {}, client));
    ConnectionOptions own;
    own.traffic_class = 0x68;  // DSCP 26
    own.path_from_request = false;
    Connection cd = take(wait_event(ld).request->accept(*d.qp, {}, own));
    for (Connection* conn : {&ca, &cb, &cc, &cd})
      REQUIRE(wait_event(*conn).type == ConnectionEventType::established);
    // A SEND each way on each connection.
    for (Side* s : {&a, &b, &c, &d}) REQUIRE(s->post_recv(1, 0) == Errc::ok);
    for (Side* s : {&a, &b, &c, &d}) REQUIRE(s->post_send(2, 1) == Errc::ok);
    for (Side* s : {&a, &b, &c, &d}) s->wait_completions(2);
  }

  // (The flow label is left to mad_codec's hand-computed bytes: Debian's tshark 4.0 shows the
  // word at data 88 shifted right by 20 bits where the field is its top 20, 0x123 for 0x12345.)
  const auto req = tshark(path, {"-Y", "infiniband.cm.req", "-T", "fields", "-E", "separator=|",
                                 "-e", "infiniband.cm.req.prim_tfcclass", "-e",
                                 "infiniband.cm.req.prim_hoplim", "-e",
                                 "infiniband.cm.req.prim_sl"});
  REQUIRE(req.size() >= 2);
  for (const std::string& row : req) {
    INFO(row);
    CHECK(row == "0xb8|0x09|0x03");
  }
  // The SENDs' IPv4 TOS by source: a, b and c carry the client's class, d its own.
  const auto sends = tshark(path, {"-Y", "infiniband.bth.opcode == 4", "-T", "fields", "-E",
                                   "separator=|", "-e", "ip.src", "-e", "ip.dsfield.dscp",
                                   "-e", "ip.ttl"});
  std::map<std::string, std::string> by_source;
  for (const std::string& row : sends) by_source[row.substr(0, row.find('|'))] = row;
  INFO(Catch::Detail::stringify(sends));
  REQUIRE(by_source.size() == 4);
  CHECK(by_source[ip_a] == ip_a + "|46|9");
  CHECK(by_source[ip_c] == ip_c + "|46|9");
  int passive_with_client_class = 0, passive_with_own = 0;
  for (const auto& [src, row] : by_source) {
    if (src == ip_a || src == ip_c) continue;
    if (row == src + "|46|9") ++passive_with_client_class;
    if (row == src + "|26|64") ++passive_with_own;
  }
  CHECK(passive_with_client_class == 1);
  CHECK(passive_with_own == 1);
}

TEST_CASE("over IPv6, tshark decodes the CM exchange: IPv6 frames, the primary path's GIDs and "
          "an IP version 6 rdma_cm header") {
  skip_without_tshark();
  TempPcap pcap;
  const char* path = pcap.path;
  const hw::IpAddress ip_a = take(hw::IpAddress::parse("fd00::a"));
  const hw::IpAddress ip_b = take(hw::IpAddress::parse("fd00::b"));
  uint16_t port_a = 0;
  {
    auto fabric = make_fabric(sim::ExecMode::deterministic, path);
    Side a = make_side(fabric, {}, ip_a);
    Side b = make_side(fabric, {}, ip_b);
    Listener l = take(Listener::listen(*b.dev, "::", kCmPort));
    Connection ca = take(Connection::connect(*a.qp, "fd00::b", kCmPort, bytes("hello")));
    port_a = ca.local_address().port;
    Connection cb = take(wait_event(l).request->accept(*b.qp));
    REQUIRE(wait_event(ca).type == ConnectionEventType::established);
    REQUIRE(wait_event(cb).type == ConnectionEventType::established);
    REQUIRE(a.post_recv(1, 0) == Errc::ok);
    REQUIRE(b.post_send(2, 1) == Errc::ok);
    REQUIRE(a.wait_completions(1));
  }

  // Every frame is IPv6 (nothing malformed), between the two addresses.
  const auto frames = tshark(path, {"-T", "fields", "-E", "separator=|", "-e", "eth.type", "-e",
                                    "ipv6.src", "-e", "ipv6.dst", "-e", "_ws.malformed"});
  REQUIRE(frames.size() >= 4);  // REQ, REP, RTU, the SEND (and its ACK)
  for (const std::string& row : frames) {
    INFO(row);
    CHECK((row == "0x86dd|fd00::a|fd00::b|" || row == "0x86dd|fd00::b|fd00::a|"));
  }
  const auto req = tshark(path, {"-Y", "infiniband.cm.req", "-T", "fields", "-E", "separator=|",
                                 "-e", "infiniband.cm.req.prim_localgid", "-e",
                                 "infiniband.cm.req.prim_remotegid", "-e",
                                 "infiniband.cm.req.ip_cm.ipv", "-e",
                                 "infiniband.cm.req.ip_cm.sport", "-e",
                                 "infiniband.cm.req.ip_cm.sip6", "-e",
                                 "infiniband.cm.req.ip_cm.dip6"});
  REQUIRE(req.size() == 1);
  char sport[8];
  std::snprintf(sport, sizeof sport, "0x%04x", port_a);
  CHECK(req[0] == std::string("fd00::a|fd00::b|0x06|") + sport + "|fd00::a|fd00::b");
  // The handshake, then the DREQs of the two connections' destruction.
  const auto names = tshark(path, {"-Y", "infiniband.mad", "-T", "fields", "-e", "_ws.col.Info"});
  REQUIRE(names.size() >= 3);
  CHECK(std::vector<std::string>(names.begin(), names.begin() + 3) ==
        std::vector<std::string>{"CM: ConnectRequest", "CM: ConnectReply", "CM: ReadyToUse"});
  for (size_t i = 3; i < names.size(); ++i)
    CHECK((names[i] == "CM: DisconnectRequest" || names[i] == "CM: DisconnectReply"));
}
