// SPDX-License-Identifier: BSD-3-Clause
// libFuzzer's entry point for one target of targets.h, chosen at build time
// (-DRNICDV_FUZZ_TARGET=cm_mad, ...): one program per target, built with -Dfuzzing=enabled.
#include <cstddef>
#include <cstdint>

#include "targets.h"

#ifndef RNICDV_FUZZ_TARGET
#error "define RNICDV_FUZZ_TARGET as one of the functions in targets.h"
#endif

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return rnicdv::fuzz::RNICDV_FUZZ_TARGET(data, size);
}
