// SPDX-License-Identifier: BSD-3-Clause
// The unreliable datagram service (IBA 9.8): a UD QP's send WQE carries its own address
// vector (mlx5_wqe_datagram_seg); each WQE is one UD_SEND_ONLY packet with a DETH, complete as
// soon as it is on the wire. Inbound datagrams are checked against the QP's Q_Key and land in
// the next receive WQE behind a 40-byte GRH area; nothing is acknowledged, retried or
// reordered, and a datagram with no receive WQE to take it is lost. A receive that cannot take
// the datagram (malformed, unregistered, too small) completes in error with the RC
// responder's affiliated event for the same fault, and the QP goes to ERR.
//
// The SQ fetcher, flush and the CQE writer are the RC transport's (rc/), shared through its
// context; only the packet handling differs.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../packet/packet.h"
#include "../rc/context.h"

namespace rnicdv::sim {

namespace rc {
class Completer;
class Flush;
class SqFetcher;
}  // namespace rc

namespace ud {

// Bytes of the GRH area at the start of every UD receive (IBA 11.4.1.1: the first 40 bytes
// of the scatter list). For RoCE v2 over IPv4, bytes 20..39 hold the IPv4 header.
inline constexpr uint32_t kGrhBytes = 40;

// The destination QPN of every datagram sent to a multicast group (IBA 10.5.2.3).
inline constexpr uint32_t kMulticastQpn = 0xFFFFFF;

class Datagram {
 public:
  Datagram(rc::Context& ctx, rc::SqFetcher& fetcher, rc::Flush& flush, rc::Completer& completer)
      : ctx_(ctx), fetcher_(fetcher), flush_(flush), completer_(completer) {}

  // Sends up to `budget` WQEs of the SQ, one packet each. A WQE that cannot be sent
  // completes with its error and moves the QP to SQE (IBA 10.3.1.2: the receive side runs on).
  bool progress(QpObj& qp, uint32_t budget);
  // An inbound UD SEND for `qp` (the engine checked its state), `frame_len` bytes on the wire
  // (BTH..pad), from `src` to `dst`.
  void on_packet(QpObj& qp, const IpAddress& src, const IpAddress& dst, const pkt::Packet& p,
                 size_t frame_len);

 private:
  void send_one(QpObj& qp, SendWqe& w);
  void fail_send(QpObj& qp, SendWqe& w);
  void recv_error(QpObj& qp, uint8_t syndrome, hw::AsyncEventType event);

  rc::Context& ctx_;
  rc::SqFetcher& fetcher_;
  rc::Flush& flush_;
  rc::Completer& completer_;
};

// The 40-byte GRH area of a RoCE v2 datagram: over IPv4, 20 zero bytes and then the IPv4
// header the packet travelled in (RFC 791; UDP, TTL 64, DF, no options, checksum filled in);
// over IPv6, the IPv6 header itself (RFC 8200; UDP, hop limit 64). `udp_payload_len` is
// BTH..pad plus the 4-byte ICRC.
void write_grh(uint8_t out[kGrhBytes], const IpAddress& src, const IpAddress& dst,
               size_t udp_payload_len);

}  // namespace ud
}  // namespace rnicdv::sim
