// SPDX-License-Identifier: BSD-3-Clause
// hw-qualify: the programs behind `tools/dev hardware` (docs/hardware.md).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "rnicdv/hw/device.h"
#include "rnicdv/status.h"

namespace rnicdv::hwq {

// What one part of the experiment saw: WQEs (or slots) that ran at each stage, read from the
// responder's memory, and the requester's CQEs. `after_doorbell` is the control: a doorbell
// for everything written, which shows that the WQEs were valid and the path works.
struct PartFindings {
  uint32_t written = 0;
  uint32_t in_rtr = 0;          // (a), (c): ran while the requester was in RTR
  uint32_t after_rts = 0;       // (a), (c): ran after the move to RTS, before any further doorbell
  uint32_t announced = 0;       // (b): ran of those the doorbell record covered
  uint32_t beyond = 0;          // (b): ran of those beyond the doorbell record
  uint32_t after_doorbell = 0;  // the control
  uint32_t cqes_before_doorbell = 0;
  uint32_t cqes = 0;
  uint32_t error_cqes = 0;
};

struct ExperimentFindings {
  hw::DeviceProfile backend_profile;  // what the hw/mlx5 backend tells the driver
  uint32_t window_ms = 0;  // how long a stage was watched before "nothing ran" was concluded
  PartFindings a, b, c;
};

// The conclusions drawn from the findings.
struct ExperimentVerdict {
  bool conclusive = false;       // every control ran every WQE, no error CQE
  std::string a, b, c;           // one sentence each
  bool fetches_beyond_dbr = false;
  bool keeps_rtr_doorbell = false;
  // False when (c) cannot tell: a device that runs WQEs no doorbell announced after RTS (a)
  // runs (c)'s WQE whether or not it kept the doorbell. keeps_rtr_doorbell is then assumed
  // true, the case the driver guards against by never ringing below RTS.
  bool keeps_rtr_doorbell_determined = false;
  hw::DeviceProfile profile;     // from the two fields above
  std::string withholding;       // "in_place" or "shadow": what early posting should use
};

// Runs the experiment on `device` (an rdma-core device served by libmlx5). `window`: how
// long a stage is watched for WQEs that might run.
Result<ExperimentFindings> run_experiment(const std::string& device,
                                          std::chrono::milliseconds window);
ExperimentVerdict judge(const ExperimentFindings& f);

// The early-posting cases on `device` through librdmacm: {in_place, shadow} x {RTU, COMM_EST}.
struct CaseResult {
  std::string name;
  bool passed = false;
  double seconds = 0;
  std::string detail;  // the first failure, or what was seen
};
std::vector<CaseResult> run_early_post(const std::string& device);

}  // namespace rnicdv::hwq
