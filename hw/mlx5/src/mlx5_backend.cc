// SPDX-License-Identifier: BSD-3-Clause
#include "rnicdv/hw/mlx5.h"

#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>

#include <cerrno>

#include "mlx5_device.h"
#include "mlx5_verbs.h"

namespace rnicdv::hw::mlx5 {

namespace {

// ibv_get_device_list's array, freed on scope exit.
class DeviceList {
 public:
  DeviceList() {
    int count = 0;
    list_ = ibv_get_device_list(&count);
    count_ = (list_ && count > 0) ? count : 0;
  }
  ~DeviceList() {
    if (list_) ibv_free_device_list(list_);
  }
  DeviceList(const DeviceList&) = delete;
  DeviceList& operator=(const DeviceList&) = delete;

  ibv_device** begin() const { return list_; }
  ibv_device** end() const { return list_ + count_; }

 private:
  ibv_device** list_ = nullptr;
  int count_ = 0;
};

}  // namespace

std::vector<std::string> list_devices() {
  std::vector<std::string> names;
  DeviceList devices;
  for (ibv_device* device : devices) {
    if (mlx5dv_is_supported(device)) names.emplace_back(ibv_get_device_name(device));
  }
  return names;
}

Result<std::shared_ptr<Device>> open_device(const std::string& name) {
  DeviceList devices;
  ibv_device* match = nullptr;
  std::string found;
  for (ibv_device* device : devices) {
    const std::string device_name = ibv_get_device_name(device);
    if (device_name == name) match = device;
    if (!found.empty()) found += ", ";
    found += device_name;
    if (!mlx5dv_is_supported(device)) found += " (not mlx5)";
  }
  if (!match) {
    if (found.empty()) {
      return Status(Errc::not_found,
                    "no RDMA device '" + name +
                        "'; no RDMA devices found (is the mlx5_ib kernel module loaded?)");
    }
    return Status(Errc::not_found, "no RDMA device '" + name + "'; found: " + found);
  }
  if (!mlx5dv_is_supported(match)) {
    return Status(Errc::unsupported,
                  "RDMA device '" + name + "' is not served by the mlx5 provider");
  }
  errno = 0;
  ContextRef ctx(ibv_open_device(match), ContextCloser{});
  if (!ctx) return verbs_failure(errno, "open " + name, "ibv_open_device");
  return Mlx5Device::create(std::move(ctx), name);
}

const Backend kBackend{"mlx5", true, [](const std::string&) { return Claim::fallback; },
                       list_devices, open_device};

}  // namespace rnicdv::hw::mlx5
