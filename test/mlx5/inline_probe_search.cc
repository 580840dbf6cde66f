// SPDX-License-Identifier: BSD-3-Clause
// The search for the largest max_inline_data, against models of libmlx5's QP sizing.
#include <catch2/catch.hpp>

#include <optional>

#include "mlx5_caps.h"

using namespace rnicdv::hw::mlx5;

namespace {

// libmlx5's RC send WQE sizing (providers/mlx5/verbs.c, mlx5_calc_send_wqe): a fixed
// overhead of ctrl + the largest of (atomic + raddr) and the MW-bind segments (192 bytes),
// inline data behind a 4-byte header padded to 16, the WQE rounded up to 64 bytes, and a
// failure above the device's largest send descriptor. The grant is all the room left.
struct Mlx5SizingModel {
  uint32_t max_sq_desc = 1024;
  uint32_t overhead = 192;
  int calls = 0;
  uint32_t largest_request = 0;

  std::optional<uint32_t> operator()(uint32_t inline_size) {
    ++calls;
    if (inline_size > largest_request) largest_request = inline_size;
    const uint32_t sge = overhead + 16;  // one data segment
    const uint32_t inl = inline_size ? overhead + ((4 + inline_size + 15) / 16) * 16 : 0;
    const uint32_t total = sge > inl ? sge : inl;
    if (total > max_sq_desc) return std::nullopt;
    const uint32_t wqe = (total + 63) / 64 * 64;
    return wqe - overhead - 4;
  }
};

}  // namespace

TEST_CASE("the search finds libmlx5's exact inline limit in a few creations", "[inline]") {
  for (uint32_t desc : {256u, 512u, 1024u, 2048u}) {
    Mlx5SizingModel model;
    model.max_sq_desc = desc;
    const uint32_t found = find_max_inline(std::ref(model), 64 * 1024);
    INFO("max_sq_desc " << desc);
    CHECK(found == desc - 192 - 4);
    CHECK(model.calls <= 24);
  }
}

TEST_CASE("the search is exact for a device that grants exactly what is asked", "[inline]") {
  int calls = 0;
  auto exact = [&](uint32_t n) -> std::optional<uint32_t> {
    ++calls;
    if (n > 1000) return std::nullopt;
    return n;
  };
  CHECK(find_max_inline(exact, 64 * 1024) == 1000);
  CHECK(calls <= 40);
}

TEST_CASE("the search returns 0 when no QP can be created at all", "[inline]") {
  auto none = [](uint32_t) -> std::optional<uint32_t> { return std::nullopt; };
  CHECK(find_max_inline(none, 64 * 1024) == 0);
}

TEST_CASE("the search never asks for more than the ceiling", "[inline]") {
  uint32_t largest = 0;
  auto unlimited = [&](uint32_t n) -> std::optional<uint32_t> {
    if (n > largest) largest = n;
    return n;
  };
  CHECK(find_max_inline(unlimited, 4096) == 4096);
  CHECK(largest == 4096);
}
