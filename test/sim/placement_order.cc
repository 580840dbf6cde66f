// SPDX-License-Identifier: BSD-3-Clause
// The device's own ordered placement (placement.h: what host_place uses where the kernel's
// process_vm_writev is refused), seen one instruction at a time: the copy runs under x86-64's
// trap flag, and after every instruction the test's SIGTRAP handler records which destination
// bytes that instruction stored and sets them back to zero. The source bytes are never zero,
// so a byte stored twice (even with the same value) is seen twice. (The kernel's copy, when
// host_place uses it, cannot be single-stepped; test/verbs/exactly_once.cc checks it as an
// application sees it.)
#include <catch2/catch.hpp>

#include <signal.h>
#include <ucontext.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "placement.h"

namespace sim = rnicdv::sim;

namespace {

#if defined(__x86_64__)

constexpr size_t kMaxBytes = 4096 + 64;

struct Trace {
  uint8_t* dst = nullptr;
  size_t n = 0;
  const uint8_t* src = nullptr;
  uint32_t step = 0;
  // Per byte: how many times it was stored, the step of its first store, and whether every
  // store carried the source's value.
  uint32_t stores[kMaxBytes];
  uint32_t first_step[kMaxBytes];
  bool right_value[kMaxBytes];
};

Trace g_trace;
volatile sig_atomic_t g_tracing = 0;

void on_step(int, siginfo_t*, void*) {
  if (!g_tracing) return;
  Trace& t = g_trace;
  ++t.step;
  for (size_t i = 0; i < t.n; ++i) {
    if (t.dst[i] == 0) continue;
    if (t.stores[i]++ == 0) t.first_step[i] = t.step;
    if (t.dst[i] != t.src[i]) t.right_value[i] = false;
    t.dst[i] = 0;
  }
}

using Copy = void (*)(void*, const void*, size_t);

// Runs `copy(dst, src, n)` one instruction at a time, recording every store into dst.
void trace_copy(Copy copy, uint8_t* dst, const uint8_t* src, size_t n) {
  Trace& t = g_trace;
  t.dst = dst;
  t.src = src;
  t.n = n;
  t.step = 0;
  for (size_t i = 0; i < n; ++i) {
    t.stores[i] = 0;
    t.first_step[i] = 0;
    t.right_value[i] = true;
  }
  std::memset(dst, 0, n);
  g_tracing = 1;
  asm volatile("pushfq; orq $0x100, (%%rsp); popfq" ::: "memory", "cc");
  copy(dst, src, n);
  asm volatile("pushfq; andq $~0x100, (%%rsp); popfq" ::: "memory", "cc");
  g_tracing = 0;
}

struct StepHandler {
  struct sigaction old {};
  StepHandler() {
    struct sigaction sa {};
    sa.sa_sigaction = on_step;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    REQUIRE(::sigaction(SIGTRAP, &sa, &old) == 0);
  }
  ~StepHandler() { ::sigaction(SIGTRAP, &old, nullptr); }
};

// What the trace says about one copy of n bytes to `dst`: every byte stored exactly once with
// the source's value, in increasing address order, and every naturally aligned 8-byte word
// inside the range stored by one instruction.
struct Verdict {
  bool once = true;
  bool values = true;
  bool ascending = true;
  bool aligned_words_whole = true;
};

Verdict judge(const uint8_t* dst, size_t n) {
  const Trace& t = g_trace;
  Verdict v;
  for (size_t i = 0; i < n; ++i) {
    v.once &= t.stores[i] == 1;
    v.values &= t.right_value[i];
    if (i > 0) v.ascending &= t.first_step[i] >= t.first_step[i - 1];
  }
  const auto base = reinterpret_cast<uintptr_t>(dst);
  for (size_t i = 0; i < n; ++i) {
    if ((base + i) % 8 != 0 || i + 8 > n) continue;
    for (size_t k = 1; k < 8; ++k) v.aligned_words_whole &= t.first_step[i + k] == t.first_step[i];
  }
  return v;
}

void place(void* dst, const void* src, size_t n) {
  sim::place_in_order(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), n);
}

// A copy that stores its last 8 bytes twice, as an overlapping memcpy tail does.
void store_tail_twice(void* dst, const void* src, size_t n) {
  auto* d = static_cast<uint8_t*>(dst);
  auto* s = static_cast<const uint8_t*>(src);
  for (size_t i = 0; i < n; ++i) {
    d[i] = s[i];
    asm volatile("" ::: "memory");
  }
  for (size_t i = n - 8; i < n; ++i) {
    d[i] = s[i];
    asm volatile("" ::: "memory");
  }
}

std::vector<uint8_t> nonzero_bytes(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 37 % 255 + 1);
  return v;
}

#endif

}  // namespace

TEST_CASE("ordered placement stores each byte once, in increasing address order, aligned words whole") {
#if defined(__x86_64__)
  StepHandler handler;
  alignas(64) static uint8_t area[kMaxBytes + 16];
  const std::vector<uint8_t> src = nonzero_bytes(kMaxBytes);
  std::vector<size_t> sizes;
  for (size_t n = 1; n <= 40; ++n) sizes.push_back(n);
  for (size_t n : {63u, 64u, 65u, 127u, 1031u, 4096u}) sizes.push_back(n);
  for (size_t n : sizes) {
    for (size_t align = 0; align < 16; ++align) {
      if (n > 64 && align % 5 != 0) continue;  // the long copies at a few alignments only
      uint8_t* dst = area + align;
      trace_copy(place, dst, src.data(), n);
      const Verdict v = judge(dst, n);
      INFO("bytes " << n << " at alignment " << align << ", " << g_trace.step << " steps");
      CHECK(v.once);
      CHECK(v.values);
      CHECK(v.ascending);
      CHECK(v.aligned_words_whole);
    }
  }
#else
  WARN("single-stepping needs x86-64's trap flag");
#endif
}

TEST_CASE("the store trace sees a byte stored twice") {
#if defined(__x86_64__)
  // The tracer itself: a copy that stores its tail twice must be caught, or the test above
  // could not fail.
  StepHandler handler;
  alignas(64) static uint8_t area[128];
  const std::vector<uint8_t> src = nonzero_bytes(64);
  trace_copy(store_tail_twice, area, src.data(), 64);
  const Verdict v = judge(area, 64);
  CHECK_FALSE(v.once);
  CHECK(v.values);
  CHECK_FALSE(v.aligned_words_whole);  // byte by byte
#else
  WARN("single-stepping needs x86-64's trap flag");
#endif
}
