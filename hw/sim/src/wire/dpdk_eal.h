// SPDX-License-Identifier: BSD-3-Clause
// DPDK's Environment Abstraction Layer, started once per process (rte_eal_init cannot run
// twice, nor again after rte_eal_cleanup) with defaults a user need not think about:
//
//  * memory: hugepages when some are free and hugetlbfs is mounted (--in-memory, so that no
//    runtime files are shared with other processes); otherwise --no-huge --no-shconf -m 256
//    and a one-line notice on stderr;
//  * --no-pci unless the arguments name PCI devices (-a/--allow, -b/--block): a DPDK wire
//    never takes over a NIC it was not given;
//  * -l <the first CPU this thread may run on>, --no-telemetry, --log-level=5 (warnings);
//    the calling thread's CPU affinity is restored afterwards, as EAL pins it to that core.
//
// Any of these the user passes explicitly wins. Failures carry DPDK's own reason
// (rte_strerror); nothing here exits or aborts.
#pragma once

#include <string>
#include <vector>

#include "rnicdv/status.h"

namespace rnicdv::sim {

struct EalPlan {
  std::vector<std::string> args;  // without the program name
  bool no_huge_added = false;     // the notice is due
};

// The full argument list for `user_args`. Pure: tested without EAL.
EalPlan plan_eal_args(const std::vector<std::string>& user_args, bool hugepages_free, int cpu);

// Free hugepages of some size and a mounted hugetlbfs.
bool hugepages_free() noexcept;

// Starts EAL with `user_args` planned as above, once per process. Later calls succeed when
// they pass no arguments or the same ones, and fail otherwise, naming both. A start-up that
// failed is reported again to every later caller. When the application started EAL itself,
// this adopts it.
Status eal_start(const std::vector<std::string>& user_args);
bool eal_running() noexcept;
// "hugepages" or "4 KiB pages (--no-huge)"; "" before EAL runs.
std::string eal_memory_mode();

}  // namespace rnicdv::sim
