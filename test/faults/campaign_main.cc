// SPDX-License-Identifier: BSD-3-Clause
// rnicdv-faults: the long fault campaign (tools/dev faults). Runs seeds first..first+N-1,
// prints the table of totals, writes JSON, and exits 1 if any run failed.
//
//   rnicdv-faults [--seeds N] [--first-seed S] [--wire inproc|udp|both] [--udp-every K]
//                 [--max-rate R] [--rates P,P,...] [--no-mib] [--json PATH] [--jobs J]
//                 [--verbose]
//
// --rates runs the seeds once per fault rate (percent, every run at exactly that rate) and
// prints one row per rate: runs, connections that never came up, transport give-ups, lost
// and duplicated. Lost and duplicated must stay 0 at every rate; the other two are what
// extreme loss costs.
//
// Runs are independent (each has its own fabric), so --jobs runs J of them at once; a
// deterministic run gives the same result whichever thread runs it.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "campaign.h"

using namespace rnicdv::faults;

namespace {

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "rnicdv-faults: %s\n"
               "usage: rnicdv-faults [--seeds N] [--first-seed S] [--wire inproc|udp|both]\n"
               "                     [--udp-every K] [--max-rate R] [--rates P,P,...] [--no-mib]\n"
               "                     [--json PATH] [--jobs J] [--verbose]\n",
               why);
  std::exit(2);
}

uint64_t number(const char* opt, const char* s) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(s, &end, 10);
  if (errno || end == s || *end) usage((std::string(opt) + ": not a number: " + s).c_str());
  return v;
}

// Runs seeds first..first+count-1 on `jobs` threads; returns the totals and the failed runs.
Totals run_seeds(uint64_t first, uint64_t count, const SpecOptions& o, uint64_t jobs,
                 bool verbose, std::vector<RunResult>* failed) {
  Totals totals;
  std::mutex mu;  // totals, failed, next_seed, stdout
  uint64_t next_seed = first, done = 0;
  const auto started = std::chrono::steady_clock::now();
  auto worker = [&] {
    for (;;) {
      uint64_t seed;
      {
        std::lock_guard lock(mu);
        if (next_seed >= first + count) return;
        seed = next_seed++;
      }
      const RunSpec spec = spec_for_seed(seed, o);
      RunResult r = run(spec);
      std::lock_guard lock(mu);
      totals.add(r);
      ++done;
      if (verbose || !r.passed)
        std::printf("%s %s: %.1f ms, %" PRIu64 " faults, %" PRIu64 " retransmits%s%s\n",
                    r.passed ? "ok  " : "FAIL", spec.describe().c_str(), r.real_ms,
                    r.faults_injected, r.retransmits,
                    r.connection_failed ? ", connection never came up: " : "",
                    r.connection_failure.c_str());
      for (const std::string& f : r.failures) std::printf("       %s\n", f.c_str());
      if (!verbose && done % 100 == 0)
        std::printf("%" PRIu64 "/%" PRIu64 " runs, %" PRIu64 " failed, %.0f s\n", done, count,
                    done - totals.passed,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - started)
                        .count());
      std::fflush(stdout);
      if (!r.passed) failed->push_back(std::move(r));
    }
  };
  std::vector<std::thread> threads;
  for (uint64_t j = 1; j < jobs; ++j) threads.emplace_back(worker);
  worker();
  for (std::thread& t : threads) t.join();
  std::sort(failed->begin(), failed->end(),
            [](const RunResult& x, const RunResult& y) { return x.spec.seed < y.spec.seed; });
  std::sort(totals.failed_seeds.begin(), totals.failed_seeds.end());
  std::sort(totals.gave_up_seeds.begin(), totals.gave_up_seeds.end());
  std::sort(totals.connection_failed_seeds.begin(), totals.connection_failed_seeds.end());
  return totals;
}

std::vector<double> parse_rates(const std::string& list) {
  std::vector<double> out;
  size_t at = 0;
  while (at <= list.size()) {
    const size_t comma = list.find(',', at);
    const std::string item = list.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    const uint64_t p = number("--rates", item.c_str());
    if (p > 100) usage("--rates: percentages from 0 to 100");
    out.push_back(static_cast<double>(p) / 100.0);
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t seeds = 1000, first = 1, jobs = 1;
  SpecOptions o;
  std::string json_path;
  std::vector<double> rates;
  bool verbose = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage((a + " needs a value").c_str());
      return argv[++i];
    };
    if (a == "--seeds") {
      seeds = number("--seeds", value());
    } else if (a == "--first-seed") {
      first = number("--first-seed", value());
    } else if (a == "--wire") {
      const std::string w = value();
      if (w == "inproc") o.wires = SpecOptions::Wires::inproc;
      else if (w == "udp") o.wires = SpecOptions::Wires::udp;
      else if (w == "both") o.wires = SpecOptions::Wires::both;
      else usage(("--wire: unknown wire " + w).c_str());
    } else if (a == "--udp-every") {
      o.udp_every = static_cast<uint32_t>(number("--udp-every", value()));
    } else if (a == "--max-rate") {
      const char* v = value();
      char* end = nullptr;
      o.max_rate = std::strtod(v, &end);
      if (end == v || *end || !(o.max_rate >= 0 && o.max_rate <= 1))
        usage("--max-rate: a probability in [0, 1]");
    } else if (a == "--rates") {
      rates = parse_rates(value());
    } else if (a == "--no-mib") {
      o.multi_mib = false;
    } else if (a == "--json") {
      json_path = value();
    } else if (a == "--jobs" || a == "-j") {
      jobs = number("--jobs", value());
      if (jobs == 0 || jobs > 64) usage("--jobs: 1 to 64");
    } else if (a == "--verbose" || a == "-v") {
      verbose = true;
    } else if (a == "--help" || a == "-h") {
      usage("the long fault campaign");
    } else {
      usage(("unknown option " + a).c_str());
    }
  }

  if (!rates.empty()) {
    // The sweep: the same seeds at each rate, one row each.
    std::string rows =
        "rate   runs  connection never came up  transport gave up (runs)  lost  duplicated  "
        "failed\n";
    std::string json = "{\n  \"sweep\": [";
    bool bad = false;
    for (size_t k = 0; k < rates.size(); ++k) {
      SpecOptions ro = o;
      ro.force_rate = rates[k];
      std::vector<RunResult> failed;
      std::printf("== rate %.0f%%\n", rates[k] * 100);
      const Totals t = run_seeds(first, seeds, ro, jobs, verbose, &failed);
      char row[256];
      std::snprintf(row, sizeof row, "%3.0f%%  %5" PRIu64 "  %24" PRIu64 "  %24" PRIu64
                    "  %4" PRIu64 "  %10" PRIu64 "  %6" PRIu64 "\n",
                    rates[k] * 100, t.runs, t.connection_failures, t.runs_gave_up, t.lost,
                    t.duplicated, t.runs - t.passed);
      rows += row;
      std::snprintf(row, sizeof row,
                    "%s\n    {\"rate\": %.2f, \"runs\": %" PRIu64 ", \"connection_failures\": %" PRIu64
                    ", \"runs_gave_up\": %" PRIu64 ", \"lost\": %" PRIu64 ", \"duplicated\": %" PRIu64
                    ", \"failed\": %" PRIu64 "}",
                    k ? "," : "", rates[k], t.runs, t.connection_failures, t.runs_gave_up, t.lost,
                    t.duplicated, t.runs - t.passed);
      json += row;
      bad |= t.lost != 0 || t.duplicated != 0;
    }
    json += "\n  ]\n}\n";
    std::printf("\n%s", rows.c_str());
    if (!json_path.empty()) {
      FILE* f = std::fopen(json_path.c_str(), "w");
      if (!f) {
        std::fprintf(stderr, "rnicdv-faults: cannot write %s: %s\n", json_path.c_str(),
                     std::strerror(errno));
        return 2;
      }
      std::fwrite(json.data(), 1, json.size(), f);
      std::fclose(f);
    }
    return bad ? 1 : 0;
  }

  std::vector<RunResult> failed;
  Totals totals = run_seeds(first, seeds, o, jobs, verbose, &failed);
  std::printf("\n%s", format_table(totals).c_str());
  if (!json_path.empty()) {
    char label[128];
    std::snprintf(label, sizeof label, "seeds %" PRIu64 "..%" PRIu64, first, first + seeds - 1);
    FILE* f = std::fopen(json_path.c_str(), "w");
    if (!f) {
      std::fprintf(stderr, "rnicdv-faults: cannot write %s: %s\n", json_path.c_str(),
                   std::strerror(errno));
      return 2;
    }
    const std::string j = format_json(totals, failed, label);
    std::fwrite(j.data(), 1, j.size(), f);
    std::fclose(f);
  }
  return totals.passed == totals.runs ? 0 : 1;
}
