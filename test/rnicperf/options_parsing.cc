// SPDX-License-Identifier: BSD-3-Clause
// Command-line parsing: perftest's names and defaults, and one-line errors for bad input.
#include <catch2/catch.hpp>

#include <initializer_list>
#include <sstream>
#include <string>
#include <vector>

#include "options.h"

using rnicperf::Kind;
using rnicperf::Options;
using rnicperf::Verb;

namespace {
rnicdv::Result<Options> parse(std::initializer_list<const char*> args) {
  std::vector<const char*> argv = {"rnicperf"};
  argv.insert(argv.end(), args);
  return rnicperf::parse_options(static_cast<int>(argv.size()), argv.data());
}
std::string error_of(std::initializer_list<const char*> args) {
  auto r = parse(args);
  REQUIRE_FALSE(r.is_ok());
  return r.status().message();
}
}  // namespace

TEST_CASE("defaults follow perftest per test", "[options]") {
  auto lat = parse({"write_lat"});
  REQUIRE(lat.is_ok());
  CHECK(lat->test.verb == Verb::write);
  CHECK(lat->test.kind == Kind::latency);
  CHECK(lat->size == 2);
  CHECK(lat->iterations == 1000);
  CHECK(lat->tx_depth == 1);
  CHECK(lat->cq_mod == 1);
  CHECK(lat->port == 18515);
  CHECK(lat->is_server());
  CHECK(lat->json_path == "perftest_out.json");

  auto wbw = parse({"write_bw", "10.0.0.1"});
  REQUIRE(wbw.is_ok());
  CHECK(wbw->size == 65536);
  CHECK(wbw->iterations == 5000);
  CHECK(wbw->tx_depth == 128);
  CHECK(wbw->cq_mod == 1);  // above 8 KiB: one completion per message unless -Q
  CHECK(wbw->server == "10.0.0.1");
  CHECK_FALSE(wbw->is_server());

  auto sbw = parse({"send_bw", "-s", "4096"});
  REQUIRE(sbw.is_ok());
  CHECK(sbw->iterations == 1000);
  CHECK(sbw->cq_mod == 100);

  auto atomic = parse({"atomic_lat"});
  REQUIRE(atomic.is_ok());
  CHECK(atomic->size == 8);
}

TEST_CASE("short, grouped, attached and long forms all parse", "[options]") {
  auto r = parse({"send_bw", "-s64", "-n", "200", "-bF", "--report_gbits", "--qp=2",
                  "--out_json_file=/tmp/x.json", "-Q", "10", "host"});
  REQUIRE(r.is_ok());
  CHECK(r->size == 64);
  CHECK(r->iterations == 200);
  CHECK(r->bidirectional);
  CHECK(r->cpu_freq_f);
  CHECK(r->report_gbits);
  CHECK(r->num_qps == 2);
  CHECK(r->out_json);
  CHECK(r->json_path == "/tmp/x.json");
  CHECK(r->cq_mod == 10);
  CHECK(r->server == "host");
}

TEST_CASE("sizes accept K and M suffixes up to 8 MiB", "[options]") {
  CHECK(parse({"write_bw", "-s", "4K"})->size == 4096);
  CHECK(parse({"write_bw", "-s", "8M"})->size == 8u << 20);
  CHECK(error_of({"write_bw", "-s", "9000000"}) ==
        "-s 9000000: message size above the maximum 8388608");
  CHECK(error_of({"write_bw", "-s", "12Q"}) == "-s: '12Q': not a size");
  CHECK(error_of({"write_bw", "-s", "0"}) == "-s 0: message size must be at least 1");
}

TEST_CASE("unknown options and tests are one-line errors", "[options]") {
  CHECK(error_of({"write_lat", "--frobnicate"}) ==
        "unknown option '--frobnicate' (try 'rnicperf -h')");
  CHECK(error_of({"write_lat", "-Z"}) == "unknown option '-Z' (try 'rnicperf -h')");
  CHECK(error_of({"write_latency"}).rfind("unknown test 'write_latency'", 0) == 0);
  CHECK(error_of({}) == "no test given (usage: rnicperf <test> [options] [server])");
  CHECK(error_of({"write_lat", "-n"}) == "option '-n' needs a value");
  CHECK(error_of({"write_lat", "--iters"}) == "option '--iters' needs a value");
  CHECK(error_of({"write_lat", "--loopback=1"}) == "option '--loopback' takes no value");
  CHECK(error_of({"write_lat", "a", "b"}) == "unexpected argument 'b'");
}

TEST_CASE("numbers outside perftest's limits are rejected", "[options]") {
  CHECK(error_of({"write_lat", "-n", "4"}) == "-n 4: must be between 5 and 100000000");
  CHECK(error_of({"write_lat", "-n", "ten"}) == "-n 'ten': not a number");
  CHECK(error_of({"write_lat", "-n", "-5"}) == "-n '-5': not a number");
  CHECK(error_of({"write_lat", "-p", "70000"}) == "-p 70000: must be between 1 and 65535");
  CHECK(error_of({"write_lat", "-m", "1000"}) ==
        "-m 1000: MTU must be one of 256, 512, 1024, 2048, 4096");
  CHECK(error_of({"write_lat", "-I", "2000"}) == "-I 2000: must be between 0 and 1024");
}

TEST_CASE("cross-option rules", "[options]") {
  SECTION("tx depth is clamped to the iterations and CQ moderation to the tx depth") {
    auto r = parse({"write_bw", "-n", "50", "-s", "64"});
    REQUIRE(r.is_ok());
    CHECK(r->tx_depth == 50);
    CHECK(r->cq_mod == 50);
  }
  SECTION("a post list sets the CQ moderation and must divide the iterations") {
    auto r = parse({"write_bw", "-l", "8", "-n", "64"});
    REQUIRE(r.is_ok());
    CHECK(r->cq_mod == 8);
    CHECK(error_of({"write_bw", "-l", "8", "-n", "60"}) ==
          "-n 60: iterations must be a multiple of the post list size 8");
  }
  SECTION("duration mode takes a quarter as margins and drops peak") {
    auto r = parse({"write_bw", "-D", "8"});
    REQUIRE(r.is_ok());
    CHECK(r->margin_s == 2);
    CHECK(r->no_peak);
    CHECK(error_of({"write_bw", "-D", "4", "-f", "2"}) ==
          "-D 4 -f 2: the margins leave no time to measure");
  }
  SECTION("peak is dropped above 20000 iterations") {
    CHECK(parse({"write_bw", "-n", "20001"})->no_peak);
    CHECK_FALSE(parse({"write_bw", "-n", "20000"})->no_peak);
  }
  SECTION("latency-only and bandwidth-only options") {
    CHECK(error_of({"write_lat", "-b"}) == "write_lat: -b applies to bandwidth tests only");
    CHECK(error_of({"write_lat", "-q", "2"}) == "write_lat: latency tests use one QP (-q 2)");
    CHECK(error_of({"atomic_bw", "-s", "64"}) == "atomic_bw: -s 64: atomics are 8 bytes");
    CHECK(error_of({"atomic_lat", "-a"}) == "atomic_lat: -a is not available: atomics are 8 bytes");
    CHECK(error_of({"read_lat", "-I", "64"}) ==
          "read_lat: -I: READ and atomics carry no inline data");
    CHECK(error_of({"write_lat", "-a", "-s", "64"}) == "-a and -s exclude each other");
  }
  SECTION("loopback takes no server address") {
    CHECK(error_of({"write_lat", "--loopback", "10.0.0.1"}) ==
          "--loopback runs both ends here: do not give a server address ('10.0.0.1')");
    auto r = parse({"write_lat", "--loopback"});
    REQUIRE(r.is_ok());
    CHECK_FALSE(r->is_server());
  }
  SECTION("early post needs that many iterations") {
    CHECK(parse({"write_lat", "--early-post=16", "-n", "16"}).is_ok());
    CHECK(error_of({"write_lat", "--early-post=32", "-n", "16"}) ==
          "--early-post=32: more than the 16 iterations");
  }
  SECTION("first reply is a send_lat in one process, with its own connections") {
    CHECK(parse({"send_lat", "--loopback", "--first-reply=10", "--cm-poll-us=500"}).is_ok());
    CHECK(error_of({"write_lat", "--loopback", "--first-reply=10"}) ==
          "--first-reply: a request and a reply are SENDs; use send_lat");
    CHECK(error_of({"send_lat", "--first-reply=10"}) ==
          "--first-reply runs client and server in this process: add --loopback");
    CHECK(error_of({"send_lat", "--loopback", "--first-reply=10", "-R"}) ==
          "--first-reply makes its own connections; not with --early-post or -R");
    CHECK(error_of({"send_lat", "--loopback", "--first-reply=10", "-z"}) ==
          "--first-reply has no control channel to put on rdma_cm: not with -z");
    CHECK(error_of({"send_lat", "--loopback", "--cm-poll-us=10"}) ==
          "--cm-poll-us applies with --first-reply only");
  }
}

TEST_CASE("help and version need no test", "[options]") {
  auto h = parse({"-h"});
  REQUIRE(h.is_ok());
  CHECK(h->help);
  CHECK(rnicperf::usage_text().find("--early-post") != std::string::npos);
  CHECK(rnicperf::usage_text().find("--first-reply") != std::string::npos);
  CHECK(rnicperf::usage_text().find("sweep-max") == std::string::npos);
  CHECK(parse({"--version"})->version);
}

TEST_CASE("-h is generated from the option table: every option listed is one the parser takes, "
          "in perftest's layout", "[options]") {
  const std::string help = rnicperf::usage_text();
  std::istringstream lines(help);
  size_t listed = 0;
  bool in_options = false;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("Options (", 0) == 0) in_options = true;
    if (!in_options || line.empty() || line.back() == ':') continue;
    INFO(line);
    REQUIRE(line.size() > 26);
    if (line.compare(0, 28, std::string(28, ' ')) == 0) continue;  // a continuation line
    // "  -X, --name[=<arg>]" or "      --name[=<arg>]", padded to column 28, then the text;
    // or, when longer than 26 characters, alone on its line with the text under it.
    if (line.find(' ', 6) == std::string::npos && line.size() > 26) {
      CHECK((line.rfind("  -", 0) == 0 || line.rfind("      --", 0) == 0));
    } else {
      CHECK(line[27] == ' ');
      CHECK(line[28] != ' ');
    }
    const size_t dashes = line.find("--");
    REQUIRE(dashes != std::string::npos);
    const std::string name = line.substr(dashes + 2, line.find_first_of("= ", dashes) - dashes - 2);
    // The parser knows the name: any refusal is about its value or use, never "unknown".
    const std::string spelled = "--" + name;
    auto r = parse({"write_bw", spelled.c_str(), "1"});
    if (!r) CHECK(r.status().message().find("unknown option") == std::string::npos);
    ++listed;
  }
  CHECK(listed >= 40);
  // A row of the table with a value and two continuation lines, exactly.
  CHECK(help.find("      --first-reply=<n>     With send_lat --loopback: <n> fresh connections "
                  "through the\n                            CM for each way the server can reply "
                  "(early posting, its own\n                            queue; RTU delivered or "
                  "lost); times the client's connect to\n                            the reply "
                  "(docs/rnicperf.md, \"First reply\")\n") != std::string::npos);
  CHECK(help.find("  -n, --iters=<n>           Number of exchanges") != std::string::npos);
}

TEST_CASE("--wire, --dpdk-args and --dpdk-mem are parsed and checked", "[options]") {
  auto o = parse({"write_bw", "--wire", "dpdk", "--dpdk-args",
                  "--vdev=net_af_packet0,iface=veth0 --no-pci", "--dpdk-mem", "10.0.0.1"});
  REQUIRE(o.is_ok());
  CHECK(o->wire == "dpdk");
  CHECK(o->dpdk_args == "--vdev=net_af_packet0,iface=veth0 --no-pci");
  CHECK(o->dpdk_mem);
  CHECK(o->server == "10.0.0.1");
  auto defaults = parse({"write_bw"});
  REQUIRE(defaults.is_ok());
  CHECK(defaults->wire.empty());
  CHECK_FALSE(defaults->dpdk_mem);
  CHECK(parse({"write_bw", "--wire=udp"}).is_ok());
  CHECK(parse({"write_bw", "--wire=inproc", "--loopback"}).is_ok());
  CHECK(error_of({"write_bw", "--wire", "ib"}) == "--wire 'ib': one of inproc, udp, dpdk");
  CHECK(error_of({"write_bw", "--dpdk-args=--no-pci"}) ==
        "--dpdk-args applies with --wire dpdk only");
  CHECK(error_of({"write_bw", "--wire=inproc"}).find("add --loopback") != std::string::npos);
  CHECK(rnicperf::usage_text().find("--dpdk-args") != std::string::npos);
}

TEST_CASE("perftest's -c, -x, --output, --dont_xchg_versions and --mr_per_qp are understood",
          "[options]") {
  auto ok = parse({"write_bw", "-c", "RC", "-x", "3", "--output=bandwidth", "--dont_xchg_versions",
                   "--mr_per_qp"});
  REQUIRE(ok.is_ok());
  CHECK(ok->gid_index == 3);
  CHECK(ok->output == Options::Output::bandwidth);
  CHECK(parse({"write_bw", "--connection=RC"}).is_ok());
  CHECK(parse({"send_bw", "--output=message_rate"})->output == Options::Output::message_rate);
  CHECK(parse({"read_lat", "--output=latency"})->output == Options::Output::latency);
  CHECK(parse({"read_lat"})->gid_index == -1);
  CHECK(error_of({"write_bw", "-c", "DC"}) ==
        "-c DC: rnicdv's QPs are RC, UC, UD or XRC (DC and SRD are not implemented)");
  CHECK(error_of({"send_bw", "-c", "SRD"}).find("-c SRD: ") == 0);
  CHECK(error_of({"write_bw", "--output=everything"}) ==
        "--output=everything: one of bandwidth, message_rate, latency");
  CHECK(error_of({"write_bw", "--output=latency"}) ==
        "write_bw: --output=latency applies to latency tests (bandwidth or message_rate here)");
  CHECK(error_of({"write_lat", "--output=bandwidth"}) ==
        "write_lat: --output=bandwidth applies to bandwidth tests (latency here)");
  CHECK(error_of({"write_lat", "-x", "300"}).find("-x 300") != std::string::npos);
}

TEST_CASE("--perform_warm_up and --use_hugepages are checked against the test", "[options]") {
  CHECK(parse({"write_bw", "--perform_warm_up"})->warm_up);
  CHECK(parse({"read_bw", "--perform_warm_up"}).is_ok());
  CHECK(parse({"atomic_bw", "--perform_warm_up"}).is_ok());
  CHECK(error_of({"send_bw", "--perform_warm_up"}) ==
        "send_bw: --perform_warm_up applies to write, read and atomic bandwidth tests");
  CHECK(error_of({"write_lat", "--perform_warm_up"}) ==
        "write_lat: --perform_warm_up applies to write, read and atomic bandwidth tests");
  CHECK(parse({"write_lat", "--use_hugepages"})->use_hugepages);
  CHECK(error_of({"write_lat", "--use_hugepages", "--dpdk-mem"}) ==
        "--use_hugepages and --dpdk-mem exclude each other");
}

TEST_CASE("-e is taken by every test but the write ones, as perftest's -e", "[options]") {
  for (const char* t : {"send_lat", "send_bw", "read_lat", "read_bw", "atomic_lat", "atomic_bw"})
    CHECK(parse({t, "-e"})->use_event);
  CHECK(parse({"send_bw", "--events"})->use_event);
  CHECK_FALSE(parse({"send_bw"})->use_event);
  CHECK(error_of({"write_lat", "-e"}) ==
        "write_lat: -e is not an option of the write tests (their loops poll memory and the send "
        "CQ, as perftest's do)");
  CHECK(error_of({"write_bw", "-e"}).rfind("write_bw: -e is not an option", 0) == 0);
}

TEST_CASE("--plot takes an .svg or .png file for one latency run, refused elsewhere in one line",
          "[options][plot]") {
  auto ok = parse({"write_lat", "--loopback", "--plot=run.svg"});
  REQUIRE(ok.is_ok());
  CHECK(ok->plot == "run.svg");
  CHECK(parse({"read_lat", "10.0.0.1", "--plot", "run.png"}).is_ok());
  CHECK(parse({"send_lat", "--plot", "run.svg"}).is_ok());  // a send_lat server measures too

  CHECK(error_of({"write_lat", "--plot=run.pdf"}) ==
        "--plot 'run.pdf': the file must end in .svg or .png");
  CHECK(error_of({"write_lat", "--plot=.svg"}) ==
        "--plot '.svg': the file must end in .svg or .png");
  CHECK(error_of({"write_bw", "--loopback", "--plot=bw.svg"}) ==
        "write_bw: --plot draws the samples of a latency test; a bandwidth test keeps none");
  CHECK(error_of({"write_lat", "-D", "2", "--plot=x.svg"}) ==
        "write_lat: --plot needs the samples, which -D does not keep (use -n)");
  CHECK(error_of({"write_lat", "-a", "--plot=x.svg"}) ==
        "write_lat: --plot draws one size's samples; not with -a (use -s)");
  CHECK(error_of({"read_lat", "--plot=x.svg"}) ==
        "read_lat: --plot on the client: the server of a READ test measures nothing");
  CHECK(error_of({"send_lat", "--loopback", "--first-reply=5", "--plot=x.svg"}) ==
        "--plot: --first-reply prints its own table; nothing to draw");
  for (const char* bad : {"--plot=x.pdf", "--plot=x.svgz"}) {
    auto r = parse({"write_lat", bad});
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().message().find('\n') == std::string::npos);
  }
}

TEST_CASE("--plot-compare takes a list of reports, runs no test, and needs --plot", "[options][plot]") {
  auto ok = parse({"--plot-compare", "early.json,queue.json", "--plot=cmp.svg"});
  REQUIRE(ok.is_ok());
  CHECK(ok->plot_compare == std::vector<std::string>{"early.json", "queue.json"});
  CHECK(ok->plot == "cmp.svg");
  auto repeated = parse({"--plot-compare=a.json", "--plot-compare=b.json,c.json", "--plot=c.png"});
  REQUIRE(repeated.is_ok());
  CHECK(repeated->plot_compare == std::vector<std::string>{"a.json", "b.json", "c.json"});

  CHECK(error_of({"--plot-compare", "a.json,b.json"}) ==
        "--plot-compare needs --plot=<file.svg|file.png> to draw to");
  CHECK(error_of({"write_lat", "--plot-compare", "a.json", "--plot=x.svg"}) ==
        "--plot-compare draws saved JSON reports and runs no test: leave out 'write_lat'");
  CHECK(error_of({"--plot-compare", "a.json,,b.json", "--plot=x.svg"}) ==
        "--plot-compare 'a.json,,b.json': an empty file name in the list");
  CHECK(error_of({"--plot-compare", "a.json,", "--plot=x.svg"}) ==
        "--plot-compare 'a.json,': an empty file name in the list");
}

TEST_CASE("--run_infinitely implies duration mode with perftest's 5 s interval and no peak",
          "[options][run_infinitely]") {
  auto r = parse({"write_bw", "--run_infinitely", "-n", "10"});
  REQUIRE(r.is_ok());
  CHECK(r->run_infinitely);
  CHECK(r->duration_s == 5);
  CHECK(r->no_peak);
  CHECK(r->tx_depth == 128);  // not clamped to -n: the run has no count
  auto d = parse({"read_bw", "--run_infinitely", "-D", "2", "--stop-after=3"});
  REQUIRE(d.is_ok());
  CHECK(d->duration_s == 2);
  CHECK(d->stop_after == 3);
  CHECK(d->margin_s == 0);
  CHECK(parse({"atomic_bw", "--run_infinitely"}).is_ok());
}

TEST_CASE("--run_infinitely runs send_bw one way, and write, read and atomic bandwidth with -b",
          "[options][run_infinitely]") {
  for (const char* test : {"send_bw", "write_bw", "read_bw", "atomic_bw"}) {
    INFO(test);
    auto one_way = parse({test, "--run_infinitely", "-D", "1", "--stop-after=2"});
    REQUIRE(one_way.is_ok());
    CHECK(one_way->run_infinitely);
    CHECK(one_way->duration_s == 1);
    CHECK(one_way->no_peak);
    auto reversed = parse({test, "--run_infinitely", "--reversed"});
    REQUIRE(reversed.is_ok());
    CHECK(reversed->reversed);
  }
  for (const char* test : {"write_bw", "read_bw", "atomic_bw"}) {
    INFO(test);
    auto both = parse({test, "--run_infinitely", "-b", "-q", "2"});
    REQUIRE(both.is_ok());
    CHECK(both->bidirectional);
    CHECK(both->duration_s == 5);
  }
}

TEST_CASE("--run_infinitely is refused where perftest refuses it, and where it is not built",
          "[options][run_infinitely]") {
  CHECK(error_of({"write_lat", "--run_infinitely"}) ==
        "write_lat: run_infinitely exists only in BW tests for now");
  CHECK(error_of({"read_bw", "--run_infinitely", "-e"}) ==
        "read_bw: run_infinitely does not support events feature yet (-e)");
  // perftest's force_dependecies: no endless bidirectional SEND.
  CHECK(error_of({"send_bw", "--run_infinitely", "-b"}) ==
        "send_bw: run_infinitely mode is not supported in SEND, SEND_IMM or WRITE_IMM "
        "Bidirectional BW test (-b)");
  CHECK(error_of({"write_bw", "--run_infinitely", "-b", "--report-both"}) ==
        "--report-both and --run_infinitely exclude each other (an endless -b row is this "
        "side's count for both directions)");
  CHECK(error_of({"write_bw", "--run_infinitely", "-a"}) ==
        "-a and --run_infinitely exclude each other (one size, reported every interval)");
  CHECK(error_of({"write_bw", "--run_infinitely", "-D", "4", "-f", "1"}).find("no margins") !=
        std::string::npos);
  CHECK(error_of({"write_bw", "--run_infinitely", "--output=bandwidth"})
            .find("--output and --run_infinitely exclude each other") != std::string::npos);
  CHECK(error_of({"write_bw", "--run_infinitely", "--perform_warm_up"}) ==
        "--perform_warm_up and --run_infinitely exclude each other");
  CHECK(error_of({"write_bw", "--stop-after=2"}) ==
        "--stop-after applies with --run_infinitely only");
  CHECK(error_of({"write_bw", "--run_infinitely", "--stop-after=0"}).find("between 1 and") !=
        std::string::npos);
}

TEST_CASE("--cpu_util needs duration mode, as perftest's CPU column does", "[options][cpu_util]") {
  CHECK(error_of({"write_bw", "--cpu_util"}) ==
        "--cpu_util: CPU Utilization works only with Duration mode (-D)");
  CHECK(error_of({"send_lat", "--cpu_util", "-n", "100"}) ==
        "--cpu_util: CPU Utilization works only with Duration mode (-D)");
  auto bw = parse({"write_bw", "--cpu_util", "-D", "3"});
  REQUIRE(bw.is_ok());
  CHECK(bw->cpu_util);
  auto lat = parse({"send_lat", "--cpu_util", "-D", "3"});
  REQUIRE(lat.is_ok());
  CHECK(lat->cpu_util);
  // --run_infinitely is duration mode: each interval has its own figure.
  CHECK(parse({"write_bw", "--cpu_util", "--run_infinitely"}).is_ok());
}

TEST_CASE("--report-both needs a bidirectional bandwidth test", "[options][report_both]") {
  auto r = parse({"write_bw", "-b", "--report-both"});
  REQUIRE(r.is_ok());
  CHECK(r->report_both);
  CHECK(error_of({"write_bw", "--report-both"}) ==
        "write_bw: --report-both reports the two directions of a bidirectional bandwidth test: "
        "add -b");
  CHECK(error_of({"send_lat", "--report-both"}).find("add -b") != std::string::npos);
}

TEST_CASE("-h lists --run_infinitely, --cpu_util and --report-both, not --stop-after",
          "[options][help]") {
  const std::string help = rnicperf::usage_text();
  CHECK(help.find("      --run_infinitely      Run test forever, print results every "
                  "<duration> seconds") != std::string::npos);
  CHECK(help.find("      --cpu_util            Show CPU Utilization in report, valid only "
                  "in Duration mode") != std::string::npos);
  CHECK(help.find("      --report-both         With -b:") != std::string::npos);
  CHECK(help.find("stop-after") == std::string::npos);
}

TEST_CASE("--reversed turns a bandwidth test around: the server posts the operations",
          "[options][reversed]") {
  for (const char* test : {"write_bw", "send_bw", "read_bw", "atomic_bw"}) {
    INFO(test);
    auto server = parse({test, "--reversed"});
    REQUIRE(server.is_ok());
    CHECK(server->reversed);
    CHECK(server->is_server());
    CHECK(server->posts_operations(false));
    auto client = parse({test, "--reversed", "10.0.0.1"});
    REQUIRE(client.is_ok());
    CHECK_FALSE(client->posts_operations(true));
  }
  // Without it the client posts, as before.
  auto plain = parse({"write_bw"});
  REQUIRE(plain.is_ok());
  CHECK_FALSE(plain->reversed);
  CHECK(plain->posts_operations(true));
  CHECK_FALSE(plain->posts_operations(false));
  // With -D, -a, -q, -l, -R and an endless run it is the same run the other way round.
  CHECK(parse({"send_bw", "--reversed", "-D", "3", "-q", "2"}).is_ok());
  CHECK(parse({"write_bw", "--reversed", "-a", "-l", "4", "-n", "64"}).is_ok());
  CHECK(parse({"read_bw", "--reversed", "-R"}).is_ok());
  CHECK(parse({"write_bw", "--reversed", "--run_infinitely"}).is_ok());
}

TEST_CASE("--reversed is refused in one line where it has no meaning", "[options][reversed]") {
  CHECK(error_of({"write_lat", "--reversed"}) ==
        "write_lat: --reversed applies to bandwidth tests (the server sends, the client "
        "receives)");
  CHECK(error_of({"read_lat", "--reversed"}).find("applies to bandwidth tests") !=
        std::string::npos);
  CHECK(error_of({"send_bw", "--reversed", "-b"}) ==
        "send_bw: --reversed turns a one-way test around; with -b both sides send already");
  CHECK(error_of({"write_bw", "--reversed", "--early-post=8"}) ==
        "--early-post: the client posts in RTR; not with --reversed");
  CHECK(error_of({"write_bw", "--reversed=1"}) == "option '--reversed' takes no value");
}

TEST_CASE("--recv_post_list follows perftest: SEND bandwidth tests, a divisor of the "
          "iterations, within the RX depth",
          "[options][recv_post_list]") {
  auto d = parse({"send_bw"});
  REQUIRE(d.is_ok());
  CHECK(d->recv_post_list == 1);  // perftest's default: one receive per post call
  auto r = parse({"send_bw", "--recv_post_list=8", "-n", "800"});
  REQUIRE(r.is_ok());
  CHECK(r->recv_post_list == 8);
  CHECK(parse({"send_bw", "--recv_post_list", "16", "-b", "-n", "1600"})->recv_post_list == 16);
  // Duration mode has no count to divide.
  CHECK(parse({"send_bw", "--recv_post_list=7", "-D", "3"}).is_ok());
  CHECK(error_of({"send_bw", "--recv_post_list=8", "-n", "100"}) ==
        "-n 100: iterations must be a multiple of the receive post list size 8");
  CHECK(error_of({"send_bw", "--recv_post_list=3"}) ==
        "-n 1000: iterations must be a multiple of the receive post list size 3");
  CHECK(error_of({"send_bw", "--recv_post_list=64", "-r", "32", "-n", "640"}) ==
        "--recv_post_list=64: more than the RX depth 32 (-r): no list would ever be posted");
  CHECK(error_of({"send_lat", "--recv_post_list=2"}) ==
        "send_lat: --recv_post_list: receive post lists are supported in bandwidth tests only");
  CHECK(error_of({"write_bw", "--recv_post_list=2"}) ==
        "write_bw: --recv_post_list: only SEND tests post receives (send_bw)");
}

TEST_CASE("--recv_post_list refuses values that are not a list size", "[options][recv_post_list]") {
  CHECK(error_of({"send_bw", "--recv_post_list=0"}) ==
        "--recv_post_list 0: must be between 1 and 16384");
  CHECK(error_of({"send_bw", "--recv_post_list=16385"}) ==
        "--recv_post_list 16385: must be between 1 and 16384");
  CHECK(error_of({"send_bw", "--recv_post_list=-4"}) == "--recv_post_list '-4': not a number");
  CHECK(error_of({"send_bw", "--recv_post_list=four"}) ==
        "--recv_post_list 'four': not a number");
  CHECK(error_of({"send_bw", "--recv_post_list"}) == "option '--recv_post_list' needs a value");
}

TEST_CASE("-H, -U and -C are perftest's latency report options", "[options][dumps]") {
  auto r = parse({"write_lat", "-H", "-U", "-C"});
  REQUIRE(r.is_ok());
  CHECK(r->report_histogram);
  CHECK(r->report_unsorted);
  CHECK(r->report_cycles);
  auto l = parse({"read_lat", "--report-histogram", "--report-unsorted", "--report-cycles"});
  REQUIRE(l.is_ok());
  CHECK(l->report_histogram);
  CHECK(l->report_unsorted);
  CHECK(l->report_cycles);
  // Grouped, as getopt takes them; none is rnicperf's --histogram.
  auto g = parse({"send_lat", "-HUC"});
  REQUIRE(g.is_ok());
  CHECK((g->report_histogram && g->report_unsorted && g->report_cycles));
  CHECK_FALSE(g->histogram);
  // The passive server of read_lat takes them and prints nothing, as perftest's.
  CHECK(parse({"read_lat", "-H", "-U"}).is_ok());
}

TEST_CASE("-H, -U and -C are refused in one line where there are no samples",
          "[options][dumps]") {
  CHECK(error_of({"write_bw", "-H"}) ==
        "write_bw: -H (--report-histogram) is available only on latency tests");
  CHECK(error_of({"send_bw", "-U"}) ==
        "send_bw: -U (--report-unsorted) is available only on latency tests");
  CHECK(error_of({"read_bw", "--report-cycles"}) ==
        "read_bw: -C (--report-cycles) is available only on latency tests");
  CHECK(error_of({"write_lat", "-H", "-D", "2"}) ==
        "write_lat: -H (--report-histogram) needs the samples, which -D does not keep (use -n)");
  CHECK(error_of({"send_lat", "-C", "-D", "2"}).find("needs the samples") != std::string::npos);
  CHECK(error_of({"write_lat", "-C", "--histogram"}) ==
        "-C reports cycles; --histogram and --plot are drawn in usec: not together");
  CHECK(error_of({"write_lat", "-C", "--plot=x.svg"}).find("not together") != std::string::npos);
  CHECK(error_of({"write_lat", "-H1"}) == "unknown option '-1' (try 'rnicperf -h')");
  CHECK(error_of({"write_lat", "--report-cycles=1"}) == "option '--report-cycles' takes no value");
}

TEST_CASE("-h lists --reversed, --recv_post_list, -H, -U and -C", "[options][help]") {
  const std::string help = rnicperf::usage_text();
  CHECK(help.find("      --reversed            Reverse traffic direction - Server send to "
                  "client\n") != std::string::npos);
  CHECK(help.find("      --recv_post_list=<n>  Post receives in lists of <n> WRs") !=
        std::string::npos);
  CHECK(help.find("  -H, --report-histogram    Latency: print every sample, sorted") !=
        std::string::npos);
  CHECK(help.find("  -U, --report-unsorted     Latency: print every sample in the order") !=
        std::string::npos);
  CHECK(help.find("  -C, --report-cycles       Latency: report times in TSC cycles") !=
        std::string::npos);
}

TEST_CASE("QP attribute options take perftest's names and ranges", "[options][qos]") {
  auto o = parse({"write_bw", "-S", "15", "--tclass=0xb8", "--pkey_index", "3", "--retry_count=0",
                  "--flow_label=1,0x2,0xfffff"});
  REQUIRE(o.is_ok());
  CHECK(o->sl == 15);
  CHECK(o->traffic_class == 0xb8);
  CHECK(o->resolved_traffic_class() == 0xb8);
  CHECK(o->pkey_index == 3);
  CHECK(o->retry_count == 0);
  REQUIRE(o->flow_labels == std::vector<uint32_t>{1, 2, 0xfffff});
  CHECK(o->flow_label_of(3) == 1);  // round robin over the QPs
  CHECK(o->flow_label_of(5) == 0xfffff);
  CHECK(o->resolved_hop_limit() == 255);  // perftest's GRH hop limit

  auto cm = parse({"write_bw", "-R", "-T", "106", "--hop_limit", "9"});
  REQUIRE(cm.is_ok());
  CHECK(cm->resolved_traffic_class() == 106);
  CHECK(cm->resolved_hop_limit() == 9);
  CHECK(parse({"write_bw", "-R"})->resolved_hop_limit() == 64);
  CHECK(parse({"write_bw"})->retry_count == 7);

  CHECK(error_of({"write_bw", "-S", "16"}) == "-S 16: must be between 0 and 15");
  CHECK(error_of({"write_bw", "--tclass=256"}) == "--tclass 256: must be between 0 and 255");
  CHECK(error_of({"write_bw", "-L", "300"}) == "-L 300: must be between 0 and 255");
  CHECK(error_of({"write_bw", "--retry_count=8"}) == "--retry_count 8: must be between 0 and 7");
  CHECK(error_of({"write_bw", "--pkey_index=70000"}) ==
        "--pkey_index 70000: must be between 0 and 65535");
  CHECK(error_of({"write_bw", "--flow_label=1,,2"}) == "--flow_label '': not a number");
  CHECK(error_of({"write_bw", "--flow_label=0x100000"}) ==
        "--flow_label 1048576: must be between 0 and 1048575");
  CHECK(error_of({"write_bw", "-T", "10"}).find("-T 10: the TOS is rdma_cm's (add -R)") == 0);
  CHECK(error_of({"write_bw", "-R", "-T", "10", "--tclass=11"}) ==
        "-T 10 and --tclass 11: with -R the TOS is the traffic class; give one");
  CHECK(error_of({"write_bw", "-R", "--flow_label=1,2"}) ==
        "--flow_label: -R connects one QP; give one flow label");
}

TEST_CASE("the rate limiter follows perftest's rules and units", "[options][rate_limit]") {
  using Type = Options::RateLimitType;
  // A rate alone asks for the HW limiter, in Gb/s.
  auto hw = parse({"write_bw", "--rate_limit=2.5"});
  REQUIRE(hw.is_ok());
  CHECK(hw->rate_limit_type == Type::hw);
  CHECK(hw->device_rate_kbps() == 2'500'000);
  CHECK(hw->burst_size == 0);
  auto mib = parse({"read_lat", "--rate_limit=10", "--rate_units=M"});
  REQUIRE(mib.is_ok());
  CHECK(mib->device_rate_kbps() == 83'886);  // 10 x 2^20 x 8 bits

  // PP: MiB/s times 8 x 1024, a burst in bytes and a typical packet size, as perftest.
  auto pp = parse({"write_bw", "--rate_limit_type=PP", "--rate_units=M", "--rate_limit=10",
                   "--burst_size=8192", "--typical_pkt_size=1024"});
  REQUIRE(pp.is_ok());
  CHECK(pp->rate_limit_type == Type::pp);
  CHECK(pp->device_rate_kbps() == 81'920);
  CHECK(pp->burst_size == 8192);
  CHECK(pp->typical_pkt_size == 1024);

  // SW: bursts of a TX depth unless told, messages per second from the rate and the size.
  auto sw = parse({"write_bw", "-s", "4096", "--rate_limit_type=SW", "--rate_limit=1"});
  REQUIRE(sw.is_ok());
  CHECK(sw->rate_limit_type == Type::sw);
  CHECK(sw->device_rate_kbps() == 0);
  CHECK(sw->burst_size == sw->tx_depth);
  CHECK(sw->sw_rate_pps(4096) == Approx(1e9 / (4096 * 8)));
  auto swm = parse({"send_bw", "--rate_limit_type=SW", "--rate_units=M", "--rate_limit=4",
                    "--burst_size=10"});
  REQUIRE(swm.is_ok());
  CHECK(swm->sw_rate_pps(1024) == Approx(4096));
  CHECK(parse({"write_bw", "--rate_limit_type=SW", "--rate_units=p", "--rate_limit=500"})
            ->sw_rate_pps(65536) == Approx(500));

  CHECK(error_of({"write_bw", "--rate_limit=0"}) ==
        "--rate_limit '0': the rate must be a positive number");
  CHECK(error_of({"write_bw", "--rate_limit=-1"}) ==
        "--rate_limit '-1': the rate must be a positive number");
  CHECK(error_of({"write_bw", "--rate_units=k"}) ==
        "--rate_units=k: invalid rate limit units, use M (MiB/s), g (Gb/s) or p (packets/s)");
  CHECK(error_of({"write_bw", "--rate_limit_type=XX"}) ==
        "--rate_limit_type=XX: invalid rate limit type, use HW, SW or PP");
  CHECK(error_of({"write_bw", "--rate_limit_type=SW"}) ==
        "--rate_limit_type=SW: must specify a rate limit (--rate_limit=<rate>)");
  CHECK(error_of({"write_bw", "--burst_size=4"}).find("--burst_size: can't enable burst mode") ==
        0);
  CHECK(error_of({"write_bw", "--rate_limit=1", "--typical_pkt_size=64"})
            .find("--typical_pkt_size: typical packet size only supports the PP") == 0);
  CHECK(error_of({"write_bw", "--rate_limit=1", "--rate_units=p"})
            .find("--rate_units=p: pps rate limit units is not supported when setting HW") == 0);
  CHECK(error_of({"write_bw", "--rate_limit=1", "--burst_size=4"})
            .find("--burst_size: the HW limiter paces with the device's own burst") == 0);
  CHECK(error_of({"write_bw", "--rate_limit_type=PP", "--rate_limit=1"}) ==
        "--rate_limit_type=PP: packet pacing only supports MiB/s (--rate_units=M)");
  CHECK(error_of({"atomic_bw", "--rate_limit_type=SW", "--rate_limit=1"})
            .find("atomic_bw: the SW rate limiter runs in bandwidth tests only") == 0);
  CHECK(error_of({"send_bw", "-b", "--rate_limit_type=SW", "--rate_limit=1"})
            .find("send_bw: the SW rate limiter") == 0);
  CHECK(error_of({"write_lat", "--rate_limit_type=SW", "--rate_limit=1"})
            .find("write_lat: the SW rate limiter") == 0);
  CHECK(error_of({"write_bw", "-l", "4", "--rate_limit_type=SW", "--rate_limit=1",
                  "--burst_size=6"}) == "--burst_size 6: a burst is whole post lists of 4 (-l)");
  CHECK(error_of({"write_bw", "--run_infinitely", "--rate_limit=1"}) ==
        "--run_infinitely does not support the rate limiter (--rate_limit)");
  CHECK(error_of({"write_bw", "--rate_limit=5000"}) ==
        "--rate_limit 5000: 5000000000 kb/s is outside what a QP's rate limit holds (1 kb/s to "
        "4.29 Tb/s)");
}

TEST_CASE("-c UD is taken by the SEND tests, and refused with the reason elsewhere", "[options][ud]") {
  auto lat = parse({"send_lat", "-c", "UD"});
  REQUIRE(lat.is_ok());
  CHECK(lat->ud);
  auto bw = parse({"send_bw", "--connection=UD", "-q", "2", "-b"});
  REQUIRE(bw.is_ok());
  CHECK(bw->ud);
  CHECK_FALSE(parse({"send_bw", "-c", "RC"})->ud);
  // A datagram finding no receive is dropped: the receive queue holds the whole run (perftest).
  CHECK(parse({"send_bw", "-c", "UD", "-n", "2000"})->rx_depth == 2000);
  CHECK(parse({"send_bw", "-c", "UD", "-n", "100000"})->rx_depth == 16000);
  CHECK(parse({"send_bw", "-c", "UD", "-n", "2000", "-r", "64"})->rx_depth == 64);
  CHECK(parse({"send_bw", "-n", "2000"})->rx_depth == 512);

  CHECK(error_of({"write_bw", "-c", "UD"}) ==
        "write_bw: -c UD: unreliable datagrams carry SENDs only (send_lat, send_bw)");
  CHECK(error_of({"read_lat", "-c", "UD"}).find("read_lat: -c UD: unreliable datagrams") == 0);
  // UC: SEND and WRITE, its SEND receives posted for the whole run as UD's, not with -R.
  auto uc = parse({"write_bw", "-c", "UC", "-n", "2000"});
  REQUIRE(uc.is_ok());
  CHECK(uc->uc);
  CHECK_FALSE(uc->ud);
  CHECK(uc->rx_depth == 512);  // a WRITE takes no receive
  CHECK(parse({"send_bw", "-c", "UC", "-n", "2000"})->rx_depth == 2000);
  CHECK(parse({"send_lat", "-c", "UC", "--early-post=4"}).is_ok());
  CHECK(parse({"write_lat", "-c", "UC", "--rate_limit=10", "--rate_limit_type=HW"}).is_ok());
  CHECK(error_of({"read_bw", "-c", "UC"}) ==
        "read_bw: -c UC: unreliable connections carry SEND and RDMA WRITE only (send_lat, "
        "send_bw, write_lat, write_bw)");
  CHECK(error_of({"atomic_lat", "-c", "UC"}).find("atomic_lat: -c UC: ") == 0);
  CHECK(error_of({"send_lat", "-c", "UC", "-R"}).find("-c UC with -R: ") == 0);
  CHECK(error_of({"send_lat", "-c", "UC", "--first-reply=2"}).find("-c UC: --first-reply") ==
        0);
  CHECK(parse({"send_lat", "-c", "UD", "-R"}).is_ok());  // SIDR finds the peer's QP
  CHECK(parse({"send_bw", "-c", "UD", "-R", "-q", "2"}).is_ok());  // one request per QP
  CHECK(error_of({"write_bw", "-R", "-q", "2"}) == "-R: one QP per connection (-q 2)");
  CHECK(error_of({"send_lat", "-c", "UD", "--early-post=4"}).find("-c UD: --early-post") == 0);
  CHECK(error_of({"send_bw", "-c", "UD", "--rate_limit=1"}) ==
        "-c UD: the device paces RC QPs only (use --rate_limit_type=SW)");
  CHECK(parse({"send_bw", "-c", "UD", "--rate_limit_type=SW", "--rate_limit=1"}).is_ok());
  CHECK(parse({"send_bw", "-c", "UD", "--run_infinitely"}).is_ok());
  CHECK(parse({"send_bw", "-c", "UD", "-D", "2"}).is_ok());
}

TEST_CASE("-c XRC is taken by all eight tests and refused with rdma_cm, as perftest refuses it",
          "[options][xrc]") {
  for (const char* test : {"write_lat", "send_lat", "read_lat", "atomic_lat", "write_bw",
                           "send_bw", "read_bw", "atomic_bw"}) {
    INFO(test);
    auto o = parse({test, "-c", "XRC"});
    REQUIRE(o.is_ok());
    CHECK(o->xrc);
    CHECK_FALSE(o->ud);
    CHECK_FALSE(o->uc);
    // The typed calls name no SRQ: the loops post SendWr lists through post_send.
    CHECK(o->post_send_lists());
    CHECK_FALSE(o->old_post_send);
  }
  CHECK_FALSE(parse({"write_bw", "-c", "RC"})->xrc);
  CHECK_FALSE(parse({"write_bw"})->post_send_lists());
  auto bw = parse({"send_bw", "--connection=XRC", "-b", "-q", "2", "--recv_post_list=4",
                   "--early-post=4", "-e", "--use_old_post_send"});
  REQUIRE(bw.is_ok());
  CHECK(bw->xrc);
  CHECK(bw->num_qps == 2);  // perftest doubles it for -b: the endpoint makes the pairs
  CHECK(parse({"write_bw", "-c", "XRC", "-b", "--run_infinitely"}).is_ok());
  CHECK(parse({"write_bw", "-c", "XRC", "--rate_limit=1", "--rate_limit_type=HW"}).is_ok());
  // Unlike UD and UC, an XRC receiver loses nothing: the RX depth keeps its default.
  CHECK(parse({"send_bw", "-c", "XRC", "-n", "2000"})->rx_depth == 512);
  // perftest_parameters.c: " XRC does not support RDMA_CM" for -R; its -z cannot run XRC.
  CHECK(error_of({"write_lat", "-c", "XRC", "-R"}) == "-c XRC: XRC does not support RDMA_CM (-R)");
  CHECK(error_of({"send_bw", "-c", "XRC", "-z"}) == "-c XRC: XRC does not support RDMA_CM (-z)");
  CHECK(error_of({"read_bw", "-R", "-z", "-c", "XRC"}) ==
        "-c XRC: XRC does not support RDMA_CM (-R)");
  CHECK(error_of({"send_lat", "-c", "XRC", "--loopback", "--first-reply=2"}) ==
        "-c XRC: --first-reply times connections the connection manager makes, which are RC");
}

TEST_CASE("-w and -y set perftest's verifier limits on bandwidth tests, 0 or more",
          "[options][limits]") {
  auto none = parse({"write_bw"});
  REQUIRE(none.is_ok());
  CHECK(none->limit_bw < 0);
  CHECK(none->limit_msgrate < 0);
  auto both = parse({"write_bw", "-w", "120.5", "--limit_msgrate=0.25"});
  REQUIRE(both.is_ok());
  CHECK(both->limit_bw == Approx(120.5));
  CHECK(both->limit_msgrate == Approx(0.25));
  CHECK(parse({"send_bw", "--limit_bw", "0"})->limit_bw == 0);
  CHECK(parse({"atomic_bw", "-y3"})->limit_msgrate == Approx(3));

  CHECK(error_of({"write_bw", "-w", "-1"}) ==
        "-w -1: Invalid Minimum BW Limit (a limit is 0 or more)");
  CHECK(error_of({"write_bw", "-y", "-0.5"}) ==
        "-y -0.5: Invalid Minimum msgRate Limit (a limit is 0 or more)");
  CHECK(error_of({"write_bw", "-w", "fast"}) == "-w 'fast': not a number");
  CHECK(error_of({"write_bw", "-y", "1x"}) == "-y '1x': not a number");
  CHECK(error_of({"write_bw", "--limit_bw=nan"}) == "-w 'nan': not a number");
  CHECK(error_of({"write_lat", "-w", "1"}) ==
        "write_lat: -w: the verifier limits check bandwidth results (perftest has them in "
        "bandwidth tests only)");
  CHECK(error_of({"read_lat", "-y", "1"}).find("read_lat: -y: the verifier limits") == 0);
  CHECK(error_of({"write_bw", "--run_infinitely", "-y", "1"}) ==
        "-y: --run_infinitely has no final result to verify");
}

TEST_CASE("--use_old_post_send, --wait_destroy, -i, --dlid and --force-link parse",
          "[options][post_path]") {
  auto d = parse({"write_lat"});
  REQUIRE(d.is_ok());
  CHECK_FALSE(d->old_post_send);
  CHECK(d->wait_destroy_s == 0);
  CHECK(d->ib_port == 1);
  CHECK(d->dlid == 0);
  CHECK(d->force_link == Options::Link::unset);

  auto r = parse({"send_bw", "--use_old_post_send", "--wait_destroy=3", "-i", "1", "--dlid",
                  "0x12", "--force-link=Ethernet"});
  REQUIRE(r.is_ok());
  CHECK(r->old_post_send);
  CHECK(r->wait_destroy_s == 3);
  CHECK(r->ib_port == 1);
  CHECK(r->dlid == 0x12);
  CHECK(r->force_link == Options::Link::ethernet);
  CHECK(parse({"write_bw", "--force-link", "ethernet"})->force_link == Options::Link::ethernet);
  // The port is checked against the device when it is opened; only 0 is refused here.
  CHECK(parse({"write_bw", "--ib-port=2"})->ib_port == 2);

  CHECK(error_of({"write_bw", "-i", "0"}) == "-i 0: IB Port can't be less than 1");
  CHECK(error_of({"write_bw", "-i", "256"}) == "-i 256: must be between 0 and 255");
  CHECK(error_of({"write_bw", "--wait_destroy=-1"}) == "--wait_destroy '-1': not a number");
  CHECK(error_of({"write_bw", "--dlid=65536"}) == "--dlid 65536: must be between 0 and 65535");
  CHECK(error_of({"write_bw", "--force-link=Infiniband"}) ==
        "--force-link=Infiniband: Invalid link layer value should be IB or ETHERNET.");
  CHECK(error_of({"write_bw", "--force-link=IB"}) ==
        "--force-link=IB: rnicdv's devices are RoCE devices, whose link is Ethernet: there is no "
        "InfiniBand link (no LIDs, no subnet manager) to run on");
  CHECK(error_of({"send_lat", "--loopback", "--first-reply=2", "--use_old_post_send"}) ==
        "--use_old_post_send: --first-reply's replies are posted its own way");
}

TEST_CASE("--mmap and --mmap-offset: a file and an offset in whole pages", "[options][mmap]") {
  auto r = parse({"write_bw", "--mmap=/tmp/buffers", "--mmap-offset", "8192"});
  REQUIRE(r.is_ok());
  CHECK(r->mmap_file == "/tmp/buffers");
  CHECK(r->mmap_offset == 8192);
  CHECK(parse({"write_bw", "--mmap", "/tmp/buffers"})->mmap_offset == 0);

  CHECK(error_of({"write_bw", "--mmap="}) == "--mmap: empty file name");
  CHECK(error_of({"write_bw", "--mmap-offset=4096"}) == "--mmap-offset applies with --mmap only");
  const std::string unaligned = error_of({"write_bw", "--mmap=/tmp/b", "--mmap-offset=100"});
  CHECK(unaligned.find("--mmap-offset 100: not a multiple of the page size ") == 0);
  CHECK(error_of({"write_bw", "--mmap=/tmp/b", "--mmap-offset=x"}) ==
        "--mmap-offset 'x': not a number");
  CHECK(error_of({"write_bw", "--mmap=/tmp/b", "--use_hugepages"}) ==
        "--mmap and --use_hugepages exclude each other (both choose the buffers' memory)");
  CHECK(error_of({"write_bw", "--mmap=/tmp/b", "--dpdk-mem"}) ==
        "--mmap and --dpdk-mem exclude each other (both choose the buffers' memory)");
}

TEST_CASE("-h lists -w, -y, --use_old_post_send, --wait_destroy, -i, --mmap, --force-link and "
          "--dlid",
          "[options][help]") {
  const std::string help = rnicperf::usage_text();
  CHECK(help.find("  -w, --limit_bw=<value>    Set verifier limit for bandwidth") !=
        std::string::npos);
  CHECK(help.find("  -y, --limit_msgrate=<value>\n                            Set verifier "
                  "limit for Msg Rate") != std::string::npos);
  CHECK(help.find("      --use_old_post_send   Use old post send flow") != std::string::npos);
  CHECK(help.find("      --wait_destroy=<seconds>\n                            Wait <seconds> "
                  "before destroying") != std::string::npos);
  CHECK(help.find("  -i, --ib-port=<port>      Use port <port> of the device") !=
        std::string::npos);
  CHECK(help.find("      --mmap=<file>         Use an mmap'd file") != std::string::npos);
  CHECK(help.find("      --mmap-offset=<offset>\n") != std::string::npos);
  CHECK(help.find("      --force-link=<value>  Force the link type") != std::string::npos);
  CHECK(help.find("      --dlid=<lid>          Shown as the remote LID") != std::string::npos);
}

TEST_CASE("-W takes perftest's comma-separated counter names and refuses an empty one",
          "[options][counters]") {
  auto o = parse({"write_bw", "-W", "counters/port_xmit_data,hw_counters/out_of_buffer"});
  REQUIRE(o.is_ok());
  CHECK(o->counters ==
        std::vector<std::string>{"counters/port_xmit_data", "hw_counters/out_of_buffer"});
  o = parse({"send_lat", "--report-counters=counters/port_rcv_packets"});
  REQUIRE(o.is_ok());
  CHECK(o->counters == std::vector<std::string>{"counters/port_rcv_packets"});
  CHECK(parse({"write_bw"})->counters.empty());
  for (auto bad : {"", ",", "counters/a,", ",counters/a", "counters/a,,counters/b"}) {
    INFO("-W '" << bad << "'");
    CHECK(error_of({"write_bw", "-W", bad}).find("-W: an empty counter name in \"") == 0);
  }
  const std::string help = rnicperf::usage_text();
  CHECK(help.find("  -W, --report-counters=<list>\n                            Report performance "
                  "counter change after each result row") != std::string::npos);
}

TEST_CASE("--ipv6, --ipv6-addr and --bind_source_ip follow perftest's rules", "[options]") {
  auto r = parse({"write_bw", "--ipv6", "--ipv6-addr", "--bind_source_ip", "fd00::2", "fd00::1"});
  REQUIRE(r);
  CHECK(r->ipv6);
  CHECK(r->ipv6_addr);
  CHECK(r->bind_source_ip == "fd00::2");
  auto v4 = parse({"write_bw", "--bind_source_ip=10.0.0.2", "10.0.0.1"});
  REQUIRE(v4);
  CHECK(v4->bind_source_ip == "10.0.0.2");
  CHECK_FALSE(v4->ipv6_addr);
  // perftest: "--ipv6-addr flag must be used when specifying an IPv6 source IP".
  CHECK(error_of({"write_bw", "--bind_source_ip", "fd00::2"}) ==
        "--bind_source_ip fd00::2: an IPv6 source needs --ipv6-addr");
  CHECK(error_of({"write_bw", "--ipv6-addr", "--bind_source_ip", "10.0.0.2"}) ==
        "--bind_source_ip 10.0.0.2: --ipv6-addr makes the control channel IPv6, so the source "
        "must be IPv6");
  CHECK(error_of({"write_bw", "--bind_source_ip", "host.example"}) ==
        "--bind_source_ip: IP address \"host.example\": neither IPv4 nor IPv6");
  CHECK(error_of({"write_bw", "--bind_source_ip", "0.0.0.0"}) ==
        "--bind_source_ip 0.0.0.0: not the address of an interface");
  CHECK(error_of({"write_bw", "--loopback", "--ipv6-addr"}) ==
        "--loopback has no control channel to address: leave out --ipv6-addr");
}

TEST_CASE("with -z (--com_rdma_cm) the control channel is rdma_cm's, with or without -R",
          "[options]") {
  CHECK(parse({"send_bw", "-z"})->com_rdma_cm);
  CHECK(parse({"send_bw", "--com_rdma_cm"})->com_rdma_cm);
  CHECK_FALSE(parse({"send_bw"})->com_rdma_cm);
  CHECK_FALSE(parse({"send_bw", "-R"})->com_rdma_cm);  // -R alone keeps TCP (docs/rnicperf.md)
  auto both = parse({"write_lat", "-R", "-z"});
  REQUIRE(both.is_ok());
  CHECK(both->rdma_cm);
  CHECK(both->com_rdma_cm);
  CHECK(rnicperf::usage_text().find("  -z, --com_rdma_cm ") != std::string::npos);
}

TEST_CASE("-O doubles the QPs of a bandwidth test, as perftest's num_of_qps *= 2",
          "[options][dual_port]") {
  auto one = parse({"write_bw", "-O"});
  REQUIRE(one.is_ok());
  CHECK(one->dual_port);
  CHECK(one->num_qps == 2);
  CHECK(one->ib_port == 1);
  CHECK(one->highest_port() == 2);
  auto three = parse({"send_bw", "--dualport", "-q", "3"});
  REQUIRE(three.is_ok());
  CHECK(three->num_qps == 6);
  // Any transport and the other bandwidth tests; -z keeps its control channel on port 1.
  CHECK(parse({"read_bw", "-O", "-c", "XRC", "-b"})->num_qps == 2);
  CHECK(parse({"send_bw", "-O", "-c", "UD", "-z"})->num_qps == 2);
  CHECK(parse({"atomic_bw", "-O", "-i", "1"})->num_qps == 2);
  auto plain = parse({"write_bw", "-q", "3"});
  REQUIRE(plain.is_ok());
  CHECK_FALSE(plain->dual_port);
  CHECK(plain->num_qps == 3);
  CHECK(plain->highest_port() == 1);
  CHECK(parse({"write_bw", "-i", "2"})->highest_port() == 2);

  const std::string help = rnicperf::usage_text();
  CHECK(help.find("  -O, --dualport            Run test in dual-port mode: twice -q QPs, the "
                  "first half on\n                            port 1, the second half on port 2 "
                  "(bandwidth tests)\n") != std::string::npos);
  CHECK(help.find("      --report-per-port     Report BW data on both ports when running "
                  "Dualport and\n                            Duration mode (-O -D)\n") !=
        std::string::npos);
}

TEST_CASE("-O and --report-per-port are refused where perftest refuses them, with its words",
          "[options][dual_port]") {
  // perftest's force_dependecies: " Dual-port mode only supports BW tests."
  for (const char* test : {"write_lat", "send_lat", "read_lat", "atomic_lat"}) {
    INFO(test);
    CHECK(error_of({test, "-O"}) ==
          std::string(test) + ": -O: Dual-port mode only supports BW tests.");
  }
  CHECK(error_of({"write_bw", "-O", "-R"}) ==
        "-O with -R: Perftest still doesn't support Dual Port with rdma_cm (the connection "
        "manager connects one QP)");
  // perftest's -O sets port 1 over an earlier -i, and a later -i moves the first half: both
  // would put a half elsewhere than asked, so -i other than 1 is refused in either order.
  const std::string with_i2 =
      "-O and -i 2: dual-port mode puts the first half of the QPs on port 1 and the second "
      "half on port 2 (perftest's -O resets -i to 1): leave out -i";
  CHECK(error_of({"write_bw", "-O", "-i", "2"}) == with_i2);
  CHECK(error_of({"write_bw", "--ib-port=2", "--dualport"}) == with_i2);
  CHECK(error_of({"write_bw", "-O", "-q", "8193"}) == "-O -q 8193: twice 8193 QPs is above 16384");
  CHECK(error_of({"write_bw", "-R", "-i", "2"}) ==
        "-R with -i 2: the connection manager connects QPs on port 1, where it runs");

  // perftest: "report per port feature work only with Duration and Dualport".
  const std::string per_port =
      "--report-per-port: report per port feature work only with Duration and Dualport (-D "
      "and -O)";
  CHECK(error_of({"write_bw", "--report-per-port"}) == per_port);
  CHECK(error_of({"write_bw", "--report-per-port", "-O"}) == per_port);
  CHECK(error_of({"send_bw", "--report-per-port", "-D", "2"}) == per_port);
  // --run_infinitely's interval is not a -D given (perftest's test_type stays ITERATIONS).
  CHECK(error_of({"write_bw", "--report-per-port", "-O", "--run_infinitely"}) == per_port);
  CHECK(error_of({"write_bw", "--report-per-port", "-O", "--run_infinitely", "-D", "1"}) ==
        "--report-per-port and --run_infinitely exclude each other (perftest's endless rows "
        "count no ports: their port columns read 0)");
  auto ok = parse({"send_bw", "-O", "-D", "2", "--report-per-port"});
  REQUIRE(ok.is_ok());
  CHECK(ok->report_per_port);
  CHECK(ok->num_qps == 2);
}
