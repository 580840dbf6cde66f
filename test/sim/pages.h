// SPDX-License-Identifier: BSD-3-Clause
// Anonymous pages a test can unmap, protect or map over while the device uses them.
#pragma once

#include <catch2/catch.hpp>

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>

namespace simtest {

// Anonymous pages the test can unmap or protect.
struct Pages {
  uint8_t* p = nullptr;
  size_t len = 0;
  bool mapped = false;

  explicit Pages(size_t n) : len((n + 4095) / 4096 * 4096) {
    void* m = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(m != MAP_FAILED);
    p = static_cast<uint8_t*>(m);
    mapped = true;
  }
  ~Pages() {
    if (mapped) ::munmap(p, len);
  }
  Pages(const Pages&) = delete;
  Pages& operator=(const Pages&) = delete;
  void unmap() {
    REQUIRE(::munmap(p, len) == 0);
    mapped = false;
  }
  void protect(int prot) { REQUIRE(::mprotect(p, len, prot) == 0); }
  // New zeroed anonymous pages in place of the old ones (MAP_FIXED): the program's view of
  // the range changes, the old pages are no longer mapped anywhere.
  void replace() {
    void* m = ::mmap(p, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    REQUIRE(m == p);
  }
  bool all(uint8_t v, size_t n) const {
    for (size_t i = 0; i < n; ++i)
      if (p[i] != v) return false;
    return true;
  }
  uint64_t addr() const { return reinterpret_cast<uintptr_t>(p); }
};

}  // namespace simtest
