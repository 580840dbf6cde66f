// SPDX-License-Identifier: BSD-3-Clause
#include "rnicdv/hw/loader.h"

#include <dlfcn.h>

namespace rnicdv::hw {

namespace {

std::string directory_of(const void* anchor) {
  Dl_info info{};
  if (dladdr(anchor, &info) == 0 || !info.dli_fname) return "";
  const std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash + 1);
}

}  // namespace

void* find_entry(const char* entry, const char* library, const void* anchor, int dlopen_flags,
                 std::string* error) {
  if (void* found = dlsym(RTLD_DEFAULT, entry)) return found;
  std::string first_error;
  for (const std::string& name : {directory_of(anchor) + library, std::string(library)}) {
    void* handle = dlopen(name.c_str(), dlopen_flags);
    if (!handle) {
      if (first_error.empty()) first_error = dlerror();
      continue;
    }
    if (void* found = dlsym(handle, entry)) return found;
    if (first_error.empty()) first_error = std::string(name) + " has no " + entry;
  }
  if (error) *error = first_error.empty() ? "not found" : first_error;
  return nullptr;
}

}  // namespace rnicdv::hw
