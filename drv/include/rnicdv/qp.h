// SPDX-License-Identifier: BSD-3-Clause
// rnicdv::QueuePair: an RC queue pair whose WQEs the driver writes straight into the send
// queue the HCA reads, with early posting in RTR (docs/driver.md, "Early posting").
//
// | QP state  | post_recv          | post_send                                          |
// |-----------|--------------------|----------------------------------------------------|
// | RESET     | Errc::bad_state    | Errc::bad_state                                    |
// | INIT      | accepted           | Errc::bad_state                                    |
// | RTR       | accepted           | accepted and withheld (EarlyPost::strict: bad_state)|
// | RTS       | accepted           | accepted, doorbell rung                            |
// | SQD       | accepted           | accepted, runs after the QP returns to RTS         |
// | SQE / ERR | accepted, flushed  | accepted, completed with IBV_WC_WR_FLUSH_ERR       |
//
// Withheld work is released by the move to RTS, whatever causes it (modify(), the CM's
// ESTABLISHED, a COMM_EST forwarded by the connection layer): one doorbell-record store and
// one doorbell for the whole batch. A move to ERR before that completes every withheld WR
// with WR_FLUSH_ERR (unsignaled ones too); a move to RESET discards them.
//
// Accepting sends in RTR is an explicit extension of IB verbs (IBA C10-29 requires an
// immediate error); EarlyPost::strict keeps the spec's behaviour.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "rnicdv/doorbell/send_doorbell.h"
#include "rnicdv/hw/device.h"
#include "rnicdv/qp_config.h"
#include "rnicdv/status.h"
#include "rnicdv/wqe/work_request.h"

namespace rnicdv {

class AddressHandle;

namespace detail {
struct DeviceCore;
struct QpCore;
}  // namespace detail

// The destination QPN of every datagram sent to a multicast group (IBA 10.5.2.3).
inline constexpr uint32_t kMulticastQpn = 0xFFFFFF;

// A multicast group's GID on RoCE v2, as rdma_cm makes it: the IPv4-mapped form of an IPv4
// group ("239.1.2.3" -> ::ffff:239.1.2.3), an IPv6 group itself ("ff0e::1:2"). A device joins
// groups of its own IP version. Errc::invalid_argument, naming the text, for what is not an
// address in 224.0.0.0/4 or ff00::/8.
Result<hw::Gid> multicast_gid(const std::string& address);

// A moved-from QueuePair holds no QP. Its posts return Errc::invalid_argument and write
// nothing, modify() and the to_*() calls fail with invalid_argument and a message saying so,
// state() reports RESET, qpn() 0, withheld() 0, and its other accessors their defaults.
class QueuePair {
 public:
  QueuePair(QueuePair&&) noexcept;
  QueuePair& operator=(QueuePair&&) noexcept;
  // Destroying a QP with work outstanding is allowed: the device QP is destroyed, withheld
  // work is discarded, and completions still in a CQ for it are dropped and counted there.
  ~QueuePair();

  // ---- Fast path ------------------------------------------------------------------------
  // Builds every WR of `wrs` and rings one doorbell for the batch. Stops at the first bad WR:
  // the WRs before it are posted (and rung), that one and the rest are not; `*bad_index`
  // (if non-null) receives its index. Returns Errc::ok or that WR's error.
  Errc post_send(std::span<const SendWr> wrs, size_t* bad_index = nullptr) noexcept;
  Errc post_send(const SendWr& wr) noexcept { return post_send(std::span(&wr, 1)); }

  // Two-step posting: stage_send() builds one WQE without a doorbell; ring_send() rings once
  // for everything staged since the last ring. (In RTR both withhold; ring_send is a no-op.)
  Errc stage_send(const SendWr& wr) noexcept;
  void ring_send() noexcept;
  // Takes back every WR built since the last doorbell that the device has not been given, as
  // ibv_wr_abort does: the stage_* calls' WQEs in RTS, and in RTR the early-posted (withheld)
  // ones too. None of them runs, completes or is flushed, and their room in the send queue is
  // free again. Returns how many were taken back (0 when there are none, and in any state
  // where nothing is held back). Call it from the thread that posts (Threading::single and
  // single_poster). Errors: bad_state when the device may already have seen them (a device
  // that fetches WQEs beyond the doorbell record, with them in its SQ): they stay posted, and
  // ring_send() sends them; invalid_argument on a moved-from QueuePair.
  Result<uint32_t> abort_staged() noexcept;

  // ---- Typed fast path (docs/driver.md, "Typed post calls") -------------------------------
  // One call per operation, with its arguments in registers: no SendWr, no opcode table, no
  // SGE loop. Each has exactly post_send's semantics (the early-post gate, the error codes,
  // the threading models, the doorbell modes and BlueFlame, completions), and costs about
  // what its stores cost when the QP is in RTS. `flags` are send_flags (signaled, solicited,
  // fence); `sge` is copied. post_* rings the doorbell for this WQE and every staged one;
  // stage_* builds it without a doorbell, and ring_send() rings once for the batch.
  Errc post_write(uint64_t wr_id, const Sge& sge, uint64_t remote_addr, uint32_t rkey,
                  SendFlags flags) noexcept;
  Errc post_write_imm(uint64_t wr_id, const Sge& sge, uint64_t remote_addr, uint32_t rkey,
                      uint32_t imm, SendFlags flags) noexcept;
  Errc post_read(uint64_t wr_id, const Sge& sge, uint64_t remote_addr, uint32_t rkey,
                 SendFlags flags) noexcept;
  Errc post_message(uint64_t wr_id, const Sge& sge, SendFlags flags) noexcept;
  Errc post_message_imm(uint64_t wr_id, const Sge& sge, uint32_t imm, SendFlags flags) noexcept;
  // Atomics: `result` is the local 8 bytes that receive the original remote value;
  // remote_addr must be 8-byte aligned.
  Errc post_fetch_add(uint64_t wr_id, const Sge& result, uint64_t remote_addr, uint32_t rkey,
                      uint64_t add, SendFlags flags) noexcept;
  Errc post_compare_swap(uint64_t wr_id, const Sge& result, uint64_t remote_addr, uint32_t rkey,
                         uint64_t compare, uint64_t swap, SendFlags flags) noexcept;
  // The payload is copied into the WQE (up to caps().max_inline_data bytes): the buffer needs
  // no registration and may be reused when the call returns.
  Errc post_write_inline(uint64_t wr_id, const void* data, uint32_t length, uint64_t remote_addr,
                         uint32_t rkey, SendFlags flags) noexcept;
  Errc post_message_inline(uint64_t wr_id, const void* data, uint32_t length,
                        SendFlags flags) noexcept;

  Errc stage_write(uint64_t wr_id, const Sge& sge, uint64_t remote_addr, uint32_t rkey,
                   SendFlags flags) noexcept;
  Errc stage_write_imm(uint64_t wr_id, const Sge& sge, uint64_t remote_addr, uint32_t rkey,
                       uint32_t imm, SendFlags flags) noexcept;
  Errc stage_read(uint64_t wr_id, const Sge& sge, uint64_t remote_addr, uint32_t rkey,
                  SendFlags flags) noexcept;
  Errc stage_message(uint64_t wr_id, const Sge& sge, SendFlags flags) noexcept;
  Errc stage_message_imm(uint64_t wr_id, const Sge& sge, uint32_t imm, SendFlags flags) noexcept;
  Errc stage_fetch_add(uint64_t wr_id, const Sge& result, uint64_t remote_addr, uint32_t rkey,
                       uint64_t add, SendFlags flags) noexcept;
  Errc stage_compare_swap(uint64_t wr_id, const Sge& result, uint64_t remote_addr, uint32_t rkey,
                          uint64_t compare, uint64_t swap, SendFlags flags) noexcept;
  Errc stage_write_inline(uint64_t wr_id, const void* data, uint32_t length,
                          uint64_t remote_addr, uint32_t rkey, SendFlags flags) noexcept;
  Errc stage_message_inline(uint64_t wr_id, const void* data, uint32_t length,
                         SendFlags flags) noexcept;

  // Datagrams on a UD QP (the typed counterpart of post_send with SendWr::av): one SEND, or
  // SEND with immediate, of `sge` (or `length` bytes at `data`, copied into the WQE) to QP
  // `remote_qpn` with Q_Key `qkey` at the address `ah` holds; kMulticastQpn and a group's
  // address handle send to a multicast group. One WQE of two blocks, built in place in RTS
  // (Threading::single and single_poster); otherwise exactly post_send's path, errors and
  // early-post gate. On a QP that is not UD: invalid_argument. `ah` need only outlive the
  // call: its address vector is copied into the WQE.
  Errc post_datagram(uint64_t wr_id, const Sge& sge, const AddressHandle& ah, uint32_t remote_qpn,
                     uint32_t qkey, SendFlags flags) noexcept;
  Errc post_datagram_imm(uint64_t wr_id, const Sge& sge, const AddressHandle& ah,
                         uint32_t remote_qpn, uint32_t qkey, uint32_t imm,
                         SendFlags flags) noexcept;
  Errc post_datagram_inline(uint64_t wr_id, const void* data, uint32_t length,
                            const AddressHandle& ah, uint32_t remote_qpn, uint32_t qkey,
                            SendFlags flags) noexcept;
  Errc stage_datagram(uint64_t wr_id, const Sge& sge, const AddressHandle& ah,
                      uint32_t remote_qpn, uint32_t qkey, SendFlags flags) noexcept;
  Errc stage_datagram_imm(uint64_t wr_id, const Sge& sge, const AddressHandle& ah,
                          uint32_t remote_qpn, uint32_t qkey, uint32_t imm,
                          SendFlags flags) noexcept;
  Errc stage_datagram_inline(uint64_t wr_id, const void* data, uint32_t length,
                             const AddressHandle& ah, uint32_t remote_qpn, uint32_t qkey,
                             SendFlags flags) noexcept;

  // Receive side: builds receive WQEs and updates the RQ doorbell record.
  Errc post_recv(std::span<const RecvWr> wrs, size_t* bad_index = nullptr) noexcept;
  Errc post_recv(const RecvWr& wr) noexcept { return post_recv(std::span(&wr, 1)); }
  // One receive of one SGE (on a UD QP, the first 40 bytes take the GRH).
  Errc post_recv(uint64_t wr_id, const Sge& sge) noexcept {
    RecvWr wr;
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    return post_recv(std::span(&wr, 1));
  }

  // ---- Control path ---------------------------------------------------------------------
  // One IB state transition. Moving to RTS releases withheld work; moving to ERR completes it
  // with flush errors; RESET discards it. Errors name the QP, the transition and the reason.
  Status modify(const hw::QpAttr& attr, uint32_t mask);

  // Conveniences for the usual RC bring-up (out-of-band exchange of QpEndpoint, as perftest).
  // A UC QP comes up the same way; the reliability attributes (max_dest_rd_atomic,
  // min_rnr_timer, timeout, retry_cnt, rnr_retry, max_rd_atomic), which UC has not, are left
  // out of its transitions.
  Status to_init(uint32_t remote_access = hw::access::remote_write | hw::access::remote_read |
                                          hw::access::remote_atomic);
  // The same on port `port` of a device with several (DeviceInfo::ports): the QP sends and
  // receives through that port, and local_endpoint() gives that port's GID. A port the device
  // has not is refused by it, naming the port.
  Status to_init(uint32_t remote_access, uint8_t port);
  Status to_rtr(const QpEndpoint& remote, hw::Mtu mtu, uint8_t max_dest_rd_atomic = 16,
                uint8_t min_rnr_timer = 12);
  Status to_rts(uint32_t sq_psn, uint8_t timeout = 14, uint8_t retry_cnt = 7, uint8_t rnr_retry = 7,
                uint8_t max_rd_atomic = 16);
  Status to_error();
  Status reset();
  // The QP's send rate limit, in any state (ibv_modify_qp_rate_limit; hw::RateLimit): its
  // request packets leave at no more than `kbps` kb/s of Ethernet frames, at most
  // `max_burst_bytes` at once (0: the device's default). kbps 0 lifts the limit. A rate
  // outside DeviceCaps' rate_limit_min_kbps..rate_limit_max_kbps is refused, naming both.
  Status set_rate_limit(uint32_t kbps, uint32_t max_burst_bytes = 0,
                        uint16_t typical_pkt_bytes = 0);
  // UD multicast (ibv_attach_mcast): from attach on, the QP receives the datagrams sent to
  // the group `group` names (RoCE v2: an IPv4 group's IPv4-mapped address, an IPv6 group's
  // address, multicast_gid()), in any state that receives, until detach or its destruction.
  // A datagram to a group is sent with an AddressHandle to that GID and remote_qpn
  // kMulticastQpn. Refused: a QP that is not UD, a GID that is not a group's, a group of the
  // other IP version than the device's, a detach of a group not attached (invalid_argument), and
  // more than DeviceCaps' max_mcast_* allow (no_resources).
  Status attach_multicast(const hw::Gid& group);
  Status detach_multicast(const hw::Gid& group);

  hw::QpState state() const noexcept;  // the driver's view
  uint32_t qpn() const noexcept;
  QpEndpoint local_endpoint(uint32_t psn) const;
  EarlyPost early_post() const noexcept;                  // resolved (never `automatic`)
  doorbell::DoorbellMode doorbell_mode() const noexcept;  // resolved
  Threading threading() const noexcept;
  const hw::QpCaps& caps() const noexcept;  // granted
  uint32_t withheld() const noexcept;       // WRs posted in RTR and not yet released

  // Called (on the thread that processes async events) when the device raises COMM_EST for
  // this QP. The connection layer installs this; without one, the driver only records it.
  // With `where_learnt`, also at once on the thread where the device learns it (a backend
  // that can call back, hw::Qp::set_comm_est_notifier: the simulated HCA's device thread, or
  // the real-device backend's event thread):
  // `fn` must then be thread-safe, and `ctx` valid until the handler is replaced or a token
  // `fn` looks up.
  void set_comm_est_handler(void (*fn)(void* ctx), void* ctx, bool where_learnt = false);

  detail::QpCore* core() { return core_; }

 private:
  friend class Device;
  explicit QueuePair(std::unique_ptr<detail::QpCore> core);
  // Owned, or detail::QpCore::moved_from() (never null): a moved-from handle points at an
  // immortal core whose gate is always closed, so the fast path needs no null test.
  detail::QpCore* core_;
};

}  // namespace rnicdv

#include "rnicdv/detail/qp_inl.h"        // IWYU pragma: export
#include "rnicdv/detail/qp_typed_inl.h"  // IWYU pragma: export
