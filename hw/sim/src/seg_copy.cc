// SPDX-License-Identifier: BSD-3-Clause
#include "seg_copy.h"

#include <algorithm>

#include "host_access.h"

namespace rnicdv::sim {

namespace {

template <class Copy>
SegCopy walk(const std::vector<LocalSeg>& segs, uint64_t offset, uint32_t len, Copy&& copy) {
  size_t i = 0;
  while (i < segs.size() && offset >= segs[i].len) {
    offset -= segs[i].len;
    ++i;
  }
  uint32_t done = 0;
  while (done < len) {
    if (i >= segs.size()) return SegCopy::short_list;
    if (segs[i].len == offset) {  // empty, or consumed by `offset`
      offset = 0;
      ++i;
      continue;
    }
    const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(len - done, segs[i].len - offset));
    if (!copy(segs[i], offset, done, n)) return SegCopy::fault;
    done += n;
    offset = 0;
    ++i;
  }
  return SegCopy::ok;
}

}  // namespace

SegCopy gather_bytes(const std::vector<LocalSeg>& segs, uint64_t offset, uint8_t* dst,
                     uint32_t len) noexcept {
  return walk(segs, offset, len, [dst](const LocalSeg& seg, uint64_t off, uint32_t at, uint32_t n) {
    return host_read(seg.pin, dst + at, seg.ptr + off, n);
  });
}

SegCopy scatter_bytes(const std::vector<LocalSeg>& segs, uint64_t offset, const uint8_t* src,
                      uint32_t len) noexcept {
  return walk(segs, offset, len, [src](const LocalSeg& seg, uint64_t off, uint32_t at, uint32_t n) {
    return host_place(seg.pin, seg.ptr + off, src + at, n);
  });
}

bool gather_wqe_payload(SendWqe& w, uint64_t offset, uint8_t* dst, uint32_t len,
                        uint64_t& faults) noexcept {
  switch (gather_bytes(w.segs, offset, dst, len)) {
    case SegCopy::ok:
      return true;
    case SegCopy::short_list:
      w.error = MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR;
      return false;
    case SegCopy::fault:
      ++faults;
      w.error = MLX5_CQE_SYNDROME_LOCAL_PROT_ERR;
      return false;
  }
  return false;
}

}  // namespace rnicdv::sim
