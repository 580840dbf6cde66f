// SPDX-License-Identifier: BSD-3-Clause
// -O (perftest's --dualport) and --report-per-port end to end: the rnicperf binary in
// loopback (two-port HCAs on its own fabric) and as two processes on the default fabric
// (RNICDV_SIM_PORTS=2). Each half of the QPs is on its own port: its record carries that
// port's address, and the simulated HCA drops a frame sent to the port its QP is not on, so a
// run that completes has carried each half through its own port. Also the refusals of a
// one-port device and of a peer without -O.
#include <catch2/catch.hpp>

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "json_check.h"
#include "subprocess.h"

using namespace rnicperf_test;

namespace {

// rnicperf with `args`, the environment changed as `env` says ("NAME=value" sets, "-u NAME"
// pairs unset), through env(1).
std::vector<std::string> with_env(std::vector<std::string> env,
                                  const std::vector<std::string>& args) {
  std::vector<std::string> full = {"/usr/bin/env"};
  full.insert(full.end(), env.begin(), env.end());
  full.push_back(rnicperf_bin());
  full.insert(full.end(), args.begin(), args.end());
  return full;
}

// What env(1) is given so that the default fabric's HCAs have one port, whatever the caller's
// environment says.
const std::vector<std::string> kOnePort = {"-u", "RNICDV_SIM_PORTS", "-u", "RNICDV_SIM_PORT2_ADDR",
                                           "-u", "RNICDV_SIM_WIRE"};
const std::vector<std::string> kTwoPorts = {"-u", "RNICDV_SIM_PORT2_ADDR", "-u",
                                            "RNICDV_SIM_WIRE", "RNICDV_SIM_PORTS=2"};

// The address line's GID of an IPv4 address, as perftest prints it (decimal bytes).
std::string gid_line(const std::string& ipv4) {
  unsigned a = 0, b = 0, c = 0, d = 0;
  std::sscanf(ipv4.c_str(), "%u.%u.%u.%u", &a, &b, &c, &d);
  char line[80];
  std::snprintf(line, sizeof line, " GID: 00:00:00:00:00:00:00:00:00:00:255:255:%02u:%02u:%02u:%02u",
                a, b, c, d);
  return line;
}

// The two addresses of a two-port HCA's "Sim wire" line ("inproc A:4791, port 2 B:4791").
struct PortAddresses {
  std::string port1, port2;
};
PortAddresses sim_wire_addresses(const std::string& out) {
  PortAddresses p;
  const size_t at = out.find(" Sim wire        : ");
  if (at == std::string::npos) return p;
  const std::string line = out.substr(at, out.find('\n', at) - at);
  const size_t first = line.find(' ', std::string(" Sim wire        : ").size()) + 1;
  p.port1 = line.substr(first, line.find(':', first) - first);
  const size_t second = line.find(", port 2 ");
  if (second != std::string::npos) {
    const size_t from = second + std::string(", port 2 ").size();
    p.port2 = line.substr(from, line.find(':', from) - from);
  }
  return p;
}

// The GID line under each "<side> address:" line, in order.
std::vector<std::string> gids(const std::string& out, const char* side) {
  std::vector<std::string> found;
  const std::string head = std::string(" ") + side + " address: ";
  for (size_t at = out.find(head); at != std::string::npos; at = out.find(head, at + 1)) {
    const size_t gid = out.find('\n', at) + 1;
    found.push_back(out.substr(gid, out.find('\n', gid) - gid));
  }
  return found;
}

// The numbers of the first line of `out` that starts with " <size> ".
std::vector<double> row_of(const std::string& out, const std::string& size) {
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(" " + size + " ", 0) != 0) continue;
    std::istringstream cells(line);
    std::vector<double> v;
    double x;
    while (cells >> x) v.push_back(x);
    return v;
  }
  return {};
}

}  // namespace

TEST_CASE("-O in loopback: twice -q QPs, the first half on port 1 and the second on port 2, "
          "in write_bw, send_bw and read_bw",
          "[e2e][dual_port]") {
  for (const char* test : {"write_bw", "send_bw", "read_bw"}) {
    const std::string json = tmp_json((std::string("dual_") + test).c_str());
    ProcessResult r = run_rnicperf({test, "--loopback", "--timeout=20", "-O", "-q", "2", "-n",
                                    "100", "-s", "4096", "--out_json_file=" + json},
                                   60);
    INFO(test << "\n" << r.out << r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(r.out.find(" Dual-port       : ON\t\tDevice         : sim") != std::string::npos);
    CHECK(r.out.find(" Number of qps   : 4\t\t") != std::string::npos);
    CHECK(r.out.find(" GID index       : 3\n GID index2      : 3\n") != std::string::npos);
    const PortAddresses ports = sim_wire_addresses(r.out);
    REQUIRE(!ports.port2.empty());
    CHECK(ports.port1 != ports.port2);
    // This side's records: QPs 0 and 1 at port 1's address, 2 and 3 at port 2's.
    const std::vector<std::string> local = gids(r.out, "local");
    CHECK(local == std::vector<std::string>{gid_line(ports.port1), gid_line(ports.port1),
                                            gid_line(ports.port2), gid_line(ports.port2)});
    // The peer's: its two halves at two addresses of its own.
    const std::vector<std::string> remote = gids(r.out, "remote");
    REQUIRE(remote.size() == 4);
    CHECK(remote[0] == remote[1]);
    CHECK(remote[2] == remote[3]);
    CHECK(remote[0] != remote[2]);
    CHECK(remote[0] != local[0]);
    CHECK(remote[2] != local[2]);
    const std::vector<double> row = row_of(r.out, "4096");
    REQUIRE(row.size() == 5);
    CHECK(row[1] == 400);  // 100 per QP
    CHECK(json_query(json, "d['test_info']['Dual_port'], d['test_info']['GID_index2'], "
                           "d['test_info']['Number_of_qps']") == "ON 3 4");
    CHECK(json_query(json, "len(set(a['gid'] for a in d['local_address'][:2])), "
                           "len(set(a['gid'] for a in d['local_address']))") == "1 2");
    CHECK(json_query(json, "'BW_average_port1' in d['results'][0]") == "False");
    std::remove(json.c_str());
  }
}

TEST_CASE("-O: port 1 carries the first half's packets only (-W counts port 1's)",
          "[e2e][dual_port][counters]") {
  // 4096-byte writes at MTU 4096: one request packet each. With -O, QP 1's 100 go out through
  // port 2, so port 1 sends QP 0's 100 (and any retransmission); with -q 2 it sends all 200.
  const auto sent = [](const std::vector<std::string>& extra) -> long {
    std::vector<std::string> args = {"write_bw", "--loopback", "--timeout=20", "-n", "100", "-s",
                                     "4096", "-W", "counters/port_xmit_packets"};
    args.insert(args.end(), extra.begin(), extra.end());
    ProcessResult r = run_rnicperf(args, 60);
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    const std::string key = "\tcounters/port_xmit_packets=";
    const size_t at = r.out.find(key);
    REQUIRE(at != std::string::npos);
    return std::stol(r.out.substr(at + key.size()));
  };
  const long dual = sent({"-O"});
  CHECK(dual >= 100);
  CHECK(dual < 200);
  CHECK(sent({"-q", "2"}) >= 200);
}

TEST_CASE("--report-per-port -D 1: each port's bandwidth and message rate after the totals, in "
          "perftest's wide table, write_bw and send_bw",
          "[e2e][dual_port]") {
  // The two runs at once: a -D run lasts its second whatever the machine does.
  const std::string write_json = tmp_json("per_port_write"), send_json = tmp_json("per_port_send");
  Child write_run({rnicperf_bin(), "write_bw", "--loopback", "--timeout=20", "-O", "-D", "1",
                   "--report-per-port", "-s", "1024", "--out_json_file=" + write_json});
  Child send_run({rnicperf_bin(), "send_bw", "--loopback", "--timeout=20", "-O", "-D", "1",
                  "--report-per-port", "--report_gbits", "-s", "1024",
                  "--out_json_file=" + send_json});
  Child atomic_run({rnicperf_bin(), "atomic_bw", "--loopback", "--timeout=20", "-O", "-D", "1",
                    "--report-per-port"});
  const ProcessResult results[2] = {write_run.wait(60), send_run.wait(60)};
  {
    // atomic_bw keeps perftest's plain frame (RESULT_LINE and RESULT_FMT, atomic_bw.c); only
    // its row is per-port.
    const ProcessResult a = atomic_run.wait(60);
    INFO(a.out << a.err);
    REQUIRE(a.exit_code == 0);
    CHECK(count_lines_starting(a.out, std::string(163, '-')) == 0);
    CHECK(a.out.find(std::string(87, '-') +
                     "\n #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   "
                     "MsgRate[Mpps]\n") != std::string::npos);
    CHECK(row_of(a.out, "8").size() == 9);
  }
  const char* units[2] = {"MB/sec", "Gb/sec"};
  const std::string* jsons[2] = {&write_json, &send_json};
  for (int k = 0; k < 2; ++k) {
    const ProcessResult& r = results[k];
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    // perftest's RESULT_LINE_PER_PORT above the column header and below the rows; the header
    // block keeps its own.
    const std::string wide = std::string(163, '-') + "\n";
    const std::string unit = units[k];
    CHECK(r.out.find("\n" + wide + " #bytes     #iterations    BW peak[" + unit +
                     "]    BW average[" + unit + "]   MsgRate[Mpps]   BW Port1[" + unit +
                     "]   MsgRate Port1[Mpps]   BW Port2[" + unit +
                     "]   MsgRate Port2[Mpps]\n") != std::string::npos);
    CHECK(count_lines_starting(r.out, std::string(163, '-')) == 2);
    CHECK(r.out.rfind(wide) + wide.size() == r.out.size());
    const std::vector<double> row = row_of(r.out, "1024");
    REQUIRE(row.size() == 9);
    // Traffic through both ports, and the shares add up to the total (each printed rounded).
    CHECK(row[5] > 0);
    CHECK(row[7] > 0);
    CHECK(row[5] + row[7] == Approx(row[3]).margin(0.011));
    CHECK(row[6] + row[8] == Approx(row[4]).margin(2.1e-6));
    // The row is perftest's REPORT_FMT_PER_PORT of its own figures.
    char perftest[256];
    std::snprintf(perftest, sizeof perftest,
                  " %-7lu    %-10" PRIu64
                  "     %-7.2lf            %-7.2lf\t\t   %-7.6lf        %-7.2lf            "
                  "%-7.6lf              %-7.2lf            %-7.6lf\n",
                  1024ul, static_cast<uint64_t>(row[1]), row[2], row[3], row[4], row[5], row[6],
                  row[7], row[8]);
    CHECK(r.out.find(perftest) != std::string::npos);
    CHECK(json_query(*jsons[k],
                     "abs(d['results'][0]['BW_average_port1'] + "
                     "d['results'][0]['BW_average_port2'] - d['results'][0]['BW_average']) < 1e-4 "
                     "and d['results'][0]['MsgRate_port2'] > 0") == "True");
    std::remove(jsons[k]->c_str());
  }
}

TEST_CASE("-O as two processes on the default fabric (RNICDV_SIM_PORTS=2): each record carries "
          "its own port's GID and the peer's QP of that half connects to it",
          "[e2e][dual_port][udp]") {
  const std::string port = std::to_string(free_port());
  const std::vector<std::string> args = {"send_bw", "-O", "-n", "100", "-s", "4096", "-p", port,
                                         "--timeout=20"};
  Child server(with_env(kTwoPorts, args));
  std::vector<std::string> client_args = args;
  client_args.insert(client_args.end(), {"--retry-connect", "127.0.0.1"});
  Child client(with_env(kTwoPorts, client_args));
  const ProcessResult c = client.wait(60), s = server.wait(60);
  INFO("server:\n" << s.out << s.err << "\nclient:\n" << c.out << c.err);
  REQUIRE(c.exit_code == 0);
  REQUIRE(s.exit_code == 0);
  for (const ProcessResult* side : {&s, &c}) {
    const PortAddresses ports = sim_wire_addresses(side->out);
    CHECK(side->out.find(" Sim wire        : udp 127.0.0.") != std::string::npos);
    REQUIRE(!ports.port2.empty());
    CHECK(gids(side->out, "local") ==
          std::vector<std::string>{gid_line(ports.port1), gid_line(ports.port2)});
  }
  // What each side received is what the other sent, QP by QP.
  CHECK(gids(c.out, "remote") == gids(s.out, "local"));
  CHECK(gids(s.out, "remote") == gids(c.out, "local"));
  CHECK(row_of(c.out, "4096").size() == 5);
  CHECK(row_of(s.out, "4096").size() == 5);
}

TEST_CASE("-O is refused on a one-port device, naming it, before the server listens; -O on one "
          "side only is a mismatch named on both",
          "[e2e][dual_port][errors]") {
  const std::string port = std::to_string(free_port());
  Child dual(with_env(kOnePort, {"write_bw", "-O", "-p", port, "--timeout=5"}));
  Child port2(with_env(kOnePort, {"write_bw", "-i", "2", "-p", port, "--timeout=5"}));
  const ProcessResult d = dual.wait(30), p = port2.wait(30);
  INFO(d.out << d.err << "\n" << p.out << p.err);
  CHECK(d.exit_code == 1);
  CHECK(d.err ==
        "rnicperf: -O: Unable to query port 2 attributes: sim0 has 1 port (port 1), and "
        "dual-port mode puts the second half of the QPs on port 2 (a simulated HCA has two with "
        "RNICDV_SIM_PORTS=2)\n");
  CHECK(d.out.find("Waiting for client") == std::string::npos);
  CHECK(p.exit_code == 1);
  CHECK(p.err == "rnicperf: -i 2: Unable to query port 2 attributes: sim0 has 1 port (port 1)\n");

  const std::string port_b = std::to_string(free_port());
  Child server(with_env(kTwoPorts, {"write_bw", "-O", "-n", "100", "-p", port_b, "--timeout=20"}));
  Child client(with_env(kTwoPorts, {"write_bw", "-n", "100", "-p", port_b, "--timeout=20",
                                    "--retry-connect", "127.0.0.1"}));
  const ProcessResult c = client.wait(60), s = server.wait(60);
  INFO("server:\n" << s.out << s.err << "\nclient:\n" << c.out << c.err);
  CHECK(s.exit_code == 1);
  CHECK(c.exit_code == 1);
  CHECK(s.err == "rnicperf: parameter mismatch: dual port (-O) local=on remote=off\n");
  CHECK(c.err == "rnicperf: parameter mismatch: dual port (-O) local=off remote=on\n");
}
