// SPDX-License-Identifier: BSD-3-Clause
// Rings and doorbell records the application placed (queues.h).
#include "queues.h"

#include <endian.h>

namespace rnicdv::sim::rc {

namespace {

// Copies `count` consecutive slots of `bytes` each from the application's ring into the
// mirror, from slot `first` on (counters wrap at `cnt`, a power of two): one or two reads.
bool copy_slots(uint8_t* mirror, const uint8_t* host, uint32_t cnt, uint32_t bytes,
                uint32_t first, uint32_t count) {
  const uint32_t start = first & (cnt - 1);
  const uint32_t run = count < cnt - start ? count : cnt - start;
  if (!host_read(mirror + size_t{start} * bytes, host + size_t{start} * bytes, size_t{run} * bytes))
    return false;
  if (run == count) return true;
  return host_read(mirror, host, size_t{count - run} * bytes);
}

}  // namespace

uint16_t load_external_dbr(const QpObj& qp, unsigned word, uint32_t consumed) {
  uint32_t raw = 0;
  if (qp.host_failed) return static_cast<uint16_t>(consumed);
  if (!host_load32(&qp.dbrec[word], &raw)) {
    qp.host_fault = true;
    return static_cast<uint16_t>(consumed);
  }
  return static_cast<uint16_t>(be32toh(raw) & 0xffff);
}

bool mirror_sq(QpObj& qp, uint32_t pi, uint32_t limit) {
  if (!qp.external) [[likely]]
    return true;
  if (qp.host_failed || !qp.has_sq()) return false;
  // What the mirror holds is [pi, sq_mirrored) when sq_mirrored is ahead of pi.
  uint32_t from = static_cast<int32_t>(qp.sq_mirrored - pi) > 0 ? qp.sq_mirrored : pi;
  if (static_cast<int32_t>(limit - from) <= 0) return true;
  uint32_t count = limit - from;
  if (count > qp.sq.bb_count) count = qp.sq.bb_count;
  if (!copy_slots(qp.sq.buf, qp.sq_host.buf, qp.sq.bb_count, wqe::kBbBytes, from, count)) {
    qp.host_fault = true;
    return false;
  }
  qp.sq_mirrored = from + count;
  return true;
}

bool mirror_sq_beyond(QpObj& qp, uint32_t pi) {
  if (!qp.external) [[likely]]
    return true;
  if (qp.host_failed || !qp.has_sq()) return false;
  const uint32_t count = kMaxWqeBbs < qp.sq.bb_count ? kMaxWqeBbs : qp.sq.bb_count;
  if (!copy_slots(qp.sq.buf, qp.sq_host.buf, qp.sq.bb_count, wqe::kBbBytes, pi, count)) {
    qp.host_fault = true;
    return false;
  }
  qp.sq_mirrored = pi;  // nothing past pi is known to be announced
  return true;
}

bool mirror_rq(QpObj& qp, uint32_t index) {
  if (!qp.external) [[likely]]
    return true;
  if (qp.host_failed || qp.rq.wqe_cnt == 0) return false;
  if (!copy_slots(qp.rq.buf, qp.rq_host.buf, qp.rq.wqe_cnt, qp.rq.stride, index, 1)) {
    qp.host_fault = true;
    return false;
  }
  return true;
}

bool mirror_srq(SrqObj& srq, uint32_t index) {
  if (!srq.external) [[likely]]
    return true;
  if (srq.host_failed) return false;
  return copy_slots(srq.ring.buf, srq.ring_host.buf, srq.ring.wqe_cnt, srq.ring.stride, index, 1);
}

}  // namespace rnicdv::sim::rc
