// SPDX-License-Identifier: BSD-3-Clause
// The uverbs shim: presents simulated HCAs to the unmodified libibverbs and libmlx5.
//
// libibverbs finds devices in a sysfs tree (SYSFS_PATH), opens /dev/infiniband/uverbsN and
// speaks the kernel's uverbs command interface on that descriptor: write() commands, ioctl()
// methods and mmap() of UAR pages. The shim answers all three for descriptors it created and
// lets every other descriptor through to libc. Behind each opened device is a sim::Device of
// the process-wide default fabric; libmlx5's rings, doorbell records and UAR pages are given
// to it as external memory, so its WQEs, doorbells and CQ polling run against the model.
//
// Layouts and command numbers come from the kernel ABI headers rdma-core installs
// (rdma/ib_user_verbs.h, rdma/mlx5-abi.h); the ioctl interface is answered with ENOTTY, as
// an older kernel would, which makes libibverbs 44 use the write() commands throughout.
#pragma once

#include <cerrno>

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "rnicdv/hw/device.h"
#include "rnicdv/status.h"

namespace rnicdv::uverbs {

inline constexpr const char* kLogPrefix = "rnicdv-uverbs";

// ---- fork() ----
// The number of fork()s between the first process that used the shim and this one: 0 there,
// 1 in its child, and so on (a pthread_atfork handler counts them).
uint32_t fork_generation() noexcept;

// The shim's process-wide tables (devices, contexts, event files, rdma_cm IDs) belong to one
// process. A child of fork() inherits copies whose locks a parent thread may have held at the
// fork and whose devices are the parent's: the first use of a table in the child makes it
// anew, and the parent's copy is left alone (never locked, never freed). A child therefore
// opens devices of its own, and finds none of its parent's objects.
template <class T>
T& per_process_table() {
  struct Holder {
    T table;
    uint32_t generation;
  };
  static std::atomic<Holder*> slot{nullptr};
  const uint32_t g = fork_generation();
  for (;;) {
    Holder* h = slot.load(std::memory_order_acquire);
    if (h && h->generation == g) [[likely]]
      return h->table;
    auto* fresh = new Holder{T{}, g};  // never freed: it outlives exit, as the tables must
    if (slot.compare_exchange_strong(h, fresh, std::memory_order_acq_rel)) return fresh->table;
    delete fresh;  // another thread of this process made it first
  }
}
inline constexpr uint32_t kUverbsMajor = 231;       // the kernel's infiniband_verbs cdev major
inline constexpr uint32_t kUverbsMinorBase = 192;   // uverbs0
inline constexpr uint32_t kMaxDevices = 8;
inline constexpr uint32_t kGidTableLen = 8;

// The GID table (sysfs.cc), as the kernel builds one for a netdev with one address
// (roce_gid_mgmt.c), a RoCE v1 entry then a RoCE v2 one for each GID. At 0 and 1 the port's
// default GID, link-local: the device's own address when that is link-local (fe80::/10), else
// fe80:: with the node GUID as interface identifier, an address the device does not hold on
// the fabric. Then, unless the device's address is link-local, that address's GID at 2 and 3
// (::ffff:a.b.c.d, or the IPv6 address). The rest is empty.
inline uint32_t gid_entries_in_use(const hw::IpAddress& device_address) {
  return device_address.is_link_local() ? 2 : 4;
}
// The RoCE v2 entry of the device's own address: where its frames come from.
inline uint32_t own_gid_index(const hw::IpAddress& device_address) {
  return device_address.is_link_local() ? 1 : 3;
}
// The address of port `port` of a device whose ports `info` lists (port 1's for one it has
// not): a two-port device has one per port, and each port's GID table is built from its own.
inline hw::IpAddress port_address(const hw::DeviceInfo& info, uint32_t port) {
  if (port >= 1 && port <= info.ports.size()) return info.ports[port - 1].gid.ip();
  return info.gid.ip();
}
inline hw::Gid gid_entry(uint32_t index, const hw::IpAddress& device_address,
                         uint64_t node_guid) {
  hw::Gid g;
  if (index >= gid_entries_in_use(device_address)) return g;
  if (index >= 2 || device_address.is_link_local()) return hw::Gid::from_ip(device_address);
  g.raw[0] = 0xfe;  // link-local, interface identifier from the node GUID
  g.raw[1] = 0x80;
  for (int b = 0; b < 8; ++b) g.raw[8 + b] = static_cast<uint8_t>(node_guid >> (56 - 8 * b));
  return g;
}

// Why a QP's or an AH's address vector may not send from GID index `index` of a device whose
// address is `device_address`, with the errno the kernel gives (rdma_get_gid_attr: EINVAL
// beyond the table, ENODATA for an empty entry); null when it may. A RoCE v1 entry is refused
// with EOPNOTSUPP: a ConnectX would send RoCE v1 frames (Ethertype 0x8915, a GRH, no IP
// header) from it, which the simulated fabric does not carry, and sending RoCE v2 instead
// would be a silent change of protocol. So is the default link-local GID of a device whose
// address is not link-local: nothing on the fabric answers there.
struct GidRefusal {
  int err;
  const char* reason;
};
inline const GidRefusal* source_gid_refusal(uint32_t index, const hw::IpAddress& device_address) {
  static constexpr GidRefusal kBeyond{EINVAL, "is outside the GID table (8 entries)"};
  static constexpr GidRefusal kEmpty{ENODATA, "is an empty entry of the GID table"};
  static constexpr GidRefusal kRoceV1{
      EOPNOTSUPP,
      "is a RoCE v1 entry; the simulated fabric carries RoCE v2 only (the next index is the "
      "same address's RoCE v2 entry)"};
  static constexpr GidRefusal kNotHeld{
      EOPNOTSUPP,
      "is the port's default link-local GID, which this device does not hold on the simulated "
      "fabric: its address is not link-local (give it one, RNICDV_SIM_ADDR=fe80::..., to send "
      "from index 1; its own address is at index 3)"};
  if (index >= kGidTableLen) return &kBeyond;
  if (index >= gid_entries_in_use(device_address)) return &kEmpty;
  if (index % 2 == 0) return &kRoceV1;
  if (index == 1 && !device_address.is_link_local()) return &kNotHeld;
  return nullptr;
}
inline constexpr uint16_t kPkeyTableLen = 1;

// ---- libc entry points (interpose.cc) ----
// The real functions (dlsym(RTLD_NEXT)), resolved at load time before main().
namespace libc {
int open(const char* path, int flags, mode_t mode);
ssize_t read(int fd, void* buf, size_t n);
ssize_t write(int fd, const void* buf, size_t n);
int close(int fd);
void* mmap(void* addr, size_t len, int prot, int flags, int fd, off_t off);
int munmap(void* addr, size_t len);
}  // namespace libc

// What a descriptor the shim created stands for. Looked up on every read/write/close/mmap of
// any descriptor, so the table is a flat array of atomics.
// counter: a port counter's sysfs file (sysfs.cc), read afresh at offset 0.
enum class FdKind : uint8_t { none = 0, command, event, ucma, counter };
FdKind fd_kind(int fd) noexcept;
void set_fd_kind(int fd, FdKind kind) noexcept;

// ---- configuration (config.cc) ----
struct Config {
  uint32_t devices = 2;        // RNICDV_UVERBS_DEVICES (1..8)
  uint32_t ports = 1;          // RNICDV_SIM_PORTS (1 or 2; 2 with RNICDV_SIM_PORT2_ADDR)
  bool log_errors = false;     // RNICDV_UVERBS_LOG=1: every failed command, with the reason,
                               // and once how doorbell stores wake a sleeping device
  std::string sysfs_root;      // SYSFS_PATH as libibverbs will read it
};
const Config& config();

// One line on stderr: "rnicdv-uverbs: <message>".
void log_line(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
// The same, once per distinct message: a device that cannot be opened (a bad fault
// specification, a wire that cannot attach) is said once, however often the program tries.
void log_line_once(const std::string& message);
// Errors. The command handlers (uverbs and rdma_cm) return 0 or a negative errno, as the
// kernel's do; the libc entry points (write, mmap, ioctl, ...) return -1 with errno.
// report(): reports a refusal when RNICDV_UVERBS_LOG=1 (one that is EOPNOTSUPP always, once
// per reason) and returns -err. fail(): the same, for an entry point: -1 with errno = err.
// `reason` identifies the reason without the object refused (Cmd::error passes the command
// and its format string); without it, the message with its numbers left out stands for it.
int report(int err, const Status& why, const std::string& reason = {});
int fail(int err, const Status& why);
// EBADF for a descriptor of the shim's kinds that has no object in this process, or, in a
// child of fork(), EACCES with a line saying it was inherited (cdev.cc).
int unknown_descriptor(const char* file, const char* op, int fd);
// Reports an unimplemented command once per process (always) and returns -EOPNOTSUPP.
int unimplemented(const char* what, uint32_t number);

// ---- sysfs (sysfs.cc) ----
std::string device_name(uint32_t index);  // "rnicsim0"
// Writes the static tree (class/infiniband_verbs, class/infiniband/<dev>/...) for `devices`
// devices under `root`, atomically (a temporary directory renamed into place).
Status write_sysfs_tree(const std::string& root, uint32_t devices, uint32_t ports);
// If `path` names a per-process sysfs file under the shim's root (a GID table entry, whose
// content depends on the address this process's device got), returns a descriptor holding
// its content. A path under the real /sys/class/infiniband (or infiniband_verbs) that names
// a simulated device, as programs that do not read SYSFS_PATH build it (UCX), is the same
// path in the shim's tree. -2 when `path` is neither.
int open_dynamic_sysfs_file(const char* path, int flags);
// A path under the real /sys/class/infiniband (or infiniband_verbs) that names a simulated
// device: true, with the same path in the shim's tree in `out`.
bool redirect_real_sysfs_path(const char* path, std::string* out);
// A port counter's file (FdKind::counter) is what the kernel's is: each read at offset 0
// (perftest's -W reads, seeks back and reads again) gives the device's figure at that moment.
ssize_t counter_file_read(int fd, void* buf, size_t n);
void counter_file_close(int fd);

// ---- cdev and commands (cdev.cc, commands*.cc) ----
// Parses "/dev/infiniband/uverbsN"; returns N, -1 for another path, -3 for a null one.
int uverbs_index_of(const char* path) noexcept;
int open_uverbs(uint32_t index, int flags);
int fake_stat_uverbs(uint32_t index, struct stat* st) noexcept;
int fstat_command_fd(int fd, struct stat* st);
ssize_t command_write(int fd, const void* buf, size_t n);
int command_ioctl(int fd, unsigned long request, void* arg);
void* command_mmap(int fd, void* addr, size_t len, int prot, int flags, off_t off);
// True if [addr, addr+len) is a UAR page the shim keeps mapped; the caller then skips munmap.
bool command_munmap(void* addr, size_t len);
void command_close(int fd);
// `newfd` is a duplicate of command descriptor `oldfd` (dup, dup2, dup3, F_DUPFD): the same
// open file, so the same context, which lives until the last of its descriptors is closed.
void command_dup(int oldfd, int newfd);

// ---- the rdma_cm cdev (ucma.cc, ucma_commands.cc) ----
bool is_ucma_path(const char* path) noexcept;  // "/dev/infiniband/rdma_cm"
int fake_stat_ucma(struct stat* st) noexcept;
int open_ucma(int flags);
ssize_t ucma_write(int fd, const void* buf, size_t n);
// The application's view of O_NONBLOCK on a channel: reads it (set = false) or sets it.
// False if `fd` is not a channel.
bool ucma_nonblocking(int fd, bool* on, bool set);
void ucma_close(int fd);
// At exit, before the devices go: destroys every ID (REJ or DREQ to the peers), unless the ID
// table stays locked past `deadline` (exit_teardown.h): then false, and nothing is touched.
class ExitDeadline;
bool shutdown_ucma(const ExitDeadline& deadline);

// ---- event descriptors (events.cc) ----
ssize_t event_read(int fd, void* buf, size_t n);
void event_close(int fd);
// Unregisters an event descriptor the application never received (its command's response
// could not be written) and closes it.
void event_discard(int fd);

}  // namespace rnicdv::uverbs
