// SPDX-License-Identifier: BSD-3-Clause
// Result<T>'s monadic operations behave as std::expected's: the continuation runs only with a
// value, an error passes through unchanged without calling it, and an rvalue Result moves its
// value (move-only values compose). RNICDV_TRY and RNICDV_ASSIGN_OR_RETURN return the error
// from the enclosing function and go on with the value.
#include <catch2/catch.hpp>

#include <memory>
#include <string>

#include "rnicdv/status.h"

using namespace rnicdv;

namespace {

Result<int> failed(Errc code = Errc::not_found) {
  return Status::error(code, "open sim9: no such device");
}

Result<int> parse_positive(const std::string& text) {
  if (text.empty() || text[0] == '-') return Status::error(Errc::invalid_argument, "'%s'", text.c_str());
  return std::stoi(text);
}

struct Base {
  virtual ~Base() = default;
  virtual int id() const { return 0; }
};
struct Derived : Base {
  int id() const override { return 7; }
};

}  // namespace

TEST_CASE("and_then passes the value to the continuation and returns its Result") {
  Result<std::string> text = std::string("42");
  Result<int> n = text.and_then(parse_positive);
  REQUIRE(n.is_ok());
  CHECK(*n == 42);
  // The continuation's own error is the result.
  Result<int> refused = Result<std::string>(std::string("-1")).and_then(parse_positive);
  REQUIRE_FALSE(refused.is_ok());
  CHECK(refused.status().code() == Errc::invalid_argument);
  CHECK(refused.status().message() == "'-1'");
}

TEST_CASE("and_then on an error returns it without calling the continuation") {
  int calls = 0;
  Result<double> r = failed().and_then([&](int v) -> Result<double> {
    ++calls;
    return v * 0.5;
  });
  CHECK(calls == 0);
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().code() == Errc::not_found);
  CHECK(r.status().message() == "open sim9: no such device");
}

TEST_CASE("and_then with a continuation returning a Status yields that Status") {
  int seen = 0;
  Status st = Result<int>(5).and_then([&](int v) {
    seen = v;
    return Status::ok();
  });
  CHECK(st.is_ok());
  CHECK(seen == 5);
  Status bad = Result<int>(5).and_then([](int) { return Status::error(Errc::busy, "in use"); });
  CHECK(bad.code() == Errc::busy);
  Status passed = failed(Errc::timeout).and_then([&](int) {
    seen = -1;
    return Status::ok();
  });
  CHECK(passed.code() == Errc::timeout);
  CHECK(seen == 5);
}

TEST_CASE("and_then on an rvalue moves a move-only value into the continuation") {
  Result<std::unique_ptr<int>> owned = std::make_unique<int>(9);
  Result<int> r = std::move(owned).and_then([](std::unique_ptr<int> p) -> Result<int> { return *p + 1; });
  REQUIRE(r.is_ok());
  CHECK(*r == 10);
  // An lvalue passes a reference: the value stays.
  Result<std::unique_ptr<int>> kept = std::make_unique<int>(3);
  Result<int> seen = kept.and_then([](std::unique_ptr<int>& p) -> Result<int> { return *p; });
  CHECK(*seen == 3);
  REQUIRE(kept.is_ok());
  CHECK(*kept != nullptr);
  const Result<std::unique_ptr<int>>& ro = kept;
  CHECK(*ro.and_then([](const std::unique_ptr<int>& p) -> Result<int> { return *p * 2; }) == 6);
}

TEST_CASE("transform maps the value and keeps an error without calling the function") {
  Result<int> n = 21;
  Result<std::string> s = n.transform([](int v) { return std::to_string(v * 2); });
  REQUIRE(s.is_ok());
  CHECK(*s == "42");
  int calls = 0;
  Result<std::string> e = failed(Errc::rejected).transform([&](int v) {
    ++calls;
    return std::to_string(v);
  });
  CHECK(calls == 0);
  REQUIRE_FALSE(e.is_ok());
  CHECK(e.status().code() == Errc::rejected);
  CHECK(e.status().message() == "open sim9: no such device");
}

TEST_CASE("transform of a move-only value, and to a move-only value") {
  Result<std::unique_ptr<int>> owned = std::make_unique<int>(4);
  Result<std::unique_ptr<long>> widened =
      std::move(owned).transform([](std::unique_ptr<int> p) { return std::make_unique<long>(*p * 10L); });
  REQUIRE(widened.is_ok());
  CHECK(**widened == 40);
  Result<std::unique_ptr<Base>> as_base =
      Result<int>(1).transform([](int) -> std::unique_ptr<Base> { return std::make_unique<Derived>(); });
  CHECK((*as_base)->id() == 7);
}

TEST_CASE("transform with a function returning nothing yields a Status") {
  int seen = 0;
  Status st = Result<int>(8).transform([&](int v) { seen = v; });
  CHECK(st.is_ok());
  CHECK(seen == 8);
  Status e = failed(Errc::busy).transform([&](int) { seen = -1; });
  CHECK(e.code() == Errc::busy);
  CHECK(seen == 8);
}

TEST_CASE("or_else runs only on an error, with the Status, and a value passes") {
  int calls = 0;
  auto fallback = [&](const Status& st) -> Result<int> {
    ++calls;
    if (st.code() == Errc::not_found) return 0;
    return st;
  };
  Result<int> v = Result<int>(3).or_else(fallback);
  CHECK(calls == 0);
  CHECK(*v == 3);
  Result<int> recovered = failed(Errc::not_found).or_else(fallback);
  CHECK(calls == 1);
  REQUIRE(recovered.is_ok());
  CHECK(*recovered == 0);
  Result<int> kept = failed(Errc::timeout).or_else(fallback);
  CHECK(calls == 2);
  REQUIRE_FALSE(kept.is_ok());
  CHECK(kept.status().code() == Errc::timeout);
  // On an rvalue the Status is moved in, and a move-only value passes through.
  Result<std::unique_ptr<int>> owned = std::make_unique<int>(5);
  Result<std::unique_ptr<int>> same =
      std::move(owned).or_else([](Status st) -> Result<std::unique_ptr<int>> { return st; });
  CHECK(**same == 5);
  Result<std::unique_ptr<int>> gone = Status::error(Errc::io_error, "read");
  Result<std::unique_ptr<int>> prefixed = std::move(gone).or_else([](Status st) -> Result<std::unique_ptr<int>> {
    st.prepend("load");
    return st;
  });
  CHECK(prefixed.status().message() == "load: read");
}

TEST_CASE("value_or returns the value, or the fallback on an error") {
  CHECK(Result<int>(4).value_or(-1) == 4);
  CHECK(failed().value_or(-1) == -1);
  const Result<std::string> c = std::string("sim0");
  CHECK(c.value_or("none") == "sim0");
  CHECK(Result<std::string>(Status::error(Errc::not_found, "x")).value_or("none") == "none");
  // An rvalue moves its value out.
  Result<std::unique_ptr<int>> owned = std::make_unique<int>(6);
  std::unique_ptr<int> p = std::move(owned).value_or(nullptr);
  REQUIRE(p != nullptr);
  CHECK(*p == 6);
  CHECK(Result<std::unique_ptr<int>>(Status::error(Errc::busy, "x")).value_or(nullptr) == nullptr);
}

TEST_CASE("the operations chain, and the first error ends the chain") {
  std::string trace;
  auto step = [&](const char* name) {
    return [&trace, name](int v) -> Result<int> {
      trace += name;
      if (v > 10) return Status::error(Errc::no_resources, "%s: %d over 10", name, v);
      return v * 3;
    };
  };
  // 2 -> a: 6 -> b: 18 -> c: over 10, and d never runs.
  Result<std::string> r = Result<int>(2)
                              .and_then(step("a"))
                              .and_then(step("b"))
                              .and_then(step("c"))
                              .and_then(step("d"))
                              .transform([](int v) { return std::to_string(v); });
  CHECK(trace == "abc");
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().code() == Errc::no_resources);
  CHECK(r.status().message() == "c: 18 over 10");
  trace.clear();
  CHECK(*Result<int>(1).and_then(step("a")).and_then(step("b")).transform([](int v) { return v + 1; }) == 10);
  CHECK(trace == "ab");
}

TEST_CASE("a Result converts to a Result of a type its value converts to") {
  Result<std::unique_ptr<Derived>> d = std::make_unique<Derived>();
  Result<std::unique_ptr<Base>> b = std::move(d);
  REQUIRE(b.is_ok());
  CHECK((*b)->id() == 7);
  Result<std::unique_ptr<Base>> e = Result<std::unique_ptr<Derived>>(Status::error(Errc::busy, "held"));
  REQUIRE_FALSE(e.is_ok());
  CHECK(e.status().message() == "held");
}

TEST_CASE("status() of an rvalue Result gives its Status up") {
  Result<int> r = Status::error(Errc::timeout, "no REP in %d ms", 100);
  Status st = std::move(r).status();
  CHECK(st.code() == Errc::timeout);
  CHECK(st.message() == "no REP in 100 ms");
  CHECK(Result<int>(1).status().is_ok());
}

// ---- RNICDV_TRY and RNICDV_ASSIGN_OR_RETURN ----

namespace {

Status check_step(Status st, int* reached) {
  RNICDV_TRY(st);
  ++*reached;
  return Status::ok();
}

Result<int> try_result_in_result(Result<int> r, int* reached) {
  RNICDV_TRY(r);  // the value is not wanted, only the error
  ++*reached;
  return 100;
}

Result<std::string> doubled(const std::string& text, int* reached) {
  RNICDV_ASSIGN_OR_RETURN(int n, parse_positive(text));
  ++*reached;
  RNICDV_ASSIGN_OR_RETURN(const int m, parse_positive(std::to_string(n * 2)));
  return std::to_string(m);
}

Status take_ownership(Result<std::unique_ptr<int>> made, std::unique_ptr<int>* out) {
  RNICDV_ASSIGN_OR_RETURN(*out, std::move(made));
  return Status::ok();
}

}  // namespace

TEST_CASE("RNICDV_TRY returns the error of a Status or a Result, and goes on without one") {
  int reached = 0;
  CHECK(check_step(Status::ok(), &reached).is_ok());
  CHECK(reached == 1);
  Status st = check_step(Status::error(Errc::bad_state, "qp 0x1c: modify"), &reached);
  CHECK(st.code() == Errc::bad_state);
  CHECK(st.message() == "qp 0x1c: modify");
  CHECK(reached == 1);

  Result<int> ok = try_result_in_result(7, &reached);
  CHECK(reached == 2);
  CHECK(*ok == 100);
  Result<int> err = try_result_in_result(failed(Errc::unreachable), &reached);
  CHECK(reached == 2);
  CHECK(err.status().code() == Errc::unreachable);
}

TEST_CASE("RNICDV_ASSIGN_OR_RETURN declares or assigns the value, or returns the error") {
  int reached = 0;
  Result<std::string> r = doubled("21", &reached);
  CHECK(reached == 1);
  REQUIRE(r.is_ok());
  CHECK(*r == "42");
  Result<std::string> e = doubled("-3", &reached);
  CHECK(reached == 1);  // returned before the line after the macro
  REQUIRE_FALSE(e.is_ok());
  CHECK(e.status().code() == Errc::invalid_argument);
  CHECK(e.status().message() == "'-3'");

  std::unique_ptr<int> out;
  CHECK(take_ownership(std::make_unique<int>(11), &out).is_ok());
  REQUIRE(out != nullptr);
  CHECK(*out == 11);
  Status failed_take = take_ownership(Status::error(Errc::no_resources, "no MR"), &out);
  CHECK(failed_take.code() == Errc::no_resources);
  CHECK(*out == 11);  // untouched
}
