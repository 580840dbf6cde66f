// SPDX-License-Identifier: BSD-3-Clause
// Hot-path bodies of cqe.h: the ownership test and the decoding of a good completion, as
// rdma-core's providers/mlx5/cq.c does them (get_sw_cqe, handle_good_req, handle_responder).
#pragma once

#include <endian.h>
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>

#include "rnicdv/wqe/cqe.h"
#include "rnicdv/wqe/work_request.h"

namespace rnicdv::wqe {

// The layouts read and written here (mlx5dv.h, struct mlx5_cqe64, of rdma-core 44).
static_assert(sizeof(mlx5_cqe64) == 64);
static_assert(offsetof(mlx5_cqe64, flags_rqpn) == 24);
static_assert(offsetof(mlx5_cqe64, srqn_uidx) == 32);
static_assert(offsetof(mlx5_cqe64, imm_inval_pkey) == 36);
static_assert(offsetof(mlx5_cqe64, byte_cnt) == 44);
static_assert(offsetof(mlx5_cqe64, sop_drop_qpn) == 56);
static_assert(offsetof(mlx5_cqe64, wqe_counter) == 60);
static_assert(offsetof(mlx5_cqe64, op_own) == 63);
static_assert(sizeof(mlx5_err_cqe) == 64);
static_assert(offsetof(mlx5_err_cqe, srqn) == 32);
static_assert(offsetof(mlx5_err_cqe, vendor_err_synd) == 54);
static_assert(offsetof(mlx5_err_cqe, syndrome) == 55);
// An error CQE keeps the opcode/QPN word and the WQE counter where a good one has them.
static_assert(offsetof(mlx5_err_cqe, s_wqe_opcode_qpn) == offsetof(mlx5_cqe64, sop_drop_qpn));
static_assert(offsetof(mlx5_err_cqe, wqe_counter) == offsetof(mlx5_cqe64, wqe_counter));
static_assert(offsetof(mlx5_err_cqe, op_own) == offsetof(mlx5_cqe64, op_own));

inline constexpr uint8_t kCqeOwnerBit = MLX5_CQE_OWNER_MASK;  // op_own bit 0
inline constexpr uint8_t kCqeSolicitedBit = 1u << 1;          // op_own bit 1 (SE)
inline constexpr uint32_t kCqeQpnMask = 0xffffff;

namespace detail {

// ibv_wc_opcode of a completed send WQE (handle_good_req). A NOP or an opcode verbs has no
// name for completes as IBV_WC_DRIVER1, the provider-specific value.
constexpr uint8_t wc_opcode_for_send(uint8_t mlx5_opcode) noexcept {
  switch (mlx5_opcode) {
    case MLX5_OPCODE_SEND:
    case MLX5_OPCODE_SEND_IMM:
    case MLX5_OPCODE_SEND_INVAL:
      return IBV_WC_SEND;
    case MLX5_OPCODE_RDMA_WRITE:
    case MLX5_OPCODE_RDMA_WRITE_IMM:
      return IBV_WC_RDMA_WRITE;
    case MLX5_OPCODE_RDMA_READ:
      return IBV_WC_RDMA_READ;
    case MLX5_OPCODE_ATOMIC_CS:
      return IBV_WC_COMP_SWAP;
    case MLX5_OPCODE_ATOMIC_FA:
      return IBV_WC_FETCH_ADD;
    case MLX5_OPCODE_TSO:
      return IBV_WC_TSO;
    default:
      return IBV_WC_DRIVER1;
  }
}

// A good requester CQE's ibv_wc_opcode (low byte) and where its byte count comes from (high
// byte: kSendLenNone, kSendLenCqe for RDMA READ, kSendLenAtomic for the atomics), by the send
// opcode in sop_drop_qpn's top byte: one load instead of the switch and three compares.
inline constexpr uint16_t kSendLenNone = 0, kSendLenCqe = 1, kSendLenAtomic = 2;
struct SendDecodeTable {
  uint16_t entry[256];
  constexpr SendDecodeTable() : entry{} {
    for (unsigned op = 0; op < 256; ++op) {
      const uint8_t opcode = static_cast<uint8_t>(op);
      const uint16_t len = opcode == MLX5_OPCODE_RDMA_READ ? kSendLenCqe
                           : (opcode == MLX5_OPCODE_ATOMIC_CS || opcode == MLX5_OPCODE_ATOMIC_FA)
                               ? kSendLenAtomic
                               : kSendLenNone;
      entry[op] = static_cast<uint16_t>(wc_opcode_for_send(opcode) | (len << 8));
    }
  }
};
inline constexpr SendDecodeTable kSendDecode{};

// Error CQEs (mlx5_err_cqe) and opcodes a QP never completes with; out of line.
[[gnu::cold]] void unusual_completion(const mlx5_cqe64* cqe, Completion* out) noexcept;

}  // namespace detail

[[gnu::always_inline]] inline bool sw_owns_cqe(const mlx5_cqe64* cqe, uint32_t ci,
                                               uint32_t cqe_cnt, uint8_t* op_own) noexcept {
  // Acquire: the device writes op_own last (release), so every other field read after this
  // load is the one it wrote. This is the from-device ordering of rdma-core's get_sw_cqe +
  // udma_from_device_barrier(), expressed as a load-acquire.
  const uint8_t own = __atomic_load_n(&cqe->op_own, __ATOMIC_ACQUIRE);
  *op_own = own;
  const uint8_t lap_owner = (ci & cqe_cnt) ? 1 : 0;
  return ((own >> 4) != MLX5_CQE_INVALID) & ((own & kCqeOwnerBit) == lap_owner);
}

inline const mlx5_cqe64* cqe_for_sw(CqRing ring, uint32_t ci) noexcept {
  const mlx5_cqe64* cqe = ring.cqe(ci);
  uint8_t op_own;
  return sw_owns_cqe(cqe, ci, ring.cqe_cnt, &op_own) ? cqe : nullptr;
}

// The opcode and byte count of a good requester CQE (MLX5_CQE_REQ) whose sop_drop_qpn word,
// in host order, is `sop_drop_qpn`: as cqe_to_completion reports them (READ the bytes read,
// atomics their 8 bytes, others 0).
[[gnu::always_inline]] inline void decode_good_send(const mlx5_cqe64* cqe, uint32_t sop_drop_qpn,
                                                    uint8_t* wc_opcode,
                                                    uint32_t* byte_len) noexcept {
  const uint16_t d = detail::kSendDecode.entry[sop_drop_qpn >> 24];
  *wc_opcode = static_cast<uint8_t>(d);
  uint32_t len = 0;
  if ((d >> 8) != detail::kSendLenNone) [[unlikely]]
    len = (d >> 8) == detail::kSendLenCqe ? be32toh(cqe->byte_cnt) : 8;  // MLX5_ATOMIC_SIZE
  *byte_len = len;
}

// Every field of Completion for a good requester CQE: cqe_to_completion's MLX5_CQE_REQ case,
// from the words the poll loop has already read.
[[gnu::always_inline]] inline void good_send_to_completion(const mlx5_cqe64* cqe,
                                                           uint32_t sop_drop_qpn,
                                                           Completion* out) noexcept {
  uint8_t wc_opcode;
  uint32_t byte_len;
  decode_good_send(cqe, sop_drop_qpn, &wc_opcode, &byte_len);
  out->byte_len = byte_len;
  out->imm_data = 0;
  out->qp_num = sop_drop_qpn & kCqeQpnMask;
  out->src_qp = 0;
  out->wqe_counter = be16toh(cqe->wqe_counter);
  out->status = IBV_WC_SUCCESS;
  out->opcode = wc_opcode;
  out->vendor_err = 0;
  out->flags = 0;
  out->reserved[0] = 0;
  out->reserved[1] = 0;
}

inline void cqe_to_completion(const mlx5_cqe64* cqe, Completion* out) noexcept {
  const uint8_t op_own = cqe->op_own;
  const uint32_t sop_drop_qpn = be32toh(cqe->sop_drop_qpn);
  out->qp_num = sop_drop_qpn & kCqeQpnMask;
  out->wqe_counter = be16toh(cqe->wqe_counter);
  out->vendor_err = 0;
  out->reserved[0] = 0;
  out->reserved[1] = 0;
  out->src_qp = 0;
  out->imm_data = 0;
  out->byte_len = 0;
  out->flags = 0;
  out->status = IBV_WC_SUCCESS;

  uint8_t responder_flags = 0;
  switch (op_own >> 4) {
    case MLX5_CQE_REQ: {
      const uint8_t send_opcode = static_cast<uint8_t>(sop_drop_qpn >> 24);
      out->opcode = detail::wc_opcode_for_send(send_opcode);
      if (send_opcode == MLX5_OPCODE_RDMA_READ)
        out->byte_len = be32toh(cqe->byte_cnt);
      else if (send_opcode == MLX5_OPCODE_ATOMIC_CS || send_opcode == MLX5_OPCODE_ATOMIC_FA)
        out->byte_len = 8;  // MLX5_ATOMIC_SIZE, as libmlx5 reports it
      return;
    }
    case MLX5_CQE_RESP_SEND:
      out->opcode = IBV_WC_RECV;
      break;
    case MLX5_CQE_RESP_SEND_IMM:
      out->opcode = IBV_WC_RECV;
      responder_flags = wc_flags::with_imm;
      break;
    case MLX5_CQE_RESP_WR_IMM:
      out->opcode = IBV_WC_RECV_RDMA_WITH_IMM;
      responder_flags = wc_flags::with_imm;
      break;
    case MLX5_CQE_RESP_SEND_INV:
      out->opcode = IBV_WC_RECV;
      responder_flags = wc_flags::with_inv;
      break;
    default:
      detail::unusual_completion(cqe, out);
      return;
  }
  out->byte_len = be32toh(cqe->byte_cnt);
  const uint32_t flags_rqpn = be32toh(cqe->flags_rqpn);
  out->src_qp = flags_rqpn & kCqeQpnMask;
  if (responder_flags) out->imm_data = be32toh(cqe->imm_inval_pkey);
  // Bits 29..28 of flags_rqpn: the L3 header the device put in front of a UD receive (GRH,
  // IPv6 or IPv4), as libmlx5 reads IBV_WC_GRH.
  out->flags = static_cast<uint8_t>(responder_flags |
                                    ((op_own & kCqeSolicitedBit) ? wc_flags::solicited : 0) |
                                    (((flags_rqpn >> 28) & 3) ? wc_flags::grh : 0));
}

}  // namespace rnicdv::wqe
