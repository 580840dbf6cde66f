// SPDX-License-Identifier: BSD-3-Clause
// Checks a fault specification (docs/faults.md) without running anything:
//
//   check-faults [SPEC | @FILE]     (no argument: $RNICDV_SIM_FAULTS)
//
// Prints what it asks for and exits 0, or prints the one-line refusal that names the clause
// and the field, and exits 2. `tools/dev verbs --faults` runs it before the program.
#include <cstdio>
#include <string>

#include "rnicdv/sim/sim.h"

int main(int argc, char** argv) {
  if (argc > 2 || (argc == 2 && (std::string(argv[1]) == "-h" || std::string(argv[1]) == "--help"))) {
    std::fprintf(stderr, "usage: check-faults [SPEC | @FILE]   (default: $RNICDV_SIM_FAULTS)\n");
    return argc > 2 ? 2 : 0;
  }
  std::string summary;
  const rnicdv::Status st = rnicdv::sim::check_fault_spec(argc == 2 ? argv[1] : "", &summary);
  if (!st) {
    std::fprintf(stderr, "%s\n", st.message().c_str());
    return 2;
  }
  std::printf("fault specification: %s\n", summary.c_str());
  return 0;
}
