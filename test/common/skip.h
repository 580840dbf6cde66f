// SPDX-License-Identifier: BSD-3-Clause
// Skipping a test from inside it: meson reports exit code 77 as SKIP. The reason goes to
// stdout, which meson keeps in the test log.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

namespace rnicdv::test {

// _Exit, not exit: no static destructor or atexit handler runs, so a skip taken before main
// or halfway through setting up does not tear down what was never made.
[[noreturn]] inline void skip_test(const std::string& why) {
  std::printf("skipped: %s\n", why.c_str());
  std::fflush(stdout);
  std::_Exit(77);
}

}  // namespace rnicdv::test
