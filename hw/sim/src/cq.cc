// SPDX-License-Identifier: BSD-3-Clause
#include "cq.h"

#include <endian.h>

namespace rnicdv::sim {

uint32_t cq_consumer_index(const CqObj& cq) noexcept {
  const uint32_t raw = __atomic_load_n(&cq.dbrec[kCqDbrConsumerIndex], __ATOMIC_ACQUIRE);
  return be32toh(raw) & 0xffffff;
}

CqPush cq_push(CqObj& cq, const wqe::CqeInit& init) noexcept {
  if (cq.overflowed) return CqPush::dead;
  const uint32_t in_use = (cq.pi - cq_consumer_index(cq)) & 0xffffff;
  if (in_use >= cq.ring.cqe_cnt) {
    cq.overflowed = true;
    return CqPush::overflow;
  }
  wqe::write_cqe(cq.ring, cq.pi, init);
  ++cq.pi;
  ++cq.cqes_written;
  return CqPush::written;
}

}  // namespace rnicdv::sim
