// SPDX-License-Identifier: BSD-3-Clause
// CQE ring: ownership test and decoding (driver side), and CQE writing (device side).
//
// Layout: struct mlx5_cqe64 / mlx5_err_cqe from mlx5dv.h. For 128-byte CQEs the 64-byte
// struct is the second half of the entry. Ownership (rdma-core get_sw_cqe): entry for the
// free-running consumer index `ci` is valid for software iff its opcode != MLX5_CQE_INVALID and
// (op_own & 1) == ((ci & cqe_cnt) ? 1 : 0). A fresh ring has op_own = 0xF0 everywhere.
// Hot-path bodies are in cqe_inl.h.
#pragma once

#include <cstdint>

#include "rnicdv/wqe/work_request.h"

namespace rnicdv::wqe {

struct CqRing {
  uint8_t* buf = nullptr;  // mlx5dv_cq::buf
  uint32_t cqe_cnt = 0;    // power of two
  uint32_t cqe_size = 64;  // 64 or 128

  // The 64-byte CQE struct for index `i` (second half of a 128-byte entry).
  mlx5_cqe64* cqe(uint32_t i) const {
    return reinterpret_cast<mlx5_cqe64*>(buf + (i & (cqe_cnt - 1)) * cqe_size + (cqe_size - 64));
  }
};

// Sets every entry to op_own = 0xF0 (invalid, owned by hardware) as libmlx5 does at creation.
void init_cq_ring(CqRing ring) noexcept;

// The CQE at consumer index `ci` if software owns it, else nullptr. The owner byte is read
// with acquire ordering, so the other fields may be read after a non-null return.
const mlx5_cqe64* cqe_for_sw(CqRing ring, uint32_t ci) noexcept;
// The same test, for a poll loop: true if software owns the CQE at `ci`, whose op_own byte
// (read once, with acquire ordering) is then in `*op_own`.
bool sw_owns_cqe(const mlx5_cqe64* cqe, uint32_t ci, uint32_t cqe_cnt, uint8_t* op_own) noexcept;

// Fields of a CQE, independent of how the driver maps wqe_counter to wr_id.
struct CqeFields {
  uint8_t cqe_opcode;       // MLX5_CQE_REQ, MLX5_CQE_RESP_SEND, ... MLX5_CQE_REQ_ERR
  uint8_t send_opcode;      // REQ / REQ_ERR: the send WQE's MLX5_OPCODE_*
  uint8_t syndrome;         // errors: MLX5_CQE_SYNDROME_*
  uint8_t vendor_syndrome;  // errors
  uint16_t wqe_counter;
  uint32_t qpn;
  uint32_t src_qpn;  // RESP: flags_rqpn & 0xffffff
  uint32_t byte_cnt;
  uint32_t imm;  // host order
  bool solicited;
  bool grh;               // RESP: flags_rqpn bits 29:28 non-zero, an L3 header leads the data
  uint8_t roce_pkt_type;  // RESP: flags_rqpn bits 27:24 (see CqeInit::roce_pkt_type)
};

// Decodes a software-owned CQE.
void decode_cqe(const mlx5_cqe64* cqe, CqeFields* out) noexcept;

// Fills `out` (all but wr_id) from a software-owned CQE: status (ibv_wc_status), opcode
// (ibv_wc_opcode), byte_len, imm, flags, qp_num, src_qp, wqe_counter, vendor_err.
void cqe_to_completion(const mlx5_cqe64* cqe, Completion* out) noexcept;

// mlx5 error syndrome -> ibv_wc_status (rdma-core cq.c mlx5_handle_error_cqe); anything
// unknown -> IBV_WC_GENERAL_ERR.
ibv_wc_status syndrome_to_wc_status(uint8_t syndrome) noexcept;

// MLX5_OPCODE_* of a completed send WQE -> ibv_wc_opcode (rdma-core cq.c handle_good_req).
// NOP and opcodes verbs has no completion opcode for -> IBV_WC_DRIVER1.
ibv_wc_opcode send_opcode_to_wc_opcode(uint8_t mlx5_opcode) noexcept;

// Names for logs and dumps: "REQ", "RESP_SEND_IMM", ...; "LOCAL_PROT_ERR", ...; "unknown"
// for values mlx5dv.h does not define.
const char* cqe_opcode_name(uint8_t cqe_opcode) noexcept;
const char* cqe_syndrome_name(uint8_t syndrome) noexcept;

// ---- Device side -------------------------------------------------------------------------

// What the device writes for one completion.
struct CqeInit {
  uint8_t cqe_opcode = MLX5_CQE_REQ;
  uint8_t send_opcode = 0;  // REQ / REQ_ERR
  uint8_t syndrome = 0;     // REQ_ERR / RESP_ERR
  uint8_t vendor_syndrome = 0;
  uint16_t wqe_counter = 0;
  uint32_t qpn = 0;
  uint32_t src_qpn = 0;  // RESP
  uint32_t byte_cnt = 0;
  uint32_t imm = 0;        // host order; RESP_SEND_IMM / RESP_WR_IMM
  uint32_t srqn_uidx = 0;  // user index of the QP (libmlx5 with cqe_version 1)
  uint64_t timestamp = 0;  // the device's clock when it wrote the CQE (good CQEs only)
  bool solicited = false;
  bool grh = false;  // RESP: a GRH area (for RoCE v2, the IP header) leads the data: UD
  // RESP on RoCE, UD: what the PRM puts in the SL field (flags_rqpn bits 27:24, libmlx5's
  // wc.sl): bit 3 a UDP header (RoCE v2), bits 2:0 the L3 header (0 GRH, 1 IPv6, 2 IPv4).
  uint8_t roce_pkt_type = 0;
};

// Writes a CQE at producer index `pi` with the owner bit for that lap. Every field is written
// before op_own, which is stored last with release ordering.
void write_cqe(CqRing ring, uint32_t pi, const CqeInit& init) noexcept;

}  // namespace rnicdv::wqe

#include "rnicdv/wqe/cqe_inl.h"
