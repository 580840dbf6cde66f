// SPDX-License-Identifier: BSD-3-Clause
// Device: opening by name (real mlx5 devices or simulated HCAs), and async-event dispatch.
#include "rnicdv/device.h"

#include <cctype>
#include <string>
#include <utility>
#include <vector>

#include "device_core.h"
#include "mlx5_backend.h"
#include "rnicdv/cq.h"
#include "rnicdv/detail/cq_core.h"
#include "rnicdv/detail/qp_core.h"
#include "rnicdv/qp.h"
#include "rnicdv/sim/sim.h"

namespace rnicdv {

namespace {

// "sim" followed by one or more digits.
bool is_sim_name(const std::string& name) {
  if (name.size() <= 3 || name.compare(0, 3, "sim") != 0) return false;
  for (size_t i = 3; i < name.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(name[i]))) return false;
  return true;
}

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) {
    if (!out.empty()) out += ", ";
    out += n;
  }
  return out.empty() ? std::string("nothing") : out;
}

Result<std::shared_ptr<hw::Device>> open_sim(const std::string& name,
                                             const DeviceOptions& options) {
  std::shared_ptr<sim::Fabric> fabric = options.fabric;
  if (!fabric) {
    auto def = sim::default_fabric();
    if (!def) return Status(def.status()).prepend("open " + name);
    fabric = std::move(def.value());
  }
  for (const auto& dev : fabric->devices())
    if (dev->info().name == name) return std::shared_ptr<hw::Device>(dev);
  sim::DeviceConfig config = options.sim_config ? *options.sim_config : sim::DeviceConfig{};
  config.name = name;
  auto added = fabric->add_device(config);
  if (!added) return Status(added.status()).prepend("open " + name);
  return std::shared_ptr<hw::Device>(std::move(added.value()));
}

}  // namespace

std::vector<std::string> Device::list() {
  std::vector<std::string> names = hw::mlx5::list_devices();
  bool have_sim0 = false;
  if (auto fabric = sim::default_fabric()) {
    for (const auto& dev : fabric.value()->devices()) {
      names.push_back(dev->info().name);
      have_sim0 |= dev->info().name == "sim0";
    }
  }
  if (!have_sim0) names.push_back("sim0");
  return names;
}

std::string Device::default_name() {
  const auto real = hw::mlx5::list_devices();
  return real.empty() ? std::string("sim0") : real.front();
}

Result<Device> Device::open(const std::string& name, const DeviceOptions& options) {
  if (is_sim_name(name)) {
    auto dev = open_sim(name, options);
    if (!dev) return dev.status();
    return wrap(std::move(dev.value()));
  }
  auto dev = hw::mlx5::open_device(name);
  if (!dev) {
    if (dev.status().code() == Errc::not_found)
      return Status::error(Errc::not_found, "open %s: no such device; found: %s", name.c_str(),
                           join(list()).c_str());
    return Status(dev.status()).prepend("open " + name);
  }
  return wrap(std::move(dev.value()));
}

Result<Device> Device::wrap(std::shared_ptr<hw::Device> hw_device) {
  if (!hw_device) return Status::error(Errc::invalid_argument, "wrap: null device");
  return Device(std::make_shared<detail::DeviceCore>(std::move(hw_device)));
}

Device::Device(std::shared_ptr<detail::DeviceCore> core) : core_(std::move(core)) {}
Device::Device(Device&&) noexcept = default;
Device& Device::operator=(Device&&) noexcept = default;
Device::~Device() = default;

const hw::DeviceInfo& Device::info() const {
  return core_->hw->info();
}
hw::Device& Device::hw() {
  return *core_->hw;
}
int Device::async_fd() const {
  return core_->hw->async_fd();
}
void Device::progress() {
  core_->progress();
}

int Device::process_events() {
  detail::DeviceCore& dev = *core_;
  int handled = 0;
  hw::AsyncEvent event;
  while (dev.hw->next_async_event(&event)) {
    ++handled;
    std::unique_lock lock(dev.mutex);
    switch (event.type) {
      case hw::AsyncEventType::comm_est: {
        // The first request reached a QP still in RTR. The state does not change (IBA
        // 11.6.3); the connection layer decides whether this counts as an RTU.
        detail::QpCore* qp = dev.qp_table.find(event.qpn);
        if (!qp) break;
        qp->comm_est_seen = true;
        void (*fn)(void*) = qp->comm_est_fn;
        void* ctx = qp->comm_est_ctx;
        lock.unlock();
        if (fn) fn(ctx);
        break;
      }
      case hw::AsyncEventType::qp_fatal:
      case hw::AsyncEventType::qp_req_err:
      case hw::AsyncEventType::qp_access_err:
        if (detail::QpCore* qp = dev.qp_table.find(event.qpn)) qp->on_async_error(event.type);
        break;
      case hw::AsyncEventType::cq_err:
        for (detail::CqCore* cq : dev.cqs)
          if (cq->cqn == event.cqn) cq->in_error.store(true, std::memory_order_release);
        break;
      case hw::AsyncEventType::device_fatal:
        dev.fatal = true;
        for (detail::QpCore* qp : dev.qps) qp->on_async_error(event.type);
        break;
      case hw::AsyncEventType::sq_drained:
      case hw::AsyncEventType::last_wqe_reached:
      case hw::AsyncEventType::port_active:
      case hw::AsyncEventType::port_err:
        break;
    }
  }
  return handled;
}

}  // namespace rnicdv
