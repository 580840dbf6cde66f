// SPDX-License-Identifier: BSD-3-Clause
// What the RC transport sees of its device. The roles (requester.h, completer.h,
// retransmit.h, responder.h, flush.h, sq_fetch.h, qp_state.h) work on one QpObj at a time and
// reach the rest of the device only through this context: its clock, MR table, counters,
// capabilities and profile, a frame buffer, and three actions (put a frame on the wire, write
// a CQE, raise an async event). All of it runs under the device lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "../mr_table.h"
#include "../qp.h"
#include "rnicdv/hw/device.h"
#include "rnicdv/sim/sim.h"
#include "rnicdv/wqe/cqe.h"

namespace rnicdv::sim {

class Hca;

namespace faults {
class FaultSchedule;
}

namespace rc {

// Go-back-N window in PSNs (rxe stops 128 PSNs past the oldest unacked one) and the interval
// at which AckReq is set inside long messages.
inline constexpr uint32_t kPsnWindow = 128;
inline constexpr uint32_t kAckReqInterval = 32;

class Context {
 public:
  Context(Hca& device, DeviceCounters& counters, const MrTable& mrs, const hw::DeviceInfo& info,
          const DeviceConfig& config);
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // Read and counted by every role.
  DeviceCounters& counters() { return counters_; }
  const MrTable& mrs() const { return mrs_; }
  const hw::DeviceCaps& caps() const { return info_.caps; }
  const hw::DeviceProfile& profile() const { return config_.profile; }
  // The device's address, which its frames come from: of one family with every peer's.
  const IpAddress& local_address() const { return config_.address; }
  uint64_t now() const;

  // Scratch for one outgoing packet (headers and payload).
  uint8_t* frame() { return frame_.data(); }
  size_t frame_size() const { return frame_.size(); }

  // Hands a built packet (BTH..pad) to the wire, towards the QP's peer.
  void transmit(QpObj& qp, const uint8_t* frame, size_t len);
  // The same towards `dst` (a UD WQE's own address vector), its IP header carrying `ip`
  // (the vector's traffic class and hop limit).
  void transmit_to(QpObj& qp, const IpAddress& dst, const uint8_t* frame, size_t len, IpClass ip);
  // Writes a CQE into `cq` (null: the QP has none): overrun, CQ errors and completion
  // events are the device's (cq.h, cq_events.cc).
  void write_cqe(CqObj* cq, const wqe::CqeInit& init);
  void raise_event(hw::AsyncEventType type, uint32_t qpn, uint32_t cqn, uint32_t srqn = 0);

  // The fabric's fault schedule when its specification has `wr status=` rules
  // (faults/schedule.h), else null; and the device's index in its fabric, their device=.
  faults::FaultSchedule* wr_faults() const;
  uint32_t device_index() const;
  // An SRQ of the device by its number (an XRC request's XRCETH names one), or null.
  SrqObj* find_srq(uint32_t srqn) const;
  // The device's ports (1 or 2).
  uint8_t port_count() const;

 private:
  Hca& device_;
  DeviceCounters& counters_;
  const MrTable& mrs_;
  const hw::DeviceInfo& info_;
  const DeviceConfig& config_;
  std::vector<uint8_t> frame_;
};

}  // namespace rc
}  // namespace rnicdv::sim
