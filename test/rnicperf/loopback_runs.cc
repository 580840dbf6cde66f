// SPDX-License-Identifier: BSD-3-Clause
// Every subcommand end to end in one process (--loopback, two simulated HCAs), with the
// JSON report parsed back by an independent parser.
#include <catch2/catch.hpp>

#include <algorithm>
#include <csignal>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "json_check.h"
#include "subprocess.h"

using namespace rnicperf_test;

namespace {
void check_run(const std::string& test, std::vector<std::string> extra, bool latency) {
  std::string json = tmp_json(test.c_str());
  std::vector<std::string> args = {test, "--loopback", "--timeout=20", "--out_json_file=" + json};
  args.insert(args.end(), extra.begin(), extra.end());
  ProcessResult r = run_rnicperf(args, 120);
  INFO(test << " stdout:\n" << r.out << "\nstderr:\n" << r.err);
  REQUIRE_FALSE(r.timed_out);
  REQUIRE(r.exit_code == 0);
  if (latency) {
    CHECK(r.out.find(" #bytes #iterations    t_min[usec]") != std::string::npos);
  } else {
    CHECK(r.out.find(" #bytes     #iterations    BW peak[") != std::string::npos);
  }
  CHECK(r.out.find(" local address: LID 0000 QPN ") != std::string::npos);
  CHECK(r.out.find(" remote address: LID 0000 QPN ") != std::string::npos);
  CHECK(r.out.find(" GID: 00:00:00:00:00:00:00:00:00:00:255:255:127:") != std::string::npos);
  CHECK(r.out.find(" Sim wire        : inproc ") != std::string::npos);
  CHECK(json_query(json, "len(d['results'])") == "1");
  CHECK(json_query(json, "d['test_info']['rnicperf_test']") == test);
  if (latency) {
    CHECK(json_query(json,
                     "d['results'][0]['t_min'] > 0 and "
                     "d['results'][0]['t_min'] <= d['results'][0]['t_typical'] <= "
                     "d['results'][0]['t_max']") == "True");
  } else {
    CHECK(json_query(json, "d['results'][0]['BW_average'] > 0") == "True");
  }
  std::remove(json.c_str());
}
}  // namespace

TEST_CASE("write_lat runs in loopback", "[e2e]") {
  check_run("write_lat", {"-n", "50"}, true);
}
TEST_CASE("send_lat runs in loopback", "[e2e]") {
  check_run("send_lat", {"-n", "50"}, true);
}
TEST_CASE("read_lat runs in loopback", "[e2e]") {
  check_run("read_lat", {"-n", "50"}, true);
}
TEST_CASE("atomic_lat runs in loopback", "[e2e]") {
  check_run("atomic_lat", {"-n", "50"}, true);
}
TEST_CASE("write_bw runs in loopback", "[e2e]") {
  check_run("write_bw", {"-n", "100", "-s", "4096"}, false);
}
TEST_CASE("send_bw runs in loopback", "[e2e]") {
  check_run("send_bw", {"-n", "100", "-s", "4096"}, false);
}
TEST_CASE("read_bw runs in loopback", "[e2e]") {
  check_run("read_bw", {"-n", "100", "-s", "4096"}, false);
}
TEST_CASE("atomic_bw runs in loopback", "[e2e]") {
  check_run("atomic_bw", {"-n", "100"}, false);
}

TEST_CASE("bidirectional multi-QP post-list bandwidth runs", "[e2e]") {
  check_run("write_bw", {"-n", "64", "-s", "1024", "-b", "-q", "2", "-l", "4", "--report_gbits"},
            false);
}

TEST_CASE("an -a sweep keeps every size in the JSON report and reports progress", "[e2e]") {
  std::string json = tmp_json("sweep");
  ProcessResult r = run_rnicperf({"write_lat", "--loopback", "-a", "--sweep-max=64", "-n", "20",
                                  "--timeout=20", "--out_json_file=" + json},
                                 120);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(json_query(json, "[r['MsgSize'] for r in d['results']]") == "[2, 4, 8, 16, 32, 64]");
  CHECK(count_lines_starting(r.err, "rnicperf: write_lat: ") == 6);
  CHECK(r.err.find("rnicperf: write_lat: 64 bytes done (6/6)") != std::string::npos);
  std::remove(json.c_str());
}

TEST_CASE("an -a sweep runs every size of every test, receives carried across sizes",
          "[e2e]") {
  // SEND tests consume receives: each size must start with the receive queue full again and
  // with receives large enough for it (a leftover from a smaller size used to be too small,
  // or the queue empty: "no completion for 5 s").
  for (const char* test : {"send_bw", "send_lat", "write_bw", "write_lat", "read_bw", "read_lat"}) {
    std::string json = tmp_json((std::string("sweep_") + test).c_str());
    ProcessResult r = run_rnicperf({test, "--loopback", "-a", "--sweep-max=64", "-n", "20",
                                    "--timeout=20", "--out_json_file=" + json},
                                   120);
    INFO(test << "\n" << r.out << r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(json_query(json, "[r['MsgSize'] for r in d['results']]") == "[2, 4, 8, 16, 32, 64]");
    std::remove(json.c_str());
  }
  for (const char* test : {"atomic_bw", "atomic_lat"}) {
    ProcessResult r = run_rnicperf({test, "--loopback", "-a", "-n", "20"}, 60);
    INFO(test << "\n" << r.out << r.err);
    CHECK(r.exit_code != 0);
    CHECK(r.err.find("-a is not available: atomics are 8 bytes") != std::string::npos);
  }
}

TEST_CASE("early posting reports the batch withheld in RTR beside one posted after RTS",
          "[e2e][early-post]") {
  for (const char* test : {"write_lat", "send_bw"}) {
    std::string json = tmp_json(test);
    ProcessResult r = run_rnicperf({test, "--loopback", "-n", "40", "-s", "64", "--early-post=8",
                                    "--timeout=20", "--out_json_file=" + json},
                                   120);
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(r.out.find(" #posts     posted       withheld     t_first[usec]    t_last[usec]") !=
          std::string::npos);
    CHECK(r.out.find(" 8          in RTR       8  ") != std::string::npos);
    CHECK(r.out.find(" 8          after RTS    0  ") != std::string::npos);
    CHECK(json_query(json, "d['early_post']['posted_in_rtr']['withheld_at_rts']") == "8");
    CHECK(json_query(json, "d['early_post']['posted_in_rtr']['t_last_usec'] > 0") == "True");
    std::remove(json.c_str());
  }
}

TEST_CASE("the histogram is printed and kept in the JSON report", "[e2e][histogram]") {
  std::string json = tmp_json("hist");
  ProcessResult r = run_rnicperf({"read_lat", "--loopback", "-n", "60", "--histogram",
                                  "--timeout=20", "--out_json_file=" + json},
                                 120);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find(" Latency histogram [usec, round trip; 59 samples, none dropped]") !=
        std::string::npos);
  CHECK(json_query(json, "sum(b['count'] for b in d['results'][0]['histogram']['buckets'])") ==
        "59");
  std::remove(json.c_str());
}

TEST_CASE("duration mode measures the middle window", "[e2e][duration]") {
  ProcessResult r =
      run_rnicperf({"write_bw", "--loopback", "-D", "2", "-s", "1024", "--timeout=20"}, 120);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find(" 1024       ") != std::string::npos);
  CHECK(r.err.find("rnicperf: write_bw: 1/2 s, ") != std::string::npos);

  ProcessResult lat = run_rnicperf({"send_lat", "--loopback", "-D", "2", "--timeout=20"}, 120);
  INFO(lat.out << lat.err);
  REQUIRE(lat.exit_code == 0);
  CHECK(lat.out.find(" #bytes        #iterations       t_avg[usec]    tps average") !=
        std::string::npos);
}

TEST_CASE("with -z the control channel is SENDs on a QP the CM connects, with -R too",
          "[e2e][cm]") {
  check_run("send_lat", {"-n", "50", "-z"}, true);
  check_run("write_bw", {"-n", "100", "-z"}, false);
  // 40 QPs' records (4320 bytes) are more than one receive of the channel takes: the message
  // goes as two SENDs and arrives whole.
  check_run("write_bw", {"-n", "20", "-s", "4096", "-q", "40", "-z"}, false);
  std::string json = tmp_json("z");
  for (const char* test : {"read_lat", "send_bw"}) {
    ProcessResult r = run_rnicperf({test, "--loopback", "-z", "-R", "-n", "100", "--timeout=20",
                                    "--out_json_file=" + json},
                                   120);
    INFO(test << "\n" << r.out << r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(r.out.find(" rdma_cm QPs\t : ON\n") != std::string::npos);
    CHECK(r.out.find(" Data ex. method : rdma_cm\n") != std::string::npos);
    CHECK(json_query(json, "d['test_info']['Data_ex_method']") == "rdma_cm");
  }
  std::remove(json.c_str());
  // Without -z the channel is TCP's ("Ethernet").
  ProcessResult tcp = run_rnicperf({"write_lat", "--loopback", "-n", "20", "--timeout=20"}, 120);
  REQUIRE(tcp.exit_code == 0);
  CHECK(tcp.out.find(" Data ex. method : Ethernet\n") != std::string::npos);
}

TEST_CASE("-R connects the test QP through the connection manager", "[e2e][cm]") {
  check_run("read_lat", {"-n", "50", "-R"}, true);
  ProcessResult r = run_rnicperf(
      {"write_bw", "--loopback", "-R", "-n", "100", "-s", "4096", "--timeout=20"}, 120);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find(" rdma_cm QPs\t : ON\n") != std::string::npos);
}

TEST_CASE("first-reply times fresh connections for each way the server replies, with the RTU "
          "delivered and lost",
          "[e2e][cm]") {
  for (const char* poll : {"--cm-poll-us=0", "--cm-poll-us=2000"}) {
    std::string json = tmp_json("first_reply");
    ProcessResult r = run_rnicperf({"send_lat", "--loopback", "--first-reply=6", poll,
                                    "--timeout=20", "--out_json_file=" + json},
                                   120);
    INFO(poll << " stdout:\n" << r.out << "\nstderr:\n" << r.err);
    REQUIRE_FALSE(r.timed_out);
    REQUIRE(r.exit_code == 0);
    CHECK(r.out.find(" First reply on a fresh connection") != std::string::npos);
    CHECK(r.out.find(" 6        early post   delivered ") != std::string::npos);
    CHECK(r.out.find(" 6        own queue    delivered ") != std::string::npos);
    CHECK(r.out.find(" 6        early post   lost ") != std::string::npos);
    CHECK(r.out.find(" 6        own queue    lost ") != std::string::npos);
    CHECK(json_query(json, "len(d['rows'])") == "4");
    CHECK(json_query(json, "all(0 < x['t_median_us'] <= x['t_p90_us'] <= x['t_p99_us'] "
                           "for x in d['rows'])") == "True");
    // The own queue never releases a reply before the server reads ESTABLISHED.
    CHECK(json_query(json, "[x['released_before_event'] for x in d['rows'] "
                           "if x['reply'] == 'own queue']") == "[0, 0]");
    if (std::string(poll) == "--cm-poll-us=2000") {
      // A server that reads CM events every 2 ms: with the RTU delivered, an early post
      // leaves at the RTU, before the server reads ESTABLISHED (which a QP that moved to RTS
      // only at that read could never do). Times are not compared: this machine may be slow.
      CHECK(json_query(json, "d['rows'][0]['released_before_event'] >= 1") == "True");
      CHECK(json_query(json, "d['ratio_early_vs_queue_rtu'] > 0") == "True");
    }
    std::remove(json.c_str());
  }
}

TEST_CASE("when one loopback end cannot open its device, that cause is reported at once",
          "[e2e]") {
  // Both ends given the same address on the UDP wire: the second device cannot attach. The
  // other end must not wait out --timeout for a hello and then blame the peer's silence.
  setenv("RNICDV_SIM_WIRE", "udp", 1);
  setenv("RNICDV_SIM_ADDR", "127.0.0.93,127.0.0.93", 1);
  const auto t0 = std::chrono::steady_clock::now();
  ProcessResult r = run_rnicperf({"write_lat", "--loopback", "-d", "sim0", "-n", "10",
                                  "--timeout=60"},
                                 120);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  unsetenv("RNICDV_SIM_WIRE");
  unsetenv("RNICDV_SIM_ADDR");
  INFO("stdout:\n" << r.out << "\nstderr:\n" << r.err);
  REQUIRE_FALSE(r.timed_out);
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("address in use") != std::string::npos);
  CHECK(r.err.find("no answer from loopback peer") == std::string::npos);
  // Not after the 60 s --timeout: the failure ends both ends (a wide margin for a slow machine).
  CHECK(seconds < 30);
}

TEST_CASE("--output prints one number per size, and -x names only the device's GID", "[e2e]") {
  ProcessResult bw = run_rnicperf(
      {"write_bw", "--loopback", "-a", "--sweep-max=8", "-n", "50", "--output=bandwidth"}, 60);
  INFO(bw.out << bw.err);
  REQUIRE(bw.exit_code == 0);
  // Three sizes, three lines, each one number as perftest prints it ("%lf").
  std::istringstream lines(bw.out);
  std::string line;
  int n = 0;
  while (std::getline(lines, line)) {
    ++n;
    CHECK(line.find_first_not_of("0123456789.") == std::string::npos);
    CHECK(line.find('.') == line.size() - 7);
  }
  CHECK(n == 3);

  ProcessResult lat = run_rnicperf({"write_lat", "--loopback", "-n", "50", "--output=latency"}, 60);
  INFO(lat.out << lat.err);
  REQUIRE(lat.exit_code == 0);
  CHECK(std::count(lat.out.begin(), lat.out.end(), '\n') == 1);

  ProcessResult gid = run_rnicperf({"write_lat", "--loopback", "-n", "10", "-x", "3"}, 60);
  CHECK(gid.exit_code == 0);
  CHECK(gid.out.find(" GID index       : 3\n") != std::string::npos);
  ProcessResult bad = run_rnicperf({"write_lat", "--loopback", "-n", "10", "-x", "0"}, 60);
  CHECK(bad.exit_code != 0);
  CHECK(bad.err.find("-x 0: sim") != std::string::npos);
  CHECK(bad.err.find("sends from GID index 3 only") != std::string::npos);
}

TEST_CASE("--perform_warm_up measures only the iterations asked for", "[e2e]") {
  std::string json = tmp_json("warm_up");
  ProcessResult r = run_rnicperf({"write_bw", "--loopback", "-n", "200", "--perform_warm_up",
                                  "--out_json_file=" + json},
                                 60);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(json_query(json, "[x['n_iterations'] for x in d['results']]") == "[200]");
  std::remove(json.c_str());
}

TEST_CASE("--use_hugepages puts the buffers on huge pages, or says why it cannot", "[e2e]") {
  std::ifstream f("/proc/sys/vm/nr_hugepages");
  long reserved = 0;
  f >> reserved;
  ProcessResult r = run_rnicperf({"write_bw", "--loopback", "-n", "100", "--use_hugepages"}, 60);
  INFO(r.out << r.err);
  if (reserved == 0) {
    CHECK(r.exit_code != 0);
    CHECK(r.err.find("--use_hugepages: cannot map") != std::string::npos);
    CHECK(r.err.find("sysctl vm.nr_hugepages") != std::string::npos);
  } else if (r.exit_code == 0) {
    CHECK(r.out.find(" Buffers         : 2 MiB huge pages (--use_hugepages)\n") !=
          std::string::npos);
  } else {
    // Reserved, but taken by someone else: still a clear reason.
    CHECK(r.err.find("--use_hugepages: cannot map") != std::string::npos);
  }
}

TEST_CASE("-e sleeps on completion events and says so in the header", "[e2e][events]") {
  for (const char* test : {"send_lat", "read_lat", "send_bw", "atomic_bw"}) {
    std::string json = tmp_json("events");
    // As perftest's -e, every poll first takes a completion event (and arms the CQ again), so
    // the count is never 0 however fast the device completes: before, a poll that found
    // completions never slept, and on a loaded machine a whole run could take no event.
    std::vector<std::string> args{test, "--loopback", "-e", "-n", "1000", "--timeout=20",
                                  "--out_json_file=" + json};
    if (std::string(test).ends_with("_bw")) args.insert(args.end(), {"-t", "10"});
    ProcessResult r = run_rnicperf(args, 120);
    INFO(test << " stdout:\n" << r.out << "\nstderr:\n" << r.err);
    REQUIRE_FALSE(r.timed_out);
    REQUIRE(r.exit_code == 0);
    CHECK(r.out.find("\n Test with events. Using sim") != std::string::npos);
    CHECK(json_query(json, "len(d['results'])") == "1");
    // The measuring side slept on the channel: events were taken and acknowledged.
    CHECK(json_query(json, "d['test_info']['Completion_events'] > 0") == "True");
    std::remove(json.c_str());
  }
}

namespace {
// The rows of a bandwidth table (lines that start with the size).
std::vector<std::string> rows_of(const std::string& out, const std::string& size) {
  std::vector<std::string> rows;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(" " + size + " ", 0) == 0) rows.push_back(line);
  return rows;
}
// perftest's REPORT_FMT fields: size, iterations, peak, average, message rate (and CPU).
std::vector<double> fields_of(const std::string& row) {
  std::istringstream in(row);
  std::vector<double> v;
  double x = 0;
  while (in >> x) v.push_back(x);
  return v;
}
}  // namespace

TEST_CASE("--run_infinitely prints a row every interval until stopped", "[e2e][run_infinitely]") {
  const std::string json = tmp_json("run_infinitely");
  ProcessResult r = run_rnicperf({"write_bw", "--loopback", "--run_infinitely", "-D", "1",
                                  "--stop-after=3", "-s", "1024", "--timeout=20",
                                  "--out_json_file=" + json},
                                 120);
  INFO(r.out << r.err);
  REQUIRE_FALSE(r.timed_out);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find(" #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   "
                   "MsgRate[Mpps]\n") != std::string::npos);
  const auto rows = rows_of(r.out, "1024");
  REQUIRE(rows.size() == 3);
  for (const auto& row : rows) {
    const auto f = fields_of(row);
    REQUIRE(f.size() == 5);
    CHECK(f[1] > 0);    // operations of the interval
    CHECK(f[2] == 0);   // no peak, as perftest
    CHECK(f[3] > 0);    // BW average
    CHECK(f[4] > 0);    // MsgRate
  }
  const size_t stopped = r.out.find("\n User stopped traffic\n");
  REQUIRE(stopped != std::string::npos);
  CHECK(r.out.find(rows.back()) < stopped);
  CHECK(r.out.substr(stopped).find(std::string(87, '-')) != std::string::npos);
  // No -D progress lines on stderr: the rows are the progress.
  CHECK(r.err.find("1/1 s") == std::string::npos);
  // The JSON keeps every interval's row.
  CHECK(json_query(json, "len(d['results'])") == "3");
  CHECK(json_query(json, "all(x['BW_average'] > 0 and x['BW_peak'] == 0 for x in d['results'])") ==
        "True");
  std::remove(json.c_str());
}

namespace {
// An endless loopback run stopped by --stop-after=2 (-D 1, -s 1024 or atomics' 8): two
// interval rows, each
// with perftest's fields and no peak, then perftest's stop line, and the two rows in the
// JSON. The first interval lasts at least its second (the printer never wakes early), so its
// message rate over its operations is at most `factor` per second and, unless the wake was
// late by as much again, above factor / 2: perftest doubles a -b row's rate (factor 2).
void check_endless_loopback(std::vector<std::string> args, double factor) {
  const std::string json = tmp_json("endless");
  const std::string size = args[0] == "atomic_bw" ? "8" : "1024";
  args.insert(args.end(), {"--loopback", "--run_infinitely", "-D", "1", "--stop-after=2", "-s",
                           size, "--timeout=20", "--out_json_file=" + json});
  ProcessResult r = run_rnicperf(args, 120);
  INFO(r.out << r.err);
  REQUIRE_FALSE(r.timed_out);
  REQUIRE(r.exit_code == 0);
  const auto rows = rows_of(r.out, size);
  REQUIRE(rows.size() == 2);
  for (const auto& row : rows) {
    const auto f = fields_of(row);
    REQUIRE(f.size() == 5);
    CHECK(f[1] > 0);   // operations of the interval
    CHECK(f[2] == 0);  // no peak
    CHECK(f[3] > 0);
    // The bandwidth is the message rate times the size, in MB (2^20 bytes).
    CHECK(std::fabs(f[3] - f[4] * 1e6 * f[0] / 1048576.0) <= 0.01 * f[3] + 0.01);
  }
  const auto first = fields_of(rows[0]);
  const double per_second = first[4] * 1e6 / first[1];
  CHECK(per_second <= factor * 1.01);
  CHECK(per_second > factor / 2);
  const size_t stopped = r.out.find("\n User stopped traffic\n");
  REQUIRE(stopped != std::string::npos);
  CHECK(r.out.find(rows.back()) < stopped);
  CHECK(json_query(json, "len(d['results'])") == "2");
  CHECK(json_query(json, "all(x['BW_average'] > 0 and x['BW_peak'] == 0 for x in d['results'])") ==
        "True");
  std::remove(json.c_str());
}
}  // namespace

TEST_CASE("an endless send_bw: the sender prints its rows, stopped, the receiver drains and ends",
          "[e2e][run_infinitely]") {
  // The client sends; the quiet loopback server receives, refilling its receive queue, and
  // both end on the client's stop.
  check_endless_loopback({"send_bw"}, 1.0);
  // Reversed: the client receives and prints the rows of what arrives; its stop ends the
  // server's sends.
  check_endless_loopback({"send_bw", "--reversed", "-r", "64", "--recv_post_list=4"}, 1.0);
}

TEST_CASE("an endless -b run: both sides post, each row doubled as perftest's",
          "[e2e][run_infinitely]") {
  for (const char* test : {"write_bw", "read_bw", "atomic_bw"}) {
    INFO(test);
    check_endless_loopback({test, "-b"}, 2.0);
  }
}

TEST_CASE("--run_infinitely stops cleanly on SIGINT and on SIGTERM", "[e2e][run_infinitely]") {
  for (int sig : {SIGINT, SIGTERM}) {
    Child c({rnicperf_bin(), "read_bw", "--loopback", "--run_infinitely", "-D", "1", "-s", "512",
             "--timeout=20"});
    // Two interval rows, then the signal.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
    while (rows_of(c.out_so_far(), "512").size() < 2 &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    c.signal(sig);
    ProcessResult r = c.wait(60);
    INFO("signal " << sig << "\n" << r.out << r.err);
    REQUIRE_FALSE(r.timed_out);
    CHECK(r.exit_code == 0);
    CHECK(rows_of(r.out, "512").size() >= 2);
    CHECK(r.out.find("\n User stopped traffic\n") != std::string::npos);
  }
}

TEST_CASE("--cpu_util prints perftest's CPU_Util column in duration mode", "[e2e][cpu_util]") {
  const std::string json = tmp_json("cpu_util");
  ProcessResult bw = run_rnicperf({"write_bw", "--loopback", "-D", "2", "--cpu_util", "-s",
                                   "1024", "--timeout=20", "--out_json_file=" + json},
                                  120);
  INFO(bw.out << bw.err);
  REQUIRE(bw.exit_code == 0);
  // perftest's JSON key, beside the row's figures.
  CHECK(json_query(json, "0 <= d['results'][0]['CPU_util'] <= 100") == "True");
  std::remove(json.c_str());
  CHECK(bw.out.find("MsgRate[Mpps]    CPU_Util[%]\n") != std::string::npos);
  auto rows = rows_of(bw.out, "1024");
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].find("\t    ") != std::string::npos);
  auto f = fields_of(rows[0]);
  REQUIRE(f.size() == 6);
  // perftest's figure counts `user` time only: a run under `nice` (its time is `nice` time)
  // on an otherwise idle machine can read 0, so only the range is checked here; the maths is
  // checked in report_format.
  CHECK(f[5] >= 0);
  CHECK(f[5] <= 100);

  ProcessResult lat =
      run_rnicperf({"send_lat", "--loopback", "-D", "2", "--cpu_util", "--timeout=20"}, 120);
  INFO(lat.out << lat.err);
  REQUIRE(lat.exit_code == 0);
  CHECK(lat.out.find(" #bytes        #iterations       t_avg[usec]    tps average    CPU_Util[%]\n") !=
        std::string::npos);
  rows = rows_of(lat.out, "2");
  REQUIRE(rows.size() == 1);
  f = fields_of(rows[0]);
  REQUIRE(f.size() == 5);
  CHECK(f[4] >= 0);
  CHECK(f[4] <= 100);

  ProcessResult inf = run_rnicperf({"write_bw", "--loopback", "--run_infinitely", "-D", "1",
                                    "--stop-after=2", "--cpu_util", "-s", "1024", "--timeout=20"},
                                   120);
  INFO(inf.out << inf.err);
  REQUIRE(inf.exit_code == 0);
  rows = rows_of(inf.out, "1024");
  REQUIRE(rows.size() == 2);
  for (const auto& row : rows) {
    f = fields_of(row);
    REQUIRE(f.size() == 6);
    CHECK(f[5] >= 0);
    CHECK(f[5] <= 100);
  }
}

TEST_CASE("--report-both prints the sum, then the local and the remote direction",
          "[e2e][report_both]") {
  ProcessResult r = run_rnicperf(
      {"write_bw", "--loopback", "-b", "--report-both", "-n", "400", "-s", "4096", "--timeout=20"},
      120);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  const size_t local = r.out.find("\n Local results: \n");
  const size_t remote = r.out.find("\n Remote results: \n");
  REQUIRE(local != std::string::npos);
  REQUIRE(remote != std::string::npos);
  CHECK(local < remote);
  const std::string header =
      " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n";
  CHECK(count_lines_starting(r.out, header.substr(0, header.size() - 1)) == 3);
  const auto rows = rows_of(r.out, "4096");
  REQUIRE(rows.size() == 3);  // the sum, local, remote
  const auto sum = fields_of(rows[0]), mine = fields_of(rows[1]), theirs = fields_of(rows[2]);
  REQUIRE(sum.size() == 5);
  REQUIRE(mine.size() == 5);
  REQUIRE(theirs.size() == 5);
  CHECK(mine[3] > 0);
  CHECK(theirs[3] > 0);
  CHECK(sum[3] == Approx(mine[3] + theirs[3]).epsilon(0.01));
  CHECK(r.out.find(rows[1]) > local);
  CHECK(r.out.find(rows[2]) > remote);
}

namespace {
// The blocks of "<n>, <value>" lines under each "#, <unit>" line of a -U or -H dump.
std::vector<std::vector<double>> dump_blocks(const std::string& out, const std::string& unit) {
  std::vector<std::vector<double>> blocks;
  std::istringstream in(out);
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    if (line == "#, " + unit) {
      blocks.emplace_back();
      inside = true;
      continue;
    }
    const size_t comma = line.find(", ");
    if (!inside || comma == std::string::npos || line[0] < '0' || line[0] > '9') {
      inside = false;
      continue;
    }
    // Numbered from 1, in order.
    CHECK(std::stoul(line.substr(0, comma)) == blocks.back().size() + 1);
    blocks.back().push_back(std::stod(line.substr(comma + 2)));
  }
  return blocks;
}
}  // namespace

TEST_CASE("--reversed: the server posts every bandwidth test's operations, the client is "
          "posted to",
          "[e2e][reversed]") {
  for (const char* test : {"write_bw", "read_bw", "atomic_bw", "send_bw"}) {
    const bool atomic = std::string(test) == "atomic_bw";
    const bool send = std::string(test) == "send_bw";
    std::string json = tmp_json((std::string("reversed_") + test).c_str());
    std::vector<std::string> args = {test, "--loopback", "--reversed", "-n", "100",
                                     "--timeout=20", "--out_json_file=" + json};
    if (!atomic) args.insert(args.end(), {"-s", "4096"});
    ProcessResult r = run_rnicperf(args, 120);
    INFO(test << "\n" << r.out << r.err);
    REQUIRE(r.exit_code == 0);
    // The loopback process prints its client's report: the side that does not post, so its
    // header has no TX depth (and a SEND receiver's RX depth), as perftest's SERVER machine.
    CHECK(r.out.find(" TX depth ") == std::string::npos);
    CHECK(count_lines_starting(r.out, atomic ? " 8 " : " 4096 ") == 1);
    CHECK(json_query(json, "d['results'][0]['BW_average'] > 0") == "True");
    if (send) {
      CHECK(r.out.find(" RX depth        : 100\n") != std::string::npos);
      // It received them: 100 receives, one post call each without --recv_post_list.
      CHECK(json_query(json, "d['test_info']['Receive_post_calls']") == "100");
    }
    std::remove(json.c_str());
  }
  // Not reversed, the same client posts.
  ProcessResult plain = run_rnicperf({"send_bw", "--loopback", "-n", "100", "-s", "4096"}, 120);
  INFO(plain.out << plain.err);
  REQUIRE(plain.exit_code == 0);
  CHECK(plain.out.find(" TX depth        : 100\n") != std::string::npos);
  CHECK(plain.out.find(" RX depth ") == std::string::npos);
}

TEST_CASE("--reversed runs endless and duration-mode runs the other way round",
          "[e2e][reversed]") {
  ProcessResult endless = run_rnicperf({"write_bw", "--loopback", "--reversed",
                                        "--run_infinitely", "-D", "1", "--stop-after=2", "-s",
                                        "1024", "--timeout=20"},
                                       120);
  INFO(endless.out << endless.err);
  REQUIRE(endless.exit_code == 0);
  // The client waits on its channel and is told of the end, as perftest's server is.
  CHECK(endless.out.find(" Client closed connection") != std::string::npos);

  ProcessResult duration = run_rnicperf(
      {"send_bw", "--loopback", "--reversed", "-D", "2", "-s", "1024", "--timeout=20"}, 120);
  INFO(duration.out << duration.err);
  REQUIRE(duration.exit_code == 0);
  CHECK(count_lines_starting(duration.out, " 1024 ") == 1);
}

TEST_CASE("--recv_post_list posts the receives in lists, one call each", "[e2e][recv_post_list]") {
  // The client receives (--reversed) and writes the report: 32 receives at the start in 4
  // lists of 8, then 64 more in 8 lists as they are consumed: 12 calls for 96 receives.
  std::string json = tmp_json("recv_list");
  ProcessResult r = run_rnicperf({"send_bw", "--loopback", "--reversed", "-n", "96", "-r", "32",
                                  "-s", "1024", "--recv_post_list=8", "--timeout=20",
                                  "--out_json_file=" + json},
                                 120);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find(" Recv Post List  : 8\n RX depth        : 32\n") != std::string::npos);
  CHECK(count_lines_starting(r.out, " 1024 ") == 1);
  CHECK(json_query(json, "d['test_info']['Recv_Post_List']") == "8");
  CHECK(json_query(json, "d['test_info']['Receive_post_calls']") == "12");
  CHECK(json_query(json, "d['results'][0]['n_iterations']") == "96");

  // One receive per call without it: 96.
  ProcessResult one = run_rnicperf({"send_bw", "--loopback", "--reversed", "-n", "96", "-r", "32",
                                    "-s", "1024", "--timeout=20", "--out_json_file=" + json},
                                   120);
  INFO(one.out << one.err);
  REQUIRE(one.exit_code == 0);
  CHECK(one.out.find("Recv Post List") == std::string::npos);
  CHECK(json_query(json, "d['test_info']['Receive_post_calls']") == "96");

  // A sweep, both sides receiving (-b): each size starts with 8 receives (2 lists of 4) and
  // refills 12 more in 3 lists: 5 calls a size, 30 for the six sizes.
  ProcessResult sweep = run_rnicperf({"send_bw", "--loopback", "-b", "-a", "--sweep-max=64",
                                      "-n", "20", "-r", "8", "--recv_post_list=4", "--timeout=20",
                                      "--out_json_file=" + json},
                                     120);
  INFO(sweep.out << sweep.err);
  REQUIRE(sweep.exit_code == 0);
  CHECK(json_query(json, "[r['MsgSize'] for r in d['results']]") == "[2, 4, 8, 16, 32, 64]");
  CHECK(json_query(json, "d['test_info']['Receive_post_calls']") == "30");

  // Duration mode refills lists for as long as the run lasts (7 does not divide the depth).
  ProcessResult dur = run_rnicperf({"send_bw", "--loopback", "--reversed", "-D", "2", "-s",
                                    "1024", "-r", "30", "--recv_post_list=7", "--timeout=20"},
                                   120);
  INFO(dur.out << dur.err);
  REQUIRE(dur.exit_code == 0);
  CHECK(count_lines_starting(dur.out, " 1024 ") == 1);
  std::remove(json.c_str());
}

TEST_CASE("-U and -H dump the samples before the row, as perftest's print_report_lat",
          "[e2e][dumps]") {
  for (const char* test : {"write_lat", "read_lat"}) {
    std::string json = tmp_json((std::string("dumps_") + test).c_str());
    ProcessResult r = run_rnicperf({test, "--loopback", "-n", "40", "-U", "-H", "--timeout=20",
                                    "--out_json_file=" + json},
                                   120);
    INFO(test << "\n" << r.out << r.err);
    REQUIRE(r.exit_code == 0);
    const auto blocks = dump_blocks(r.out, "usec");
    REQUIRE(blocks.size() == 2);
    // -U: all 39 samples in the order taken; -H: sorted, the two largest left out.
    REQUIRE(blocks[0].size() == 39);
    REQUIRE(blocks[1].size() == 37);
    CHECK(std::is_sorted(blocks[1].begin(), blocks[1].end()));
    std::vector<double> sorted = blocks[0];
    std::sort(sorted.begin(), sorted.end());
    sorted.resize(37);
    CHECK(sorted == blocks[1]);
    // The table header, the dumps, the table header again and the row.
    CHECK(r.out.find(" #bytes #iterations") < r.out.find("#, usec"));
    CHECK(count_lines_starting(r.out, " #bytes #iterations    t_min[usec]") == 2);
    const size_t last_sample = r.out.rfind("\n37, ");
    CHECK(r.out.find(std::string(87, '-') + "\n #bytes #iterations", last_sample) !=
          std::string::npos);
    CHECK(r.out.find("\n 2       40 ", last_sample) != std::string::npos);
    // The figures are those of the dumped samples (t_min the smallest; %g keeps 6 digits).
    CHECK(std::stod(json_query(json, "d['results'][0]['t_min']")) ==
          Approx(blocks[1].front()).epsilon(1e-5));
    std::remove(json.c_str());
  }
  // With --output, perftest prints the dump and then its one number, without the table.
  ProcessResult out = run_rnicperf(
      {"send_lat", "--loopback", "-n", "20", "-U", "--output=latency", "--timeout=20"}, 120);
  INFO(out.out << out.err);
  REQUIRE(out.exit_code == 0);
  CHECK(out.out.rfind("#, usec\n1, ", 0) == 0);
  CHECK(dump_blocks(out.out, "usec").at(0).size() == 19);
  CHECK(std::count(out.out.begin(), out.out.end(), '\n') == 1 + 19 + 1);
}

TEST_CASE("-C reports the latency figures in TSC cycles, or says why it cannot",
          "[e2e][dumps]") {
  std::string json = tmp_json("cycles");
  ProcessResult r = run_rnicperf({"write_lat", "--loopback", "-n", "40", "-C", "-H",
                                  "--timeout=20", "--out_json_file=" + json},
                                 120);
  INFO(r.out << r.err);
  if (r.err.find("-C reports TSC cycles") != std::string::npos) {
    // A machine without an invariant TSC: refused before anything runs.
    CHECK(r.exit_code == 1);
  } else {
    REQUIRE(r.exit_code == 0);
    CHECK(r.out.find(" Clock           : TSC ") != std::string::npos);
    const auto blocks = dump_blocks(r.out, "cycles");
    REQUIRE(blocks.size() == 1);
    REQUIRE(blocks[0].size() == 37);
    // Whole ticks halved (write_lat reports half the round trip): no fraction but .5.
    for (double v : blocks[0]) CHECK(v * 2 == std::floor(v * 2));
    CHECK(json_query(json, "d['test_info']['Latency_unit']") == "cycles");
    CHECK(std::stod(json_query(json, "d['results'][0]['t_min']")) ==
          Approx(blocks[0].front()).epsilon(1e-5));
    // Half a round trip through two simulated HCAs takes far more than 100 cycles.
    CHECK(blocks[0].front() > 100);
  }
  std::remove(json.c_str());

  setenv("RNICPERF_CLOCK", "monotonic", 1);
  ProcessResult mono = run_rnicperf({"write_lat", "--loopback", "-n", "20", "-C"}, 60);
  unsetenv("RNICPERF_CLOCK");
  INFO(mono.out << mono.err);
  CHECK(mono.exit_code == 1);
  CHECK(mono.err ==
        "rnicperf: -C reports TSC cycles, and this run's clock is CLOCK_MONOTONIC_RAW (no "
        "invariant TSC, or RNICPERF_CLOCK=monotonic): use usec (no -C)\n");
}

TEST_CASE("send_lat and send_bw run over UD: datagrams of at most the MTU, the header says UD",
          "[e2e][ud]") {
  check_run("send_lat", {"-c", "UD", "-n", "50", "-s", "512"}, true);
  check_run("send_bw", {"-c", "UD", "-n", "2000", "-s", "1024", "-q", "2"}, false);

  const std::string json = tmp_json("ud_sweep");
  ProcessResult r = run_rnicperf({"send_bw", "--loopback", "-c", "UD", "-a", "-n", "20", "-m",
                                  "1024", "--timeout=20", "--out_json_file=" + json},
                                 120);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find(" Connection type : UD") != std::string::npos);
  // 2 B to the 1024-byte MTU: one packet per datagram, as perftest sweeps UD.
  CHECK(json_query(json, "[x['MsgSize'] for x in d['results']]") ==
        "[2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]");
  std::remove(json.c_str());

  // A size above the MTU becomes the MTU, as perftest does, and says so.
  r = run_rnicperf({"send_lat", "--loopback", "-c", "UD", "-n", "20", "-m", "1024", "-s", "4096",
                    "--timeout=20"},
                   120);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  const std::string cap = " Max msg size in UD is MTU 1024\n Changing to this MTU\n";
  CHECK(r.err.find(cap) != std::string::npos);
  CHECK(r.err.find(cap) == r.err.rfind(cap));  // once: the quiet loopback end says nothing
  CHECK(r.out.find(" 1024    20 ") != std::string::npos);
}

TEST_CASE("-c UD -R: each client QP sends to what the server's datagram service answered",
          "[e2e][ud][cm]") {
  check_run("send_lat", {"-c", "UD", "-R", "-n", "50", "-s", "512"}, true);
  ProcessResult r = run_rnicperf({"send_bw", "--loopback", "-c", "UD", "-R", "-q", "2", "-n",
                                  "500", "-s", "1024", "--timeout=20"},
                                 120);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find(" rdma_cm QPs\t : ON\n") != std::string::npos);
  CHECK(r.out.find(" Connection type : UD") != std::string::npos);
  CHECK(r.out.find(" 1024       1000 ") != std::string::npos);  // 500 on each of 2 QPs
}

TEST_CASE("the SEND and WRITE tests run over UC, the header says UC, and a UC receiver that "
          "lost SENDs reports them and ends",
          "[e2e][uc]") {
  check_run("send_lat", {"-c", "UC", "-n", "50", "-s", "3000"}, true);
  check_run("write_lat", {"-c", "UC", "-n", "50", "-s", "3000"}, true);
  check_run("write_bw", {"-c", "UC", "-n", "500", "-s", "4096"}, false);
  check_run("send_bw", {"-c", "UC", "-n", "500", "-s", "1024", "-q", "2"}, false);
  ProcessResult r = run_rnicperf(
      {"write_bw", "--loopback", "-c", "UC", "-n", "100", "--timeout=20"}, 120);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find(" Connection type : UC") != std::string::npos);

  // 16 receives against 2000 SENDs with 128 in flight: UC loses what finds no receive, and
  // the receiver reports it once the sender's count is in instead of waiting out --timeout.
  const auto start = std::chrono::steady_clock::now();
  r = run_rnicperf({"send_bw", "--loopback", "-c", "UC", "-n", "2000", "-r", "16", "-s", "1024",
                    "--timeout=15"},
                   120);
  INFO(r.out << r.err);
  REQUIRE_FALSE(r.timed_out);
  CHECK(r.exit_code == 0);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(15));
  CHECK(r.err.find(" of 2000 messages arrived (UC does not retransmit") != std::string::npos);
}

TEST_CASE("a UD receiver with -D or --run_infinitely ends once the sender's count is in and "
          "nothing more arrives, whatever UD lost",
          "[e2e][ud]") {
  // 16 receives against a sender with 128 in flight: datagrams are lost, and a receiver that
  // waited for the sender's count would wait out --timeout and fail.
  const auto start = std::chrono::steady_clock::now();
  ProcessResult r = run_rnicperf({"send_bw", "--loopback", "-c", "UD", "-D", "1", "-r", "16",
                                  "-s", "1024", "--timeout=15"},
                                 120);
  INFO(r.out << r.err);
  REQUIRE_FALSE(r.timed_out);
  CHECK(r.exit_code == 0);
  CHECK(r.err.find("no message from the peer") == std::string::npos);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(15));
  CHECK(rows_of(r.out, "1024").size() == 1);

  check_endless_loopback({"send_bw", "-c", "UD", "-r", "16"}, 1);
}

TEST_CASE("-w and -y: a run that reaches its limits exits 0, one that cannot exits 1 with "
          "perftest's line",
          "[e2e][limits]") {
  for (const char* test : {"write_bw", "send_bw", "read_bw", "atomic_bw"}) {
    INFO(test);
    const std::vector<std::string> base = {test, "--loopback", "--timeout=20", "-n", "100"};
    auto with = [&](std::vector<std::string> extra) {
      std::vector<std::string> args = base;
      args.insert(args.end(), extra.begin(), extra.end());
      return run_rnicperf(args, 120);
    };
    // Any bandwidth reaches 0, and a simulated HCA reaches no 10^9 MB/sec nor 10^9 Mpps.
    ProcessResult met = with({"-w", "0", "-y", "0"});
    INFO(met.out << met.err);
    REQUIRE_FALSE(met.timed_out);
    CHECK(met.exit_code == 0);
    CHECK(met.err.find("Error:") == std::string::npos);

    ProcessResult bw = with({"-w", "1e9", "-y", "1e9"});
    INFO(bw.out << bw.err);
    CHECK(bw.exit_code == 1);
    // The result is still reported, and only the first limit missed is named, as perftest.
    CHECK(bw.out.find(" #bytes     #iterations    BW peak[") != std::string::npos);
    CHECK(bw.err.find("Error: BW result is below bw limit\n") != std::string::npos);
    CHECK(bw.err.find("Msg rate") == std::string::npos);
    CHECK(bw.err.find("rnicperf:") == std::string::npos);

    ProcessResult rate = with({"--limit_msgrate=1e9"});
    INFO(rate.out << rate.err);
    CHECK(rate.exit_code == 1);
    CHECK(rate.err.find("Error: Msg rate  is below msg_rate limit\n") != std::string::npos);
  }
}

namespace {
// A loopback write_bw run with a JSON report: its exit status and each row's BW_average.
struct LimitRun {
  int exit_code = -1;
  std::string err;
  std::vector<double> bw;
};
LimitRun limit_run(std::vector<std::string> extra) {
  const std::string json = tmp_json("limits");
  std::vector<std::string> args = {"write_bw", "--loopback", "--timeout=20", "-n", "100",
                                   "--out_json_file=" + json};
  args.insert(args.end(), extra.begin(), extra.end());
  ProcessResult r = run_rnicperf(args, 120);
  LimitRun out;
  out.exit_code = r.exit_code;
  out.err = r.err;
  std::istringstream rows(json_query(json, "' '.join(str(r['BW_average']) for r in d['results'])"));
  for (double v; rows >> v;) out.bw.push_back(v);
  std::remove(json.c_str());
  return out;
}
}  // namespace

TEST_CASE("-w is in the report's unit (Gb/sec with --report_gbits), and with -a a limit any "
          "row reaches is met",
          "[e2e][limits]") {
  // A run's bandwidth in Gb/sec is 1/119 of its figure in MB/sec (2^20 B): a limit 11 times
  // below the MB/sec figure is met in MB/sec and missed in Gb/sec, with a margin of 11 times
  // for the runs' noise.
  const LimitRun reference = limit_run({"-s", "65536"});
  REQUIRE(reference.exit_code == 0);
  REQUIRE(reference.bw.size() == 1);
  const std::string limit = std::to_string(reference.bw[0] / 11);
  INFO("limit " << limit);
  const LimitRun mbytes = limit_run({"-s", "65536", "-w", limit});
  INFO(mbytes.err);
  CHECK(mbytes.exit_code == 0);
  const LimitRun gbits = limit_run({"-s", "65536", "--report_gbits", "-w", limit});
  INFO(gbits.err);
  REQUIRE(gbits.bw.size() == 1);
  CHECK(gbits.bw[0] < std::stod(limit));
  CHECK(gbits.exit_code == 1);

  // A sweep's 2-byte row has a small fraction of its 4 KiB row's bandwidth: a limit between
  // the two (their geometric mean) passes, as perftest ORs the rows' verdicts.
  const LimitRun sweep = limit_run({"-a", "--sweep-max=4096"});
  REQUIRE(sweep.exit_code == 0);
  REQUIRE(sweep.bw.size() == 12);
  const double between = std::sqrt(sweep.bw.front() * sweep.bw.back());
  const LimitRun some = limit_run({"-a", "--sweep-max=4096", "-w", std::to_string(between)});
  INFO(some.err << "limit " << between);
  REQUIRE(some.bw.size() == 12);
  CHECK(some.bw.front() < between);
  CHECK(some.bw.back() >= between);
  CHECK(some.exit_code == 0);
  const LimitRun none =
      limit_run({"-a", "--sweep-max=4096", "-w", std::to_string(sweep.bw.back() * 1000)});
  CHECK(none.exit_code == 1);
  CHECK(none.err.find("Error: BW result is below bw limit\n") != std::string::npos);
}

TEST_CASE("--use_old_post_send posts through post_send, one call per post list, in every test",
          "[e2e][post_path]") {
  struct Run {
    const char* test;
    std::vector<std::string> extra;
    const char* calls;  // post_send calls the client's loops make
  };
  const Run runs[] = {
      {"write_lat", {"-n", "100"}, "100"},
      {"send_lat", {"-n", "100"}, "100"},
      {"read_lat", {"-n", "100"}, "100"},
      {"atomic_lat", {"-n", "100"}, "100"},
      {"write_bw", {"-n", "100", "-s", "4096", "-l", "4"}, "25"},
      {"send_bw", {"-n", "100", "-s", "4096", "-l", "4"}, "25"},
      {"read_bw", {"-n", "100", "-s", "4096", "-l", "4"}, "25"},
      {"atomic_bw", {"-n", "100", "-l", "5"}, "20"},
  };
  for (const Run& run : runs) {
    INFO(run.test);
    for (const bool old : {true, false}) {
      std::string json = tmp_json((std::string("old_post_") + run.test).c_str());
      std::vector<std::string> args = {run.test, "--loopback", "--timeout=20",
                                       "--out_json_file=" + json};
      args.insert(args.end(), run.extra.begin(), run.extra.end());
      if (old) args.push_back("--use_old_post_send");
      ProcessResult r = run_rnicperf(args, 120);
      INFO("old " << old << "\n" << r.out << r.err);
      REQUIRE(r.exit_code == 0);
      const bool line = r.out.find(" Post calls      : post_send, a SendWr list per call\n") !=
                        std::string::npos;
      CHECK(line == old);
      if (old) {
        CHECK(json_query(json, "d['test_info']['Post_send_calls']") == run.calls);
        CHECK(json_query(json, "d['test_info']['Post_calls']") ==
              "post_send, a SendWr list per call");
      } else {
        CHECK(json_query(json, "'Post_send_calls' in d['test_info']") == "False");
      }
      CHECK(json_query(json, "d['results'][0]['MsgSize'] > 0") == "True");
      std::remove(json.c_str());
    }
  }
}

TEST_CASE("--wait_destroy waits before releasing the resources, and says so", "[e2e][wait]") {
  const auto t0 = std::chrono::steady_clock::now();
  ProcessResult r = run_rnicperf(
      {"write_bw", "--loopback", "--timeout=20", "-n", "100", "--wait_destroy=2"}, 120);
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(elapsed >= 2.0);
  const size_t table = r.out.find(" #bytes     #iterations");
  const size_t waiting = r.out.find(" Waiting 2 seconds before releasing resources...\n");
  REQUIRE(table != std::string::npos);
  REQUIRE(waiting != std::string::npos);
  CHECK(waiting > table);
  CHECK(count_lines_starting(r.out, " Waiting ") == 1);  // the quiet loopback end prints none
}

TEST_CASE("-i: port 1 runs; port 2 runs on the second port of the loopback's two-port HCAs; "
          "a port beyond them is refused naming the device and its ports",
          "[e2e][ib_port]") {
  ProcessResult one = run_rnicperf({"write_lat", "--loopback", "--timeout=20", "-n", "50", "-i",
                                    "1"},
                                   120);
  INFO(one.out << one.err);
  CHECK(one.exit_code == 0);
  CHECK(one.out.find(", port 2 ") == std::string::npos);  // one-port HCAs
  ProcessResult two = run_rnicperf({"write_lat", "--loopback", "--timeout=20", "-n", "50",
                                    "--ib-port=2"},
                                   120);
  INFO(two.out << two.err);
  REQUIRE(two.exit_code == 0);
  // The QP is on port 2: its record's GID is port 2's address (the Sim wire line's second).
  const std::string wire = " Sim wire        : inproc 127.0.0.";
  const size_t at = two.out.find(wire);
  REQUIRE(at != std::string::npos);
  const size_t port2 = two.out.find(", port 2 127.0.0.", at);
  REQUIRE(port2 != std::string::npos);
  const std::string octet = two.out.substr(port2 + 17, two.out.find(':', port2) - port2 - 17);
  char gid[80];
  std::snprintf(gid, sizeof gid, " GID: 00:00:00:00:00:00:00:00:00:00:255:255:127:00:00:%02d\n",
                std::stoi(octet));
  const size_t local = two.out.find(" local address: ");
  REQUIRE(local != std::string::npos);
  CHECK(two.out.compare(two.out.find('\n', local) + 1, std::strlen(gid), gid) == 0);
  ProcessResult three = run_rnicperf({"write_lat", "--loopback", "--timeout=20", "-n", "50",
                                      "-i", "3"},
                                     120);
  INFO(three.out << three.err);
  CHECK(three.exit_code == 1);
  CHECK(count_lines_starting(three.err, "rnicperf: -i 3: Unable to query port 3 attributes: sim") ==
        1);
  CHECK(three.err.find(" has 2 ports (ports 1 and 2)\n") != std::string::npos);
}

namespace {
// A file of `bytes` bytes, each `fill`; returns its path.
std::string make_file(const char* tag, size_t bytes, char fill) {
  const std::string path = "/tmp/rnicperf-" + std::to_string(::getpid()) + "-" + tag;
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << std::string(bytes, fill);
  return path;
}
}  // namespace

TEST_CASE("--mmap: the buffers are the file's pages at --mmap-offset, shared", "[e2e][mmap]") {
  // write_bw -s 4096: each QP's region is 8 KiB, its send half first. The file's first page
  // is outside the mapping; both loopback ends map the same pages, so the client's writes copy
  // the send half (the 'A's) over the receive half (the 'B's) of the file itself.
  const std::string path = make_file("mmap-buffers", 4 * 4096, 'B');
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(4096);
    f << std::string(4096, 'A');
  }
  ProcessResult r = run_rnicperf({"write_bw", "--loopback", "--timeout=20", "-n", "100", "-s",
                                  "4096", "--mmap=" + path, "--mmap-offset=4096"},
                                 120);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(count_lines_starting(r.out, "allocated mmap buffer of size 8192 at 0x") == 1);
  CHECK(r.out.find(" Buffers         : mmap of " + path + " from offset 4096, shared (--mmap)\n") !=
        std::string::npos);
  const std::string after = slurp(path);
  REQUIRE(after.size() == 4 * 4096);
  CHECK(after.substr(0, 4096) == std::string(4096, 'B'));      // before the offset: untouched
  CHECK(after.substr(4096, 4096) == std::string(4096, 'A'));   // the send half
  CHECK(after.substr(8192, 4096) == std::string(4096, 'A'));   // the receive half, written
  CHECK(after.substr(12288, 4096) == std::string(4096, 'B'));  // past the region: untouched
  std::remove(path.c_str());
}

TEST_CASE("--mmap: a file too small for the buffers, a missing one or a bad offset is refused",
          "[e2e][mmap]") {
  const std::string small = make_file("mmap-small", 8192, 0);
  ProcessResult r = run_rnicperf({"write_bw", "--loopback", "--timeout=20", "-n", "100", "-s",
                                  "4096", "-q", "2", "--mmap=" + small},
                                 120);
  INFO(r.out << r.err);
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("rnicperf: --mmap '" + small +
                   "': 8192 bytes, too small for 2 QP buffers of 8192 bytes from offset 0 "
                   "(needs 16384 bytes)\n") != std::string::npos);
  std::remove(small.c_str());

  ProcessResult missing = run_rnicperf(
      {"write_bw", "--loopback", "--timeout=20", "-n", "100", "--mmap=/nonexistent/buffers"},
      120);
  INFO(missing.out << missing.err);
  CHECK(missing.exit_code == 1);
  CHECK(missing.err.find("rnicperf: --mmap '/nonexistent/buffers': Unable to open: No such "
                         "file or directory\n") != std::string::npos);

  ProcessResult offset = run_rnicperf(
      {"write_bw", "--loopback", "-n", "100", "--mmap=/tmp/x", "--mmap-offset=123"}, 60);
  CHECK(offset.exit_code == 1);
  CHECK(offset.err.find("rnicperf: --mmap-offset 123: not a multiple of the page size") == 0);
}

TEST_CASE("--force-link=Ethernet runs; --dlid is shown as the remote LID and changes nothing "
          "else",
          "[e2e][force_link]") {
  ProcessResult r = run_rnicperf({"write_lat", "--loopback", "--timeout=20", "-n", "50",
                                  "--force-link=Ethernet", "--dlid=0x1f"},
                                 120);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find(" Link type       : Ethernet\n") != std::string::npos);
  CHECK(r.out.find(" local address: LID 0000 QPN ") != std::string::npos);
  CHECK(r.out.find(" remote address: LID 0x1f QPN ") != std::string::npos);
  ProcessResult ib =
      run_rnicperf({"write_lat", "--loopback", "-n", "50", "--force-link=IB"}, 60);
  CHECK(ib.exit_code == 1);
  CHECK(ib.err.find("rnicperf: --force-link=IB: rnicdv's devices are RoCE devices") == 0);
}

namespace {
// The values of `name` in a run's -W blocks ("\t<name>=<change>" lines), in order.
std::vector<uint64_t> counter_lines(const std::string& out, const std::string& name) {
  std::vector<uint64_t> v;
  const std::string key = "\n\t" + name + "=";
  for (size_t at = out.find(key); at != std::string::npos; at = out.find(key, at + 1))
    v.push_back(std::stoull(out.substr(at + key.size())));
  return v;
}
}  // namespace

TEST_CASE("-W prints each port counter's change after every result row, as perftest does",
          "[e2e][counters]") {
  ProcessResult r = run_rnicperf({"write_bw", "--loopback", "-n", "300", "-s", "1024",
                                  "--timeout=20", "-W",
                                  "counters/port_xmit_packets,hw_counters/out_of_buffer"},
                                 120);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  // The row, then the block: one line per counter, in the order given, and an empty line.
  const size_t row = r.out.find("\n 1024       300 ");
  REQUIRE(row != std::string::npos);
  const size_t block = r.out.find("\n\tcounters/port_xmit_packets=", row);
  REQUIRE(block != std::string::npos);
  CHECK(r.out.find('\n', row + 1) == block);
  const size_t next = r.out.find("\n\thw_counters/out_of_buffer=0\n\n", block + 1);
  CHECK(next == r.out.find('\n', block + 1));
  // 300 one-packet WRITEs left this side (more only if some were sent again).
  const auto xmit = counter_lines(r.out, "counters/port_xmit_packets");
  REQUIRE(xmit.size() == 1);
  CHECK(xmit[0] >= 300);
  CHECK(xmit[0] < 600);

  // A sweep: a block after each size's row, each the change since the one before.
  r = run_rnicperf({"send_bw", "--loopback", "-a", "-n", "50", "-m", "1024", "--sweep-max=64",
                    "--timeout=20", "-W", "counters/port_xmit_packets"},
                   120);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  const auto per_size = counter_lines(r.out, "counters/port_xmit_packets");
  REQUIRE(per_size.size() == 6);  // 2 to 64 bytes
  for (uint64_t n : per_size) {
    CHECK(n >= 50);
    CHECK(n < 100);
  }

  // A latency test prints its block after its row too.
  r = run_rnicperf({"send_lat", "--loopback", "-n", "100", "-s", "64", "--timeout=20", "-W",
                    "counters/port_rcv_packets"},
                   120);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  const auto rcv = counter_lines(r.out, "counters/port_rcv_packets");
  REQUIRE(rcv.size() == 1);
  CHECK(rcv[0] >= 100);  // the pongs (and ACKs) this side received
}

TEST_CASE("-W with a counter the device lacks fails before the test, naming it and what exists",
          "[e2e][counters]") {
  ProcessResult r = run_rnicperf(
      {"write_bw", "--loopback", "-n", "10", "--timeout=20", "-W", "counters/symbol_error"}, 120);
  INFO(r.out << r.err);
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("-W: Unable to access performance counters: sim") != std::string::npos);
  CHECK(r.err.find("port 1 has no counter 'counters/symbol_error' (a simulated HCA keeps "
                   "counters/port_xmit_data,") != std::string::npos);
  CHECK(r.out.find("#bytes") == std::string::npos);
}

TEST_CASE("--ipv6 on devices with IPv4 addresses is refused, naming the device and its GID",
          "[e2e][ipv6]") {
  ProcessResult r = run_rnicperf({"write_lat", "--loopback", "--ipv6", "-n", "10",
                                  "--timeout=20"},
                                 60);
  INFO(r.out << r.err);
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("--ipv6: ") != std::string::npos);
  CHECK(r.err.find("'s GID 127.0.0.") != std::string::npos);
  CHECK(r.err.find(" is IPv4 (on the simulated HCA, RNICDV_SIM_ADDR gives it an IPv6 address)") !=
        std::string::npos);
}

namespace {
// A -c XRC loopback run of `test` with `qps` initiators a side and perftest's QP count in the
// header (`header_qps`): "Connection type : XRC", its SRQ, one SRQ number on every address
// line, a row of `iterations` per QP, and every post a post_send call (the typed calls take no
// SRQ number).
void check_xrc_run(const std::string& test, std::vector<std::string> extra, uint64_t size,
                   uint64_t iterations, uint32_t header_qps) {
  const std::string json = tmp_json(("xrc_" + test).c_str());
  std::vector<std::string> args = {test, "--loopback", "-c", "XRC", "--timeout=10",
                                   "--out_json_file=" + json};
  args.insert(args.end(), extra.begin(), extra.end());
  ProcessResult r = run_rnicperf(args, 60);
  INFO(test << " stdout:\n" << r.out << "\nstderr:\n" << r.err);
  REQUIRE_FALSE(r.timed_out);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find(" Number of qps   : " + std::to_string(header_qps) +
                   "\t\tTransport type : IB\n Connection type : XRC\t\tUsing SRQ      : ON\n") !=
        std::string::npos);
  const int addresses = count_lines_starting(r.out, " local address: ") +
                        count_lines_starting(r.out, " remote address: ");
  CHECK(addresses == 2 * static_cast<int>(header_qps));
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);)
    if (line.find(" address: LID ") != std::string::npos)
      CHECK(line.find(" SRQn 0x") != std::string::npos);
  const auto rows = rows_of(r.out, std::to_string(size));
  REQUIRE(rows.size() == 1);
  CHECK(fields_of(rows[0]).at(1) == static_cast<double>(iterations));
  // The header's keys, and each side's records all naming its one SRQ.
  CHECK(json_query(json, "d['test_info']['Connection_type'], d['test_info']['Using_SRQ'], "
                         "d['test_info']['Number_of_qps'], d['test_info']['Post_calls'], "
                         "len({a['srqn'] for a in d['local_address']}), "
                         "len({a['srqn'] for a in d['remote_address']})") ==
        "XRC ON " + std::to_string(header_qps) + " post_send, a SendWr list per call 1 1");
  std::remove(json.c_str());
}
}  // namespace

TEST_CASE("-c XRC write_lat and send_lat: two QPs a side, each initiator reaching the peer's "
          "SRQ through its target",
          "[e2e][xrc]") {
  check_xrc_run("write_lat", {"-n", "50"}, 2, 50, 2);
  check_xrc_run("send_lat", {"-n", "50", "-s", "300"}, 300, 50, 2);
}

TEST_CASE("-c XRC read_lat and atomic_lat: two QPs a side, the client's initiator reading and "
          "adding through the server's target",
          "[e2e][xrc]") {
  check_xrc_run("read_lat", {"-n", "50", "-s", "64"}, 64, 50, 2);
  check_xrc_run("atomic_lat", {"-n", "50"}, 8, 50, 2);
}

TEST_CASE("-c XRC send_bw and write_bw: the client's initiators send into the server's SRQ "
          "through its targets",
          "[e2e][xrc]") {
  check_xrc_run("send_bw", {"-n", "100", "-s", "4096"}, 4096, 100, 1);
  check_xrc_run("write_bw", {"-n", "100", "-s", "4096"}, 4096, 100, 1);
}

TEST_CASE("-c XRC read_bw and atomic_bw: the client's initiators read and add through the "
          "server's targets",
          "[e2e][xrc]") {
  check_xrc_run("read_bw", {"-n", "100", "-s", "4096"}, 4096, 100, 1);
  check_xrc_run("atomic_bw", {"-n", "100"}, 8, 100, 1);
}

TEST_CASE("-c XRC -b: perftest's doubled QPs, initiators first, both sides posting -q x -n",
          "[e2e][xrc]") {
  check_xrc_run("send_bw", {"-b", "-q", "2", "-n", "100", "-s", "1024"}, 1024, 200, 4);
  check_xrc_run("write_bw", {"-b", "-n", "100", "-s", "1024", "-l", "4"}, 1024, 100, 2);
}

TEST_CASE("-c XRC send_bw: three initiators' SENDs arrive in the server's one SRQ, which is "
          "refilled in lists as they complete; --reversed makes the server's QPs the initiators",
          "[e2e][xrc][recv_post_list]") {
  // 300 SENDs into an SRQ that holds 100: every list posted after the first ten is a refill
  // of the SRQ, which the three targets share (30 calls of 10).
  const std::string json = tmp_json("xrc_srq");
  ProcessResult r = run_rnicperf({"send_bw", "--loopback", "-c", "XRC", "--reversed", "-q", "3",
                                  "-n", "100", "-s", "1024", "--recv_post_list=10",
                                  "--timeout=10", "--out_json_file=" + json},
                                 60);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find(" RX depth        : 100\n") != std::string::npos);
  CHECK(json_query(json, "d['results'][0]['n_iterations']") == "300");
  CHECK(json_query(json, "d['test_info']['Receive_post_calls']") == "30");
  std::remove(json.c_str());
}

TEST_CASE("-c XRC with --early-post: the initiator's writes and sends are withheld in RTR and run "
          "once at RTS",
          "[e2e][xrc][early-post]") {
  for (const char* test : {"write_lat", "send_bw"}) {
    ProcessResult r = run_rnicperf({test, "--loopback", "-c", "XRC", "-n", "40", "-s", "64",
                                    "--early-post=8", "--timeout=10"},
                                   60);
    INFO(test << "\n" << r.out << r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(r.out.find(" 8          in RTR       8  ") != std::string::npos);
    CHECK(r.out.find(" 8          after RTS    0  ") != std::string::npos);
  }
}
