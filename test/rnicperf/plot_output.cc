// SPDX-License-Identifier: BSD-3-Clause
// --plot and --plot-compare end to end: rnicperf runs (--loopback, few iterations), its
// matplotlib script draws, and the SVG is parsed back (xml.etree) for its marks and header.
// Needs Debian's python3-matplotlib (tools/dev installs it).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "json_check.h"
#include "subprocess.h"

using namespace rnicperf_test;

namespace {

// Runs python3 on `script` with `arg` (json_check.h).
std::string python(const std::string& script, const std::string& arg) {
  return run_python(script, arg, 60);
}

// The SVG's text, one <text> element a line, or "ERROR: ..." when it is not well-formed XML
// or its root is not an <svg>.
std::string svg_text(const std::string& path) {
  return python(
      "import sys, xml.etree.ElementTree as ET\n"
      "try:\n"
      "    root = ET.parse(sys.argv[1]).getroot()\n"
      "except Exception as e:\n"
      "    print('ERROR: ' + str(e)); sys.exit(0)\n"
      "if root.tag != '{http://www.w3.org/2000/svg}svg':\n"
      "    print('ERROR: root ' + root.tag); sys.exit(0)\n"
      "for el in root.iter('{http://www.w3.org/2000/svg}text'):\n"
      "    print(''.join(el.itertext()))\n",
      path);
}

// Figures the SVG's axes: <g id="axes_N"> groups.
std::string svg_axes(const std::string& path) {
  return python(
      "import sys, xml.etree.ElementTree as ET\n"
      "root = ET.parse(sys.argv[1]).getroot()\n"
      "print(sum(1 for g in root.iter('{http://www.w3.org/2000/svg}g')\n"
      "          if g.get('id', '').startswith('axes_')))\n",
      path);
}

bool has(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

std::string tmp(const char* tag, const char* ext) {
  return "/tmp/rnicperf-" + std::to_string(::getpid()) + "-" + tag + ext;
}

bool exists(const std::string& path) {
  return access(path.c_str(), F_OK) == 0;
}

}  // namespace

TEST_CASE("--plot draws the run's histogram and CDF with its percentile marks and header",
          "[e2e][plot]") {
  const std::string svg = tmp("run", ".svg");
  const std::string json = tmp("run", ".json");
  ProcessResult r = run_rnicperf({"write_lat", "--loopback", "-n", "200", "--timeout=20",
                                  "--out_json_file=" + json, "--plot=" + svg},
                                 180);
  INFO("stdout:\n" << r.out << "\nstderr:\n" << r.err);
  REQUIRE_FALSE(r.timed_out);
  REQUIRE(r.exit_code == 0);
  const std::string text = svg_text(svg);
  INFO("SVG text:\n" << text);
  REQUIRE_FALSE(has(text, "ERROR"));
  CHECK(svg_axes(svg) == "2");  // histogram and CDF
  CHECK(has(text, "Latency histogram"));
  CHECK(has(text, "Latency CDF"));
  // The header: test, size, iterations, device and wire, date.
  CHECK(has(text, "RDMA Write Latency Test | 2 B | 200 iterations | sim1, wire inproc"));
  const std::string date = json_query(json, "d['test_info']['Date']");
  CHECK(date.size() == 23);
  CHECK(has(text, date));
  // Each mark, with the figure the run reported (two decimals, as the table prints).
  const std::vector<std::pair<std::string, std::string>> marks = {
      {"p50", "t_typical"},      {"p90", "percentile_90"}, {"p99", "percentile_99"},
      {"p99.9", "percentile_99_9"}, {"max", "t_max"}};
  for (const auto& [label, field] : marks) {
    const std::string value = json_query(json, "'%.2f' % d['results'][0]['" + field + "']");
    INFO(label << " = " << value);
    CHECK(has(text, label + " " + value));
  }
  // --plot keeps the distribution in the report; the histogram table is printed only with
  // --histogram.
  CHECK(json_query(json, "d['results'][0]['histogram']['samples']") == "199");
  CHECK(json_query(json, "d['results'][0]['cdf']['points'][-1][1]") == "1.0");
  CHECK_FALSE(has(r.out, "Latency histogram"));
  std::remove(svg.c_str());
  std::remove(json.c_str());
}

TEST_CASE("--plot writes a PNG, and leaves no temporary report behind without --out_json",
          "[e2e][plot]") {
  const std::string png = tmp("run", ".png");
  const std::string dir = tmp("tmpdir", "");
  REQUIRE(system(("rm -rf '" + dir + "' && mkdir '" + dir + "'").c_str()) == 0);
  setenv("TMPDIR", dir.c_str(), 1);
  ProcessResult r =
      run_rnicperf({"read_lat", "--loopback", "-n", "50", "--timeout=20", "--plot", png}, 180);
  unsetenv("TMPDIR");
  INFO("stdout:\n" << r.out << "\nstderr:\n" << r.err);
  REQUIRE_FALSE(r.timed_out);
  REQUIRE(r.exit_code == 0);
  std::ifstream in(png, std::ios::binary);
  std::string magic(8, '\0');
  in.read(magic.data(), 8);
  CHECK(magic == "\x89PNG\r\n\x1a\n");
  CHECK(python("import os, sys; print(len(os.listdir(sys.argv[1])))", dir) == "0");
  std::remove(png.c_str());
  REQUIRE(system(("rm -rf '" + dir + "'").c_str()) == 0);
}

TEST_CASE("--plot-compare lays two runs over each other in one figure, each series named",
          "[e2e][plot]") {
  const std::string a = tmp("early", ".json"), b = tmp("queue", ".json");
  for (const auto& [test, path] : {std::pair<std::string, std::string>{"write_lat", a},
                                   {"send_lat", b}}) {
    ProcessResult r = run_rnicperf({test, "--loopback", "-n", "100", "--timeout=20", "--histogram",
                                    "--out_json_file=" + path},
                                   180);
    INFO(test << " stderr:\n" << r.err);
    REQUIRE(r.exit_code == 0);
  }
  const std::string svg = tmp("compare", ".svg");
  ProcessResult r = run_rnicperf({"--plot-compare", a + "," + b, "--plot=" + svg}, 120);
  INFO("stderr:\n" << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.empty());  // no test ran
  const std::string text = svg_text(svg);
  INFO("SVG text:\n" << text);
  REQUIRE_FALSE(has(text, "ERROR"));
  CHECK(svg_axes(svg) == "2");  // one figure: the same two panels, both series on each
  const std::string early = "rnicperf-" + std::to_string(::getpid()) + "-early";
  const std::string queue = "rnicperf-" + std::to_string(::getpid()) + "-queue";
  // Named in the legends, in the header lines, and on their marks.
  CHECK(has(text, early + ": RDMA Write Latency Test | 2 B | 100 iterations"));
  CHECK(has(text, queue + ": Send Latency Test | 2 B | 100 iterations"));
  // Each series' marks carry its name and its figures (marks of equal value share a label,
  // "p99 = p99.9 = max 12.34").
  for (const auto& [name, file] : {std::pair<std::string, std::string>{early, a}, {queue, b}}) {
    const std::string p99 = json_query(file, "'%.2f' % d['results'][0]['percentile_99']");
    bool labelled = false;
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);)
      labelled = labelled || (line.rfind(name + " ", 0) == 0 && has(line, "p99") &&
                              line.size() >= p99.size() &&
                              line.compare(line.size() - p99.size(), p99.size(), p99) == 0);
    INFO(name << " p99 " << p99);
    CHECK(labelled);
  }
  int legend_entries = 0;
  for (size_t at = 0; (at = text.find("\n" + early + "\n", at)) != std::string::npos; ++at)
    ++legend_entries;
  CHECK(legend_entries == 2);  // one legend per panel
  std::remove(a.c_str());
  std::remove(b.c_str());
  std::remove(svg.c_str());
}

TEST_CASE("reports --plot-compare cannot draw are refused in one line naming the file",
          "[e2e][plot]") {
  const std::string bw = tmp("bw", ".json"), plain = tmp("plain", ".json");
  ProcessResult run = run_rnicperf({"write_bw", "--loopback", "-n", "50", "-s", "64",
                                    "--timeout=20", "--out_json_file=" + bw},
                                   180);
  REQUIRE(run.exit_code == 0);
  run = run_rnicperf(
      {"write_lat", "--loopback", "-n", "20", "--timeout=20", "--out_json_file=" + plain}, 180);
  REQUIRE(run.exit_code == 0);
  const std::string svg = tmp("refused", ".svg");
  const std::string missing = tmp("missing", ".json");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {bw, "rnicperf: " + bw + ": a bandwidth result (write_bw); only latency runs have a "
                               "distribution to draw\n"},
      {plain, "rnicperf: " + plain + ": no latency histogram in the report (a run with "
                                     "--histogram or --plot writes one; -D runs keep no "
                                     "samples)\n"},
      {missing, "rnicperf: " + missing + ": cannot read: No such file or directory\n"},
      {"/etc/hostname", "rnicperf: /etc/hostname: not a JSON document"},
  };
  for (const auto& [file, message] : cases) {
    ProcessResult r = run_rnicperf({"--plot-compare", file, "--plot=" + svg}, 120);
    INFO(file);
    CHECK(r.exit_code == 1);
    CHECK(r.err.rfind(message, 0) == 0);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    CHECK_FALSE(exists(svg));
  }
  std::remove(bw.c_str());
  std::remove(plain.c_str());
}

TEST_CASE("--plot without matplotlib fails in one line naming the Debian package",
          "[e2e][plot]") {
  // A module named matplotlib that fails to import, ahead of the real one on the path.
  const std::string dir = tmp("nompl", "");
  REQUIRE(system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "/matplotlib' && echo 'raise "
                  "ImportError(\"No module named matplotlib\")' > '" + dir +
                  "/matplotlib/__init__.py'").c_str()) == 0);
  const std::string json = tmp("nompl", ".json"), svg = tmp("nompl", ".svg");
  ProcessResult run = run_rnicperf({"write_lat", "--loopback", "-n", "20", "--timeout=20",
                                    "--histogram", "--out_json_file=" + json},
                                   180);
  REQUIRE(run.exit_code == 0);
  setenv("PYTHONPATH", dir.c_str(), 1);
  ProcessResult r = run_rnicperf({"--plot-compare", json, "--plot=" + svg}, 120);
  unsetenv("PYTHONPATH");
  INFO("stderr:\n" << r.err);
  CHECK(r.exit_code == 1);
  CHECK(r.err.rfind("rnicperf: --plot needs matplotlib for Debian's python3: apt-get install "
                    "python3-matplotlib (",
                    0) == 0);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  CHECK_FALSE(exists(svg));
  REQUIRE(system(("rm -rf '" + dir + "'").c_str()) == 0);
  std::remove(json.c_str());
}

TEST_CASE("rnicperf refuses a --plot it cannot draw in one line, before running",
          "[e2e][plot]") {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"write_lat", "--loopback", "--plot=x.jpg"},
           {"write_bw", "--loopback", "--plot=x.svg"},
           {"--plot-compare", "a.json"}}) {
    ProcessResult r = run_rnicperf(args, 60);
    INFO(args[0] << " " << args[1] << ": " << r.err);
    CHECK(r.exit_code == 1);
    CHECK(r.err.rfind("rnicperf: ", 0) == 0);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    CHECK(r.out.empty());
  }
}
