// SPDX-License-Identifier: BSD-3-Clause
// perftest's QP attribute and rate limiter options, end to end in loopback: what reaches the
// wire (tshark's decoding of the run's pcap), the rates the limiters hold a bandwidth run to
// (an upper bound that load cannot break, and a loose lower one), and the refusals of what the
// device does not have.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "json_check.h"
#include "subprocess.h"
#include "tshark.h"

using namespace rnicperf_test;
using rnicdv::test::skip_without_tshark;
using rnicdv::test::tshark;
using rnicdv::test::tshark_rows;

namespace {

// Runs rnicperf in loopback with the simulated fabric's capture in `pcap`.
ProcessResult run_captured(const std::string& pcap, std::vector<std::string> args) {
  std::remove(pcap.c_str());
  ::setenv("RNICDV_PCAP", pcap.c_str(), 1);
  ProcessResult r = run_rnicperf(args, 120);
  ::unsetenv("RNICDV_PCAP");
  return r;
}

// "TOS TTL" -> frames, over the RoCE frames of the test's QPs (the CM's MADs go to QP1).
std::map<std::string, int> tos_ttl_of(const std::string& pcap) {
  std::map<std::string, int> out;
  for (const auto& row : tshark_rows(tshark(pcap, "-Y 'infiniband.bth.destqp != 1' -T fields "
                                                  "-e ip.dsfield -e ip.ttl")))
    if (row.size() == 2) ++out[row[0] + " " + row[1]];
  return out;
}

// A write_bw run's average bandwidth in MiB/s, from its JSON report.
double bw_average(const std::vector<std::string>& extra, std::string* log) {
  const std::string json = tmp_json("rate");
  std::vector<std::string> args = {"write_bw", "--loopback", "--timeout=30",
                                   "--out_json_file=" + json};
  args.insert(args.end(), extra.begin(), extra.end());
  ProcessResult r = run_rnicperf(args, 120);
  *log = r.out + r.err;
  INFO(*log);
  REQUIRE_FALSE(r.timed_out);
  REQUIRE(r.exit_code == 0);
  const std::string v = json_query(json, "d['results'][0]['BW_average']");
  std::remove(json.c_str());
  return std::strtod(v.c_str(), nullptr);
}

}  // namespace

TEST_CASE("--tclass and -L reach every frame's IP header; perftest's hop limit 255 is the default",
          "[e2e][qos]") {
  skip_without_tshark();
  const std::string pcap = "/tmp/rnicperf-" + std::to_string(::getpid()) + "-tclass.pcap";
  ProcessResult r = run_captured(pcap, {"write_bw", "--loopback", "-n", "20", "-s", "4096",
                                        "--tclass=0xb8", "-S", "5", "--timeout=20"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  auto seen = tos_ttl_of(pcap);
  INFO("frames by TOS and TTL: " << seen.size() << " kinds");
  REQUIRE(seen.size() == 1);  // requests and ACKs alike: both ends took the options
  CHECK(seen.begin()->first == "0xb8 255");

  r = run_captured(pcap, {"write_bw", "--loopback", "-n", "20", "-s", "4096", "-L", "7",
                          "--flow_label=0x12345", "--timeout=20"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  seen = tos_ttl_of(pcap);
  REQUIRE(seen.size() == 1);
  CHECK(seen.begin()->first == "0x00 7");
  std::remove(pcap.c_str());
}

TEST_CASE("-R carries -T's type of service through the CM, with the kernel's TTL 64",
          "[e2e][qos][cm]") {
  skip_without_tshark();
  const std::string pcap = "/tmp/rnicperf-" + std::to_string(::getpid()) + "-tos.pcap";
  ProcessResult r = run_captured(pcap, {"write_bw", "--loopback", "-R", "-T", "106", "-n", "20",
                                        "-s", "4096", "--retry_count=3", "--timeout=20"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  auto seen = tos_ttl_of(pcap);
  REQUIRE(seen.size() == 1);
  CHECK(seen.begin()->first == "0x6a 64");
  std::remove(pcap.c_str());
}

TEST_CASE("the HW and PP limiters hold write_bw to the rate the device paces each QP at",
          "[e2e][rate_limit]") {
  std::string log;
  // 0.1 Gb/s of Ethernet frames: at most 11.92 MiB/s of payload (less, by the headers).
  const double hw = bw_average({"-n", "1500", "-s", "4096", "--rate_limit=0.1"}, &log);
  INFO(log);
  CHECK(hw <= 0.1e9 / 8 / 1048576 * 1.05);
  CHECK(hw >= 0.1e9 / 8 / 1048576 * 0.3);

  // PP: 10 MiB/s, as perftest converts it (x 8 x 1024 kb/s = 10.24 MB/s of frames).
  const double pp = bw_average({"-n", "1000", "-s", "4096", "--rate_limit_type=PP",
                                "--rate_units=M", "--rate_limit=10", "--burst_size=16384",
                                "--typical_pkt_size=1024"},
                               &log);
  INFO(log);
  CHECK(pp <= 10 * 8 * 1024 * 1000.0 / 8 / 1048576 * 1.05);
  CHECK(pp >= 10 * 8 * 1024 * 1000.0 / 8 / 1048576 * 0.3);
}

TEST_CASE("the SW limiter spaces bursts of --burst_size messages to the rate", "[e2e][rate_limit]") {
  std::string log;
  // 12.5 MiB/s of 4 KiB messages: 3200 a second, in bursts of 100, one every 31.25 ms. The
  // first burst goes at once, so 20 bursts take 19 gaps: at most 20/19 of the rate.
  const double sw = bw_average({"-n", "2000", "-s", "4096", "--rate_limit_type=SW",
                                "--rate_units=M", "--rate_limit=12.5", "--burst_size=100"},
                               &log);
  INFO(log);
  CHECK(sw <= 12.5 * 20 / 19 * 1.03);
  CHECK(sw >= 12.5 * 0.3);
  // Packets per second: 1000 a second, 50 at a time.
  const double pps = bw_average({"-n", "500", "-s", "1024", "--rate_limit_type=SW",
                                 "--rate_units=p", "--rate_limit=1000", "--burst_size=50"},
                                &log);
  INFO(log);
  CHECK(pps <= 1000 * 1024.0 / 1048576 * 10 / 9 * 1.03);
  CHECK(pps >= 1000 * 1024.0 / 1048576 * 0.3);
}

TEST_CASE("a rate the device cannot pace at and a P_Key index it does not have are refused by "
          "name",
          "[e2e][qos][errors]") {
  ProcessResult r = run_rnicperf({"write_bw", "--loopback", "-n", "10", "--rate_limit=200"}, 60);
  INFO(r.out << r.err);
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("--rate_limit: qp 0x") != std::string::npos);
  CHECK(r.err.find("200000000 kb/s is outside the device's 1000..100000000 kb/s") !=
        std::string::npos);

  r = run_rnicperf({"write_bw", "--loopback", "-n", "10", "--rate_limit=0.0001"}, 60);
  INFO(r.out << r.err);
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("100 kb/s is outside the device's 1000..100000000 kb/s") != std::string::npos);

  r = run_rnicperf({"write_bw", "--loopback", "-n", "10", "--pkey_index=2"}, 60);
  INFO(r.out << r.err);
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("rnicperf: --pkey_index: qp 0x") != std::string::npos);
  CHECK(r.err.find("only port 1 and P_Key index 0 exist") != std::string::npos);
}

TEST_CASE("-c UD datagrams carry the address handle's traffic class and hop limit",
          "[e2e][qos][ud]") {
  skip_without_tshark();
  const std::string pcap = "/tmp/rnicperf-" + std::to_string(::getpid()) + "-ud.pcap";
  ProcessResult r = run_captured(pcap, {"send_lat", "--loopback", "-c", "UD", "-n", "20", "-s",
                                        "256", "--tclass=0x48", "-L", "9", "--timeout=20"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  auto seen = tos_ttl_of(pcap);
  REQUIRE(seen.size() == 1);
  CHECK(seen.begin()->first == "0x48 9");
  std::remove(pcap.c_str());
}
