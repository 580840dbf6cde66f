// SPDX-License-Identifier: BSD-3-Clause
// Work requests and completions: the vocabulary of the fast path.
//
// Opcode values are rdma-core's MLX5_OPCODE_* (mlx5dv.h is the single source of truth), so
// encoding needs no translation table. Completion status and opcode values are libibverbs'
// ibv_wc_status / ibv_wc_opcode, so consumers of verbs read them without a mapping.
#pragma once

#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>

#include <cstdint>
#include <iosfwd>

namespace rnicdv {

enum class WrOpcode : uint8_t {
  nop = MLX5_OPCODE_NOP,
  rdma_write = MLX5_OPCODE_RDMA_WRITE,
  rdma_write_imm = MLX5_OPCODE_RDMA_WRITE_IMM,
  send = MLX5_OPCODE_SEND,
  send_imm = MLX5_OPCODE_SEND_IMM,
  rdma_read = MLX5_OPCODE_RDMA_READ,
  atomic_cmp_swap = MLX5_OPCODE_ATOMIC_CS,
  atomic_fetch_add = MLX5_OPCODE_ATOMIC_FA,
};

// READ and the atomics: the operations whose result comes back in a response, which an
// unreliable connection (UC) does not carry (IBA 9.8.1).
constexpr bool is_read_or_atomic(WrOpcode op) noexcept {
  return op == WrOpcode::rdma_read || op == WrOpcode::atomic_cmp_swap ||
         op == WrOpcode::atomic_fetch_add;
}

// SendWr::flags and the typed calls' flags: a set of send_flags, closed under |, & and ~, that
// no plain integer converts to (but a literal 0, the empty set, for brevity).
class SendFlags {
 public:
  constexpr SendFlags() noexcept = default;
  // `0` alone: a compile-time zero is the empty set; any other integer does not compile.
  consteval SendFlags(int zero) : bits_(0) {  // NOLINT(google-explicit-constructor)
    if (zero != 0) throw "SendFlags: only a literal 0 converts; use send_flags::*";
  }
  consteval SendFlags(unsigned zero) : bits_(0) {  // NOLINT(google-explicit-constructor)
    if (zero != 0) throw "SendFlags: only a literal 0 converts; use send_flags::*";
  }
  // The bits, for encoders and for code that stores or prints them.
  constexpr uint32_t bits() const noexcept { return bits_; }
  static constexpr SendFlags from_bits(uint32_t bits) noexcept { return SendFlags(bits, 0); }
  // Whether every flag of `f` is set.
  constexpr bool has(SendFlags f) const noexcept { return (bits_ & f.bits_) == f.bits_; }
  constexpr bool empty() const noexcept { return bits_ == 0; }
  constexpr explicit operator bool() const noexcept { return bits_ != 0; }

  friend constexpr SendFlags operator|(SendFlags a, SendFlags b) noexcept {
    return SendFlags(a.bits_ | b.bits_, 0);
  }
  friend constexpr SendFlags operator&(SendFlags a, SendFlags b) noexcept {
    return SendFlags(a.bits_ & b.bits_, 0);
  }
  constexpr SendFlags operator~() const noexcept { return SendFlags(~bits_ & kAll, 0); }
  constexpr SendFlags& operator|=(SendFlags f) noexcept { bits_ |= f.bits_; return *this; }
  constexpr SendFlags& operator&=(SendFlags f) noexcept { bits_ &= f.bits_; return *this; }
  friend constexpr bool operator==(SendFlags, SendFlags) noexcept = default;

 private:
  static constexpr uint32_t kAll = 0xf;
  constexpr SendFlags(uint32_t bits, int) noexcept : bits_(bits) {}
  uint32_t bits_ = 0;
};

// For test frameworks and logs: "SendFlags(5)". A template over the stream, so that this
// header needs only <iosfwd>.
template <class CharT, class Traits>
std::basic_ostream<CharT, Traits>& operator<<(std::basic_ostream<CharT, Traits>& os, SendFlags f) {
  return os << "SendFlags(" << f.bits() << ")";
}

namespace send_flags {
inline constexpr SendFlags none{};
inline constexpr SendFlags signaled = SendFlags::from_bits(1u << 0);     // request a CQE (CQ_UPDATE)
inline constexpr SendFlags solicited = SendFlags::from_bits(1u << 1);    // solicited event at the responder
inline constexpr SendFlags fence = SendFlags::from_bits(1u << 2);        // wait for prior READ/atomic responses
inline constexpr SendFlags inline_data = SendFlags::from_bits(1u << 3);  // copy the SGEs' bytes into the WQE
}  // namespace send_flags

// One scatter/gather element. `lkey` names the memory region that covers [addr, addr+length).
struct Sge {
  uint64_t addr = 0;
  uint32_t length = 0;
  uint32_t lkey = 0;
};

// A send-queue request. Fields that an opcode does not use are ignored.
struct SendWr {
  uint64_t wr_id = 0;
  WrOpcode opcode = WrOpcode::send;
  SendFlags flags;  // send_flags::*
  const Sge* sg_list = nullptr;
  uint32_t num_sge = 0;
  uint32_t imm_data = 0;     // host order; SEND_IMM and RDMA_WRITE_IMM
  uint64_t remote_addr = 0;  // RDMA and atomics (atomics: 8-byte aligned)
  uint32_t rkey = 0;         // RDMA and atomics
  // XRC initiator QPs (every opcode): the number of the XRC SRQ, on the responder's device,
  // that the message goes to (24 bits). It fills what was padding: the layout is unchanged.
  uint32_t remote_srqn = 0;
  uint64_t compare_add = 0;  // ATOMIC_CS: compare value; ATOMIC_FA: value to add
  uint64_t swap = 0;         // ATOMIC_CS: swap value
  // UD QPs (SEND and SEND_IMM): where the datagram goes. `av` is an address handle's address
  // vector (AddressHandle::av(), mlx5dv's mlx5_wqe_av), copied into the WQE's datagram
  // segment with the destination QP and its Q_Key. Null on an RC QP, and required on a UD one.
  const mlx5_wqe_av* av = nullptr;
  uint32_t remote_qpn = 0;
  uint32_t remote_qkey = 0;
};

// A receive-queue request.
struct RecvWr {
  uint64_t wr_id = 0;
  const Sge* sg_list = nullptr;
  uint32_t num_sge = 0;
};

// Completion::flags bits.
namespace wc_flags {
inline constexpr uint8_t with_imm = 1u << 0;   // imm_data is valid
inline constexpr uint8_t solicited = 1u << 1;  // the sender set SE
inline constexpr uint8_t with_inv = 1u << 2;   // imm_data holds the invalidated rkey (SEND_INV)
// UD receive: the buffer starts with the packet's 40-byte GRH (on RoCE v2 over IPv4, the IPv4
// header in its last 20 bytes), counted in byte_len, before the payload (IBV_WC_GRH).
inline constexpr uint8_t grh = 1u << 3;
}  // namespace wc_flags

// A decoded completion. 32 bytes; an array of them is what Cq::poll fills.
struct Completion {
  uint64_t wr_id;
  uint32_t byte_len;     // receive: bytes placed; RDMA READ: bytes read; atomics: 8; else 0
  uint32_t imm_data;     // host order, valid with wc_flags::with_imm
  uint32_t qp_num;       // local QP
  uint32_t src_qp;       // receive: the sender's QPN
  uint16_t wqe_counter;  // the device's WQE index (SQ: BB counter, RQ: WQE counter)
  uint8_t status;        // enum ibv_wc_status
  uint8_t opcode;        // enum ibv_wc_opcode
  uint8_t vendor_err;    // mlx5 vendor syndrome, errors only
  uint8_t flags;         // wc_flags::*
  uint8_t reserved[2];
};
static_assert(sizeof(Completion) == 32);

// What CompletionQueue::poll_lean and poll_each report: the fields most consumers read. Those
// who need the immediate, the QPNs or the flags use poll() and Completion.
struct LeanCompletion {
  uint64_t wr_id;
  uint32_t byte_len;  // as Completion::byte_len
  uint8_t status;     // enum ibv_wc_status
  uint8_t opcode;     // enum ibv_wc_opcode
  uint8_t reserved[2];
};
static_assert(sizeof(LeanCompletion) == 16);

}  // namespace rnicdv
