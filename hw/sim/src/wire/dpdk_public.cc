// SPDX-License-Identifier: BSD-3-Clause
// librnicdv-dpdk's entry point (dpdk_provider.h): the DPDK wire and the EAL and memory calls
// behind rnicdv/sim/dpdk.h.
#include <rte_malloc.h>

#include "wire/dpdk_args.h"
#include "wire/dpdk_eal.h"
#include "wire/dpdk_provider.h"

namespace rnicdv::sim {
namespace {

Status init(const std::string& dpdk_args) {
  return parse_dpdk_args(dpdk_args).and_then(
      [](const DpdkWireOptions& options) { return eal_start(options.eal_args); });
}

Result<void*> alloc(size_t bytes, size_t align) {
  if (bytes == 0 || (align & (align - 1)) != 0)
    return Status::error(Errc::invalid_argument,
                         "dpdk: allocate %zu bytes aligned to %zu: %s", bytes, align,
                         bytes == 0 ? "zero bytes" : "alignment is not a power of two");
  if (!eal_running()) RNICDV_TRY(eal_start({}));
  void* memory = ::rte_zmalloc("rnicdv", bytes, static_cast<unsigned>(align));
  if (memory == nullptr)
    return Status::error(Errc::no_resources,
                         "dpdk: allocate %zu bytes: DPDK's heap has no room (EAL memory: %s; "
                         "raise it with -m or --socket-mem)",
                         bytes, eal_memory_mode().c_str());
  return memory;
}

void release(void* memory) noexcept {
  ::rte_free(memory);
}

std::string memory_mode() {
  return eal_memory_mode();
}

const DpdkProvider kProvider{kDpdkProviderAbi, dpdk_wire_create, init, alloc, release,
                             memory_mode};

}  // namespace
}  // namespace rnicdv::sim

extern "C" __attribute__((visibility("default"))) const rnicdv::sim::DpdkProvider*
rnicdv_dpdk_provider() {
  return &rnicdv::sim::kProvider;
}
