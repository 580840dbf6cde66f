// SPDX-License-Identifier: BSD-3-Clause
// The state behind a QueuePair. Public only so that the fast path (qp_inl.h, cq_inl.h) can be
// inlined into the application; nothing here is API.
//
// Send queue bookkeeping, in 64-byte basic blocks (BBs), all free-running 32-bit counters:
//
//   sq_tail          doorbell_pi                  sq_pi
//      |  the device's   |  built, not yet rung:        |
//      |  (DBR written)  |  staged (RTS) or withheld    |
//
//  * sq_pi        next free block; advanced by posters.
//  * doorbell_pi  the value last stored into the SQ doorbell record. The device owns
//                 [sq_tail, doorbell_pi); nothing at or past it has been announced by a
//                 doorbell.
//  * device_pi    end of the WQEs in the SQ the device may run: doorbell_pi, and on a
//                 scanning device (which may run a WQE before its doorbell) the staged ones
//                 too, so for one it moves before each WQE is written. A CQE naming a block
//                 at or past it is stale (retire_send_id) and dropped. Withheld WQEs are
//                 never included.
//  * sq_tail      first block not yet retired; advanced by the send CQ's poller when a CQE's
//                 wqe_counter names a WQE: that WQE and every earlier (unsignaled) one retire.
//  * [sw_begin, sw_end)  in ERR, work the driver completes itself with WR_FLUSH_ERR (withheld
//                 WRs, and WRs posted in ERR); delivered by the send CQ once sq_tail reaches
//                 sw_begin, i.e. after everything the device was given has been retired.
//
// sq_entries[start block] records each WQE's wr_id and size; a CQE's wqe_counter is the start
// block of the WQE it completes (rdma-core cq.c: wrid[wqe_counter & (wqe_cnt - 1)]).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>

#include "rnicdv/detail/spinlock.h"
#include "rnicdv/detail/srq_core.h"
#include "rnicdv/doorbell/send_doorbell.h"
#include "rnicdv/hw/device.h"
#include "rnicdv/qp_config.h"
#include "rnicdv/status.h"
#include "rnicdv/wqe/recv_wqe.h"
#include "rnicdv/wqe/segments.h"
#include "rnicdv/wqe/send_wqe.h"
#include "rnicdv/wqe/work_request.h"

namespace rnicdv::detail {

struct CqCore;
struct DeviceCore;
struct XrcdCore;

// What the send queue remembers about a WQE, stored at the WQE's first block.
struct SqEntry {
  uint64_t wr_id;
  uint8_t bbs;     // blocks the WQE spans; a software-completed entry spans one
  uint8_t opcode;  // MLX5_OPCODE_* (the opcode reported with a flush error)
  uint8_t kind;    // SqEntryKind
  uint8_t reserved[5];

  // A user WQE's entry, in two 8-byte stores (the second a constant for a typed call).
  void set(uint64_t id, uint8_t blocks, uint8_t mlx5_opcode) noexcept {
    wr_id = id;
    const uint64_t meta = uint64_t{blocks} | (uint64_t{mlx5_opcode} << 8);  // kind: kUserWqe
    std::memcpy(&bbs, &meta, sizeof meta);
  }
};
static_assert(sizeof(SqEntry) == 16 && offsetof(SqEntry, bbs) == 8);

enum SqEntryKind : uint8_t {
  kUserWqe = 0,
  // A signaled NOP the driver adds when software completions start while the device still
  // owns WQEs: its CQE (a flush error in ERR) retires everything before it. Never reported.
  kDrainMarker = 1,
};

// What posters read first: whether the lock-free fast path may run. It is a function of the
// state and of what was fixed at creation (threading model, a scanning device), published
// with every state change, under the post lock, after the state (QpCore::publish_state).
enum PostGate : uint8_t {
  // RTS on a device that fetches only up to the doorbell record, Threading::single or
  // single_poster: build into the SQ and ring, with no lock.
  kGateOpen = 0,
  // The same, Threading::thread_safe: under the post lock.
  kGateOpenUnderLock = 1,
  // Anything else (below RTS, SQD, ERR, a scanning device): the gated slow path.
  kGateSlow = 2,
  // A UD QP in RTS, as kGateOpen otherwise: only the typed datagram calls build without the
  // slow path (every other post takes it, and encode_wrs checks its datagram).
  kGateOpenDatagram = 3,
};

// A UD send WQE: ctrl + datagram segment (DS 4, the first block), and with one data segment
// DS 5.
inline constexpr uint8_t kDatagramHeaderDs = 1 + wqe::kDatagramDs;
inline constexpr uint8_t kDatagramSendDs = kDatagramHeaderDs + 1;

// The typed calls' prebuilt ctrl heads (QpCore::ctrl_heads): opcode, QPN and DS in place, the
// WQE index to patch in. The inline ones carry DS 0 (their size varies).
enum TypedHead : uint8_t {
  kHeadWrite,
  kHeadWriteImm,
  kHeadRead,
  kHeadSend,
  kHeadSendImm,
  kHeadFetchAdd,
  kHeadCompareSwap,
  kHeadWriteInline,
  kHeadSendInline,
  kHeadDatagram,
  kHeadDatagramImm,
  kHeadDatagramInline,
  kTypedHeads
};

// What a CQE did to its QP.
enum class Retired : uint8_t {
  report,  // a completion for the application
  silent,  // a drain marker's: retires earlier WQEs, reports nothing
  stale,   // names no WQE outstanding in this incarnation of the QP (e.g. before a RESET)
};

struct QpCore {
  QpCore() = default;
  QpCore(const QpCore&) = delete;
  QpCore& operator=(const QpCore&) = delete;
  ~QpCore();

  // ---- Fast path (qp_inl.h) ---------------------------------------------------------------
  Errc post_send(const SendWr* wrs, size_t count, size_t* bad_index, bool ring) noexcept;
  // Room for `bbs` more blocks at sq_pi: the producer's cached bound first, the poller's
  // sq_tail only when that says no (it moves the bound on).
  bool has_room(uint32_t bbs) noexcept {
    if (room_end - sq_pi >= bbs) [[likely]]
      return true;
    room_end = sq_tail.load(std::memory_order_acquire) + sq.bb_count;
    return room_end - sq_pi >= bbs;
  }
  // The typed calls (qp_typed_inl.h): builds `op`'s WQE (a fixed layout whose ctrl head is
  // published last) at sq_pi, then bookkeeps and rings (if `ring`) as post_ready does. The
  // caller checked the gate and the room.
  template <class Op>
  void post_typed_ready(const Op& op, bool ring) noexcept;
  // post_send of one WR that a fixed layout covers (one non-empty SGE, not inline): built as
  // the typed calls build, with the opcode read at run time. False, with nothing written, for
  // any other WR (post_ready then builds it, or reports what is wrong with it).
  bool post_one_fixed(const SendWr& wr, bool ring) noexcept;
  // The same for an inline SEND or WRITE of one SGE (qp_typed_inl.h: the typed inline
  // builder). False, with nothing written, for anything else.
  bool post_one_inline(const SendWr& wr, bool ring) noexcept;
  // After a WQE of `ds` units at sq_pi whose ctrl head is `head`: sq_pi = `next`, and the
  // doorbell for it and everything staged (ring) or the bookkeeping of a staged WQE.
  void commit_one(uint8_t* wqe, uint64_t head, uint8_t ds, uint32_t next, bool ring) noexcept;
  // The RTS/SQD path: build into the SQ and, if `ring`, ring once for everything unrung.
  // Flattened: the WQE encoder is inlined into it whatever the compiler's heuristics say.
  // post_ready out of line, for post_send: the flattened encoder loop needs most registers,
  // and inlined into post_send it would make every one-WR post save and restore them.
  Errc post_ready_outlined(const SendWr* wrs, size_t count, size_t* bad_index,
                             bool ring) noexcept;
  [[gnu::always_inline, gnu::flatten]] Errc post_ready(const SendWr* wrs, size_t count,
                                                       size_t* bad_index, bool ring) noexcept;
  // The one encode loop of every post path (post_ready, post_withheld, post_ready_scanning):
  // builds WRs into `ring` (the SQ, or the shadow ring of the same layout) from sq_pi on,
  // within the room up to sq_tail + bb_count, and records each in sq_entries. It stops at the
  // first WR that fails (*err says why) and returns how many were built; sq_pi, last_wqe_pi,
  // last_ds and unrung cover them. Publish::before_bytes (a scanning device, which may run a
  // WQE as soon as its ctrl segment lands) writes each WQE's sq_entries slot, sq_pi and
  // device_pi first, then a release fence, then the bytes; after_bytes writes the slot after.
  enum class Publish : uint8_t { after_bytes, before_bytes };
  template <Publish P, bool Xrc = false>
  [[gnu::always_inline]] size_t encode_wrs(const wqe::SqRing& ring, const SendWr* wrs,
                                           size_t count, Errc* err) noexcept;
  // One WQE: encode_send_wqe, or encode_xrc_send_wqe on an XRC initiator.
  template <bool Xrc>
  [[gnu::always_inline]] Errc encode_one(const wqe::SqRing& ring, uint32_t pi, uint32_t free_bbs,
                                         const SendWr& wr, wqe::EncodedWqe* enc) noexcept;
  void ring_unrung() noexcept;
  void ring_send() noexcept;
  Errc post_recv(const RecvWr* wrs, size_t count, size_t* bad_index) noexcept;
  // Poller side: retire the WQE a CQE names and fill `out` when it is to be reported.
  Retired retire_send(const mlx5_cqe64* cqe, Completion* out) noexcept;
  // The same, giving only the WR's wr_id (the lean poll decodes the rest itself).
  Retired retire_send_id(const mlx5_cqe64* cqe, uint64_t* wr_id) noexcept;
  Retired retire_recv(const mlx5_cqe64* cqe, Completion* out) noexcept;
  [[gnu::cold]] Retired retire_xrc_recv(const mlx5_cqe64* cqe, Completion* out) noexcept;

  // ---- Slow paths (qp_post.cc) ------------------------------------------------------------
  // Whenever the gate is not open (any state but RTS, a thread_safe QP, a scanning device),
  // reached from post_send: takes the lock where the threading model needs it, then
  // post_gated.
  Errc post_send_slow(const SendWr* wrs, size_t count, size_t* bad_index, bool ring) noexcept;
  void ring_send_slow() noexcept;
  // post_recv in RESET: bad_state (IBA C10-22), or invalid_argument on a moved-from handle.
  [[gnu::cold]] Errc post_recv_in_reset(size_t count, size_t* bad_index) noexcept;
  // With the post lock held (or on the owner thread): dispatch on the state.
  Errc post_gated(const SendWr* wrs, size_t count, size_t* bad_index, bool ring) noexcept;
  Errc post_in_state(const SendWr* wrs, size_t count, size_t* bad_index, bool ring) noexcept;
  // post_ready, or post_ready_scanning on a scanning device (RTS and SQD, lock held).
  Errc post_ready_any(const SendWr* wrs, size_t count, size_t* bad_index, bool ring) noexcept;
  // post_ready for a scanning device (qp_post.cc): entry and device_pi first, then the WQE.
  Errc post_ready_scanning(const SendWr* wrs, size_t count, size_t* bad_index,
                           bool ring) noexcept;
  Errc post_withheld(const SendWr* wrs, size_t count, size_t* bad_index) noexcept;
  Errc post_flushed(const SendWr* wrs, size_t count, size_t* bad_index) noexcept;
  void ring_send_gated() noexcept;
  // QueuePair::abort_staged; qp_post.cc.
  Result<uint32_t> abort_staged() noexcept;
  // Delivers software completions (send CQ poller; called with the CQ's software lock held).
  int poll_software(Completion* out, int max) noexcept;

  // ---- Control path (qp_control.cc) -------------------------------------------------------
  Status modify(const hw::QpAttr& attr, uint32_t mask);
  void on_async_error(hw::AsyncEventType type);
  // The send or receive CQ's poller found an error CQE for this QP (poller thread).
  [[gnu::cold]] void on_error_completion() noexcept;
  void follow_device_to_error_locked() noexcept;
  // The flush: with post_lock held and the device already in RTS.
  void release_withheld_locked() noexcept;
  // Stores the state (release) and then the post gate that follows from it. Release: a
  // poster that finds the gate open (acquire) also finds everything done before, the flush's
  // doorbell among it (docs/driver.md, "Threading models").
  void publish_state(hw::QpState s) noexcept {
    state.store(s, std::memory_order_release);
    gate.store(s == hw::QpState::rts ? rts_gate : kGateSlow, std::memory_order_release);
  }
  // The gate in RTS, from what was fixed at creation (qp_control.cc); kept in rts_gate.
  PostGate gate_in_rts() const noexcept;
  void enter_error_locked(hw::QpState to) noexcept;
  void reset_locked() noexcept;
  // Destroys the device QP and hands this core to its CQs' graveyards.
  static void destroy(std::unique_ptr<QpCore> core) noexcept;
  // What a moved-from QueuePair points at: a core with no QP, in RESET, whose gate never
  // opens; never written, never destroyed (qp.cc).
  static QpCore* moved_from() noexcept;
  bool is_moved_from() const noexcept { return this == moved_from(); }

  bool locks_posts() const noexcept { return threading != Threading::single; }
  wqe::SqRing build_ring() const noexcept { return shadow.buf ? shadow : sq; }

  // ---- Fixed at creation -------------------------------------------------------------------
  uint32_t qpn = 0;
  Threading threading = Threading::thread_safe;
  EarlyPost early_post = EarlyPost::in_place;
  // The device may run valid-looking WQEs past the doorbell record (DeviceProfile::
  // fetches_beyond_dbr): every WQE's sq_entries slot and device_pi are published before its
  // bytes reach the SQ, so that its CQE can never arrive before the poller knows it.
  bool scanning_device = false;
  uint8_t sig_all_bits = 0;  // MLX5_WQE_CTRL_CQ_UPDATE when sq_sig_all
  PostGate rts_gate = kGateSlow;  // gate_in_rts(); never opens on a moved-from core
  // A UD QP: every WR carries a datagram (SendWr::av). Its gate in RTS is kGateOpenDatagram,
  // so post_send takes the gated path, where encode_wrs checks it; the typed calls' fixed RC
  // layouts are never built for it, and the typed datagram calls' only for it.
  bool datagram = false;
  // XRC: an initiator, whose WQEs carry the remote SRQ (wqe::encode_xrc_send_wqe: encode_wrs
  // dispatches on this; its gate never opens, so the typed layouts are never built for it);
  // or a target, with neither queue: its posts are refused, and its receives are retired
  // through the XRC SRQ their CQE names (retire_xrc_recv).
  bool xrc = false;
  bool xrc_target = false;
  // A UC QP: SEND and RDMA WRITE only. Its gate opens as RC's: encode_wrs refuses a READ or
  // an atomic in RTS (the typed calls' fixed layouts leave them to it), post_gated below RTS
  // and in ERR, before anything is built.
  bool unreliable = false;
  wqe::SqLimits limits;
  wqe::SqRing sq;      // the ring the device reads
  wqe::SqRing shadow;  // EarlyPost::shadow: the driver's ring; buf null otherwise
  uint32_t sq_mask = 0;
  __be32* dbrec = nullptr;  // [MLX5_RCV_DBR], [MLX5_SND_DBR]
  SqEntry* sq_entries = nullptr;
  wqe::RqRing rq;
  uint32_t rq_mask = 0;
  uint32_t rq_max_sge = 0;
  uint64_t* rq_wr_ids = nullptr;
  SrqCore* srq = nullptr;                // receives from a shared receive queue
  std::shared_ptr<SrqCore> srq_ref;      // keeps it alive while this QP lives
  doorbell::SendDoorbell doorbell;

  // ---- Producer side: posting threads -----------------------------------------------------
  alignas(64) std::atomic<uint8_t> gate{kGateSlow};  // PostGate
  uint32_t sq_pi = 0;
  // sq_tail + sq.bb_count as this producer last read it: the SQ has room up to here. It only
  // ever lags the real bound (the poller only moves sq_tail forward), so it is never wrong to
  // trust it; it is refreshed when it says the queue is full.
  uint32_t room_end = 0;
  // The QPN's bytes of every ctrl head this QP writes (wqe::ctrl_qpn_bits), and
  // sq_sig_all's bit in the second half of its ctrl segments (wqe::ctrl_rest).
  uint64_t ctrl_qpn_bits = 0;
  uint64_t ctrl_rest_sig_all = 0;
  uint64_t ctrl_heads[kTypedHeads] = {};  // TypedHead
  uint32_t unrung = 0;          // WRs built since the last doorbell (staged or withheld)
  uint32_t last_wqe_pi = 0;     // start block of the newest of them
  uint8_t last_ds = 0;          // and its size in 16-byte units
  bool ever_rts = false;        // the device may own WQEs of this incarnation (since RESET)
  bool software_flush = false;  // in ERR: posts complete in software from sw_begin on
  bool device_failed = false;   // DEVICE_FATAL: nothing will complete any more
  Spinlock post_lock;
  uint32_t rq_head = 0;
  Spinlock rq_lock;

  // ---- Shared between posters, the flush and pollers -----------------------------------
  std::atomic<hw::QpState> state{hw::QpState::reset};
  std::atomic<uint32_t> doorbell_pi{0};
  std::atomic<uint32_t> device_pi{0};
  std::atomic<uint32_t> sw_begin{0};
  std::atomic<uint32_t> sw_end{0};
  std::atomic<uint32_t> withheld{0};
  std::atomic<uint32_t> rq_posted{0};

  // ---- Consumer side: the CQ pollers ------------------------------------------------------
  // Everything a poller reads and writes to retire a CQE, but for device_pi (the posters') and
  // the entry itself, in this one line: the two tails and the poller's own copies of the
  // geometry fixed at creation (posters read theirs from the lines above, so a poller on
  // another thread never shares a written line with them for these). A CQ with many QPs
  // misses on one line per QP here instead of one for the geometry and one for the tails.
  alignas(64) std::atomic<uint32_t> sq_tail{0};
  std::atomic<uint32_t> rq_tail{0};
  SqEntry* poll_sq_entries = nullptr;  // sq_entries
  uint32_t poll_sq_mask = 0;           // sq_mask
  uint32_t poll_rq_mask = 0;           // rq_mask
  uint64_t* poll_rq_wr_ids = nullptr;  // rq_wr_ids
  SrqCore* poll_srq = nullptr;         // srq
  // Link in the send CQ's list of QPs with software completions (its software_lock).
  QpCore* software_next = nullptr;
  bool on_software_list = false;

  // ---- Control path -------------------------------------------------------------------------
  alignas(64) std::mutex control_mutex;  // modify, async events, destroy
  std::shared_ptr<DeviceCore> device;
  std::shared_ptr<hw::Pd> pd;
  std::shared_ptr<CqCore> send_cq;  // null on an XRC target
  std::shared_ptr<CqCore> recv_cq;
  std::shared_ptr<XrcdCore> xrcd;   // an XRC target's domain, held open while it lives
  std::atomic<uint8_t> port{1};     // the port its last INIT transition named
  std::unique_ptr<hw::Qp> hw_qp;
  hw::QpCaps granted;
  std::unique_ptr<SqEntry[]> sq_entry_storage;
  std::unique_ptr<uint64_t[]> rq_wr_id_storage;
  uint8_t* shadow_storage = nullptr;  // 64-byte aligned; freed by ~QpCore
  // Guarded by the device's mutex (async events are dispatched under it).
  void (*comm_est_fn)(void*) = nullptr;
  void* comm_est_ctx = nullptr;
  bool comm_est_seen = false;
};

}  // namespace rnicdv::detail
