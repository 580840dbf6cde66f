// SPDX-License-Identifier: BSD-3-Clause
// One uverbs write() command as the handlers see it (commands.cc parses the framing), and
// what the handlers in several files share.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "context.h"
#include "rnicdv/status.h"
#include "user_memory.h"

namespace rnicdv::uverbs {

// One parsed command.
struct Cmd {
  Context& ctx;
  uint32_t number = 0;
  bool extended = false;
  const uint8_t* core = nullptr;  // core request (after the header(s))
  size_t core_len = 0;
  const uint8_t* drv = nullptr;   // driver request
  size_t drv_len = 0;
  uint64_t response = 0;          // user address of the response
  size_t resp_core_len = 0;
  size_t resp_drv_len = 0;
  std::string dev_name;

  template <typename T>
  T core_as() const {
    T v{};
    std::memcpy(&v, core, std::min(sizeof v, core_len));
    return v;
  }
  template <typename T>
  T drv_as() const {
    T v{};
    if (drv) std::memcpy(&v, drv, std::min(sizeof v, drv_len));
    return v;
  }
  // Writes the core response and the driver response (each zero-padded or cut to the size
  // the caller gave).
  // The response was checked writable before the command ran (dispatch_write), so this copy
  // fails only if the application unmaps it meanwhile; the kernel's copy_to_user then gives
  // EFAULT as well.
  void reply(const void* core_resp, size_t core_size, const void* drv_resp = nullptr,
             size_t drv_size = 0) const {
    std::vector<uint8_t> out(resp_core_len + resp_drv_len, 0);
    std::memcpy(out.data(), core_resp, std::min(core_size, resp_core_len));
    if (drv_resp) std::memcpy(out.data() + resp_core_len, drv_resp, std::min(drv_size, resp_drv_len));
    if (!out.empty()) (void)copy_to_user(response, out.data(), out.size());
  }
  int error(int err, const char* fmt, ...) const __attribute__((format(printf, 3, 4)));
};


// The command's name, for messages ("CREATE_QP").
const char* command_name(uint32_t cmd);
// A failure the simulated HCA reported, prefixed with the device and the command.
int sim_error(const Cmd& c, const Status& st);
// The next object handle of `ctx` (the kernel's idr: per context, never reused while alive).
uint32_t new_handle(Context& ctx);

// Shared receive queues (srq_commands.cc).
int create_srq(Cmd& c);
int modify_srq(Cmd& c);
int query_srq(Cmd& c);
int destroy_srq(Cmd& c);

}  // namespace rnicdv::uverbs
