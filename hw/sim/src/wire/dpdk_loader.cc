// SPDX-License-Identifier: BSD-3-Clause
// rnicdv/sim/dpdk.h and the DPDK wire's factory, through librnicdv-dpdk (dpdk_provider.h),
// which is loaded here on first use: a process that never asks for DPDK maps none of it.
#include <dlfcn.h>

#include <cstring>
#include <mutex>
#include <string>

#include "rnicdv/hw/loader.h"
#include "rnicdv/sim/dpdk.h"
#include "rnicdv_config.h"
#include "wire/dpdk_provider.h"
#include "wire/wire.h"

namespace rnicdv::sim {
namespace {

struct Loaded {
  const DpdkProvider* provider = nullptr;
  Status why;  // when provider is null
};

Loaded load() {
  Loaded l;
#if !RNICDV_HAVE_DPDK
  l.why = Status::error(Errc::unsupported, "rnicdv was built without libdpdk");
  return l;
#else
  using Entry = const DpdkProvider* (*)();
  std::string error;
  auto entry = reinterpret_cast<Entry>(hw::find_entry("rnicdv_dpdk_provider", kDpdkLibrary,
                                                      reinterpret_cast<const void*>(&load),
                                                      RTLD_NOW | RTLD_LOCAL, &error));
  if (!entry) {
    l.why = Status::error(Errc::unsupported, "cannot load %s: %s", kDpdkLibrary, error.c_str());
    return l;
  }
  const DpdkProvider* p = entry();
  if (!p || p->abi != kDpdkProviderAbi) {
    l.why = Status::error(Errc::internal, "%s: provider ABI %u, expected %u", kDpdkLibrary,
                          p ? p->abi : 0, kDpdkProviderAbi);
    return l;
  }
  l.provider = p;
  return l;
#endif
}

const Loaded& loaded() {
  static const Loaded l = load();
  return l;
}

Status unavailable(const char* what) {
  return Status(loaded().why).prepend(what);
}

}  // namespace

bool dpdk_built() noexcept {
  return RNICDV_HAVE_DPDK != 0;
}

Status dpdk_init(const std::string& dpdk_args) {
  if (const DpdkProvider* p = loaded().provider) return p->init(dpdk_args);
  return unavailable("dpdk: start EAL");
}

Result<void*> dpdk_alloc(size_t bytes, size_t align) {
  if (const DpdkProvider* p = loaded().provider) return p->alloc(bytes, align);
  return unavailable("dpdk: allocate");
}

void dpdk_free(void* memory) noexcept {
  if (const DpdkProvider* p = loaded().provider) p->free(memory);
}

std::string dpdk_memory_mode() {
  if (const DpdkProvider* p = loaded().provider) return p->memory_mode();
  return "";
}

Result<std::unique_ptr<Wire>> make_dpdk_wire(const WireConfig& config) {
  if (const DpdkProvider* p = loaded().provider) return p->make_wire(config);
  return unavailable("dpdk wire");
}

}  // namespace rnicdv::sim
