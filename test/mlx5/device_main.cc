// SPDX-License-Identifier: BSD-3-Clause
// main() for the tests that need an mlx5 device: skip (exit 77) with the reason when the
// machine cannot run them, otherwise run the Catch2 session.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>

#include "mlx5_test_device.h"

int main(int argc, char* argv[]) {
  if (const char* reason = mlx5_test_skip_reason()) {
    std::printf("SKIP: %s\n", reason);
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
