// SPDX-License-Identifier: BSD-3-Clause
// UCX's direct post beside rnicdv's (rnicdv-bench-libmlx5, built with the `ucx` feature): two
// rc_mlx5 interfaces of Debian's unmodified UCX, on the uverbs shim's "rnicsim0" and
// "rnicsim1" in this process, connected endpoint to endpoint, and the posting loop of
// uct_ep_put_short, UCX's lowest-level RDMA WRITE.
#pragma once

#include <cstdint>
#include <memory>

namespace rnicdv::bench {

class UctPair {
 public:
  // Opens both interfaces and connects them; failures end the program (the control path).
  UctPair(const char* measured_dev, const char* peer_dev);
  ~UctPair();
  UctPair(const UctPair&) = delete;
  UctPair& operator=(const UctPair&) = delete;

  // The caller drains once more than this many puts are outstanding: half of rc_mlx5's
  // default TX queue (UCX_RC_MLX5_TX_QUEUE_LEN, 256), so a put never finds it full.
  static constexpr uint32_t kDrainAbove = 128;

  // `n` 8-byte uct_ep_put_short calls to the peer's registered buffer; false if one of them
  // was refused (UCS_ERR_NO_RESOURCE, which draining at kDrainAbove prevents, or an error).
  bool put_short(uint32_t n);
  // Progresses both workers until every put has completed (uct_ep_flush returns UCS_OK);
  // the caller resumes the device first.
  void drain();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rnicdv::bench
