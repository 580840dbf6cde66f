// SPDX-License-Identifier: BSD-3-Clause
// Device: opening by name (real mlx5 devices or simulated HCAs), and async-event dispatch.
#include "rnicdv/device.h"

#include <cctype>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "device_core.h"
#include "rnicdv/cq.h"
#include "rnicdv/detail/cq_core.h"
#include "rnicdv/detail/qp_core.h"
#include "rnicdv/detail/srq_core.h"
#include "rnicdv/hw/backend.h"
#include "rnicdv/qp.h"

namespace rnicdv {

namespace detail {

Status DeviceCore::register_qp(QpCore* qp) {
  std::lock_guard lock(mutex);
  if (!qp_table.insert(qp->qpn, qp))
    return Status::error(Errc::no_resources, "qp %#x: create: out of memory for the QP table",
                         qp->qpn);
  qps.insert(qp);
  return Status::ok();
}

}  // namespace detail

// Which backend serves a name is hw/'s business (rnicdv/hw/backend.h): the driver knows none.
std::vector<std::string> Device::list() {
  return hw::list_devices();
}

std::string Device::default_name() {
  return hw::default_device_name();
}

Result<Device> Device::open(const std::string& name) {
  return hw::open_device(name).and_then(&Device::wrap);
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

Result<uint64_t> Device::read_port_counter(uint8_t port, const std::string& name) {
  return core_->hw->read_port_counter(port, name);
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
      case hw::AsyncEventType::srq_limit_reached:
        for (detail::SrqCore* srq : dev.srqs)
          if (srq->srqn == event.srqn)
            srq->limit_events.fetch_add(1, std::memory_order_relaxed);
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
