// SPDX-License-Identifier: BSD-3-Clause
// Reading a QP's rings and doorbell record. The device's own rings are read directly. Rings
// and records the application placed (external.h: libmlx5's, through the uverbs shim) are
// read through host_access.h: the WQEs into the QP's mirror (qp.h) before they are decoded,
// the records word by word. A page taken away marks the QP (host_fault) instead of killing
// the process; the engine then moves such a QP to ERR with QP_FATAL and sets host_failed,
// after which its memory is never read again.
#pragma once

#include <cstdint>

#include "../host_access.h"
#include "../qp.h"
#include "../srq.h"
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

// The largest send WQE: 63 DS, 16 basic blocks.
inline constexpr uint32_t kMaxWqeBbs = 16;

// Makes the SQ's basic blocks from `pi` up to `limit` (the doorbell record's position: WQEs
// the producer announced) readable in qp.sq: for a QP in placed memory, copies what the
// mirror does not hold yet, in one read (two at the ring's end). False (and the QP marked) on
// a fault, and without reading once that memory has failed. Nothing to do for the device's
// own rings.
bool mirror_sq(QpObj& qp, uint32_t pi, uint32_t limit);
// The same for the largest WQE at `pi` beyond the doorbell record (a scanning device): copied
// again each time, since the producer may still be writing it.
bool mirror_sq_beyond(QpObj& qp, uint32_t pi);

// The same for receive WQE `index` of the QP's RQ.
bool mirror_rq(QpObj& qp, uint32_t index);

// The same for WQE `index` of a shared receive queue; false on a fault (the caller fails
// what needed it, and marks the SRQ).
bool mirror_srq(SrqObj& srq, uint32_t index);

}  // namespace rnicdv::sim::rc
