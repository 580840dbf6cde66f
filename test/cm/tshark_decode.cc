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

}  // namespace

TEST_CASE("tshark decodes the CM exchange in the wire's pcap as InfiniBand CM messages") {
  {
    auto probe = Child::spawn({"tshark", "-v"});
    if (!probe || probe->wait(30s) != 0) {
      std::printf("skipped: tshark is not installed\n");
      std::fflush(stdout);
      std::exit(77);
    }
  }
  char path[] = "/tmp/rnicdv-cm-XXXXXX.pcap";
  const int fd = mkstemps(path, 5);
  REQUIRE(fd >= 0);
  ::close(fd);
  struct Unlink {
    const char* p;
    ~Unlink() { ::unlink(p); }
  } unlink_pcap{path};

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
