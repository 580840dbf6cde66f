// SPDX-License-Identifier: BSD-3-Clause
// Result<T>::value() without a value throws BadResultAccess carrying the Status, so that the
// error's message reaches whoever catches it (it used to be std::bad_variant_access, "wrong
// index for variant", with the message lost).
#include <catch2/catch.hpp>

#include <memory>
#include <string>

#include "rnicdv/status.h"

using namespace rnicdv;

TEST_CASE("value() of a failed Result throws the Status, with its message") {
  Result<int> r = Status::error(Errc::not_found, "open mlx5_9: no such device; found: %s", "sim0");
  try {
    (void)r.value();
    FAIL("value() returned");
  } catch (const BadResultAccess& e) {
    CHECK(e.status().code() == Errc::not_found);
    CHECK(std::string(e.what()) ==
          "Result::value() without a value: open mlx5_9: no such device; found: sim0");
  }
  // Every accessor, and an rvalue Result, the same way; a std::exception handler sees it too.
  Result<std::unique_ptr<int>> moved = Status::error(Errc::timeout, "no REP");
  CHECK_THROWS_AS(std::move(moved).value(), BadResultAccess);
  Result<std::string> s = Status::error(Errc::busy, "in use");
  CHECK_THROWS_WITH(s->size(), "Result::value() without a value: in use");
  CHECK_THROWS_AS(*s, std::exception);
  const Result<int> c = Status::error(Errc::io_error, "read");
  CHECK_THROWS_AS(c.value(), BadResultAccess);
}

TEST_CASE("value() of a successful Result returns it") {
  Result<std::string> r = std::string("sim0");
  CHECK(r.value() == "sim0");
  CHECK(r->size() == 4);
  CHECK(*r == "sim0");
  CHECK(std::move(r).value() == "sim0");
}
