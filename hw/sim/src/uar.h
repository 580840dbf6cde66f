// SPDX-License-Identifier: BSD-3-Clause
// UAR pages and their doorbell/BlueFlame registers, as a ConnectX exposes them.
//
// A UAR page is 4 KiB. Its BlueFlame registers sit at 0x800 + k * 512 (k = 0..3, libmlx5
// MLX5_BF_OFFSET and NUM_BFREGS_PER_UAR); each is used as two alternating 256-byte halves
// (mlx5dv_qp.bf.size = 256). A driver rings by storing the first 8 bytes of a WQE's control
// segment into the current half, or by copying the whole WQE there (BlueFlame). The device
// consumes a half by exchanging its first 8 bytes with zero. The CQ arm doorbell is at
// page + 0x20 (MLX5_CQ_DOORBELL): one 8-byte big-endian store of (arm word << 32) | CQN
// (rdma-core mlx5_arm_cq), shared by every CQ whose arm requests go to that page.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace rnicdv::sim {

struct QpObj;

inline constexpr size_t kUarPageBytes = 4096;
inline constexpr size_t kBfRegOffset = 0x800;
inline constexpr size_t kBfRegBytes = 512;
inline constexpr uint32_t kBfHalfBytes = 256;
inline constexpr uint32_t kBfRegsPerPage = 4;
inline constexpr size_t kCqDoorbellOffset = 0x20;

// One register (both halves) and the QPs that ring it.
struct BfRegister {
  uint8_t* base = nullptr;      // page + 0x800 + k * 512, as the device reads it
  uint8_t* app_base = nullptr;  // the same register where software stores (attached pages)
  uint32_t index = 0;       // the device's register number (owned registers)
  bool owned = true;        // in a page the device allocated
  bool shared = false;      // handed to more than one QP
  std::vector<QpObj*> qps;  // every QP bound to it; all are checked on any doorbell
};

// What one consumed register half said.
struct DoorbellWrite {
  uint32_t qpn;        // ctrl.qpn_ds >> 8
  uint16_t wqe_index;  // ctrl.opmod_idx_opcode index field
  uint8_t opcode;
  bool blueflame;  // more than the first 8 bytes were written
};

// Consumes both halves of `reg`. Each half whose first 8 bytes are non-zero is one write;
// its bytes 8..15 being non-zero marks a BlueFlame copy (they are cleared too). Atomic
// 8-byte loads and exchanges: the register is shared with the driver's stores. Returns the
// number of writes stored in `out` (at most 2).
int consume_register(BfRegister& reg, DoorbellWrite out[2]) noexcept;

// What one consumed CQ doorbell said.
struct CqArmWrite {
  uint32_t arm_word;  // the word libmlx5 also stores in dbrec[MLX5_CQ_ARM_DB], host order
  uint32_t cqn;
};

// Consumes the CQ doorbell of the UAR page at `page` (8-byte aligned, atomic load; exchanged
// with zero only when non-zero). False when nothing was written since the last call.
bool consume_cq_doorbell(uint8_t* page, CqArmWrite* out) noexcept;

// Page allocation for registers the device owns (zeroed, page-aligned).
uint8_t* alloc_uar_page();
void free_uar_page(uint8_t* page) noexcept;

}  // namespace rnicdv::sim
