// SPDX-License-Identifier: BSD-3-Clause
// CQE paths off the per-poll hot path: error completions, field decoding, names, and the
// device side (ring initialisation and CQE writing).
#include <endian.h>

#include <cstddef>
#include <cstring>

#include "rnicdv/wqe/cqe.h"
#include "rnicdv/wqe/segments.h"

namespace rnicdv::wqe {

namespace {

bool is_error_cqe(uint8_t cqe_opcode) {
  return cqe_opcode == MLX5_CQE_REQ_ERR || cqe_opcode == MLX5_CQE_RESP_ERR;
}

uint8_t err_cqe_byte(const mlx5_cqe64* cqe, size_t offset) {
  return reinterpret_cast<const uint8_t*>(cqe)[offset];
}

}  // namespace

namespace detail {

void unusual_completion(const mlx5_cqe64* cqe, Completion* out) noexcept {
  const uint8_t cqe_opcode = cqe->op_own >> 4;
  if (!is_error_cqe(cqe_opcode)) {
    // RESIZE_CQ, NO_PACKET, SIG_ERR, or garbage: nothing a QP completion can be built from.
    out->status = IBV_WC_GENERAL_ERR;
    out->opcode = IBV_WC_DRIVER1;
    return;
  }
  // mlx5_err_cqe (rdma-core cq.c mlx5_handle_error_cqe, wc.vendor_err = vendor_err_synd).
  const uint8_t syndrome = err_cqe_byte(cqe, offsetof(mlx5_err_cqe, syndrome));
  out->status = syndrome_to_wc_status(syndrome);
  out->vendor_err = err_cqe_byte(cqe, offsetof(mlx5_err_cqe, vendor_err_synd));
  // Verbs leaves the opcode of an error completion undefined; report what failed anyway.
  out->opcode = cqe_opcode == MLX5_CQE_REQ_ERR
                    ? wc_opcode_for_send(static_cast<uint8_t>(be32toh(cqe->sop_drop_qpn) >> 24))
                    : static_cast<uint8_t>(IBV_WC_RECV);
}

}  // namespace detail

ibv_wc_status syndrome_to_wc_status(uint8_t syndrome) noexcept {
  switch (syndrome) {
    case MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR:
      return IBV_WC_LOC_LEN_ERR;
    case MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR:
      return IBV_WC_LOC_QP_OP_ERR;
    case MLX5_CQE_SYNDROME_LOCAL_PROT_ERR:
      return IBV_WC_LOC_PROT_ERR;
    case MLX5_CQE_SYNDROME_WR_FLUSH_ERR:
      return IBV_WC_WR_FLUSH_ERR;
    case MLX5_CQE_SYNDROME_MW_BIND_ERR:
      return IBV_WC_MW_BIND_ERR;
    case MLX5_CQE_SYNDROME_BAD_RESP_ERR:
      return IBV_WC_BAD_RESP_ERR;
    case MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR:
      return IBV_WC_LOC_ACCESS_ERR;
    case MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR:
      return IBV_WC_REM_INV_REQ_ERR;
    case MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR:
      return IBV_WC_REM_ACCESS_ERR;
    case MLX5_CQE_SYNDROME_REMOTE_OP_ERR:
      return IBV_WC_REM_OP_ERR;
    case MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR:
      return IBV_WC_RETRY_EXC_ERR;
    case MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR:
      return IBV_WC_RNR_RETRY_EXC_ERR;
    case MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR:
      return IBV_WC_REM_ABORT_ERR;
    default:
      return IBV_WC_GENERAL_ERR;
  }
}

ibv_wc_opcode send_opcode_to_wc_opcode(uint8_t mlx5_opcode) noexcept {
  return static_cast<ibv_wc_opcode>(detail::wc_opcode_for_send(mlx5_opcode));
}

void init_cq_ring(CqRing ring) noexcept {
  std::memset(ring.buf, 0, static_cast<size_t>(ring.cqe_cnt) * ring.cqe_size);
  // libmlx5 mlx5_alloc_cq_buf: opcode INVALID, owner 0, so no entry is valid in lap 0 either.
  for (uint32_t i = 0; i < ring.cqe_cnt; ++i)
    __atomic_store_n(&ring.cqe(i)->op_own, MLX5_CQE_INVALID << 4, __ATOMIC_RELAXED);
}

void decode_cqe(const mlx5_cqe64* cqe, CqeFields* out) noexcept {
  const uint8_t op_own = cqe->op_own;
  const uint32_t opcode_qpn = be32toh(cqe->sop_drop_qpn);
  out->cqe_opcode = op_own >> 4;
  out->send_opcode = static_cast<uint8_t>(opcode_qpn >> 24);
  out->qpn = opcode_qpn & kCqeQpnMask;
  out->wqe_counter = be16toh(cqe->wqe_counter);
  out->solicited = (op_own & kCqeSolicitedBit) != 0;
  if (is_error_cqe(out->cqe_opcode)) {
    out->syndrome = err_cqe_byte(cqe, offsetof(mlx5_err_cqe, syndrome));
    out->vendor_syndrome = err_cqe_byte(cqe, offsetof(mlx5_err_cqe, vendor_err_synd));
    out->src_qpn = 0;
    out->byte_cnt = 0;
    out->imm = 0;
    out->grh = false;
    out->roce_pkt_type = 0;
    return;
  }
  out->syndrome = 0;
  out->vendor_syndrome = 0;
  const uint32_t flags_rqpn = be32toh(cqe->flags_rqpn);
  out->src_qpn = flags_rqpn & kCqeQpnMask;
  out->grh = ((flags_rqpn >> 28) & 3) != 0;
  out->roce_pkt_type = static_cast<uint8_t>((flags_rqpn >> 24) & 0xf);
  out->byte_cnt = be32toh(cqe->byte_cnt);
  out->imm = be32toh(cqe->imm_inval_pkey);
}

void write_cqe(CqRing ring, uint32_t pi, const CqeInit& init) noexcept {
  uint8_t* const entry = ring.buf + static_cast<size_t>(pi & (ring.cqe_cnt - 1)) * ring.cqe_size;
  mlx5_cqe64* const cqe = ring.cqe(pi);
  const uint8_t opcode_bits = static_cast<uint8_t>((init.cqe_opcode & 0xf) << 4);
  const uint8_t op_own =
      static_cast<uint8_t>(opcode_bits | (init.solicited ? kCqeSolicitedBit : 0) |
                           ((pi & ring.cqe_cnt) ? kCqeOwnerBit : 0));
  const uint32_t opcode_qpn =
      (static_cast<uint32_t>(init.send_opcode) << 24) | (init.qpn & kCqeQpnMask);

  // Build the 64-byte CQE aside, then copy everything but op_own: the consumer may be loading
  // op_own of this entry at this moment, and must see the new value only after the rest.
  unsigned char image[sizeof(mlx5_cqe64)] = {};
  if (is_error_cqe(init.cqe_opcode)) {
    mlx5_err_cqe err{};
    err.srqn = htobe32(init.srqn_uidx & kCqeQpnMask);
    err.vendor_err_synd = init.vendor_syndrome;
    err.syndrome = init.syndrome;
    err.s_wqe_opcode_qpn = htobe32(opcode_qpn);
    err.wqe_counter = htobe16(init.wqe_counter);
    std::memcpy(image, &err, sizeof err);
  } else {
    mlx5_cqe64 good{};
    // Bit 28 of flags_rqpn: the GRH (or IP header) is in the receive buffer (IBV_WC_GRH).
    good.flags_rqpn = htobe32((init.src_qpn & kCqeQpnMask) | (init.grh ? 1u << 28 : 0) |
                              (uint32_t{init.roce_pkt_type & 0xfu} << 24));
    good.srqn_uidx = htobe32(init.srqn_uidx & kCqeQpnMask);
    good.imm_inval_pkey = htobe32(init.imm);
    good.byte_cnt = htobe32(init.byte_cnt);
    good.sop_drop_qpn = htobe32(opcode_qpn);
    good.wqe_counter = htobe16(init.wqe_counter);
    good.timestamp = htobe64(init.timestamp);
    std::memcpy(image, &good, sizeof good);
  }
  // A 128-byte entry's first half holds scattered payload; this model never scatters to CQEs.
  if (ring.cqe_size == 128) std::memset(entry, 0, 64);
  std::memcpy(cqe, image, offsetof(mlx5_cqe64, op_own));
  __atomic_store_n(&cqe->op_own, op_own, __ATOMIC_RELEASE);
}

const char* cqe_opcode_name(uint8_t cqe_opcode) noexcept {
  switch (cqe_opcode) {
    case MLX5_CQE_REQ:
      return "REQ";
    case MLX5_CQE_RESP_WR_IMM:
      return "RESP_WR_IMM";
    case MLX5_CQE_RESP_SEND:
      return "RESP_SEND";
    case MLX5_CQE_RESP_SEND_IMM:
      return "RESP_SEND_IMM";
    case MLX5_CQE_RESP_SEND_INV:
      return "RESP_SEND_INV";
    case MLX5_CQE_RESIZE_CQ:
      return "RESIZE_CQ";
    case MLX5_CQE_NO_PACKET:
      return "NO_PACKET";
    case MLX5_CQE_SIG_ERR:
      return "SIG_ERR";
    case MLX5_CQE_REQ_ERR:
      return "REQ_ERR";
    case MLX5_CQE_RESP_ERR:
      return "RESP_ERR";
    case MLX5_CQE_INVALID:
      return "INVALID";
    default:
      return "unknown";
  }
}

const char* cqe_syndrome_name(uint8_t syndrome) noexcept {
  switch (syndrome) {
    case MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR:
      return "LOCAL_LENGTH_ERR";
    case MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR:
      return "LOCAL_QP_OP_ERR";
    case MLX5_CQE_SYNDROME_LOCAL_PROT_ERR:
      return "LOCAL_PROT_ERR";
    case MLX5_CQE_SYNDROME_WR_FLUSH_ERR:
      return "WR_FLUSH_ERR";
    case MLX5_CQE_SYNDROME_MW_BIND_ERR:
      return "MW_BIND_ERR";
    case MLX5_CQE_SYNDROME_BAD_RESP_ERR:
      return "BAD_RESP_ERR";
    case MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR:
      return "LOCAL_ACCESS_ERR";
    case MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR:
      return "REMOTE_INVAL_REQ_ERR";
    case MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR:
      return "REMOTE_ACCESS_ERR";
    case MLX5_CQE_SYNDROME_REMOTE_OP_ERR:
      return "REMOTE_OP_ERR";
    case MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR:
      return "TRANSPORT_RETRY_EXC_ERR";
    case MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR:
      return "RNR_RETRY_EXC_ERR";
    case MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR:
      return "REMOTE_ABORTED_ERR";
    default:
      return "unknown";
  }
}

}  // namespace rnicdv::wqe
