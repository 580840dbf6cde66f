// SPDX-License-Identifier: BSD-3-Clause
// How one of the project's libraries reaches another that it does not link (the driver the
// software HCA, the software HCA its DPDK wire): by one C entry point, found in the process or
// loaded on first use.
#pragma once

#include <string>

namespace rnicdv::hw {

// The address of `entry` (a C function returning the library's provider table): the one
// already in the process if a loaded object defines it (a program that links the library);
// otherwise `library` is loaded from the directory of the object that contains `anchor` (the
// caller's own library: the libraries are built and installed side by side), then from the
// loader's search path, with `dlopen_flags`. Null when neither works; `*error` says why.
void* find_entry(const char* entry, const char* library, const void* anchor, int dlopen_flags,
                 std::string* error);

}  // namespace rnicdv::hw
