// SPDX-License-Identifier: BSD-3-Clause
// DPDK for the software HCA: the process's EAL and memory from DPDK's heap.
//
// A fabric with WireKind::dpdk starts EAL itself from FabricConfig::dpdk_args (see
// docs/dpdk.md). These calls are for applications that want the same EAL earlier, or want
// registered memory from DPDK's heap: hugepage-backed when the machine has free hugepages,
// which saves TLB misses on large regions and the page faults of first touch.
//
// Without libdpdk at build time every call fails with Errc::unsupported.
#pragma once

#include <cstddef>
#include <string>

#include "rnicdv/status.h"

namespace rnicdv::sim {

// True when rnicdv was built with the DPDK wire.
bool dpdk_built() noexcept;

// Starts EAL for this process with the EAL arguments in `dpdk_args` (the DPDK wire's own
// options in it are ignored here), unless it already runs with the same arguments. EAL runs
// once per process: a second start with other arguments fails and names both.
Status dpdk_init(const std::string& dpdk_args);

// `bytes` of zeroed memory from DPDK's heap, aligned to `align` (a power of two, 0 for a cache
// line). Starts EAL with default arguments when it is not running.
Result<void*> dpdk_alloc(size_t bytes, size_t align);
void dpdk_free(void* memory) noexcept;

// How EAL's memory is backed: "hugepages" or "4 KiB pages (--no-huge)"; "" before EAL runs.
std::string dpdk_memory_mode();

}  // namespace rnicdv::sim
