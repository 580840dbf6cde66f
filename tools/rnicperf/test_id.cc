// SPDX-License-Identifier: BSD-3-Clause
#include "test_id.h"

namespace rnicperf {

namespace {
struct NamedTest {
  const char* name;
  TestId id;
};
constexpr NamedTest kTests[] = {
    {"send_lat", {Verb::send, Kind::latency}},     {"send_bw", {Verb::send, Kind::bandwidth}},
    {"write_lat", {Verb::write, Kind::latency}},   {"write_bw", {Verb::write, Kind::bandwidth}},
    {"read_lat", {Verb::read, Kind::latency}},     {"read_bw", {Verb::read, Kind::bandwidth}},
    {"atomic_lat", {Verb::atomic, Kind::latency}}, {"atomic_bw", {Verb::atomic, Kind::bandwidth}},
};
}  // namespace

const char* test_name(TestId id) noexcept {
  for (const auto& t : kTests)
    if (t.id == id) return t.name;
  return "?";
}

std::optional<TestId> parse_test_name(std::string_view name) noexcept {
  for (const auto& t : kTests)
    if (name == t.name) return t.id;
  return std::nullopt;
}

const char* verb_title(Verb v) noexcept {
  switch (v) {
    case Verb::send:
      return "Send";
    case Verb::write:
      return "RDMA_Write";
    case Verb::read:
      return "RDMA_Read";
    case Verb::atomic:
      return "Atomic";
  }
  return "?";
}

std::string test_title(TestId id, bool bidirectional, bool post_list) {
  std::string title = verb_title(id.verb);
  title += ' ';
  // rnicperf's atomics are fetch-and-add, perftest's default atomic type.
  if (id.verb == Verb::atomic) title += "FETCH_AND_ADD ";
  if (id.kind == Kind::bandwidth) {
    if (bidirectional) title += "Bidirectional ";
    if (post_list) title += "Post List ";
    title += "BW ";
  } else {
    title += "Latency ";
  }
  title += "Test";
  return title;
}

}  // namespace rnicperf
