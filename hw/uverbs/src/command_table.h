// SPDX-License-Identifier: BSD-3-Clause
// Building a command table indexed by command number from its rows (the uverbs table in
// commands.cc, the rdma_cm table in ucma_commands.cc), as the kernel's designated initializers
// place each row.
#pragma once

#include <array>
#include <cstddef>

namespace rnicdv::uverbs {

// `rows` placed at their numbers in a table of `Size` entries. Each Row has a `number` and a
// `name` (null in an empty slot). Evaluated at compile time, a row outside the table or two
// rows for one number do not compile.
template <size_t Size, typename Row, size_t N>
constexpr std::array<Row, Size> by_number(const Row (&rows)[N]) {
  std::array<Row, Size> table{};
  for (const Row& row : rows) {
    if (row.number >= Size || table[row.number].name)
      throw "a row outside the table or a duplicate";
    table[row.number] = row;
  }
  return table;
}

}  // namespace rnicdv::uverbs
