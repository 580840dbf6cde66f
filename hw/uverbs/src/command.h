// SPDX-License-Identifier: BSD-3-Clause
// One uverbs write() command as the handlers see it (commands.cc parses the framing), the
// command table's row, and what the handlers in several files share.
#pragma once

#include <cstddef>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "context.h"
#include "rnicdv/status.h"
#include "user_memory.h"

namespace rnicdv::uverbs {

// One parsed command. Its handler answers 0 or a negative errno (the kernel's convention);
// dispatch_write's caller, the write() entry point, turns that into -1 with errno, once.
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
  // the caller gave): 0, or -EFAULT (reported, and recorded in reply_failed) when the copy
  // fails. The range was checked writable before the command ran (dispatch_write), but the
  // application may take it away meanwhile, or may have taken it away in a way the check
  // cannot see (a raw system call: user_memory.h); the kernel's copy_to_user then fails too.
  // A handler that created an object destroys it again when this fails, as the kernel aborts
  // an object whose response could not be copied: the caller never learns its handle.
  [[nodiscard]] int reply(const void* core_resp, size_t core_size, const void* drv_resp = nullptr,
                          size_t drv_size = 0);
  // Set by a reply that could not be written; dispatch_write then answers -EFAULT whatever the
  // handler returned.
  bool reply_failed = false;
  // A refusal: "<device>: <command>: <why>" (reported as fail() does) and -err. `why` names
  // the object refused ("QP on PD 3", "cq handle 4"), then the reason.
  int error(int err, const char* fmt, ...) const __attribute__((format(printf, 3, 4)));
};

using CommandHandler = int (*)(Cmd&);

// One row of the command table (commands.cc), as the kernel's DECLARE_UVERBS_WRITE(cmd,
// handler, req, resp): the command's number and name (both from the ABI's enumerator), its
// handler, and the sizes dispatch_write checks before the handler runs.
struct CommandSpec {
  uint32_t number = 0;
  const char* name = nullptr;         // null: no command of the ABI has this number
  CommandHandler handler = nullptr;   // null: known to the ABI, not implemented
  size_t req_len = 0;                 // the core request (after the header(s)); shorter: EINVAL
  size_t resp_len = 0;                // the core response; 0: none, shorter: ENOSPC
  size_t drv_req_min = 0;             // the shortest mlx5 driver request the handler reads
  bool needs_ucontext = true;         // refused (EINVAL) before GET_CONTEXT
};

// The row of command `number` (extended: an IB_USER_VERBS_EX_CMD_*), or null when the ABI has
// no such command.
const CommandSpec* command_spec(uint32_t number, bool extended);
// The command's name, for messages ("CREATE_QP", "EX_CREATE_QP"), or "unknown command".
const char* command_name(uint32_t number, bool extended);
// A failure the simulated HCA reported, prefixed with the device, the command and the object
// (`what`: "QP on PD 3"): -errno.
int sim_error(const Cmd& c, const std::string& what, const Status& st);
// "0x1a2b": QP and SRQ numbers as the messages print them.
inline std::string hex_number(uint32_t n) {
  char text[16];
  std::snprintf(text, sizeof text, "%#x", n);
  return text;
}

// The next object handle of `ctx` (the kernel's idr: per context, never reused while alive).
uint32_t new_handle(Context& ctx);

// The handlers, grouped by object as the kernel's uverbs_std_types_*.c are.
// Context, device, port, PD, MR and AH (device_commands.cc).
int get_context(Cmd& c);
int query_device(Cmd& c);
int query_device_ex(Cmd& c);
int query_port(Cmd& c);
int alloc_pd(Cmd& c);
int dealloc_pd(Cmd& c);
int reg_mr(Cmd& c);
int rereg_mr(Cmd& c);
int dereg_mr(Cmd& c);
int create_ah(Cmd& c);
int destroy_ah(Cmd& c);
// Completion channels and CQs (cq_commands.cc).
int create_comp_channel(Cmd& c);
int create_cq(Cmd& c);
int destroy_cq(Cmd& c);
// QPs (qp_commands.cc).
int create_qp(Cmd& c);
int create_qp_ex(Cmd& c);
int modify_qp(Cmd& c);
int modify_qp_ex(Cmd& c);
int query_qp(Cmd& c);
int destroy_qp(Cmd& c);
int attach_mcast(Cmd& c);
int detach_mcast(Cmd& c);
// Shared receive queues (srq_commands.cc).
int create_srq(Cmd& c);
int create_xsrq(Cmd& c);
// XRC domains (xrcd_commands.cc).
int open_xrcd(Cmd& c);
int close_xrcd(Cmd& c);
int modify_srq(Cmd& c);
int query_srq(Cmd& c);
int destroy_srq(Cmd& c);

}  // namespace rnicdv::uverbs
