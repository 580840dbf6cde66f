// SPDX-License-Identifier: BSD-3-Clause
// WQE decoding: what a device does when it fetches a WQE. Used by the software HCA and by
// tests. The input is untrusted ring memory (written by this driver, by rdma-core's libmlx5,
// or by a fuzzer): every length is bounded and a defect is reported, never assumed away.
#pragma once

#include <cstdint>

#include "rnicdv/wqe/recv_wqe.h"
#include "rnicdv/wqe/send_wqe.h"
#include "rnicdv/wqe/srq_wqe.h"

namespace rnicdv::wqe {

// Why a WQE cannot be executed. The device maps each to an error CQE syndrome.
enum class WqeDefect : uint8_t {
  none = 0,
  bad_opcode,         // not an opcode this device executes -> LOCAL_QP_OP_ERR
  bad_ds,             // DS of 0, larger than kMaxWqeDs/the ring, or too small for the opcode
                      //   -> LOCAL_QP_OP_ERR
  bad_qpn,            // ctrl.qpn does not match the QP that owns the ring -> LOCAL_QP_OP_ERR
  bad_inline,         // inline length runs past the WQE or the caller's inline buffer, or
                      //   inline data where the opcode takes none (READ, receive)
                      //   -> LOCAL_LENGTH_ERR
  too_many_segments,  // more data segments than kMaxDecodedSegments -> LOCAL_LENGTH_ERR
  bad_atomic,         // atomic without exactly one 8-byte local segment -> LOCAL_LENGTH_ERR
  bad_av,             // UD: an address vector in the compact form, which has no GID
                      //   (RoCE routes by GID) -> LOCAL_QP_OP_ERR
};

// What kind of QP owns the ring: an unreliable-datagram SEND carries an address vector
// (mlx5_wqe_datagram_seg, 48 bytes) between the control segment and its data, and a UD QP
// executes no RDMA or atomic opcode. An XRC initiator's WQE (any opcode but NOP) carries the
// destination SRQ's number in an XRC segment (libmlx5's mlx5_wqe_xrc_seg, 16 bytes: xrc_srqn
// big-endian, then 12 reserved) right after the control segment, before the raddr segment.
enum class SqTransport : uint8_t { rc, ud, xrc };

// The address vector of a UD send WQE (mlx5_wqe_av, extended form).
struct DatagramAv {
  uint32_t dest_qpn;  // 24 bits
  uint32_t qkey;
  uint8_t rgid[16];
  uint8_t rmac[6];
  uint8_t tclass;
  uint8_t hop_limit;
  uint32_t flow_label;  // grh_gid_fl bits 19:0: an IPv6 header carries it
};

inline constexpr uint32_t kMaxDecodedSegments = 64;

// One gather element of a decoded send WQE, or one run of inline bytes.
struct GatherEntry {
  uint64_t addr;  // data segment: local address; inline: offset into the inline buffer
  uint32_t length;
  uint32_t lkey;
  bool is_inline;
};

struct DecodedSendWqe {
  uint8_t opcode;  // MLX5_OPCODE_*
  uint8_t opmod;
  uint16_t wqe_index;  // ctrl index field (pi & 0xffff of the poster)
  uint32_t qpn;
  uint8_t ds;
  uint8_t bbs;  // ceil(ds / 4)
  uint8_t fm_ce_se;
  uint32_t imm;          // host order
  uint64_t remote_addr;  // raddr segment (RDMA, atomics)
  uint32_t rkey;
  uint64_t swap_add;  // atomic segment
  uint64_t compare;
  DatagramAv av;  // UD SEND only
  uint32_t xrc_srqn;  // XRC: the SRQ the message goes to (24 bits)
  uint32_t num_entries;
  GatherEntry entries[kMaxDecodedSegments];
  uint32_t inline_bytes;  // bytes copied into the caller's inline buffer
  uint64_t total_length;  // sum of entry lengths = the message length

  bool signaled() const { return (fm_ce_se & MLX5_WQE_CTRL_CQ_UPDATE) != 0; }
  bool solicited() const { return (fm_ce_se & MLX5_WQE_CTRL_SOLICITED) != 0; }
  bool fenced() const { return (fm_ce_se & 0xe0) != 0; }
};

// Decodes the WQE starting at BB `pi` of `ring`. Inline payload is gathered (across the ring
// wrap) into `inline_buf` of `inline_cap` bytes; inline entries refer to offsets in it
// (kMaxWqeDs * kDsBytes bytes hold any WQE's inline data). `expected_qpn` is checked against
// ctrl.qpn. Never reads outside the ring. Checks, in order: DS range, opcode, QPN, DS minimum
// for the opcode, segments. The fields parsed before a defect are filled in; on a defect
// `entries` may hold a partial list. Data segments are reported as written: a byte_count of 0
// is a zero-length entry.
// `transport` is the owning QP's: UD WQEs are read with their address vector.
WqeDefect decode_send_wqe(SqRing ring, uint32_t pi, uint32_t expected_qpn, DecodedSendWqe* out,
                          uint8_t* inline_buf, uint32_t inline_cap,
                          SqTransport transport = SqTransport::rc) noexcept;

// True when the WQE at `pi` looks executable to a device that scans past the doorbell record
// (ctrl index == pi & 0xffff, known opcode, plausible DS, matching QPN). Reads only the ring.
bool looks_valid_send_wqe(SqRing ring, uint32_t pi, uint32_t expected_qpn,
                          SqTransport transport = SqTransport::rc) noexcept;

struct DecodedRecvWqe {
  uint32_t num_sge;
  Sge sges[kMaxDecodedSegments];
  uint64_t total_length;
};

// Decodes the receive WQE in slot `index`: data segments up to the terminator (lkey 0x100) or
// the end of the stride.
WqeDefect decode_recv_wqe(RqRing ring, uint32_t index, DecodedRecvWqe* out) noexcept;
// The same for WQE `index` of a shared receive queue (srq_wqe.h): after its next segment.
WqeDefect decode_srq_wqe(const SrqRing& ring, uint32_t index, DecodedRecvWqe* out) noexcept;

// Human-readable name of a defect ("bad_ds").
const char* wqe_defect_name(WqeDefect defect) noexcept;

}  // namespace rnicdv::wqe
