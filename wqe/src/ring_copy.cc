// SPDX-License-Identifier: BSD-3-Clause
// Copies of WQE bytes between send rings, following the wrap at the ring's end.
// The shadow-queue flush copies a withheld batch into the SQ at the same BB offsets; for a
// device that runs valid-looking WQEs past the doorbell record, one WQE at a time with its
// ctrl segment last.
#include <algorithm>
#include <cstddef>
#include <cstring>

#include "rnicdv/wqe/send_wqe.h"

namespace rnicdv::wqe {

namespace {

size_t ring_bytes(SqRing ring) {
  return static_cast<size_t>(ring.bb_count) * kBbBytes;
}

size_t bb_offset(SqRing ring, uint32_t pi) {
  return static_cast<size_t>(pi & (ring.bb_count - 1)) * kBbBytes;
}

// `bytes` from byte `skip` of BB `pi` on, to the same place in `dst`. Equal sizes are the
// contract; each side still wraps at its own end so that a mismatch can never read or write
// outside either ring.
void copy_span(SqRing src, SqRing dst, uint32_t pi, size_t skip, size_t bytes) noexcept {
  const size_t src_size = ring_bytes(src);
  const size_t dst_size = ring_bytes(dst);
  size_t src_offset = (bb_offset(src, pi) + skip) % src_size;
  size_t dst_offset = (bb_offset(dst, pi) + skip) % dst_size;
  size_t left = bytes;
  while (left != 0) {
    const size_t chunk = std::min({left, src_size - src_offset, dst_size - dst_offset});
    std::memcpy(dst.buf + dst_offset, src.buf + src_offset, chunk);
    left -= chunk;
    src_offset += chunk;
    dst_offset += chunk;
    if (src_offset == src_size) src_offset = 0;
    if (dst_offset == dst_size) dst_offset = 0;
  }
}

}  // namespace

void copy_between_rings(SqRing src, SqRing dst, uint32_t pi, uint32_t bytes) noexcept {
  if (src.bb_count == 0 || dst.bb_count == 0) return;
  copy_span(src, dst, pi, 0, bytes);
}

void copy_wqe_ctrl_last(SqRing src, SqRing dst, uint32_t pi, uint32_t bbs) noexcept {
  if (src.bb_count == 0 || dst.bb_count == 0 || bbs == 0) return;
  constexpr size_t kCtrl = sizeof(mlx5_wqe_ctrl_seg);
  copy_span(src, dst, pi, kCtrl, size_t{bbs} * kBbBytes - kCtrl);
  // The ctrl segment as the encoder writes it: its head last, with release ordering
  // (segments.h, "Publishing a WQE"). A memcpy of the 16 bytes may store them in any order.
  mlx5_wqe_ctrl_seg ctrl;
  std::memcpy(&ctrl, src.bb(pi), sizeof ctrl);
  publish_ctrl_segment(dst.bb(pi), ctrl);
}

}  // namespace rnicdv::wqe
