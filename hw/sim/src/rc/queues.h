// SPDX-License-Identifier: BSD-3-Clause
// Reading a QP's rings and doorbell record. The device's own rings are read directly; rings
// and records the application placed (external.h: libmlx5's, through the uverbs shim) are
// read through host_access.h, so a page taken away marks the QP (host_fault) instead of
// killing the process. The engine then moves such a QP to ERR with QP_FATAL and sets
// host_failed, after which its memory is never read again.
#pragma once

#include <cstdint>
#include <utility>

#include "../host_access.h"
#include "../qp.h"
#include "rnicdv/doorbell/mmio.h"

namespace rnicdv::sim::rc {

// A record the application placed: on a fault, or once the QP's memory has failed, the
// device's own index `consumed`, so no new work appears and nothing is read again.
uint16_t load_external_dbr(const QpObj& qp, unsigned word, uint32_t consumed);

// The producer counters the doorbell record holds (low 16 bits). Acquire: WQEs written
// before the driver's record store are visible after the load.
inline uint16_t load_sq_dbr(const QpObj& qp) {
  if (qp.external) [[unlikely]]
    return load_external_dbr(qp, MLX5_SND_DBR, qp.sq_consumed);
  return static_cast<uint16_t>(doorbell::load_dbr(&qp.dbrec[MLX5_SND_DBR]) & 0xffff);
}

inline uint16_t load_rq_dbr(const QpObj& qp) {
  if (qp.external) [[unlikely]]
    return load_external_dbr(qp, MLX5_RCV_DBR, qp.rq_consumed);
  return static_cast<uint16_t>(doorbell::load_dbr(&qp.dbrec[MLX5_RCV_DBR]) & 0xffff);
}

// Runs `read` over the QP's rings. False (and the QP marked) on a fault, and without reading
// once that memory has failed.
template <class F>
bool read_queue(const QpObj& qp, F&& read) {
  if (!qp.external) [[likely]] {
    std::forward<F>(read)();
    return true;
  }
  if (qp.host_failed) return false;
  if (host_guarded(std::forward<F>(read))) return true;
  qp.host_fault = true;
  return false;
}

}  // namespace rnicdv::sim::rc
