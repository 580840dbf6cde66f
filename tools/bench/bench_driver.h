// SPDX-License-Identifier: BSD-3-Clause
// rnicdv-bench-driver's benchmark groups (bench_driver.cc has the overview and main), one
// file each: post (bench_post.cc), flush, poll, memory and scale.
#pragma once

#include <vector>

#include "bench_sim.h"
#include "bench_util.h"
#include "rnicdv/rnicdv.h"
#include "rnicdv/sim/sim.h"

namespace rnicdv::bench {

void post_cases(const Options& o, std::vector<Record>* out);
void flush_cases(const Options& o, std::vector<Record>* out);
void poll_cases(const Options& o, std::vector<Record>* out);
void memory_cases(const Options& o, std::vector<Record>* out);
void scale_poll_cases(const Options& o, std::vector<Record>* out);
void scale_memory_cases(std::vector<Record>* out);

// Heap bytes in use (malloc's view), and the bytes added between two readings per object (0
// when the allocator reports nothing: a sanitizer's does not fill mallinfo2).
double heap_bytes();
double per_object(double before, double after, int count);

}  // namespace rnicdv::bench
