// SPDX-License-Identifier: BSD-3-Clause
// The transport's context (context.h), bound to its device.
#include "context.h"

#include "../faults/schedule.h"
#include "../hca.h"

namespace rnicdv::sim::rc {

Context::Context(Hca& device, DeviceCounters& counters, const MrTable& mrs,
                 const hw::DeviceInfo& info, const DeviceConfig& config)
    : device_(device), counters_(counters), mrs_(mrs), info_(info), config_(config) {
  frame_.resize(pkt::kMaxPacketBytes + 64);
}

uint64_t Context::now() const {
  return device_.now();
}

void Context::transmit(QpObj& qp, const uint8_t* frame, size_t len) {
  device_.transmit(qp, qp.remote_ip, frame, len, qp.ip_class);
}

void Context::transmit_to(QpObj& qp, const IpAddress& dst, const uint8_t* frame, size_t len,
                          IpClass ip) {
  device_.transmit(qp, dst, frame, len, ip);
}

void Context::write_cqe(CqObj* cq, const wqe::CqeInit& init) {
  device_.write_cqe_locked(cq, init);
}

void Context::raise_event(hw::AsyncEventType type, uint32_t qpn, uint32_t cqn, uint32_t srqn) {
  device_.raise_event(type, qpn, cqn, srqn);
}

faults::FaultSchedule* Context::wr_faults() const {
  faults::FaultSchedule* s = device_.fault_schedule();
  return s != nullptr && !s->spec().wrs.empty() ? s : nullptr;
}

uint32_t Context::device_index() const {
  return device_.index();
}

uint8_t Context::port_count() const {
  return device_.port_count();
}

SrqObj* Context::find_srq(uint32_t srqn) const {
  return device_.find_srq_locked(srqn);
}

}  // namespace rnicdv::sim::rc
