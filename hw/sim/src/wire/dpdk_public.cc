// SPDX-License-Identifier: BSD-3-Clause
// rnicdv/sim/dpdk.h, and the DPDK wire's factory when rnicdv is built without libdpdk.
#include "rnicdv/sim/dpdk.h"
#include "rnicdv_config.h"
#include "wire/wire.h"

#if RNICDV_HAVE_DPDK
#include <rte_malloc.h>

#include "wire/dpdk_args.h"
#include "wire/dpdk_eal.h"
#endif

namespace rnicdv::sim {

#if RNICDV_HAVE_DPDK

bool dpdk_built() noexcept {
  return true;
}

Status dpdk_init(const std::string& dpdk_args) {
  Result<DpdkWireOptions> options = parse_dpdk_args(dpdk_args);
  if (!options) return options.status();
  return eal_start(options->eal_args);
}

Result<void*> dpdk_alloc(size_t bytes, size_t align) {
  if (bytes == 0 || (align & (align - 1)) != 0)
    return Status::error(Errc::invalid_argument,
                         "dpdk: allocate %zu bytes aligned to %zu: %s", bytes, align,
                         bytes == 0 ? "zero bytes" : "alignment is not a power of two");
  if (!eal_running())
    if (Status st = eal_start({}); !st) return st;
  void* memory = ::rte_zmalloc("rnicdv", bytes, static_cast<unsigned>(align));
  if (memory == nullptr)
    return Status::error(Errc::no_resources,
                         "dpdk: allocate %zu bytes: DPDK's heap has no room (EAL memory: %s; "
                         "raise it with -m or --socket-mem)",
                         bytes, eal_memory_mode().c_str());
  return memory;
}

void dpdk_free(void* memory) noexcept {
  ::rte_free(memory);
}

std::string dpdk_memory_mode() {
  return eal_memory_mode();
}

#else  // built without libdpdk

namespace {
Status not_built(const char* what) {
  return Status::error(Errc::unsupported, "%s: rnicdv was built without libdpdk", what);
}
}  // namespace

bool dpdk_built() noexcept {
  return false;
}

Status dpdk_init(const std::string&) {
  return not_built("dpdk: start EAL");
}

Result<void*> dpdk_alloc(size_t, size_t) {
  return not_built("dpdk: allocate");
}

void dpdk_free(void*) noexcept {}

std::string dpdk_memory_mode() {
  return "";
}

Result<std::unique_ptr<Wire>> make_dpdk_wire(const WireConfig&) {
  return not_built("dpdk wire");
}

#endif

}  // namespace rnicdv::sim
