// SPDX-License-Identifier: BSD-3-Clause
// The named barriers exist for this ISA, compile from barrier.h alone, and execute.
#include "rnicdv/doorbell/barrier.h"  // first: the header must stand on its own

#include <catch2/catch.hpp>

namespace db = rnicdv::doorbell;

TEST_CASE("every named barrier executes", "[doorbell]") {
  int stores = 0;
  for (int i = 0; i < 1000; ++i) {
    ++stores;
    db::to_device_barrier();
    db::from_device_barrier();
    db::wc_start();
    db::wc_flush();
    db::cpu_relax();
  }
  REQUIRE(stores == 1000);
}

TEST_CASE("barriers are compiler barriers: memory is reread after them", "[doorbell]") {
  // A value changed behind the compiler's back (through an alias the optimiser cannot see
  // through) must be reloaded after each barrier, not kept in a register.
  int value = 1;
  int* volatile alias = &value;
  int seen = 0;
  for (int i = 0; i < 4; ++i) {
    *alias += 1;
    db::to_device_barrier();
    seen += value;
    *alias += 1;
    db::from_device_barrier();
    seen += value;
  }
  REQUIRE(value == 9);
  REQUIRE(seen == 2 + 3 + 4 + 5 + 6 + 7 + 8 + 9);
}
