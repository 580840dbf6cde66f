// SPDX-License-Identifier: BSD-3-Clause
// rnicperf's posts: each one-SGE request through the QueuePair typed call for its operation
// (post_write, post_send_inline, post_read, post_fetch_add, ...), whose cost is the stores'
// (docs/driver.md, "Typed post calls"); anything else through post_send. The measurement loops
// keep their SendWr, so the request a run describes is the one a typed call gets; with
// --use_old_post_send, and with -c XRC (whose WRs name the remote SRQ, which no typed call
// takes), they hand the SendWr lists to post_send instead (post_wr_list).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "rnicdv/qp.h"

namespace rnicperf {

// Posts `wr`, or, with ring false, stages it (QueuePair::ring_send rings for what is staged).
// The same outcome and error codes as post_send(wr) / stage_send(wr).
inline rnicdv::Errc post_typed(rnicdv::QueuePair& qp, const rnicdv::SendWr& wr,
                               bool ring) noexcept {
  using rnicdv::WrOpcode;
  namespace send_flags = rnicdv::send_flags;
  // A datagram (-c UD) and anything but one SGE: post_send, which builds every shape.
  if (wr.av != nullptr || wr.num_sge != 1 || wr.sg_list == nullptr) [[unlikely]]
    return ring ? qp.post_send(wr) : qp.stage_send(wr);
  const rnicdv::Sge& sge = *wr.sg_list;
  const bool inl = (wr.flags & send_flags::inline_data) != 0;
  const rnicdv::SendFlags flags = wr.flags & ~send_flags::inline_data;
  const void* data = reinterpret_cast<const void*>(static_cast<uintptr_t>(sge.addr));
  switch (wr.opcode) {
    case WrOpcode::rdma_write:
      if (inl)
        return ring ? qp.post_write_inline(wr.wr_id, data, sge.length, wr.remote_addr, wr.rkey,
                                           flags)
                    : qp.stage_write_inline(wr.wr_id, data, sge.length, wr.remote_addr, wr.rkey,
                                            flags);
      return ring ? qp.post_write(wr.wr_id, sge, wr.remote_addr, wr.rkey, flags)
                  : qp.stage_write(wr.wr_id, sge, wr.remote_addr, wr.rkey, flags);
    case WrOpcode::send:
      if (inl)
        return ring ? qp.post_message_inline(wr.wr_id, data, sge.length, flags)
                    : qp.stage_message_inline(wr.wr_id, data, sge.length, flags);
      return ring ? qp.post_message(wr.wr_id, sge, flags) : qp.stage_message(wr.wr_id, sge, flags);
    case WrOpcode::rdma_read:
      return ring ? qp.post_read(wr.wr_id, sge, wr.remote_addr, wr.rkey, flags)
                  : qp.stage_read(wr.wr_id, sge, wr.remote_addr, wr.rkey, flags);
    case WrOpcode::atomic_fetch_add:
      return ring ? qp.post_fetch_add(wr.wr_id, sge, wr.remote_addr, wr.rkey, wr.compare_add,
                                      flags)
                  : qp.stage_fetch_add(wr.wr_id, sge, wr.remote_addr, wr.rkey, wr.compare_add,
                                       flags);
    case WrOpcode::atomic_cmp_swap:
      return ring ? qp.post_compare_swap(wr.wr_id, sge, wr.remote_addr, wr.rkey, wr.compare_add,
                                         wr.swap, flags)
                  : qp.stage_compare_swap(wr.wr_id, sge, wr.remote_addr, wr.rkey,
                                          wr.compare_add, wr.swap, flags);
    default:
      return ring ? qp.post_send(wr) : qp.stage_send(wr);
  }
}

// Posts the list `wrs` with one doorbell. With old_post_send (--use_old_post_send, perftest's
// ibv_post_send flow): one QueuePair::post_send call for the whole list, counted in
// *post_send_calls. Otherwise each WR through its typed call (perftest's ibv_wr_* flow), every
// one staged but the last, which rings.
inline rnicdv::Errc post_wr_list(rnicdv::QueuePair& qp, std::span<const rnicdv::SendWr> wrs,
                                 bool old_post_send, uint64_t* post_send_calls) noexcept {
  if (old_post_send) {
    ++*post_send_calls;
    return qp.post_send(wrs);
  }
  for (size_t k = 0; k < wrs.size(); ++k)
    if (rnicdv::Errc e = post_typed(qp, wrs[k], k + 1 == wrs.size()); e != rnicdv::Errc::ok)
        [[unlikely]]
      return e;
  return rnicdv::Errc::ok;
}

}  // namespace rnicperf
