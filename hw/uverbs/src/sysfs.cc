// SPDX-License-Identifier: BSD-3-Clause
// The sysfs tree libibverbs and UCX read, laid out as the kernel lays it out for an mlx5 PCI
// function (N = the device's index; its PCI address 0000:00:1N.0 is made up):
//
//   class/infiniband_verbs/abi_version                 "6" (the uverbs ABI)
//   class/infiniband_verbs/uverbsN -> ../../devices/pci0000:00/0000:00:1N.0/infiniband_verbs/uverbsN
//   class/infiniband/rnicsimN      -> ../../devices/pci0000:00/0000:00:1N.0/infiniband/rnicsimN
//   devices/pci0000:00/0000:00:1N.0/                   the PCI function:
//       vendor, device, subsystem_vendor, subsystem_device, class, modalias
//                                                      a ConnectX-5 (15b3:1017), which the mlx5
//                                                      provider's match table accepts and UCX
//                                                      takes for a Mellanox device
//       numa_node, local_cpus, local_cpulist           no NUMA node; every CPU local
//       net/lo/                                        the interface that carries the device's
//                                                      address (127.0.0.x)
//   .../infiniband/rnicsimN/{node_type,fw_ver,hca_type,device -> ../..}
//   .../infiniband/rnicsimN/ports/1/...                state, link layer, pkeys, GID types and
//                                                      their net devices, the port counters
//                                                      (counters/, hw_counters/)
//   .../infiniband_verbs/uverbsN/{ibdev,dev,abi_version,device -> ../..}
//
// UCX finds the PCI function through realpath(ibdev_path), two levels up, as on a real host.
// node_guid, the GID table and the port counters are per process: they depend on the address
// the process's simulated device took on the wire, or count its traffic, so open() of those
// paths is answered from the device, whichever way the path reaches them.
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

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
  RNICDV_TRY(mkdirs(path.substr(0, slash)));
  const int fd = libc::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::error(Errc::io_error, "create %s: %s", path.c_str(), strerror(errno));
  const std::string line = content + "\n";
  const ssize_t n = libc::write(fd, line.data(), line.size());
  libc::close(fd);
  if (n != static_cast<ssize_t>(line.size()))
    return Status::error(Errc::io_error, "write %s: short write", path.c_str());
  return Status::ok();
}

// Every CPU is local: the simulated HCA sits on no NUMA node. sysfs's cpumask format: 32-bit
// hex words, most significant first, comma-separated; and its list format ("0-1").
std::string cpu_mask_text() {
  const long n = std::max(1L, sysconf(_SC_NPROCESSORS_CONF));
  std::string out;
  for (long word = (n - 1) / 32; word >= 0; --word) {
    const long bits = std::min(32L, n - word * 32);
    const uint32_t mask = bits == 32 ? 0xffffffffu : ((1u << bits) - 1);
    char text[16];
    snprintf(text, sizeof text, "%08x", mask);
    if (!out.empty()) out += ',';
    out += text;
  }
  return out;
}

std::string cpu_list_text() {
  const long n = std::max(1L, sysconf(_SC_NPROCESSORS_CONF));
  return n == 1 ? "0" : "0-" + std::to_string(n - 1);
}

Status link(const std::string& target, const std::string& path) {
  const size_t slash = path.rfind('/');
  RNICDV_TRY(mkdirs(path.substr(0, slash)));
  if (::symlink(target.c_str(), path.c_str()) != 0 && errno != EEXIST)
    return Status::error(Errc::io_error, "symlink %s: %s", path.c_str(), strerror(errno));
  return Status::ok();
}

std::string pci_address(uint32_t i) {
  char text[16];
  snprintf(text, sizeof text, "0000:00:%02x.0", 0x10 + i);
  return text;
}

// A port's directory: its state and link layer, P_Key table, the GID table's types and
// netdevs, the gids/ directory (entries read when opened), and the port counters.
Status write_port(const std::string& port) {
  const std::pair<std::string, std::string> files[] = {
      {port + "/state", "4: ACTIVE"},
      {port + "/phys_state", "5: LinkUp"},
      {port + "/link_layer", "Ethernet"},
      {port + "/pkeys/0", "0xffff"},
  };
  for (const auto& [path, content] : files) RNICDV_TRY(put(path, content));
  // Even entries are RoCE v1, odd ones RoCE v2 (the kernel's order for each address). The
  // entries themselves (gids/N) are read when opened (shim.h gid_entry: the default link-local
  // GID and the port's address's, four at most). These static files are written before the
  // devices have addresses, so the first four name "lo" as their netdev, even where a device
  // with a link-local address leaves entries 2 and 3 empty.
  for (uint32_t g = 0; g < kGidTableLen; ++g) {
    const std::string type = g % 2 ? "RoCE v2" : "IB/RoCE v1";
    RNICDV_TRY(put(port + "/gid_attrs/types/" + std::to_string(g), type));
    if (g < 4) RNICDV_TRY(put(port + "/gid_attrs/ndevs/" + std::to_string(g), "lo"));
  }
  RNICDV_TRY(mkdirs(port + "/gids"));
  // The port counters the device keeps (sim::port_counter_names): a file each, so that a
  // program that lists the directory or resolves the path finds it; open() answers with the
  // port's figure at that moment.
  for (const std::string& counter : sim::port_counter_names())
    RNICDV_TRY(put(port + "/" + counter, "0"));
  return Status::ok();
}

Status write_device(const std::string& root, uint32_t i, uint32_t ports) {
  const std::string name = device_name(i);
  const std::string uverbs = "uverbs" + std::to_string(i);
  const std::string pci_rel = "devices/pci0000:00/" + pci_address(i);
  const std::string pci = root + "/" + pci_rel;
  const std::string uv = pci + "/infiniband_verbs/" + uverbs;
  const std::string ib = pci + "/infiniband/" + name;
  const std::pair<std::string, std::string> files[] = {
      {pci + "/vendor", "0x15b3"},
      {pci + "/device", "0x1017"},
      {pci + "/subsystem_vendor", "0x15b3"},
      {pci + "/subsystem_device", "0x0008"},
      {pci + "/class", "0x020000"},
      {pci + "/modalias", kModalias},
      {pci + "/numa_node", "-1"},
      {pci + "/local_cpus", cpu_mask_text()},
      {pci + "/local_cpulist", cpu_list_text()},
      {uv + "/ibdev", name},
      {uv + "/dev", std::to_string(kUverbsMajor) + ":" + std::to_string(kUverbsMinorBase + i)},
      {uv + "/abi_version", "1"},  // mlx5's driver ABI
      {ib + "/node_type", "1: CA"},
      {ib + "/fw_ver", "16.99.0000"},
      {ib + "/hca_type", "MT4119"},
  };
  for (const auto& [path, content] : files) RNICDV_TRY(put(path, content));
  for (uint32_t port = 1; port <= ports; ++port)
    RNICDV_TRY(write_port(ib + "/ports/" + std::to_string(port)));
  RNICDV_TRY(mkdirs(pci + "/net/lo"));
  RNICDV_TRY(link("../..", ib + "/device"));
  RNICDV_TRY(link("../..", uv + "/device"));
  if (Status st = link("../../" + pci_rel + "/infiniband/" + name, root + "/class/infiniband/" + name);
      !st)
    return st;
  return link("../../" + pci_rel + "/infiniband_verbs/" + uverbs,
              root + "/class/infiniband_verbs/" + uverbs);
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

Status write_sysfs_tree(const std::string& root, uint32_t devices, uint32_t ports) {
  struct stat st{};
  const std::string marker = root + "/class/infiniband_verbs/abi_version";
  if (::stat(marker.c_str(), &st) == 0) return Status::ok();  // written before
  const size_t slash = root.rfind('/');
  RNICDV_TRY(mkdirs(root.substr(0, slash)));
  std::string tmp = root + ".tmp.XXXXXX";
  if (!::mkdtemp(tmp.data()))
    return Status::error(Errc::io_error, "mkdtemp %s: %s", tmp.c_str(), strerror(errno));
  for (uint32_t i = 0; i < devices; ++i) RNICDV_TRY(write_device(tmp, i, ports));
  RNICDV_TRY(put(tmp + "/class/infiniband_verbs/abi_version", "6"));
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

bool redirect_real_sysfs_path(const char* path, std::string* out) {
  const std::string& root = config().sysfs_root;
  if (root.empty() || !path || root == "/sys") return false;
  static constexpr char kRealIb[] = "/sys/class/infiniband/rnicsim";
  static constexpr char kRealVerbs[] = "/sys/class/infiniband_verbs/uverbs";
  if (strncmp(path, kRealIb, sizeof kRealIb - 1) != 0 &&
      strncmp(path, kRealVerbs, sizeof kRealVerbs - 1) != 0)
    return false;
  *out = root + (path + 4);
  return true;
}

namespace {

// The port counter each open counter file stands for, by descriptor, and the memfd's inode:
// a descriptor closed where the shim does not see it (fclose of an fdopen'd stream closes
// inside libc) may come back as another file, which must never be rewritten.
struct CounterFile {
  uint32_t device = 0;
  uint8_t port = 1;
  std::string name;
  dev_t st_dev = 0;
  ino_t st_ino = 0;
};
std::mutex g_counter_files_mu;
std::unordered_map<int, CounterFile>& counter_files() {
  static auto* files = new std::unordered_map<int, CounterFile>();  // outlives exit handlers
  return *files;
}

std::string counter_text(uint32_t device, uint8_t port, const std::string& name) {
  uint64_t value = 0;
  Result<SimDevice*> dev = device_for(device);
  if (dev) (void)sim::port_counter_value(dev.value()->dev->counters(), port, name, &value);
  return std::to_string(value);
}

}  // namespace

ssize_t counter_file_read(int fd, void* buf, size_t n) {
  if (::lseek(fd, 0, SEEK_CUR) == 0) {
    CounterFile file;
    {
      std::lock_guard lock(g_counter_files_mu);
      auto it = counter_files().find(fd);
      if (it != counter_files().end()) file = it->second;
    }
    struct stat st{};
    if (file.name.empty() || ::fstat(fd, &st) != 0 || st.st_dev != file.st_dev ||
        st.st_ino != file.st_ino) {
      counter_file_close(fd);  // not the counter file any more: an ordinary descriptor
    } else {
      const std::string line = counter_text(file.device, file.port, file.name) + "\n";
      if (::ftruncate(fd, 0) != 0 ||
          ::pwrite(fd, line.data(), line.size(), 0) != static_cast<ssize_t>(line.size()))
        return -1;
    }
  }
  return libc::read(fd, buf, n);
}

void counter_file_close(int fd) {
  {
    std::lock_guard lock(g_counter_files_mu);
    counter_files().erase(fd);
  }
  set_fd_kind(fd, FdKind::none);
}

int open_dynamic_sysfs_file(const char* path, int flags) {
  const std::string& root = config().sysfs_root;
  if (root.empty() || !path) return -2;
  // A program that builds /sys/class/infiniband/<dev>/... itself (UCX, perftest's -W) instead
  // of reading SYSFS_PATH: a simulated device's files are in the shim's tree.
  std::string redirected;
  if (redirect_real_sysfs_path(path, &redirected)) path = redirected.c_str();
  const auto not_dynamic = [&]() {
    if (redirected.empty()) return -2;
    return libc::open(redirected.c_str(), flags, 0);
  };
  if (strncmp(path, root.c_str(), root.size()) != 0) return -2;
  const char* rest = path + root.size();
  // librdmacm checks the rdma_cm ABI here (rdma/rdma_user_cm.h's version).
  if (strcmp(rest, "/class/misc/rdma_cm/abi_version") == 0) return memfd_with("4");
  // The device's directory, by its class link or by the PCI function it resolves to.
  static constexpr char kIb[] = "/infiniband/rnicsim";
  const char* at = strstr(rest, kIb);
  if (!at || (strncmp(rest, "/class/infiniband/", 18) != 0 &&
              strncmp(rest, "/devices/pci0000:00/", 20) != 0))
    return not_dynamic();
  rest = at + sizeof kIb - 1;
  char* end = nullptr;
  const unsigned long index = strtoul(rest, &end, 10);
  if (end == rest || index >= config().devices) return not_dynamic();
  rest = end;
  const bool guid = strcmp(rest, "/node_guid") == 0;
  // /ports/<port>/gids/<index> and /ports/<port>/<counter>, for the ports the devices have.
  unsigned long port = 0;
  const char* in_port = nullptr;
  static constexpr char kPorts[] = "/ports/";
  if (strncmp(rest, kPorts, sizeof kPorts - 1) == 0) {
    const char* p = rest + sizeof kPorts - 1;
    port = strtoul(p, &end, 10);
    if (end != p && *end == '/' && port >= 1 && port <= config().ports) in_port = end + 1;
  }
  static constexpr char kGids[] = "gids/";
  const bool gid = in_port && strncmp(in_port, kGids, sizeof kGids - 1) == 0;
  const std::vector<std::string>& counters = sim::port_counter_names();
  const bool counter =
      in_port && std::find(counters.begin(), counters.end(), in_port) != counters.end();
  if (!guid && !gid && !counter) return not_dynamic();
  unsigned long gid_index = 0;
  if (gid) {
    const char* g = in_port + sizeof kGids - 1;
    gid_index = strtoul(g, &end, 10);
    if (end == g || *end != '\0' || gid_index >= kGidTableLen) {
      errno = ENOENT;
      return -1;
    }
  }
  Result<SimDevice*> dev = device_for(static_cast<uint32_t>(index));
  if (!dev) {
    log_line_once(dev.status().message());
    errno = ENODEV;
    return -1;
  }
  const hw::DeviceInfo& info = dev.value()->dev->info();
  if (counter) {
    const std::string name = in_port;
    const auto port_num = static_cast<uint8_t>(port);
    const int fd = memfd_with(counter_text(static_cast<uint32_t>(index), port_num, name));
    struct stat st{};
    if (fd >= 0 && ::fstat(fd, &st) == 0) {
      std::lock_guard lock(g_counter_files_mu);
      counter_files()[fd] =
          CounterFile{static_cast<uint32_t>(index), port_num, name, st.st_dev, st.st_ino};
      set_fd_kind(fd, FdKind::counter);
    }
    return fd;
  }
  if (guid) {
    char text[32];
    const uint64_t g = info.node_guid;
    snprintf(text, sizeof text, "%04x:%04x:%04x:%04x", static_cast<unsigned>(g >> 48) & 0xffff,
             static_cast<unsigned>(g >> 32) & 0xffff, static_cast<unsigned>(g >> 16) & 0xffff,
             static_cast<unsigned>(g) & 0xffff);
    return memfd_with(text);
  }
  const hw::Gid entry = gid_entry(static_cast<uint32_t>(gid_index),
                                  port_address(info, static_cast<uint32_t>(port)), info.node_guid);
  return memfd_with(gid_text(entry.raw));
}

}  // namespace rnicdv::uverbs
