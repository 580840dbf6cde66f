// SPDX-License-Identifier: BSD-3-Clause
// The JSON writer and report produce documents a strict parser accepts (python3's json),
// with every size kept.
#include <catch2/catch.hpp>

#include <string>

#include "json.h"
#include "json_check.h"
#include "report_json.h"

using namespace rnicperf;
using rnicperf_test::json_query_text;

TEST_CASE("strings are escaped and non-finite numbers become null", "[json]") {
  JsonWriter w;
  w.begin_object();
  w.field("quote\"back\\slash", "line\nbreak\ttab\x01");
  w.field("nan", 0.0 / 0.0);
  w.field("n", uint64_t{18446744073709551615ull});
  w.field("neg", -3);
  w.field("flag", true);
  w.key("empty").begin_array().end_array();
  w.key("nested").begin_object().end_object();
  w.end_object();
  REQUIRE(w.complete());
  const std::string& t = w.str();
  CHECK(json_query_text(t, "d['quote\"back\\\\slash']") == "line\nbreak\ttab\x01");
  CHECK(json_query_text(t, "d['nan']") == "None");
  CHECK(json_query_text(t, "d['n']") == "18446744073709551615");
  CHECK(json_query_text(t, "d['neg'], d['flag'], d['empty'], d['nested']") == "-3 True [] {}");
}

TEST_CASE("the report keeps every size of a sweep", "[json]") {
  JsonReport report;
  HeaderInfo h;
  h.test = {Verb::write, Kind::bandwidth};
  h.device = "sim0";
  h.sim_wire = "udp 127.0.0.2:4791";
  report.set_header(h, "client", BwUnit::mib_per_sec);
  AddressInfo a;
  a.qpn = 0x12;
  a.vaddr = 0x7f0000001000;
  report.set_addresses({a}, {a});
  for (uint64_t size = 2; size <= 1024; size *= 2)
    report.add(BandwidthResult{size, 1000, 10.0, 9.5, 0.25});
  std::string t = report.text();
  CHECK(json_query_text(t, "len(d['results'])") == "10");
  CHECK(json_query_text(t, "[r['MsgSize'] for r in d['results']][-1]") == "1024");
  CHECK(json_query_text(t, "d['results'][0]['BW_average']") == "9.5");
  CHECK(json_query_text(t, "d['test_info']['test']") == "RDMA_Write_BW_Test");
  CHECK(json_query_text(t, "d['test_info']['Sim_wire']") == "udp 127.0.0.2:4791");
  CHECK(json_query_text(t, "d['local_address'][0]['vaddr']") == "0x00007f0000001000");
}

TEST_CASE("the report names the connection type, XRC's SRQ and each record's SRQ number",
          "[json][xrc]") {
  JsonReport report;
  HeaderInfo h;
  h.test = {Verb::send, Kind::bandwidth};
  h.num_qps = 2;
  h.connection = "XRC";
  h.using_srq = true;
  report.set_header(h, "client", BwUnit::mib_per_sec);
  AddressInfo a;
  a.qpn = 0x100;
  a.srqn = 0x40;
  a.show_srqn = true;
  AddressInfo b = a;
  b.qpn = 0x101;
  b.srqn = 0x41;
  report.set_addresses({a, b}, {b, a});
  const std::string t = report.text();
  CHECK(json_query_text(t, "d['test_info']['Connection_type']") == "XRC");
  CHECK(json_query_text(t, "d['test_info']['Using_SRQ']") == "ON");
  CHECK(json_query_text(t, "d['test_info']['Number_of_qps']") == "2");
  CHECK(json_query_text(t, "[x['srqn'] for x in d['local_address']]") == "[64, 65]");
  CHECK(json_query_text(t, "[x['srqn'] for x in d['remote_address']]") == "[65, 64]");
  // Without XRC: the type given, no SRQ, and no srqn key.
  h.connection = "UD";
  h.using_srq = false;
  a.show_srqn = false;
  JsonReport ud;
  ud.set_header(h, "server", BwUnit::mib_per_sec);
  ud.set_addresses({a}, {a});
  CHECK(json_query_text(ud.text(), "d['test_info']['Connection_type']") == "UD");
  CHECK(json_query_text(ud.text(), "d['test_info']['Using_SRQ']") == "OFF");
  CHECK(json_query_text(ud.text(), "'srqn' in d['local_address'][0]") == "False");
}

TEST_CASE("latency results carry the histogram and early-post rows", "[json]") {
  JsonReport report;
  HeaderInfo h;
  h.test = {Verb::send, Kind::latency};
  report.set_header(h, "client", BwUnit::mib_per_sec);
  LatencyResult r;
  r.size = 2;
  r.iterations = 100;
  r.t_stdev = 0.125;
  Histogram hist;
  hist.total = 3;
  hist.buckets = {{1.0, 1.19, 2}, {1.19, 1.41, 1}};
  report.add(r, &hist);
  report.set_early_post({8, true, 8, 5.0, 9.0}, {8, false, 0, 1.0, 8.0}, "send", 2);
  std::string t = report.text();
  CHECK(json_query_text(t, "d['results'][0]['t_stdev']") == "0.125");
  CHECK(json_query_text(t, "sum(b['count'] for b in d['results'][0]['histogram']['buckets'])") ==
        "3");
  CHECK(json_query_text(t, "d['early_post']['posted_in_rtr']['withheld_at_rts']") == "8");
  CHECK(json_query_text(t, "d['early_post']['posted_after_rts']['t_last_usec']") == "8.0");
}

TEST_CASE("latency results carry the 90th percentile, the CDF and the run's date", "[json]") {
  JsonReport report;
  HeaderInfo h;
  h.test = {Verb::write, Kind::latency};
  report.set_header(h, "client", BwUnit::mib_per_sec);
  report.set_date("2026-12-06 17:30:05 UTC");
  LatencyResult r;
  r.size = 2;
  r.iterations = 100;
  r.p90 = 3.5;
  r.p99 = 4.25;
  rnicperf::Cdf cdf;
  cdf.total = 2;
  cdf.points = {{1.5, 0.5}, {2.75, 1.0}};
  report.add(r, nullptr, &cdf);
  std::string t = report.text();
  CHECK(json_query_text(t, "d['test_info']['Date']") == "2026-12-06 17:30:05 UTC");
  CHECK(json_query_text(t, "d['results'][0]['percentile_90']") == "3.5");
  CHECK(json_query_text(t, "d['results'][0]['percentile_99']") == "4.25");
  CHECK(json_query_text(t, "d['results'][0]['cdf']['points']") == "[[1.5, 0.5], [2.75, 1.0]]");
  CHECK(json_query_text(t, "d['results'][0]['cdf']['samples']") == "2");
  CHECK(json_query_text(t, "'histogram' in d['results'][0]") == "False");
  // Without a date set, there is no Date key (the report of a unit test stays fixed).
  JsonReport plain;
  plain.set_header(h, "client", BwUnit::mib_per_sec);
  CHECK(json_query_text(plain.text(), "'Date' in d['test_info']") == "False");
}

TEST_CASE("-O: Dual_port and GID_index2 as perftest's JSON has them; --report-per-port adds "
          "each port's figures to the results",
          "[json][dual_port]") {
  HeaderInfo h;
  h.test = {Verb::write, Kind::bandwidth};
  h.device = "sim0";
  h.num_qps = 2;
  h.gid_index = 3;
  h.dual_port = true;
  h.gid_index2 = 3;
  h.report_per_port = true;
  BandwidthResult r{4096, 46600, 0.0, 181.87, 0.046559};
  r.port[0] = {93.28, 0.023879};
  r.port[1] = {88.59, 0.02268};
  JsonReport report;
  report.set_header(h, "client", BwUnit::mib_per_sec);
  report.add(r);
  const std::string t = report.text();
  CHECK(json_query_text(t, "d['test_info']['Dual_port']") == "ON");
  CHECK(json_query_text(t, "d['test_info']['GID_index'], d['test_info']['GID_index2']") == "3 3");
  CHECK(json_query_text(t, "d['test_info']['Number_of_qps']") == "2");
  CHECK(json_query_text(t, "[d['results'][0][k] for k in ('BW_average_port1', 'MsgRate_port1', "
                           "'BW_average_port2', 'MsgRate_port2')]") ==
        "[93.28, 0.023879, 88.59, 0.02268]");
  // -O without --report-per-port: no per-port figures; neither option: perftest's OFF.
  h.report_per_port = false;
  JsonReport dual;
  dual.set_header(h, "client", BwUnit::mib_per_sec);
  dual.add(r);
  CHECK(json_query_text(dual.text(), "'BW_average_port1' in d['results'][0]") == "False");
  CHECK(json_query_text(dual.text(), "d['test_info']['Dual_port']") == "ON");
  h.dual_port = false;
  JsonReport single;
  single.set_header(h, "client", BwUnit::mib_per_sec);
  CHECK(json_query_text(single.text(), "d['test_info']['Dual_port']") == "OFF");
  CHECK(json_query_text(single.text(), "'GID_index2' in d['test_info']") == "False");
}
