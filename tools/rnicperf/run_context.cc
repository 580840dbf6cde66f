// SPDX-License-Identifier: BSD-3-Clause
#include "run_context.h"

#include <infiniband/verbs.h>

namespace rnicperf {

using rnicdv::Errc;
using rnicdv::Status;

Status completion_error(const char* test, const rnicdv::Completion& wc) {
  return Status::error(Errc::io_error,
                       "%s: completion with error on QP %#x: %s (status %u, vendor syndrome %#x)",
                       test, wc.qp_num, ibv_wc_status_str(static_cast<ibv_wc_status>(wc.status)),
                       wc.status, wc.vendor_err);
}

Status post_error(const char* test, const char* what, uint32_t qpn, Errc e) {
  return Status::error(e, "%s: %s on QP %#x failed: %s", test, what, qpn, rnicdv::errc_name(e));
}

Status recv_post_error(const char* test, const TestEndpoint& ep, size_t r, Errc e) {
  if (ep.xrc())
    return Status::error(e, "%s: post receive on XRC SRQ %#x failed: %s", test, ep.xrc_srqn(),
                         rnicdv::errc_name(e));
  return post_error(test, "post receive", ep.qp_number(r), e);
}

Status stall_error(const char* test, const char* what, uint32_t timeout_s) {
  return Status::error(Errc::timeout, "%s: no %s for %u s (is the peer still running?)", test, what,
                       timeout_s);
}

}  // namespace rnicperf
