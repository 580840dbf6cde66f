// SPDX-License-Identifier: BSD-3-Clause
// A UC responder's PSN rules at their edges, with hand-made packets: a copy of a packet already
// taken, and one behind the expected PSN by up to 2^16 (rc/responder.h, kUcStaleWindow), are
// dropped alone; a FIRST or ONLY further behind, or ahead, starts a new message at its PSN; a
// late MIDDLE does not abort the message in progress.
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "device_impl.h"
#include "packet/packet.h"
#include "rc/responder.h"
#include "sim_harness.h"

using namespace simtest;
namespace pkt = rnicdv::sim::pkt;

namespace {

struct UcRig {
  std::shared_ptr<sim::Fabric> fabric = make_fabric();
  Host a, uc;
  Buffer rx;
  uint64_t next_wr = 0;

  UcRig() {
    a.init(fabric, Pair::default_host());
    HostOptions o = Pair::default_host();
    o.type = hw::QpType::uc;
    uc.init(fabric, o);
    rx = uc.reg(16 * 4096);
    hw::QpAttr attr;
    attr.state = hw::QpState::init;
    attr.access_flags = hw::access::remote_write;
    must_ok(uc.modify(attr, hw::qp_attr::state | hw::qp_attr::port | hw::qp_attr::access_flags));
    attr.state = hw::QpState::rtr;
    attr.path_mtu = hw::Mtu::mtu256;
    attr.dest_qpn = a.qpn();
    attr.rq_psn = 0;
    attr.remote_gid = hw::Gid::from_ipv4(a.dev->ipv4());
    must_ok(uc.modify(attr, hw::qp_attr::state | hw::qp_attr::av | hw::qp_attr::path_mtu |
                                hw::qp_attr::dest_qpn | hw::qp_attr::rq_psn));
    attr.state = hw::QpState::rts;
    attr.sq_psn = 0;
    must_ok(uc.modify(attr, hw::qp_attr::state | hw::qp_attr::sq_psn));
    for (int i = 0; i < 16; ++i) REQUIRE(uc.post_recv(rx, uint64_t(i) * 4096, 4096, uint64_t(i)) == Errc::ok);
  }

  // One UC SEND packet from a's address: `len` bytes of `fill`.
  void send(uint8_t opcode, uint32_t psn, uint32_t len, uint8_t fill) {
    std::vector<uint8_t> payload(len, fill);
    pkt::Packet p;
    p.bth.opcode = opcode;
    p.bth.dest_qp = uc.qpn();
    p.bth.psn = psn & 0xffffff;
    p.payload = payload.data();
    p.payload_len = len;
    std::vector<uint8_t> frame(len + 64);
    const size_t n = pkt::build_packet(p, frame.data(), frame.size());
    uc.dev->impl().hca->inject_datagram(a.dev->address(), frame.data(), n);
    fabric->run_until([] { return false; }, 1'000'000);
  }

  // The receives completed since the last call: (byte count, first byte).
  std::vector<std::pair<uint32_t, uint8_t>> received() {
    std::vector<std::pair<uint32_t, uint8_t>> out;
    Completion c{};
    wqe::CqeFields f;
    while (uc.rcq->poll(&c, &f)) {
      REQUIRE(c.status == IBV_WC_SUCCESS);
      REQUIRE(f.wqe_counter == next_wr);  // the receives are taken in order
      out.emplace_back(c.byte_len, rx.data()[f.wqe_counter * 4096]);
      ++next_wr;
    }
    return out;
  }
};

using Got = std::vector<std::pair<uint32_t, uint8_t>>;

}  // namespace

TEST_CASE("a UC copy, or a packet behind the expected PSN by up to 2^16, is dropped alone") {
  UcRig r;
  namespace op = pkt::opcode;
  r.send(op::uc_send_only, 0, 100, 0xa0);
  CHECK(r.received() == Got{{100, 0xa0}});
  const uint64_t dups = r.uc.counters().duplicates_rx;
  r.send(op::uc_send_only, 0, 100, 0xa1);  // the same PSN again: a copy
  CHECK(r.received().empty());
  CHECK(r.uc.counters().duplicates_rx == dups + 1);
  // The expected PSN is 1: 2^16 behind it is still late; one more is a new message.
  r.send(op::uc_send_only, 1 - rnicdv::sim::rc::kUcStaleWindow, 50, 0xa2);
  CHECK(r.received().empty());
  CHECK(r.uc.counters().duplicates_rx == dups + 2);
  r.send(op::uc_send_only, 1 - rnicdv::sim::rc::kUcStaleWindow - 1, 60, 0xa3);
  CHECK(r.received() == Got{{60, 0xa3}});
  // The responder now follows that PSN: the next one in order is taken.
  r.send(op::uc_send_only, 1 - rnicdv::sim::rc::kUcStaleWindow, 70, 0xa4);
  CHECK(r.received() == Got{{70, 0xa4}});
  CHECK(r.uc.counters().uc_messages_dropped == 0);
  // Half the PSN space away: ahead, a new message.
  r.send(op::uc_send_only, 0x800000, 80, 0xa5);
  CHECK(r.received() == Got{{80, 0xa5}});
}

TEST_CASE("a late UC MIDDLE does not abort the message in progress, and a gap does") {
  UcRig r;
  namespace op = pkt::opcode;
  // Message A at PSN 10..12 loses its MIDDLE; message B at 13..15 arrives whole while A's
  // MIDDLE comes late, between B's FIRST and MIDDLE.
  r.send(op::uc_send_first, 10, 256, 0xb0);
  r.send(op::uc_send_last, 12, 10, 0xb0);  // a gap: A is dropped
  CHECK(r.received().empty());
  CHECK(r.uc.counters().uc_messages_dropped == 1);
  r.send(op::uc_send_first, 13, 256, 0xc0);
  r.send(op::uc_send_middle, 11, 256, 0xb0);  // A's, late
  r.send(op::uc_send_middle, 14, 256, 0xc0);
  r.send(op::uc_send_last, 15, 20, 0xc0);
  CHECK(r.received() == Got{{532, 0xc0}});
  CHECK(r.uc.counters().uc_messages_dropped == 1);
}
