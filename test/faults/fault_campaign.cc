// SPDX-License-Identifier: BSD-3-Clause
// The fault campaign's short, fixed subset: every fault kind up to 30% on the in-process
// wire, multi-MiB messages of every opcode that has one, lower rates, and the UDP wire; each
// run connects through the CM with early posting in RTR and checks every WR and byte (see
// campaign.h). The long version is `tools/dev faults`.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "campaign.h"

using namespace rnicdv;
using namespace rnicdv::faults;

namespace {

struct Case {
  uint64_t seed;
  sim::WireKind wire;
  FaultKind kind;
  double rate;
  int mib_opcode;  // -1: no multi-MiB message
};

RunSpec spec_of(const Case& c) {
  SpecOptions o;
  o.wires = c.wire == sim::WireKind::udp ? SpecOptions::Wires::udp : SpecOptions::Wires::inproc;
  o.force_kind = static_cast<int>(c.kind);
  o.force_rate = c.rate;
  o.force_mib = c.mib_opcode >= 0 ? 1 : 0;
  o.mib_opcode = c.mib_opcode;
  o.max_ops = 10;
  RunSpec s = spec_for_seed(c.seed, o);
  s.real_budget_ms = 60'000;
  return s;
}

void report(const RunResult& r) {
  INFO(r.spec.describe());
  for (const std::string& f : r.failures) UNSCOPED_INFO(f);
  CHECK(r.passed);
  CHECK(r.lost == 0);
  CHECK(r.duplicated == 0);
  if (r.spec.wire == sim::WireKind::udp) {
    // Real time on a loaded machine: a device thread kept off the CPU past several ACK
    // timeouts can exhaust the retries at 30% loss. That is the transport working as
    // specified; the run still had to account for every WR exactly once (r.passed), and the
    // only errors allowed are the give-up and the flushes after it.
    CHECK(r.completions_error == r.gave_up + r.flushed);
    if (r.gave_up) WARN("the transport gave up in " << r.spec.describe());
  } else {
    CHECK(r.completions_error == 0);
    CHECK(r.gave_up == 0);
  }
}

}  // namespace

TEST_CASE("fault campaign: every opcode and size arrives exactly once under 30% faults") {
  const std::vector<Case> cases = {
      // Each fault kind alone, at 30% (10% for the kinds that cost go-back-N rounds when a
      // multi-MiB message is in flight: see spec_for_seed), each with a multi-MiB message of
      // another opcode.
      {101, sim::WireKind::inproc, FaultKind::drop, 0.30, 0},
      {102, sim::WireKind::inproc, FaultKind::duplicate, 0.30, 1},
      {103, sim::WireKind::inproc, FaultKind::reorder, 0.30, 2},
      {104, sim::WireKind::inproc, FaultKind::corrupt, 0.30, 3},
      {105, sim::WireKind::inproc, FaultKind::delay, 0.30, -1},
      // All kinds at once, at 30%, 10% and 1%.
      {106, sim::WireKind::inproc, FaultKind::mixed, 0.30, -1},
      {107, sim::WireKind::inproc, FaultKind::mixed, 0.30, -1},
      {108, sim::WireKind::inproc, FaultKind::mixed, 0.30, -1},
      {109, sim::WireKind::inproc, FaultKind::mixed, 0.10, -1},
      {110, sim::WireKind::inproc, FaultKind::mixed, 0.01, 4},
      // Real sockets, real time, device threads.
      {111, sim::WireKind::udp, FaultKind::mixed, 0.30, -1},
      {112, sim::WireKind::udp, FaultKind::drop, 0.30, -1},
  };

  Totals totals;
  // Coverage of the subset itself: every opcode at every size class it can have.
  std::set<std::pair<int, int>> covered;
  for (const Case& c : cases) {
    const RunSpec spec = spec_of(c);
    for (const auto* ops : {&spec.a_ops, &spec.b_ops})
      for (const Op& op : *ops)
        covered.insert({static_cast<int>(op.opcode), static_cast<int>(op.size)});
    const RunResult r = run(spec);
    std::printf("%s %s: %.0f ms, %llu faults, %llu retransmits\n", r.passed ? "ok  " : "FAIL",
                spec.describe().c_str(), r.real_ms,
                static_cast<unsigned long long>(r.faults_injected),
                static_cast<unsigned long long>(r.retransmits));
    totals.add(r);
    report(r);
  }
  for (WrOpcode op : kAllOpcodes) {
    const bool atomic = op == WrOpcode::atomic_cmp_swap || op == WrOpcode::atomic_fetch_add;
    for (int size = 0; size < (atomic ? 1 : 3); ++size) {
      INFO(opcode_name(op) << " at size class " << size_class_name(static_cast<SizeClass>(size)));
      CHECK(covered.count({static_cast<int>(op), size}) == 1);
    }
  }
  CHECK(totals.faults_dropped > 0);
  CHECK(totals.faults_duplicated > 0);
  CHECK(totals.faults_reordered > 0);
  CHECK(totals.faults_corrupted > 0);
  CHECK(totals.faults_delayed > 0);
  CHECK(totals.retransmits > 0);
  CHECK(totals.withheld_in_rtr > 0);
  CHECK(totals.lost == 0);
  CHECK(totals.duplicated == 0);
  std::printf("%s", format_table(totals).c_str());
  if (const char* path = std::getenv("RNICDV_FAULTS_JSON"); path && *path) {
    if (FILE* f = std::fopen(path, "w")) {
      const std::string j = format_json(totals, {}, "faults suite subset");
      std::fwrite(j.data(), 1, j.size(), f);
      std::fclose(f);
    }
  }
}

TEST_CASE("fault campaign: a seed always stands for the same run") {
  const RunSpec a = spec_for_seed(4242);
  const RunSpec b = spec_for_seed(4242);
  CHECK(a.describe() == b.describe());
  REQUIRE(a.a_ops.size() == b.a_ops.size());
  for (size_t i = 0; i < a.a_ops.size(); ++i) CHECK(a.a_ops[i].len == b.a_ops[i].len);
  // And an in-process run replays exactly: same faults, same retransmissions, same time.
  SpecOptions o;
  o.wires = SpecOptions::Wires::inproc;
  o.force_kind = static_cast<int>(FaultKind::mixed);
  o.force_rate = 0.2;
  o.force_mib = 0;
  const RunSpec s = spec_for_seed(77, o);
  const RunResult r1 = run(s);
  const RunResult r2 = run(s);
  report(r1);
  CHECK(r1.faults_injected == r2.faults_injected);
  CHECK(r1.retransmits == r2.retransmits);
  CHECK(r1.frames == r2.frames);
  CHECK(r1.virtual_ns == r2.virtual_ns);
}

TEST_CASE("fault campaign: the checks catch a lost message") {
  // The campaign must be able to fail: a wire that drops everything after the connection
  // is up loses every message, and the run says so instead of hanging.
  SpecOptions o;
  o.wires = SpecOptions::Wires::inproc;
  o.force_kind = static_cast<int>(FaultKind::drop);
  o.force_rate = 1.0;
  o.force_mib = 0;
  RunSpec s = spec_for_seed(5, o);
  s.virtual_budget_ns = 20'000'000'000ull;
  s.real_budget_ms = 20'000;
  const RunResult r = run(s);
  CHECK_FALSE(r.passed);
  CHECK(r.lost > 0);
  CHECK(r.completions_ok == 0);
  CHECK_FALSE(r.failures.empty());
}

TEST_CASE("a connection that never comes up at extreme loss is its own outcome: nothing is lost "
          "and the run ends when the attempt fails") {
  // 80% of frames dropped: the REQ or the REP does not get through in 16 tries, or the RTU
  // not within the passive side's bounded REP wait (CmAgent::kRepWaitMaxNs, 4 s, shorter than
  // the requester's 10 s budget). The passive side may have accepted and posted its early
  // batch in RTR; that, and every receive, must complete (flushed) exactly once. The WRs the
  // driver never accepted are not lost.
  const auto wire = GENERATE(sim::WireKind::inproc, sim::WireKind::udp);
  SpecOptions o;
  o.wires = wire == sim::WireKind::udp ? SpecOptions::Wires::udp : SpecOptions::Wires::inproc;
  o.force_kind = static_cast<int>(FaultKind::drop);
  o.force_rate = 0.8;
  o.force_mib = 0;
  o.max_ops = 10;
  // A seed whose connection fails; its run is deterministic in process, and on UDP the rate
  // makes success within 16 attempts unlikely: try a few seeds until one fails to connect.
  RunResult r;
  for (uint64_t seed = 34; seed < 44; ++seed) {
    RunSpec s = spec_for_seed(seed, o);
    r = run(s);
    if (r.connection_failed) break;
  }
  INFO(r.spec.describe());
  for (const std::string& f : r.failures) UNSCOPED_INFO(f);
  REQUIRE(r.connection_failed);
  INFO(r.connection_failure);
  const bool unreachable = r.connection_failure.find("UNREACHABLE") != std::string::npos;
  const bool no_rtu = r.connection_failure.find("TIMEOUT") != std::string::npos &&
                      r.connection_failure.find("no RTU") != std::string::npos;
  CHECK((unreachable || no_rtu));
  CHECK(r.passed);
  CHECK(r.lost == 0);
  CHECK(r.duplicated == 0);
  CHECK(r.not_posted > 0);
  // Ended by the failed attempt (the connect timeout), not by the run's 120 s bound.
  CHECK(r.real_ms < 0.5 * static_cast<double>(r.spec.real_budget_ms));
}
