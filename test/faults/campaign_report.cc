// SPDX-License-Identifier: BSD-3-Clause
// The fault campaign's totals, table and JSON: see campaign.h.
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <string>
#include <vector>

#include "campaign.h"

namespace rnicdv::faults {

void Totals::add(const RunResult& r) {
  ++runs;
  if (r.passed)
    ++passed;
  else
    failed_seeds.push_back(r.spec.seed);
  ++runs_per_wire[r.spec.wire == sim::WireKind::udp ? 1 : 0];
  ++runs_per_kind[static_cast<int>(r.spec.kind)];
  wrs += r.wrs;
  recvs += r.recvs;
  completions_ok += r.completions_ok;
  completions_error += r.completions_error;
  bytes_verified += r.bytes_verified;
  lost += r.lost;
  duplicated += r.duplicated;
  gave_up += r.gave_up;
  flushed += r.flushed;
  if (r.gave_up) {
    ++runs_gave_up;
    gave_up_seeds.push_back(r.spec.seed);
  }
  if (r.connection_failed) {
    ++connection_failures;
    connection_failed_seeds.push_back(r.spec.seed);
  }
  not_posted += r.not_posted;
  withheld_in_rtr += r.withheld_in_rtr;
  faults_injected += r.faults_injected;
  faults_dropped += r.faults_dropped;
  faults_duplicated += r.faults_duplicated;
  faults_reordered += r.faults_reordered;
  faults_corrupted += r.faults_corrupted;
  faults_delayed += r.faults_delayed;
  frames += r.frames;
  retransmits += r.retransmits;
  timeouts += r.timeouts;
  naks += r.naks;
  rnr_naks += r.rnr_naks;
  duplicates_rx += r.duplicates_rx;
  comm_est += r.comm_est;
  real_ms += r.real_ms;
  if (r.real_ms > max_real_ms) {
    max_real_ms = r.real_ms;
    max_real_seed = r.spec.seed;
  }
  for (int i = 0; i < kOpcodes; ++i) {
    per_opcode[i].wrs += r.per_opcode[i].wrs;
    per_opcode[i].ok += r.per_opcode[i].ok;
    per_opcode[i].bytes += r.per_opcode[i].bytes;
  }
  for (int i = 0; i < 3; ++i) {
    per_size[i].wrs += r.per_size[i].wrs;
    per_size[i].ok += r.per_size[i].ok;
    per_size[i].bytes += r.per_size[i].bytes;
  }
}

namespace {

void appendf(std::string* out, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void appendf(std::string* out, const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  out->append(buf);
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      appendf(&out, "\\u%04x", c);
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string format_table(const Totals& t) {
  std::string s;
  appendf(&s, "%-28s %" PRIu64 " (%" PRIu64 " passed; %" PRIu64 " in-process, %" PRIu64 " UDP)\n",
          "runs", t.runs, t.passed, t.runs_per_wire[0], t.runs_per_wire[1]);
  appendf(&s, "%-28s", "runs per fault kind");
  for (int k = 0; k < kFaultKinds; ++k)
    appendf(&s, " %s %" PRIu64, fault_kind_name(static_cast<FaultKind>(k)), t.runs_per_kind[k]);
  s += "\n";
  appendf(&s, "%-28s %" PRIu64 " of %" PRIu64 " frames\n", "faults injected", t.faults_injected,
          t.frames);
  appendf(&s, "%-28s drop %" PRIu64 ", duplicate %" PRIu64 ", reorder %" PRIu64
              ", corrupt %" PRIu64 ", delay %" PRIu64 "\n",
          "  by kind", t.faults_dropped, t.faults_duplicated, t.faults_reordered,
          t.faults_corrupted, t.faults_delayed);
  appendf(&s, "%-28s %" PRIu64 " (timeouts %" PRIu64 ", NAKs %" PRIu64 ", RNR NAKs %" PRIu64
              ", duplicate requests %" PRIu64 ")\n",
          "retransmits", t.retransmits, t.timeouts, t.naks, t.rnr_naks, t.duplicates_rx);
  appendf(&s, "%-28s %" PRIu64 " send + %" PRIu64 " receive\n", "work requests", t.wrs, t.recvs);
  appendf(&s, "%-28s %" PRIu64 " (COMM_EST raised %" PRIu64 ")\n", "withheld in RTR",
          t.withheld_in_rtr, t.comm_est);
  appendf(&s, "%-28s %" PRIu64 " ok, %" PRIu64 " error\n", "completions", t.completions_ok,
          t.completions_error);
  appendf(&s, "%-28s %" PRIu64 " (%.1f MiB)\n", "bytes verified", t.bytes_verified,
          static_cast<double>(t.bytes_verified) / (1 << 20));
  appendf(&s, "%-28s %" PRIu64 " WRs in %" PRIu64 " runs (then %" PRIu64 " flushed, each once)\n",
          "transport gave up", t.gave_up, t.runs_gave_up, t.flushed);
  appendf(&s, "%-28s %" PRIu64 " runs (%" PRIu64 " WRs never posted: not lost)\n",
          "connection never came up", t.connection_failures, t.not_posted);
  appendf(&s, "%-28s %" PRIu64 "\n", "lost", t.lost);
  appendf(&s, "%-28s %" PRIu64 "\n", "duplicated", t.duplicated);
  appendf(&s, "%-28s total %.1f s, mean %.1f ms, max %.1f ms (seed %" PRIu64 ")\n", "run time",
          t.real_ms / 1e3, t.runs ? t.real_ms / static_cast<double>(t.runs) : 0.0, t.max_real_ms,
          t.max_real_seed);
  s += "per opcode                   WRs ok / posted, bytes\n";
  for (int i = 0; i < kOpcodes; ++i)
    appendf(&s, "  %-26s %" PRIu64 " / %" PRIu64 ", %" PRIu64 "\n", opcode_name(kAllOpcodes[i]),
            t.per_opcode[i].ok, t.per_opcode[i].wrs, t.per_opcode[i].bytes);
  s += "per size class\n";
  for (int i = 0; i < 3; ++i)
    appendf(&s, "  %-26s %" PRIu64 " / %" PRIu64 ", %" PRIu64 "\n",
            size_class_name(static_cast<SizeClass>(i)), t.per_size[i].ok, t.per_size[i].wrs,
            t.per_size[i].bytes);
  if (!t.gave_up_seeds.empty()) {
    s += "seeds where the transport gave up:";
    for (uint64_t seed : t.gave_up_seeds) appendf(&s, " %" PRIu64, seed);
    s += "\n";
  }
  if (!t.connection_failed_seeds.empty()) {
    s += "seeds whose connection never came up:";
    for (uint64_t seed : t.connection_failed_seeds) appendf(&s, " %" PRIu64, seed);
    s += "\n";
  }
  if (!t.failed_seeds.empty()) {
    s += "failed seeds:";
    for (uint64_t seed : t.failed_seeds) appendf(&s, " %" PRIu64, seed);
    s += "\n";
  }
  return s;
}

std::string format_json(const Totals& t, const std::vector<RunResult>& failed,
                        const std::string& label) {
  std::string s = "{\n";
  appendf(&s, "  \"label\": \"%s\",\n", json_escape(label).c_str());
  appendf(&s, "  \"runs\": %" PRIu64 ", \"passed\": %" PRIu64 ",\n", t.runs, t.passed);
  appendf(&s, "  \"runs_inproc\": %" PRIu64 ", \"runs_udp\": %" PRIu64 ",\n", t.runs_per_wire[0],
          t.runs_per_wire[1]);
  s += "  \"runs_per_fault_kind\": {";
  for (int k = 0; k < kFaultKinds; ++k)
    appendf(&s, "%s\"%s\": %" PRIu64, k ? ", " : "", fault_kind_name(static_cast<FaultKind>(k)),
            t.runs_per_kind[k]);
  s += "},\n";
  appendf(&s, "  \"frames\": %" PRIu64 ", \"faults_injected\": %" PRIu64 ",\n", t.frames,
          t.faults_injected);
  appendf(&s, "  \"faults\": {\"drop\": %" PRIu64 ", \"duplicate\": %" PRIu64 ", \"reorder\": %" PRIu64
              ", \"corrupt\": %" PRIu64 ", \"delay\": %" PRIu64 "},\n",
          t.faults_dropped, t.faults_duplicated, t.faults_reordered, t.faults_corrupted,
          t.faults_delayed);
  appendf(&s, "  \"retransmits\": %" PRIu64 ", \"timeouts\": %" PRIu64 ", \"naks\": %" PRIu64
              ", \"rnr_naks\": %" PRIu64 ", \"duplicate_requests\": %" PRIu64 ",\n",
          t.retransmits, t.timeouts, t.naks, t.rnr_naks, t.duplicates_rx);
  appendf(&s, "  \"work_requests\": %" PRIu64 ", \"receives\": %" PRIu64
              ", \"withheld_in_rtr\": %" PRIu64 ", \"comm_est\": %" PRIu64 ",\n",
          t.wrs, t.recvs, t.withheld_in_rtr, t.comm_est);
  appendf(&s, "  \"completions_ok\": %" PRIu64 ", \"completions_error\": %" PRIu64 ",\n",
          t.completions_ok, t.completions_error);
  appendf(&s, "  \"bytes_verified\": %" PRIu64 ", \"lost\": %" PRIu64 ", \"duplicated\": %" PRIu64
              ",\n",
          t.bytes_verified, t.lost, t.duplicated);
  appendf(&s, "  \"gave_up\": %" PRIu64 ", \"runs_gave_up\": %" PRIu64 ", \"flushed\": %" PRIu64
              ",\n",
          t.gave_up, t.runs_gave_up, t.flushed);
  appendf(&s, "  \"connection_failures\": %" PRIu64 ", \"not_posted\": %" PRIu64 ",\n",
          t.connection_failures, t.not_posted);
  appendf(&s, "  \"real_seconds\": %.3f, \"max_run_ms\": %.1f, \"max_run_seed\": %" PRIu64 ",\n",
          t.real_ms / 1e3, t.max_real_ms, t.max_real_seed);
  s += "  \"per_opcode\": {";
  for (int i = 0; i < kOpcodes; ++i)
    appendf(&s, "%s\"%s\": {\"posted\": %" PRIu64 ", \"ok\": %" PRIu64 ", \"bytes\": %" PRIu64 "}",
            i ? ", " : "", opcode_name(kAllOpcodes[i]), t.per_opcode[i].wrs, t.per_opcode[i].ok,
            t.per_opcode[i].bytes);
  s += "},\n  \"per_size_class\": {";
  for (int i = 0; i < 3; ++i)
    appendf(&s, "%s\"%s\": {\"posted\": %" PRIu64 ", \"ok\": %" PRIu64 ", \"bytes\": %" PRIu64 "}",
            i ? ", " : "", size_class_name(static_cast<SizeClass>(i)), t.per_size[i].wrs,
            t.per_size[i].ok, t.per_size[i].bytes);
  s += "},\n  \"gave_up_seeds\": [";
  for (size_t i = 0; i < t.gave_up_seeds.size(); ++i)
    appendf(&s, "%s%" PRIu64, i ? ", " : "", t.gave_up_seeds[i]);
  s += "],\n  \"failed\": [";
  for (size_t i = 0; i < failed.size(); ++i) {
    const RunResult& r = failed[i];
    appendf(&s, "%s\n    {\"seed\": %" PRIu64 ", \"run\": \"%s\", \"failures\": [", i ? "," : "",
            r.spec.seed, json_escape(r.spec.describe()).c_str());
    for (size_t k = 0; k < r.failures.size(); ++k)
      appendf(&s, "%s\"%s\"", k ? ", " : "", json_escape(r.failures[k]).c_str());
    s += "]}";
  }
  s += failed.empty() ? "]\n}\n" : "\n  ]\n}\n";
  return s;
}

}  // namespace rnicdv::faults
