// SPDX-License-Identifier: BSD-3-Clause
// Device: opening by name (real mlx5 devices or simulated HCAs), and async-event dispatch.
#include "rnicdv/device.h"

#include <dlfcn.h>

#include <cctype>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "device_core.h"
#include "mlx5_backend.h"
#include "rnicdv/cq.h"
#include "rnicdv/detail/cq_core.h"
#include "rnicdv/detail/qp_core.h"
#include "rnicdv/qp.h"
#include "rnicdv/hw/loader.h"
#include "rnicdv/hw/sim_provider.h"

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

// The simulator's entry points (rnicdv/hw/sim_provider.h): in the process already when the
// program links librnicdv-sim; loaded on first use otherwise (`load`), never for a program
// that opens only real devices.
const sim::Provider* sim_provider(bool load, Status* why) {
  static std::mutex mu;
  static const sim::Provider* found = nullptr;
  std::lock_guard<std::mutex> lock(mu);
  if (found) return found;
  using Entry = const sim::Provider* (*)();
  std::string error = "not loaded";
  // RTLD_GLOBAL: the simulator's symbols serve later users in the process (the uverbs shim,
  // tools that reach its API) from this one copy.
  auto entry = reinterpret_cast<Entry>(
      load ? hw::find_entry("rnicdv_sim_provider", sim::kProviderLibrary,
                            reinterpret_cast<const void*>(&sim_provider), RTLD_NOW | RTLD_GLOBAL,
                            &error)
           : dlsym(RTLD_DEFAULT, "rnicdv_sim_provider"));
  if (!entry) {
    if (why)
      *why = Status::error(Errc::unsupported, "the software HCA (%s) cannot be loaded: %s",
                           sim::kProviderLibrary, error.c_str());
    return nullptr;
  }
  const sim::Provider* p = entry();
  if (!p || p->abi != sim::kProviderAbi) {
    if (why)
      *why = Status::error(Errc::internal, "%s: provider ABI %u, expected %u",
                           sim::kProviderLibrary, p ? p->abi : 0, sim::kProviderAbi);
    return nullptr;
  }
  found = p;
  return found;
}

Result<std::shared_ptr<hw::Device>> open_sim(const std::string& name,
                                             const DeviceOptions& options) {
  Status why;
  const sim::Provider* p = sim_provider(true, &why);
  if (!p) return why.prepend("open " + name);
  return p->open(name, options.fabric, options.sim_config);
}

}  // namespace

std::vector<std::string> Device::list() {
  std::vector<std::string> names = hw::mlx5::list_devices();
  bool have_sim0 = false;
  // Only a simulator already in the process is asked: listing loads nothing.
  if (const sim::Provider* p = sim_provider(false, nullptr)) {
    for (std::string& n : p->list()) {
      have_sim0 |= n == "sim0";
      names.push_back(std::move(n));
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
