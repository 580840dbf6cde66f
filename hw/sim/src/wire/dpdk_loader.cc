// SPDX-License-Identifier: BSD-3-Clause
// rnicdv/sim/dpdk.h and the DPDK wire's factory, through librnicdv-dpdk (dpdk_provider.h),
// which is loaded here on first use: a process that never asks for DPDK maps none of it.
#include <dlfcn.h>
#include <libgen.h>

#include <cstring>
#include <mutex>
#include <string>

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

// The directory this library was loaded from: librnicdv-dpdk is installed (and built) beside it.
std::string own_directory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&own_directory), &info) == 0 || !info.dli_fname) return "";
  std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash + 1);
}

Loaded load() {
  Loaded l;
#if !RNICDV_HAVE_DPDK
  l.why = Status::error(Errc::unsupported, "rnicdv was built without libdpdk");
  return l;
#else
  using Entry = const DpdkProvider* (*)();
  auto entry = reinterpret_cast<Entry>(dlsym(RTLD_DEFAULT, "rnicdv_dpdk_provider"));
  std::string error;
  if (!entry) {
    // Beside this library first (a build tree, or an installed prefix), then the loader's path.
    for (const std::string& name : {own_directory() + kDpdkLibrary, std::string(kDpdkLibrary)}) {
      void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!handle) {
        if (error.empty()) error = dlerror();
        continue;
      }
      entry = reinterpret_cast<Entry>(dlsym(handle, "rnicdv_dpdk_provider"));
      if (entry) break;
    }
  }
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
