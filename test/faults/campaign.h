// SPDX-License-Identifier: BSD-3-Clause
// The fault campaign: two simulated HCAs connected through the connection API over a faulty
// wire, each sending the other every RC opcode at small, MTU-crossing and multi-MiB sizes,
// with part of the passive side's work posted while its QP is still in RTR.
//
// One run is a pure function of its seed (on the in-process wire, which runs in virtual
// time): the seed picks the wire faults (drop, duplicate, reorder, corrupt, delay, or a mix,
// at rates up to 30%), the path MTU, the device profile (in-place or shadow withholding) and
// the work. Each run checks, for every work request:
//  * exactly one completion, and it is a success;
//  * its payload arrived exactly once and intact: a checksum of every byte that should have
//    been written, canaries around it, immediate data and byte counts, the value every
//    atomic returned and left behind;
//  * nothing more arrives once the work is done (no late duplicate completions or writes);
// and that the run ends within a virtual-time and a real-time bound.
//
// Used by the `faults` meson suite (a short fixed subset) and by `tools/dev faults` (the
// rnicdv-faults program, thousands of seeds).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rnicdv/sim/sim.h"
#include "rnicdv/wqe/work_request.h"

namespace rnicdv::faults {

enum class SizeClass : uint8_t { small, mtu_crossing, multi_mib };
const char* size_class_name(SizeClass s) noexcept;  // "small", "mtu", "mib"

enum class FaultKind : uint8_t { drop, duplicate, reorder, corrupt, delay, mixed };
inline constexpr int kFaultKinds = 6;
const char* fault_kind_name(FaultKind k) noexcept;  // "drop", ..., "mixed"

inline constexpr int kOpcodes = 7;
extern const WrOpcode kAllOpcodes[kOpcodes];
const char* opcode_name(WrOpcode op) noexcept;  // "SEND", "RDMA_WRITE_IMM", ...

struct Op {
  WrOpcode opcode = WrOpcode::send;
  uint32_t len = 0;  // 8 for atomics
  SizeClass size = SizeClass::small;
};

struct RunSpec {
  uint64_t seed = 1;
  sim::WireKind wire = sim::WireKind::inproc;
  // In-process runs are deterministic (virtual time, reproducible from the seed); UDP runs
  // are threaded (real sockets, real time, device threads racing the application).
  sim::ExecMode mode = sim::ExecMode::deterministic;
  FaultKind kind = FaultKind::mixed;
  double rate = 0;  // the highest probability of any fault kind in this run
  sim::FaultConfig faults;
  hw::Mtu mtu = hw::Mtu::mtu1024;
  bool scanning = false;  // device profile fetches beyond the DBR: shadow withholding
  std::vector<Op> a_ops;  // the active side's work, toward the passive side
  std::vector<Op> b_ops;  // the passive side's work; the first `early` are posted in RTR
  uint32_t early = 0;
  uint64_t virtual_budget_ns = 600'000'000'000ull;
  uint64_t real_budget_ms = 120'000;

  std::string describe() const;  // "seed 17 inproc drop 12.0% mtu 1024 in_place 9+11 ops"
};

struct SpecOptions {
  enum class Wires : uint8_t { inproc, udp, both } wires = Wires::both;
  double max_rate = 0.30;
  bool multi_mib = true;     // allow multi-MiB messages
  uint32_t udp_every = 4;    // with `both`: one seed in this many runs over UDP
  uint32_t max_ops = 14;     // per direction (at least the 7 opcodes)
  // Overrides, for fixed subsets (negative: chosen by the seed).
  int force_kind = -1;       // a FaultKind
  double force_rate = -1;    // the run's rate
  int force_mib = -1;        // 1: a multi-MiB message each way; 0: none
  int mib_opcode = -1;       // with force_mib 1: the multi-MiB message is this kAllOpcodes index
};

// The run a seed stands for.
RunSpec spec_for_seed(uint64_t seed, const SpecOptions& options = {});

struct OpTally {
  uint64_t wrs = 0, ok = 0, bytes = 0;
};

struct RunResult {
  RunSpec spec;
  bool passed = false;
  std::vector<std::string> failures;  // empty when passed; each names the WR and what broke

  uint64_t wrs = 0;                 // send-queue work requests posted, both sides
  uint64_t recvs = 0;               // receive work requests posted, both sides
  uint64_t completions_ok = 0;      // successful completions (send and receive)
  uint64_t completions_error = 0;   // error completions of any kind
  uint64_t bytes_verified = 0;      // payload bytes checked at their destination
  uint64_t lost = 0;                // WRs without a completion, or whose data did not arrive
  // The transport gave up as IB specifies (RETRY_EXC_ERR / RNR_RETRY_EXC_ERR after retry_cnt
  // fruitless rounds): the run then disconnects, and every other WR must complete exactly
  // once, successfully (data checked) or with WR_FLUSH_ERR. Not a failure; counted.
  uint64_t gave_up = 0;             // WRs that completed with a retry-exhausted error
  uint64_t flushed = 0;             // WRs and receives completed with WR_FLUSH_ERR after that
  uint64_t duplicated = 0;          // second completions, unexpected completions, data twice
  // The connection never came up (at extreme loss: REQ or REP retries exhausted). Not a
  // failure and not a loss: its own outcome. WRs the driver never accepted are counted apart.
  bool connection_failed = false;
  std::string connection_failure;   // which side saw what
  uint64_t not_posted = 0;          // WRs and receives never accepted (connection failed)
  uint64_t withheld_in_rtr = 0;     // WRs the passive QP held when the early batch was posted
  uint64_t faults_injected = 0;     // sum of the kinds below
  uint64_t faults_dropped = 0, faults_duplicated = 0, faults_reordered = 0;
  uint64_t faults_corrupted = 0, faults_delayed = 0;
  uint64_t frames = 0;              // frames the wire accepted
  uint64_t retransmits = 0, timeouts = 0, naks = 0, rnr_naks = 0, duplicates_rx = 0;
  uint64_t comm_est = 0;            // COMM_EST raised (the RTU lost, the first request won)
  uint64_t virtual_ns = 0;          // virtual time the run took (deterministic runs)
  double real_ms = 0;
  OpTally per_opcode[kOpcodes];
  OpTally per_size[3];
};

// Runs one spec to completion (or to its time bounds). Never throws for a failed run: the
// failures are in the result.
RunResult run(const RunSpec& spec);

// Sums over many runs, for the table and the JSON.
struct Totals {
  uint64_t runs = 0, passed = 0;
  uint64_t runs_per_wire[2] = {};
  uint64_t runs_per_kind[kFaultKinds] = {};
  uint64_t wrs = 0, recvs = 0, completions_ok = 0, completions_error = 0, bytes_verified = 0;
  uint64_t lost = 0, duplicated = 0, withheld_in_rtr = 0;
  uint64_t gave_up = 0, flushed = 0, runs_gave_up = 0;
  uint64_t connection_failures = 0, not_posted = 0;
  std::vector<uint64_t> connection_failed_seeds;
  uint64_t faults_injected = 0, faults_dropped = 0, faults_duplicated = 0, faults_reordered = 0;
  uint64_t faults_corrupted = 0, faults_delayed = 0, frames = 0;
  uint64_t retransmits = 0, timeouts = 0, naks = 0, rnr_naks = 0, duplicates_rx = 0, comm_est = 0;
  double real_ms = 0, max_real_ms = 0;
  uint64_t max_real_seed = 0;
  OpTally per_opcode[kOpcodes];
  OpTally per_size[3];
  std::vector<uint64_t> failed_seeds;
  std::vector<uint64_t> gave_up_seeds;

  void add(const RunResult& r);
};

// A readable table of the totals (one line per row).
std::string format_table(const Totals& t);
// The totals and the failed runs' details as one JSON object.
std::string format_json(const Totals& t, const std::vector<RunResult>& failed,
                        const std::string& label);

}  // namespace rnicdv::faults
