// SPDX-License-Identifier: BSD-3-Clause
// Errc is a std::error_code enum of the "rnicdv" category: each code has a message, one errno
// (the mapping the uverbs shim reports), and compares equal to the std::errc of that errno.
#include <catch2/catch.hpp>

#include <cerrno>
#include <cstring>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "rnicdv/status.h"

using namespace rnicdv;

namespace {

// Every code, with the errno it maps to.
const std::vector<std::pair<Errc, int>> kErrno = {
    {Errc::ok, 0},
    {Errc::bad_state, EINVAL},
    {Errc::queue_full, ENOSPC},
    {Errc::too_many_sge, EINVAL},
    {Errc::inline_too_large, EINVAL},
    {Errc::invalid_argument, EINVAL},
    {Errc::qp_in_error, EIO},
    {Errc::not_found, ENOENT},
    {Errc::no_resources, ENOMEM},
    {Errc::busy, EBUSY},
    {Errc::unsupported, EOPNOTSUPP},
    {Errc::access_denied, EACCES},
    {Errc::address_in_use, EADDRINUSE},
    {Errc::timeout, ETIMEDOUT},
    {Errc::unreachable, EHOSTUNREACH},
    {Errc::rejected, ECONNREFUSED},
    {Errc::disconnected, ENOTCONN},
    {Errc::protocol_error, EPROTO},
    {Errc::io_error, EIO},
    {Errc::internal, EIO},
};

}  // namespace

TEST_CASE("the table names every code") {
  // The last enumerator is internal: the table holds each value up to it, once, in order.
  REQUIRE(kErrno.size() == static_cast<size_t>(Errc::internal) + 1);
  for (size_t i = 0; i < kErrno.size(); ++i) CHECK(static_cast<size_t>(kErrno[i].first) == i);
}

TEST_CASE("to_errno maps every code to its errno") {
  for (const auto& [code, err] : kErrno) {
    INFO(errc_name(code));
    CHECK(to_errno(code) == err);
    CHECK(make_error_code(code).default_error_condition() == std::error_condition(err, std::generic_category()));
  }
}

TEST_CASE("an Errc converts to a std::error_code of the rnicdv category") {
  std::error_code ec = Errc::queue_full;
  CHECK(ec.category() == error_category());
  CHECK(std::string(ec.category().name()) == "rnicdv");
  CHECK(ec.value() == static_cast<int>(Errc::queue_full));
  CHECK(ec == Errc::queue_full);
  CHECK(ec != Errc::no_resources);
  CHECK(static_cast<bool>(ec));
  CHECK_FALSE(static_cast<bool>(std::error_code(Errc::ok)));
  // A Status hands out its code as one.
  Status st = Status::error(Errc::timeout, "no REP");
  CHECK(st.error_code() == make_error_code(Errc::timeout));
  CHECK_FALSE(Status::ok().error_code());
}

TEST_CASE("every code compares equal to the std::errc of its errno, and not to others") {
  for (const auto& [code, err] : kErrno) {
    INFO(errc_name(code));
    const std::error_code ec = code;
    CHECK(ec == std::error_condition(err, std::generic_category()));
    CHECK(ec == std::error_condition(err, std::system_category()));
    CHECK(ec == std::error_condition(static_cast<int>(code), error_category()));  // its own
    const int other = err == EPERM ? ENOEXEC : EPERM;
    CHECK(ec != std::error_condition(other, std::generic_category()));
  }
  CHECK(Status::error(Errc::queue_full, "sq").error_code() == std::errc::no_space_on_device);
  CHECK(Status::error(Errc::timeout, "rep").error_code() == std::errc::timed_out);
  CHECK(Status::error(Errc::address_in_use, "bind").error_code() == std::errc::address_in_use);
  CHECK(Status::error(Errc::unsupported, "odp").error_code() == std::errc::operation_not_supported);
  CHECK(Status::error(Errc::bad_state, "post").error_code() == std::errc::invalid_argument);
  // The distinct codes stay distinct: a full queue is not "out of memory".
  CHECK(make_error_code(Errc::queue_full) != std::errc::not_enough_memory);
  CHECK(make_error_code(Errc::no_resources) == std::errc::not_enough_memory);
  CHECK(make_error_code(Errc::no_resources) != std::errc::no_space_on_device);
  // Codes of the same errno are still different codes.
  CHECK(make_error_code(Errc::bad_state) != make_error_code(Errc::invalid_argument));
}

TEST_CASE("the category's messages describe each code") {
  const std::error_category& cat = error_category();
  CHECK(cat.message(static_cast<int>(Errc::ok)) == "success");
  CHECK(cat.message(static_cast<int>(Errc::queue_full)) == "no room in the work queue");
  CHECK(cat.message(static_cast<int>(Errc::bad_state)) == "the QP's state does not allow the operation");
  CHECK(make_error_code(Errc::timeout).message() == "timed out");
  CHECK(cat.message(200) == "unknown rnicdv error 200");
  // Every code has a message of its own.
  std::vector<std::string> seen;
  for (const auto& [code, err] : kErrno) {
    const std::string m = make_error_code(code).message();
    INFO(errc_name(code) << ": " << m);
    CHECK_FALSE(m.empty());
    CHECK(m.find("unknown") == std::string::npos);
    for (const std::string& s : seen) CHECK(s != m);
    seen.push_back(m);
  }
}

TEST_CASE("a value outside Errc is equal to no errno") {
  const std::error_code odd(200, error_category());
  CHECK(odd != std::errc::io_error);
  CHECK(odd.default_error_condition().category() == error_category());
}

TEST_CASE("a std::system_error thrown from a Status carries the code and the message") {
  const Status st = Status::error(Errc::no_resources, "sim0: create_qp: no QPN left");
  try {
    throw std::system_error(st.error_code(), st.message());
  } catch (const std::system_error& e) {
    CHECK(e.code() == std::errc::not_enough_memory);
    CHECK(e.code() == Errc::no_resources);
    CHECK(std::string(e.what()).find("no QPN left") != std::string::npos);
  }
}
