// SPDX-License-Identifier: BSD-3-Clause
// Which benchmark runs: the verb (SEND, RDMA WRITE, RDMA READ, atomic) and the kind (latency
// or bandwidth), named as perftest's eight tools are (ib_write_lat -> "write_lat").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace rnicperf {

enum class Verb : uint8_t { send, write, read, atomic };
enum class Kind : uint8_t { latency, bandwidth };

struct TestId {
  Verb verb = Verb::write;
  Kind kind = Kind::latency;
  bool operator==(const TestId&) const = default;
};

// "write_lat", "send_bw", ...
const char* test_name(TestId id) noexcept;
std::optional<TestId> parse_test_name(std::string_view name) noexcept;

// perftest's verb names in titles: "Send", "RDMA_Write", "RDMA_Read", "Atomic".
const char* verb_title(Verb v) noexcept;

// The centred title of the header block, as perftest builds it: "RDMA_Write Latency Test",
// "Send Bidirectional BW Test", "Atomic FETCH_AND_ADD Post List BW Test".
std::string test_title(TestId id, bool bidirectional, bool post_list);

// SEND and WRITE latency report half the round trip; READ and atomics the full one.
inline int rtt_factor(Verb v) noexcept {
  return (v == Verb::read || v == Verb::atomic) ? 1 : 2;
}

}  // namespace rnicperf
