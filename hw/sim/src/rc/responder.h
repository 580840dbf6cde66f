// SPDX-License-Identifier: BSD-3-Clause
// The responder: executes inbound requests in PSN order (IBA 9.7.5.1) and answers them.
// SEND consumes receive WQEs, WRITE places data, READ and atomics are answered from a ring of
// responder resources so duplicates can be replayed. Writes the QP's expected PSN, MSN,
// messages in progress, resources and answer queue; places data in registered memory; writes
// receive CQEs through the context. Errors give the NAK classes of IBA 9.7.5.2.4 and move the
// QP to ERR. A UC QP's requests take the same paths without answers (responder_uc.cc).
#pragma once

#include <cstdint>
#include <vector>

#include "../packet/packet.h"
#include "context.h"

namespace rnicdv::sim::rc {

class Flush;

// UC: how far behind the expected PSN a packet counts as a late copy, dropped alone, rather than
// the start of a new message after a gap (PSNs are 24 bits; RC's half window would make a
// requester that lost more than 2^23 packets in a row unreachable for as many again).
inline constexpr uint32_t kUcStaleWindow = 1u << 16;

// An answer's opcode (ACK, atomic ACK, READ response) on `qp`: an XRC target answers with
// XRC's copies of RC's opcodes.
inline uint8_t answer_opcode(const QpObj& qp, uint8_t rc_opcode) {
  return qp.type == hw::QpType::xrc_recv ? static_cast<uint8_t>(rc_opcode + pkt::opcode::xrc_base)
                                         : rc_opcode;
}

class Responder {
 public:
  Responder(Context& ctx, Flush& flush) : ctx_(ctx), flush_(flush) {}

  // An inbound request packet for this QP (the engine checked state and peer).
  void on_request(QpObj& qp, const pkt::Packet& p);
  // Puts up to `budget` queued answers on the wire, in PSN order (responder_tx.cc).
  bool transmit(QpObj& qp, uint32_t budget);

 private:
  // UC (responder_uc.cc): in order or dropped, never answered.
  void on_uc_request(QpObj& qp, const pkt::Packet& p);
  void drop_uc_message(QpObj& qp);
  // A request refused for what it asked (an invalid request, a remote access violation): RC
  // answers with `nak_syndrome` and moves to ERR with `event`; UC drops the message.
  void refuse(QpObj& qp, uint8_t nak_syndrome, uint32_t psn, hw::AsyncEventType event);
  void on_duplicate_request(QpObj& qp, const pkt::Packet& p);
  static bool payload_length_ok(const QpObj& qp, const pkt::OpcodeInfo& info,
                                const pkt::Packet& p);
  bool chosen_fault(QpObj& qp, const pkt::Packet& p, const pkt::OpcodeInfo& info);
  bool execute_send(QpObj& qp, const pkt::Packet& p, const pkt::OpcodeInfo& info);
  bool execute_write(QpObj& qp, const pkt::Packet& p, const pkt::OpcodeInfo& info);
  void execute_read(QpObj& qp, const pkt::Packet& p);
  void execute_atomic(QpObj& qp, const pkt::Packet& p);
  bool take_recv_wqe(QpObj& qp, const pkt::Packet& p);
  void no_recv_wqe(QpObj& qp, const pkt::Packet& p);
  bool take_srq_wqe(QpObj& qp, const pkt::Packet& p);
  // An XRC target: the SRQ the request's XRCETH names, which must be an XRC SRQ of the
  // target's domain (and, inside a message, the one its first packet named). A new message
  // takes its receive from it and is checked against its PD. False: NAK invalid request.
  bool bind_xrc_srq(QpObj& qp, const pkt::Packet& p, const pkt::OpcodeInfo& info);
  bool srq_memory_gone(QpObj& qp, const pkt::Packet& p);
  bool resolve_recv_segs(QpObj& qp, const pkt::Packet& p, const wqe::DecodedRecvWqe& d);
  void complete_recv(QpObj& qp, const pkt::Packet& p, uint8_t cqe_opcode, uint64_t byte_cnt);
  void fail(QpObj& qp, uint8_t nak_syndrome, uint32_t psn, uint8_t recv_syndrome,
            hw::AsyncEventType event);
  // responder_tx.cc
  void queue_ack(QpObj& qp, uint8_t syndrome, uint32_t psn);
  bool send_read_response(QpObj& qp, RespJob& job);

  Context& ctx_;
  Flush& flush_;
  // One READ response packet's payload, read from the region (host_access.h) before the
  // packet is built: 4096 bytes, the largest MTU.
  std::vector<uint8_t> payload_ = std::vector<uint8_t>(4096);
};

}  // namespace rnicdv::sim::rc
