// SPDX-License-Identifier: BSD-3-Clause
// Doorbell records the application placed (queues.h).
#include "queues.h"

#include <endian.h>

namespace rnicdv::sim::rc {

uint16_t load_external_dbr(const QpObj& qp, unsigned word, uint32_t consumed) {
  uint32_t raw = 0;
  if (qp.host_failed) return static_cast<uint16_t>(consumed);
  if (!host_load32(&qp.dbrec[word], &raw)) {
    qp.host_fault = true;
    return static_cast<uint16_t>(consumed);
  }
  return static_cast<uint16_t>(be32toh(raw) & 0xffff);
}

}  // namespace rnicdv::sim::rc
