// SPDX-License-Identifier: BSD-3-Clause
// The state behind a Device, shared by every object created from it (each keeps it alive).
#pragma once

#include <algorithm>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "rnicdv/detail/qp_table.h"
#include "rnicdv/hw/device.h"

namespace rnicdv::detail {

struct CqCore;
struct SrqCore;
struct QpCore;

struct DeviceCore {
  explicit DeviceCore(std::shared_ptr<hw::Device> device)
      : hw(std::move(device)), progress(hw->progress_hook()) {}

  std::shared_ptr<hw::Device> hw;
  hw::ProgressHook progress;

  // Guards the registries below and the QPs' comm-est handlers. Async events are dispatched
  // under it, so a QP or CQ found here stays alive until the event is handled.
  std::mutex mutex;
  QpTable qp_table;          // read without the mutex by pollers
  // Sets: a destroy is O(1) however many objects the device holds.
  std::unordered_set<QpCore*> qps;    // live QPs, for device-wide events
  std::unordered_set<CqCore*> cqs;    // live CQs, found by CQN for CQ_ERR
  std::unordered_set<SrqCore*> srqs;  // live SRQs, found by SRQN for SRQ_LIMIT_REACHED
  // Live XRC SRQs by the tag their receive CQEs carry (SrqCore::cqe_tag): an XRC target's
  // receives complete on the SRQ's CQ under the target's QPN, and name the SRQ only so. A
  // lock of its own: pollers take it (QpCore::retire_xrc_recv), and a poll may run where the
  // device's mutex is held (inside an event's handler).
  std::mutex xrc_mutex;
  std::unordered_map<uint32_t, SrqCore*> xrc_srqs;
  bool fatal = false;        // DEVICE_FATAL seen

  // Makes a new QP findable by pollers (qp_table) and device-wide events (qps).
  Status register_qp(QpCore* qp);

  template <class T>
  static void erase_from(std::vector<T*>& v, T* item) {
    v.erase(std::remove(v.begin(), v.end(), item), v.end());
  }
};

}  // namespace rnicdv::detail
