// SPDX-License-Identifier: BSD-3-Clause
// The boundary between the simulator and its DPDK wire, which is a library of its own
// (librnicdv-dpdk) so that only a process that uses it maps DPDK's libraries.
//
// librnicdv-dpdk exports one C entry point, rnicdv_dpdk_provider(), returning this table;
// the simulator (dpdk_loader.cc) finds it in the process or loads the library beside its own
// on first use, checks the ABI number and calls through it. Both libraries come from one
// build: the table carries C++ types.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "rnicdv/status.h"
#include "rnicdv_config.h"
#include "wire/wire.h"

namespace rnicdv::sim {

inline constexpr uint32_t kDpdkProviderAbi = 1;
// librnicdv-dpdk.so.<soversion> (meson.build: rnicdv_dpdk_soname, through rnicdv_config.h).
inline constexpr const char* kDpdkLibrary = RNICDV_DPDK_LIBRARY;

struct DpdkProvider {
  uint32_t abi;
  Result<std::unique_ptr<Wire>> (*make_wire)(const WireConfig& config);
  Status (*init)(const std::string& dpdk_args);
  Result<void*> (*alloc)(size_t bytes, size_t align);
  void (*free)(void* memory) noexcept;
  std::string (*memory_mode)();
};

// In librnicdv-dpdk (dpdk_wire.cc): the wire itself.
Result<std::unique_ptr<Wire>> dpdk_wire_create(const WireConfig& config);

}  // namespace rnicdv::sim

extern "C" const rnicdv::sim::DpdkProvider* rnicdv_dpdk_provider();
