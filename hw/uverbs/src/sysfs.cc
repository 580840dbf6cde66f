// SPDX-License-Identifier: BSD-3-Clause
// The sysfs tree libibverbs reads to find devices (libibverbs/sysfs.c, init.c), laid out as
// the kernel lays it out for an mlx5 device:
//
//   class/infiniband_verbs/abi_version                 "6" (the uverbs ABI)
//   class/infiniband_verbs/uverbsN/{ibdev,dev,abi_version}
//   class/infiniband/<ibdev>/node_type                 "1: CA"
//   class/infiniband/<ibdev>/device/modalias           a ConnectX-5 PCI id, which the mlx5
//                                                      provider's match table accepts
//   class/infiniband/<ibdev>/ports/1/...               pkeys, GID types, link layer, state
//
// node_guid and the GID table are per process: they depend on the address the process's
// simulated device took on the wire, so open() of those paths is answered from the device.
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "devices.h"
#include "shim.h"

namespace rnicdv::uverbs {

namespace {

// ConnectX-5 (15b3:1017); the provider matches on the vendor and device ids.
constexpr const char* kModalias = "pci:v000015B3d00001017sv000015B3sd00000008bc02sc00i00";

Status mkdirs(const std::string& path) {
  std::string cur;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    cur = path.substr(0, pos);
    if (cur.empty()) continue;
    if (::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST)
      return Status::error(Errc::io_error, "mkdir %s: %s", cur.c_str(), strerror(errno));
  }
  return Status::ok();
}

Status put(const std::string& path, const std::string& content) {
  const size_t slash = path.rfind('/');
  if (Status st = mkdirs(path.substr(0, slash)); !st) return st;
  const int fd = libc::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::error(Errc::io_error, "create %s: %s", path.c_str(), strerror(errno));
  const std::string line = content + "\n";
  const ssize_t n = libc::write(fd, line.data(), line.size());
  libc::close(fd);
  if (n != static_cast<ssize_t>(line.size()))
    return Status::error(Errc::io_error, "write %s: short write", path.c_str());
  return Status::ok();
}

Status write_device(const std::string& root, uint32_t i) {
  const std::string name = device_name(i);
  const std::string uv = root + "/class/infiniband_verbs/uverbs" + std::to_string(i);
  const std::string ib = root + "/class/infiniband/" + name;
  const std::string port = ib + "/ports/1";
  const std::pair<std::string, std::string> files[] = {
      {uv + "/ibdev", name},
      {uv + "/dev", std::to_string(kUverbsMajor) + ":" + std::to_string(kUverbsMinorBase + i)},
      {uv + "/abi_version", "1"},  // mlx5's driver ABI
      {uv + "/device/modalias", kModalias},
      {ib + "/node_type", "1: CA"},
      {ib + "/device/modalias", kModalias},
      {ib + "/fw_ver", "16.99.0000"},
      {ib + "/hca_type", "MT4119"},
      {port + "/state", "4: ACTIVE"},
      {port + "/phys_state", "5: LinkUp"},
      {port + "/link_layer", "Ethernet"},
      {port + "/pkeys/0", "0xffff"},
  };
  for (const auto& [path, content] : files)
    if (Status st = put(path, content); !st) return st;
  // Even entries are RoCE v1, odd ones RoCE v2 (the kernel's order for each address).
  for (uint32_t g = 0; g < kGidTableLen; ++g) {
    const std::string type = g % 2 ? "RoCE v2" : "IB/RoCE v1";
    if (Status st = put(port + "/gid_attrs/types/" + std::to_string(g), type); !st) return st;
  }
  return mkdirs(port + "/gids");
}

// "fe80:0000:0000:0000:xxxx:xxxx:xxxx:xxxx" from 16 bytes.
std::string gid_text(const uint8_t raw[16]) {
  char out[40];
  char* p = out;
  for (int i = 0; i < 16; i += 2) {
    p += snprintf(p, 6, "%02x%02x", raw[i], raw[i + 1]);
    if (i < 14) *p++ = ':';
  }
  *p = '\0';
  return out;
}

int memfd_with(const std::string& content) {
  const int fd = ::memfd_create("rnicdv-uverbs-sysfs", MFD_CLOEXEC);
  if (fd < 0) return -1;
  const std::string line = content + "\n";
  if (libc::write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size()) ||
      ::lseek(fd, 0, SEEK_SET) != 0) {
    const int err = errno;
    libc::close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

}  // namespace

std::string device_name(uint32_t index) { return "rnicsim" + std::to_string(index); }

Status write_sysfs_tree(const std::string& root, uint32_t devices) {
  struct stat st{};
  const std::string marker = root + "/class/infiniband_verbs/abi_version";
  if (::stat(marker.c_str(), &st) == 0) return Status::ok();  // written before
  const size_t slash = root.rfind('/');
  if (Status s = mkdirs(root.substr(0, slash)); !s) return s;
  std::string tmp = root + ".tmp.XXXXXX";
  if (!::mkdtemp(tmp.data()))
    return Status::error(Errc::io_error, "mkdtemp %s: %s", tmp.c_str(), strerror(errno));
  for (uint32_t i = 0; i < devices; ++i)
    if (Status s = write_device(tmp, i); !s) return s;
  if (Status s = put(tmp + "/class/infiniband_verbs/abi_version", "6"); !s) return s;
  if (::rename(tmp.c_str(), root.c_str()) != 0) {
    // Another process won the race: its tree is identical.
    const int err = errno;
    std::string rm = "rm -rf '" + tmp + "'";
    if (::stat(marker.c_str(), &st) == 0) {
      [[maybe_unused]] int r = std::system(rm.c_str());
      return Status::ok();
    }
    return Status::error(Errc::io_error, "rename %s: %s", root.c_str(), strerror(err));
  }
  return Status::ok();
}

int open_dynamic_sysfs_file(const char* path) {
  const std::string& root = config().sysfs_root;
  if (root.empty() || strncmp(path, root.c_str(), root.size()) != 0) return -2;
  const char* rest = path + root.size();
  // librdmacm checks the rdma_cm ABI here (rdma/rdma_user_cm.h's version).
  if (strcmp(rest, "/class/misc/rdma_cm/abi_version") == 0) return memfd_with("4");
  static constexpr char kIb[] = "/class/infiniband/rnicsim";
  if (strncmp(rest, kIb, sizeof kIb - 1) != 0) return -2;
  rest += sizeof kIb - 1;
  char* end = nullptr;
  const unsigned long index = strtoul(rest, &end, 10);
  if (end == rest || index >= config().devices) return -2;
  rest = end;
  const bool guid = strcmp(rest, "/node_guid") == 0;
  static constexpr char kGids[] = "/ports/1/gids/";
  const bool gid = strncmp(rest, kGids, sizeof kGids - 1) == 0;
  if (!guid && !gid) return -2;
  unsigned long gid_index = 0;
  if (gid) {
    const char* g = rest + sizeof kGids - 1;
    gid_index = strtoul(g, &end, 10);
    if (end == g || *end != '\0' || gid_index >= kGidTableLen) {
      errno = ENOENT;
      return -1;
    }
  }
  Result<SimDevice*> dev = device_for(static_cast<uint32_t>(index));
  if (!dev) {
    log_line("%s: %s", path, dev.status().message().c_str());
    errno = ENODEV;
    return -1;
  }
  const hw::DeviceInfo& info = dev.value()->dev->info();
  if (guid) {
    char text[32];
    const uint64_t g = info.node_guid;
    snprintf(text, sizeof text, "%04x:%04x:%04x:%04x", static_cast<unsigned>(g >> 48) & 0xffff,
             static_cast<unsigned>(g >> 32) & 0xffff, static_cast<unsigned>(g >> 16) & 0xffff,
             static_cast<unsigned>(g) & 0xffff);
    return memfd_with(text);
  }
  uint8_t raw[16] = {};
  if (gid_index < 2) {
    raw[0] = 0xfe;  // link-local, interface id from the node GUID
    raw[1] = 0x80;
    for (int b = 0; b < 8; ++b) raw[8 + b] = static_cast<uint8_t>(info.node_guid >> (56 - 8 * b));
  } else if (gid_index < 4) {
    std::memcpy(raw, info.gid.raw, 16);  // ::ffff:a.b.c.d, the address the device sends from
  }
  return memfd_with(gid_text(raw));
}

}  // namespace rnicdv::uverbs
