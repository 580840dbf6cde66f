// SPDX-License-Identifier: BSD-3-Clause
// The SQ fetcher: takes the next WQE from the send ring into the QP's record ring
// (QpObj::wqes), decoded, validated and with every local buffer resolved against the MR
// table. Reads the ring and the doorbell record; writes only QpObj's fetch indices and
// record ring.
#pragma once

#include <memory>
#include <vector>

#include "context.h"
#include "rnicdv/wqe/decode.h"

namespace rnicdv::sim::rc {

class SqFetcher {
 public:
  explicit SqFetcher(Context& ctx);

  // Fetches one WQE if the device may (the record is ahead, or a scanning device finds a
  // valid-looking WQE). False when there is none or the record ring is full.
  bool fetch_next(QpObj& qp);

 private:
  bool has_fetchable(QpObj& qp, bool* beyond_dbr);
  void resolve(QpObj& qp, const wqe::DecodedSendWqe& d, SendWqe& w);
  void choose_fault(QpObj& qp, SendWqe& w);

  Context& ctx_;
  std::unique_ptr<wqe::DecodedSendWqe> decoded_;
  std::vector<uint8_t> inline_scratch_;
};

}  // namespace rnicdv::sim::rc
