// SPDX-License-Identifier: BSD-3-Clause
#include "mlx5_views.h"

#include <string>

namespace rnicdv::hw::mlx5 {

namespace {

Status view_error(const std::string& what, const std::string& reason) {
  return Status(Errc::unsupported, what + ": libmlx5 view unusable: " + reason);
}

}  // namespace

Status check_qp_view(const mlx5dv_qp& view, bool has_rq, const std::string& what, bool has_sq) {
  if (!view.dbrec) return view_error(what, "no doorbell record");
  if (!has_sq) {
    if (view.sq.wqe_cnt != 0) {
      return view_error(what, "SQ WQE count " + std::to_string(view.sq.wqe_cnt) +
                                  " for a QP created without a send queue");
    }
  } else {
    if (!view.sq.buf) return view_error(what, "no send queue buffer");
    if (!is_power_of_two(view.sq.wqe_cnt)) {
      return view_error(
          what, "SQ WQE count " + std::to_string(view.sq.wqe_cnt) + " is not a power of two");
    }
    if (view.sq.stride != MLX5_SEND_WQE_BB) {
      return view_error(what, "SQ stride " + std::to_string(view.sq.stride) + " (expected " +
                                  std::to_string(MLX5_SEND_WQE_BB) + ")");
    }
  }
  if (has_rq) {
    if (!view.rq.buf) return view_error(what, "no receive queue buffer");
    if (!is_power_of_two(view.rq.wqe_cnt)) {
      return view_error(
          what, "RQ WQE count " + std::to_string(view.rq.wqe_cnt) + " is not a power of two");
    }
    // One data segment (16 bytes) at least; libmlx5 rounds the RQ WQE up to a power of two.
    if (!is_power_of_two(view.rq.stride) || view.rq.stride < sizeof(mlx5_wqe_data_seg)) {
      return view_error(what, "RQ stride " + std::to_string(view.rq.stride) +
                                  " is not a power of two of at least 16");
    }
  }
  if (!view.bf.reg) return view_error(what, "no doorbell register (UAR)");
  // BlueFlame buffers are whole 64-byte blocks, used as two alternating halves.
  if (view.bf.size != 0 && (!is_power_of_two(view.bf.size) || view.bf.size < MLX5_SEND_WQE_BB)) {
    return view_error(what, "BlueFlame size " + std::to_string(view.bf.size) +
                                " is not a power-of-two multiple of 64");
  }
  return Status::ok();
}

Status check_cq_view(const mlx5dv_cq& view, const std::string& what) {
  if (!view.buf) return view_error(what, "no CQE buffer");
  if (!view.dbrec) return view_error(what, "no doorbell record");
  if (!is_power_of_two(view.cqe_cnt)) {
    return view_error(what, "CQE count " + std::to_string(view.cqe_cnt) + " is not a power of two");
  }
  if (view.cqe_size != 64 && view.cqe_size != 128) {
    return view_error(what, "CQE size " + std::to_string(view.cqe_size) + " (expected 64 or 128)");
  }
  // cq_uar may be null (libmlx5 without a CQ UAR): polling works, only arming does not, so the
  // driver checks it where it arms.
  return Status::ok();
}

}  // namespace rnicdv::hw::mlx5
