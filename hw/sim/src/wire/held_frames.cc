// SPDX-License-Identifier: BSD-3-Clause
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <new>

#include "wire/wire_frame.h"

namespace rnicdv::sim {
namespace {

// std::push_heap builds a max-heap; "later" as less-than puts the earliest frame on top.
bool later(const WireFrame* a, const WireFrame* b) {
  if (a->due_ns != b->due_ns) return a->due_ns > b->due_ns;
  return a->sequence > b->sequence;
}

}  // namespace

bool HeldFrames::hold(const WireFrame& frame) {
  if (heap_.size() >= limit_ || frame.len > kMaxWireDatagramLen) return false;
  WireFrame* copy;
  if (!free_.empty()) {
    copy = free_.back();
    free_.pop_back();
  } else {
    // Memory for held frames is allocated on first use; running out of it drops the frame
    // like a full holding area, rather than throwing out of the wire.
    try {
      storage_.push_back(std::make_unique_for_overwrite<WireFrame>());
      copy = storage_.back().get();
      heap_.reserve(storage_.size());
      free_.reserve(storage_.size());  // recycle() and clear() then never allocate
    } catch (const std::bad_alloc&) {
      return false;
    }
  }
  std::memcpy(copy, &frame, offsetof(WireFrame, bytes) + frame.len);
  heap_.push_back(copy);
  std::push_heap(heap_.begin(), heap_.end(), later);
  return true;
}

uint64_t HeldFrames::earliest_due() const noexcept {
  return heap_.empty() ? UINT64_MAX : heap_.front()->due_ns;
}

WireFrame* HeldFrames::take_due(uint64_t now_ns) {
  if (heap_.empty() || heap_.front()->due_ns > now_ns) return nullptr;
  std::pop_heap(heap_.begin(), heap_.end(), later);
  WireFrame* frame = heap_.back();
  heap_.pop_back();
  return frame;
}

size_t HeldFrames::clear() noexcept {
  const size_t n = heap_.size();
  for (WireFrame* f : heap_) free_.push_back(f);
  heap_.clear();
  return n;
}

}  // namespace rnicdv::sim
