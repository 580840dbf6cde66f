// SPDX-License-Identifier: BSD-3-Clause
// A queue pair as the device sees it: its rings and doorbell record, the IB state, and the
// three RC engines that work on it (as in rxe): the requester turns SQ WQEs into request
// packets, the completer turns responses into send completions, and the responder executes
// inbound requests and answers them.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "cq.h"
#include "faults/spec.h"
#include "pinned_memory.h"
#include "rc/pacer.h"
#include "rnicdv/hw/device.h"
#include "rnicdv/wqe/decode.h"
#include "uar.h"
#include "wire/wire.h"

namespace rnicdv::sim {

// A resolved local buffer: host memory the device may touch, checked against an MR.
struct LocalSeg {
  uint8_t* ptr;
  uint32_t len;
  PinRef pin;  // the region's pages (host_access.h); none for the device's own memory
};

enum class WqeKind : uint8_t { nop, send, write, read, atomic };

// An SQ WQE the device has fetched and not yet completed.
struct SendWqe {
  uint32_t pi = 0;  // first BB (free-running); the CQE's wqe_counter is pi & 0xffff
  uint8_t bbs = 1;
  uint8_t mlx5_opcode = 0;
  WqeKind kind = WqeKind::nop;
  bool signaled = false;
  bool solicited = false;
  bool fenced = false;
  bool with_imm = false;
  uint8_t error = 0;  // MLX5_CQE_SYNDROME_* to complete with; 0 = none
  uint32_t imm = 0;   // host order
  uint64_t length = 0;
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  uint64_t swap_add = 0;
  uint64_t compare = 0;
  // UD: the destination from the WQE's address vector.
  uint32_t ud_dest_qpn = 0;
  uint32_t ud_qkey = 0;
  IpAddress ud_dest;
  uint8_t ud_tclass = 0;      // the AV's traffic class and hop limit: the frame's TOS and TTL
  uint8_t ud_hop_limit = 64;
  uint32_t ud_flow_label = 0;  // the AV's, carried by an IPv6 header
  uint32_t xrc_srqn = 0;       // XRC: the responder's SRQ, carried in every packet's XRCETH
  std::vector<LocalSeg> segs;        // gather (SEND/WRITE) or scatter (READ/atomic) list
  std::vector<uint8_t> inline_data;  // backing store of inline segments

  // Transport progress.
  bool started = false;  // PSNs assigned, first packet sent
  uint32_t first_psn = 0;
  uint32_t span = 0;       // PSNs used: request packets, or READ response packets
  uint32_t pkts_sent = 0;  // SEND/WRITE: request packets sent; READ/atomic: 0 or 1
  uint32_t resp_pkts = 0;  // READ: response packets placed
  bool atomic_done = false;

  uint32_t last_psn() const;
  // Nothing (more) to transmit: every request packet is out, or, for a READ or atomic that
  // was rewound, every response has arrived anyway.
  bool fully_sent() const {
    switch (kind) {
      case WqeKind::send:
      case WqeKind::write:
        return pkts_sent >= span;
      case WqeKind::read:
        return pkts_sent != 0 || resp_pkts >= span;
      case WqeKind::atomic:
        return pkts_sent != 0 || atomic_done;
      case WqeKind::nop:
        break;
    }
    return true;
  }
  bool is_rd_atomic() const { return kind == WqeKind::read || kind == WqeKind::atomic; }
};

// A receive WQE being filled by a multi-packet SEND.
struct RecvInProgress {
  bool active = false;
  uint32_t counter = 0;  // RQ WQE counter of this WQE
  std::vector<LocalSeg> segs;
  uint64_t capacity = 0;
  uint64_t placed = 0;
};

// The RDMA WRITE being placed, between its FIRST and LAST packets.
struct WriteInProgress {
  bool active = false;
  uint8_t* dst = nullptr;
  PinRef pin;
  uint64_t total = 0;
  uint64_t placed = 0;
};

// Responder resources (IBA 9.7.5.1.6 "responder resources"): one per READ or atomic that
// was executed, so a duplicate can be answered. max_dest_rd_atomic entries, oldest replaced.
struct RespResource {
  enum class Kind : uint8_t { empty, read, atomic };
  Kind kind = Kind::empty;
  uint32_t first_psn = 0;
  uint32_t span = 0;
  uint64_t va = 0;
  uint32_t rkey = 0;
  uint32_t length = 0;
  uint64_t atomic_orig = 0;
  uint32_t msn = 0;
  // The PD the READ's region was checked against when it executed. An XRC target takes the PD
  // of each message's SRQ, so a later message may have changed the QP's by the time the
  // response (or a repeat of it) is sent.
  uint32_t pdn = 0;
};

// Something the responder still has to put on the wire, in PSN order: an ACK/NAK, a READ
// response stream or an atomic acknowledgment.
struct RespJob {
  enum class Kind : uint8_t { ack, read, atomic_ack };
  Kind kind = Kind::ack;
  uint32_t psn = 0;
  uint8_t syndrome = 0;  // AETH syndrome (ACK/NAK)
  uint32_t msn = 0;
  // READ response stream.
  uint64_t va = 0;
  uint32_t rkey = 0;
  uint32_t length = 0;  // bytes of this stream
  uint32_t npkts = 0;
  uint32_t next_pkt = 0;
  uint32_t pdn = 0;  // the PD each packet's region is checked against (RespResource::pdn)
  uint64_t atomic_orig = 0;
};

struct QpCounters {
  uint64_t uar_doorbells = 0;
  uint64_t sq_dbr_advances = 0;
  uint64_t rq_dbr_advances = 0;
  uint64_t wqes_executed = 0;
  uint64_t retransmits = 0;
  uint64_t timeouts = 0;
  uint64_t rnr_naks_rx = 0;
  uint64_t rnr_naks_tx = 0;
  uint64_t naks_rx = 0;
  uint64_t naks_tx = 0;
  uint64_t duplicates_rx = 0;
  uint64_t packets_tx = 0;
  uint64_t packets_rx = 0;
  uint64_t rx_dropped = 0;
};

struct SrqObj;

// The state of a QP's RC roles, each written by its own role (as rxe keeps qp->req, qp->comp
// and qp->resp): the requester turns fetched WQEs into request packets, the completer retires
// them from responses and runs the retransmit timer, the responder executes inbound requests.
struct RequesterState {   // rc/requester.cc, rc/retransmit.cc
  uint32_t wq_send = 0;   // first WQE record not fully sent
  uint32_t next_psn = 0;  // PSN the next new WQE gets
  uint32_t pkts_since_ack_req = 0;
  uint64_t rnr_deadline = 0;  // 0 = not waiting after an RNR NAK
  uint64_t pace_deadline = 0;  // 0 = not held back by the rate limit (QpObj::pacer)
};

struct CompleterState {   // rc/completer.cc, rc/retransmit.cc
  uint32_t wq_head = 0;   // oldest WQE record not completed
  uint32_t comp_psn = 0;  // oldest PSN not acknowledged
  uint8_t retry_left = 0;
  uint8_t rnr_left = 0;
  uint64_t retx_deadline = 0;  // 0 = timer not armed
  uint32_t gap_retry_psn = 0;  // go-back-N already started from this PSN after a gap
  bool gap_retry_armed = false;
  bool sq_drained_raised = false;
};

struct ResponderState {       // rc/responder.cc, rc/responder_tx.cc
  uint32_t epsn = 0;          // next expected request PSN
  uint32_t msn = 0;           // message sequence number (24 bits)
  bool nak_seq_sent = false;  // one NAK per PSN gap (IBA 9.7.5.1.2 / rxe class B)
  uint8_t cur_op = 0;         // 0, or the kind (send/write) of a message in progress
  // UC (rc/responder_uc.cc): a message lost a packet or was refused; every packet until the
  // next FIRST or ONLY is dropped.
  bool uc_dropping = false;
  RecvInProgress recv;
  WriteInProgress write;
  std::vector<RespResource> resources;
  uint32_t res_next = 0;
  std::deque<RespJob> resp_queue;
  bool comm_est_raised = false;
  // wr status= (faults/schedule.h): the request message the fault schedule was last asked
  // about, by its first PSN, and the status it chose for it. A retransmission of that message
  // gets the same answer and is not counted again.
  bool fault_asked = false;
  uint32_t fault_psn = 0;
  std::optional<faults::ChosenStatus> fault;
};

struct QpObj {
  size_t slot = 0;  // index in Hca::qps_ (slots.h)
  hw::QpType type = hw::QpType::rc;
  uint32_t qpn = 0;
  uint32_t pdn = 0;
  uint32_t user_index = 0;
  CqObj* send_cq = nullptr;
  CqObj* recv_cq = nullptr;
  SrqObj* srq = nullptr;  // receives come from this shared receive queue (srq.h)
  // An XRC target: its domain. `srq` and `pdn` are then those of the XRC SRQ the message
  // being received names (rc/responder.cc), and its CQs the device's placeholder: receives
  // complete on the SRQ's CQ (receive_cq()).
  uint32_t xrcdn = 0;
  hw::QpView view;
  wqe::SqRing sq;
  wqe::RqRing rq;
  uint32_t* dbrec = nullptr;  // big-endian: [MLX5_RCV_DBR], [MLX5_SND_DBR]
  BfRegister* reg = nullptr;
  bool handle_alive = true;
  uint8_t* owned_buf = nullptr;
  uint32_t* owned_dbrec = nullptr;
  hw::QpCaps caps;
  // Rings and doorbell record placed by someone else (external.h) are read through
  // host_access.h. A fault there sets host_fault; the engine then moves the QP to ERR with
  // QP_FATAL and sets host_failed, after which the device never touches that memory again.
  // The device decodes such rings from mirrors of its own (`sq` and `rq` above are then the
  // mirrors, in `mirror_buf`), copied from the application's (`sq_host`, `rq_host`) before
  // use (rc/queues.h): the WQEs a doorbell announces in one system call.
  bool external = false;
  wqe::SqRing sq_host;
  wqe::RqRing rq_host;
  uint8_t* mirror_buf = nullptr;
  uint32_t sq_mirrored = 0;  // BB counter: the SQ mirror holds the announced WQEs before it
  mutable bool host_fault = false;
  bool host_failed = false;

  // IB state and the attributes set so far.
  hw::QpState state = hw::QpState::reset;
  hw::QpAttr attr;
  IpAddress remote_ip;
  IpClass ip_class;  // from attr.traffic_class and hop_limit: what the QP's frames carry
  Pacer pacer;       // its send rate limit (rc/pacer.h); off by default
  uint32_t mtu = 1024;
  uint32_t mtu_shift = 10;

  // Doorbells and queue indices (free-running counters; the DBRs hold their low 16 bits).
  bool db_pending = false;   // a doorbell was seen and not processed yet
  bool rtr_db_kept = false;  // keeps_rtr_doorbell: a doorbell rung below RTS
  uint32_t sq_limit = 0;     // BB counter the SQ may be fetched up to (last DBR read)
  uint32_t sq_consumed = 0;  // BB counter up to which WQEs were fetched
  uint32_t rq_consumed = 0;  // receive WQEs consumed
  uint16_t seen_sq_dbr = 0;  // last value observed, for sq_dbr_advances
  uint16_t seen_rq_dbr = 0;

  // The send queue as fetched (rc/sq_fetch.cc): a ring of WQE records, power-of-two
  // capacity, from the completer's comp.wq_head to wq_tail; the requester works from
  // req.wq_send.
  std::vector<SendWqe> wqes;
  uint32_t wq_tail = 0;  // next free slot
  RequesterState req;
  CompleterState comp;
  ResponderState resp;
  // Called after the engine pass that raised COMM_EST (hw::Qp::set_comm_est_notifier).
  void (*comm_est_fn)(void*) = nullptr;
  void* comm_est_ctx = nullptr;
  // UD multicast (ud/multicast.cc): the groups it is attached to, and whether the datagrams
  // it sends to them come back to it (IBV_QP_CREATE_BLOCK_SELF_MCAST_LB).
  std::vector<IpAddress> mcast_groups;
  bool block_self_mcast_loopback = false;

  QpCounters counters;

  // The engine's bookkeeping (engine.cc): whether the QP is on the active list, the deadline
  // it is filed under in the timer set (0: none), and, in ERR or SQE, its place on the list of
  // QPs whose doorbell records are watched for work to flush.
  bool queued = false;
  uint64_t timer_at = 0;
  bool watched_in_error = false;
  uint64_t next_error_look_ns = 0;

  SendWqe& wqe_at(uint32_t i) { return wqes[i & (wqes.size() - 1)]; }
  // A QP created with max_send_wr = 0 has no send queue (libmlx5 passes a ring of 0 basic
  // blocks, as mlx5 accepts): it only receives. The device never reads such a ring, and a
  // doorbell or a scan that names the QP finds nothing to fetch or flush.
  bool has_sq() const { return sq.bb_count != 0; }
  // What a receive CQE carries in srqn_uidx: the SRQ's number, or the QP's user index.
  uint32_t recv_srqn_uidx() const;
  uint32_t in_flight() const { return wq_tail - comp.wq_head; }
  wqe::SqTransport transport() const {
    return type == hw::QpType::ud         ? wqe::SqTransport::ud
           : type == hw::QpType::xrc_send ? wqe::SqTransport::xrc
                                          : wqe::SqTransport::rc;
  }
  bool xrc() const { return type == hw::QpType::xrc_send || type == hw::QpType::xrc_recv; }
  // Where a receive completes: an XRC SRQ's own CQ, else the QP's receive CQ.
  CqObj* receive_cq() const;
};

}  // namespace rnicdv::sim
