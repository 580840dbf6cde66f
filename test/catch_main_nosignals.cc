// SPDX-License-Identifier: BSD-3-Clause
// The shared main without Catch's SIGSEGV handler: for tests of code that handles SIGSEGV
// itself (the simulated HCA's doorbell wake-up), which Catch's per-test handler would replace.
#define CATCH_CONFIG_MAIN
#define CATCH_CONFIG_NO_POSIX_SIGNALS
#include <catch2/catch.hpp>
