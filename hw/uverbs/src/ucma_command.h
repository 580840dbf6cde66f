// SPDX-License-Identifier: BSD-3-Clause
// One rdma_cm command as its handler sees it, the command table's row, and what the handlers
// in several files share (ucma_commands.cc, ucma_address.cc, ucma_connection.cc and GET_EVENT
// in ucma.cc).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include "ucma.h"
#include "user_memory.h"

namespace rnicdv::uverbs::ucma {

inline constexpr uint16_t kDefaultPkey = 0xffff;
inline constexpr uint8_t kHopLimit = 64;           // an IPv4 route's TTL
inline constexpr int kKernelEnotsupp = 524;        // the kernel's ENOTSUPP (not a libc errno)

// The address vector toward `remote` as the ABI carries it (a connected QP's RTR attributes, a
// UD ID's ESTABLISHED, a join): RoCE v2 from `dev`'s own GID entry (own_gid_index: its
// address's, IPv4-mapped or IPv6).
void fill_ah_attr(ib_uverbs_ah_attr& ah, const SimDevice& dev, const hw::Gid& remote,
                  uint8_t traffic_class, uint8_t hop_limit, uint32_t flow_label, uint8_t sl);

// One command being run: its input, its response size, and the error path. A handler answers
// 0 or a negative errno, as the kernel's ucma handlers do; ucma_write turns that into -1 with
// errno, once.
struct Cmd {
  uint32_t number;
  const uint8_t* in;
  size_t in_len;
  size_t out_len;
  const std::shared_ptr<File>& file;
  // Set by a reply that could not be written; run_command then answers -EFAULT whatever the
  // handler returned.
  mutable bool reply_failed = false;

  template <typename T>
  T as() const {
    T v{};
    if (in_len) std::memcpy(&v, in, std::min(sizeof v, in_len));
    return v;
  }
  // Copies the response: 0, or -EFAULT (reported, and recorded in reply_failed) when it
  // cannot be written. writable() checked the range before the command acted, but the
  // application may take it away meanwhile, or in a way the check cannot see (a raw system
  // call: user_memory.h); the kernel's copy_to_user then fails as well. The copy itself never
  // faults the shim.
  template <typename T>
  [[nodiscard]] int reply(uint64_t response, const T& resp) const {
    if (copy_to_user(response, &resp, std::min(sizeof resp, out_len))) return 0;
    return reply_fault(response, std::min(sizeof resp, out_len));
  }
  // The failed copy's report and -EFAULT.
  int reply_fault(uint64_t response, size_t size) const;
  // copy_to_user's check, made before anything changes: 0 or -EFAULT.
  int writable(uint64_t response, size_t size) const;
  // A refusal: "rdma_cm: <command>: <why>", reported when RNICDV_UVERBS_LOG=1, and -err.
  // `why` names the object refused ("id 7", "new id"), then the reason.
  int error(int err, const char* fmt, ...) const __attribute__((format(printf, 3, 4)));
  // -err, with one line on stderr always: a feature the simulated HCA does not have.
  int unsupported(int err, const char* fmt, ...) const __attribute__((format(printf, 3, 4)));
};

using Handler = int (*)(const Cmd&);

// One row of the command table (ucma_commands.cc), as the kernel's ucma_cmd_table entry
// [RDMA_USER_CM_CMD_x] = handler: the number and the name (both from the ABI's enumerator),
// the handler, and the sizes.
struct CommandSpec {
  uint32_t number = 0;
  const char* name = nullptr;  // null: no command of the ABI has this number
  Handler handler = nullptr;   // null: known to the ABI, ENOSYS (the kernel's table has a hole)
  size_t req_len = 0;          // the command's structure; a shorter one reads as zero-padded
  size_t resp_min = 0;         // the shortest response the kernel takes (ENOSPC below); 0: none
                               // or the handler's own check
  bool waits = false;          // runs without the registry lock (GET_EVENT blocks)
};

const char* command_name(uint32_t number);

// The Id `handle` if it belongs to `file`, else null (mu held).
Id* find(uint32_t handle, const std::shared_ptr<File>& file);

#define FIND_ID(c, var, handle)                                                   \
  Id* var = find(handle, (c).file);                                               \
  if (!var) return (c).error(ENOENT, "id %u: no such id on this channel", handle)

// ---- shared by the address and connection commands (ucma_address.cc) ----
// A socket address from user space: AF_INET, AF_INET6 (an IPv4-mapped one is taken as
// AF_INET), and the AF_IB wildcard (librdmacm's probe).
struct Parsed {
  int family = 0;
  Endpoint ep;
};
// Reads the socket address of `size` bytes at `sa` for `id`: 0, or -errno with the refusal
// reported (AF_IB beyond the wildcard, an unknown family).
int parse_addr(const Cmd& c, const Id& id, const void* sa, size_t size, Parsed* out);
// The simulated device whose address is `ip`, if any (devices are opened on first use).
SimDevice* device_owning(const hw::IpAddress& ip);
// Binds `id` to `a` (its port reserved, an ephemeral one for port 0): 0 or -errno.
int bind_to(const Cmd& c, Id& id, const Parsed& a);
hw::Mtu path_mtu(const Id& id);
// The QP's Local ACK Timeout: RDMA_OPTION_ID_ACK_TIMEOUT, or the path's packet lifetime + 1.
uint8_t local_ack_timeout(const Id& id);

// ---- the handlers, grouped as the kernel's ucma.c orders them ----
// IDs, options, multicast (ucma_commands.cc).
int create_id(const Cmd& c);
int destroy_id(const Cmd& c);
int migrate_id(const Cmd& c);
int set_option(const Cmd& c);
int join_mcast(const Cmd& c);
int leave_mcast(const Cmd& c);
// Addresses and routes (ucma_address.cc).
int bind_ip(const Cmd& c);
int bind(const Cmd& c);
int resolve_ip(const Cmd& c);
int resolve_addr(const Cmd& c);
int resolve_route(const Cmd& c);
int query_route(const Cmd& c);
int query(const Cmd& c);
// Connections (ucma_connection.cc).
int listen(const Cmd& c);
int connect(const Cmd& c);
int accept(const Cmd& c);
int reject(const Cmd& c);
int disconnect(const Cmd& c);
int init_qp_attr(const Cmd& c);
int notify(const Cmd& c);
// Events (ucma.cc).
int get_event(const Cmd& c);

}  // namespace rnicdv::uverbs::ucma
