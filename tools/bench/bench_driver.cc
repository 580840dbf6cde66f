// SPDX-License-Identifier: BSD-3-Clause
// rnicdv-bench-driver: the driver's own costs on simulated HCA memory, each beside a baseline
// measured in the same run (docs/performance.md).
//
//   post    post_write_1sge, post_send_inline_64, post_batch_32, post_read, post_atomic_fa,
//           each through post_send and through its typed call (*_typed): ns per post (median
//           of repetitions) against the same stores written by hand;
//   flush   flush_in_place_N and flush_shadow_N, N = 1, 64, 4096: from the device's move to
//           RTS to the doorbell written and RTS published, against N = 1 (in place) and
//           memcpy of the same bytes (shadow);
//   poll    poll_1 and poll_batch_16, through poll() and the lean poll_each (*_lean): ns per
//           CQE decoded against an owner-bit check plus a field load;
//   memory  heap bytes per QP, per CQ and per simulated device;
//   scale   poll() per CQE with 64 and 1024 QPs on one CQ against one QP, and heap bytes per
//           connected QP at 1024 QPs against 32.
//
// The device engine is paused (or, for polls, not running), so only the driver's work is
// timed. Prints a JSON array of records (bench_util.h) on stdout.
//
// Options: --smoke (a few iterations), --callgrind (count instructions of one repetition per
// case under callgrind; no timing), --only=post|flush|poll|memory|scale (repeatable).
#include <string>
#include <vector>

#include "bench_driver.h"

using namespace rnicdv;
using namespace rnicdv::bench;

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--smoke") {
      o.smoke = true;
    } else if (arg == "--callgrind") {
      o.callgrind = true;
    } else if (arg.rfind("--only=", 0) == 0) {
      const std::string g = arg.substr(7);
      if (g != "post" && g != "flush" && g != "poll" && g != "memory" && g != "scale")
        fail("--only: unknown group '" + g + "' (post, flush, poll, memory, scale)");
      o.only.insert(g);
    } else {
      fail("unknown option '" + arg + "' (--smoke, --callgrind, --only=GROUP)");
    }
  }
  if (o.callgrind && !bench::under_valgrind())
    fail("--callgrind: run under valgrind --tool=callgrind --collect-atstart=no");
  std::vector<Record> records;
  if (o.wants("post")) post_cases(o, &records);
  if (o.wants("flush")) flush_cases(o, &records);
  if (o.wants("poll")) poll_cases(o, &records);
  if (o.wants("memory") && !o.callgrind) memory_cases(o, &records);
  if (o.wants("scale")) scale_poll_cases(o, &records);
  if (o.wants("scale") && !o.callgrind) scale_memory_cases(&records);
  bench::print_records(records, stdout);
  return 0;
}
