// SPDX-License-Identifier: BSD-3-Clause
// Copies between a message's byte offsets and its gather/scatter list. The list's segments
// are registered memory the application may have taken away since (host_access.h).
#pragma once

#include <cstdint>
#include <vector>

#include "qp.h"

namespace rnicdv::sim {

enum class SegCopy : uint8_t {
  ok,
  short_list,  // the list holds fewer bytes than asked for
  fault,       // a segment's memory faulted (unmapped or protected since registration)
};

// Copies `len` bytes of the message starting at `offset` out of `segs` into `dst`.
SegCopy gather_bytes(const std::vector<LocalSeg>& segs, uint64_t offset, uint8_t* dst,
                     uint32_t len) noexcept;

// Gathers `len` bytes of send WQE `w`'s message, from `offset`, into `dst`. On failure sets
// w.error and returns false: a short list (the fetch checked that the list covers the length)
// is a local length error; a fault (the region's pages taken away after registration) is a
// local protection error, as the MR check gives for memory that is not registered, and is
// counted in `faults`.
bool gather_wqe_payload(SendWqe& w, uint64_t offset, uint8_t* dst, uint32_t len,
                        uint64_t& faults) noexcept;

// Places `len` bytes from `src` into the message at `offset` of `segs`: segment after
// segment, each byte once and in increasing order (host_place).
SegCopy scatter_bytes(const std::vector<LocalSeg>& segs, uint64_t offset, const uint8_t* src,
                      uint32_t len) noexcept;

}  // namespace rnicdv::sim
