// SPDX-License-Identifier: BSD-3-Clause
// Copies between a message's byte offsets and its gather/scatter list.
#pragma once

#include <cstdint>
#include <vector>

#include "qp.h"

namespace rnicdv::sim {

// Copies `len` bytes of the message starting at `offset` out of `segs` into `dst`.
// Returns false if the list holds fewer bytes.
bool gather_bytes(const std::vector<LocalSeg>& segs, uint64_t offset, uint8_t* dst,
                  uint32_t len) noexcept;

// Copies `len` bytes from `src` into the message at `offset` of `segs`.
bool scatter_bytes(const std::vector<LocalSeg>& segs, uint64_t offset, const uint8_t* src,
                   uint32_t len) noexcept;

}  // namespace rnicdv::sim
