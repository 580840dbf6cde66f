// SPDX-License-Identifier: BSD-3-Clause
// Placing inbound data into memory the application reads while the device writes it.
//
// An application may poll a registered buffer while a WRITE, a READ response or a SEND lands
// in it: the "poll the last byte" idiom of riostream, many trading stacks and RDMA key-value
// stores. It then stores into the same buffer at once, and expects its store to stay. A
// ConnectX writes a packet's payload to host memory in increasing address order (PCIe
// posted writes, kept in order) and never writes a byte of it twice, so the idiom works on
// it in practice.
//
// memcpy promises neither. glibc's copies store overlapping vectors: a 64-byte copy with
// AVX-512 stores the same 64 bytes twice, and any copy whose length is not a multiple of the
// vector stores its tail twice. A device thread preempted between the two stores makes an
// application that saw the first one lose its own store to the second, 0.2 us or a time
// slice later. The device therefore never places with memcpy; it places with the stores
// below.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rnicdv::sim {

// Stores `src[0, n)` into `dst[0, n)` so that:
// - each byte of the destination is stored exactly once;
// - the stores are made in increasing address order, and the last byte is stored last (on
//   x86-64 stores become visible in program order; elsewhere a release fence orders the
//   final store after the others);
// - every naturally aligned 2-, 4-, 8- and 16-byte unit of the destination is written by a
//   single store, so a reader never sees an aligned flag word half old and half new.
// `src` is read once, in order. The two ranges must not overlap.
void place_in_order(uint8_t* dst, const uint8_t* src, size_t n) noexcept;

}  // namespace rnicdv::sim
