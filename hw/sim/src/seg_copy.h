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

// Copies `len` bytes from `src` into the message at `offset` of `segs`.
SegCopy scatter_bytes(const std::vector<LocalSeg>& segs, uint64_t offset, const uint8_t* src,
                      uint32_t len) noexcept;

}  // namespace rnicdv::sim
