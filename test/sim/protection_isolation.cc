// SPDX-License-Identifier: BSD-3-Clause
// Isolation against a hostile or confused peer, with canaries showing memory untouched:
//  * memory keys cannot be guessed: 2^16 forged WRITEs, each with another guessed rkey, sent
//    from the connected peer's own address to the right address, reach no byte;
//  * a QP accepts packets only from the peer it is connected to: a third HCA aiming its QP
//    at it, over the in-process and the UDP wire, is dropped and the connection goes on;
//  * the UDP wire binds only the address it is given, and a datagram forged by any local
//    process (a correct ICRC, the right QPN and PSN) from another address is dropped.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "device_impl.h"
#include "packet/opcode.h"
#include "packet/packet.h"
#include "sim_harness.h"
#include "wire/wire.h"

using namespace simtest;
namespace pkt = rnicdv::sim::pkt;

namespace {

constexpr uint8_t kCanary = 0xc5;

bool all_canary(const std::vector<uint8_t>& v) {
  return std::all_of(v.begin(), v.end(), [](uint8_t b) { return b == kCanary; });
}

std::vector<uint8_t> write_only(uint32_t dest_qp, uint32_t psn, uint64_t va, uint32_t rkey,
                                const std::vector<uint8_t>& payload) {
  pkt::Packet p;
  p.bth.opcode = pkt::opcode::rc_write_only;
  p.bth.dest_qp = dest_qp;
  p.bth.psn = psn;
  p.bth.ack_req = true;
  p.headers = pkt::hdr::reth;
  p.reth.va = va;
  p.reth.rkey = rkey;
  p.reth.dma_length = static_cast<uint32_t>(payload.size());
  p.payload = payload.data();
  p.payload_len = static_cast<uint32_t>(payload.size());
  std::vector<uint8_t> f(pkt::kMaxPacketBytes);
  f.resize(pkt::build_packet(p, f.data(), f.size()));
  return f;
}

}  // namespace

TEST_CASE("2^16 guessed rkeys from the connected peer reach no memory") {
  Pair p;
  p.connect();
  // Registrations before and after the target, as an application makes them.
  Buffer before = p.b.reg(4096, all_remote(), kCanary);
  std::vector<uint8_t> arena(3 * 4096, kCanary);
  auto target = must(p.b.dev->reg_mr(*p.b.pd, arena.data() + 4096, 4096, all_remote()));
  Buffer after = p.b.reg(4096, all_remote(), kCanary);
  const uint64_t va = reinterpret_cast<uintptr_t>(arena.data()) + 4096;
  // The attacker owns A's end of the connection: it knows B's QPN, the PSN and the VA.
  p.a.dev->pause();
  const std::vector<uint8_t> payload(64, 0x66);
  auto& hca = *p.b.dev->impl().hca;
  const uint32_t a_ip = p.a.dev->ipv4();
  uint64_t rejected = 0;
  // The guesses: every tag of the first 256 table slots (where a device's keys start, if
  // keys were `index << 8 | tag`), 2^16 in all.
  for (uint32_t guess = 0; guess < (1u << 16); ++guess) {
    const uint32_t rkey = guess + 0x100;
    // Each wrong key NAKs and moves B's QP to ERR (IBA 9.7.5.2.4); bring it back to RTR.
    const auto f = write_only(p.b.qpn(), p.b.snapshot().expected_psn, va, rkey, payload);
    const uint64_t naks = p.b.counters().naks_tx;
    hca.inject_datagram(hw::IpAddress::v4(a_ip), f.data(), f.size());
    if (p.b.counters().naks_tx == naks + 1 && p.b.qp->state() == hw::QpState::err) ++rejected;
    to_state(p.b, hw::QpState::reset);
    to_init(p.b);
    to_rtr(p.b, p.a);
  }
  CHECK(all_canary(arena));
  CHECK(all_canary(before.mem));
  CHECK(all_canary(after.mem));
  // Every guess was a real try that the responder turned down, not a packet lost on the way.
  CHECK(rejected == (1u << 16));
  // Control: the real key, sent the same way, does write.
  const auto f = write_only(p.b.qpn(), p.b.snapshot().expected_psn, va, target->rkey(), payload);
  hca.inject_datagram(hw::IpAddress::v4(a_ip), f.data(), f.size());
  CHECK(arena[4096] == 0x66);
  CHECK(arena[4096 - 1] == kCanary);
  CHECK(arena[4096 + 64] == kCanary);
  p.a.dev->resume();
}

TEST_CASE("memory keys are not sequential and differ between devices") {
  Pair p;
  std::vector<Buffer> a, b;
  for (int i = 0; i < 8; ++i) {
    a.push_back(p.a.reg(64));
    b.push_back(p.b.reg(64));
  }
  std::set<uint32_t> keys;
  for (int i = 0; i < 8; ++i) {
    keys.insert(a[i].rkey());
    keys.insert(b[i].rkey());
    CHECK(a[i].rkey() != b[i].rkey());  // the same slot on two devices
    CHECK(a[i].rkey() != 0);
    CHECK(a[i].rkey() != MLX5_INVALID_LKEY);
    CHECK(a[i].lkey() == a[i].rkey());
  }
  CHECK(keys.size() == 16);
  // Not `index << 8 | tag`: successive registrations are not one slot (0x100) apart.
  int neighbours = 0;
  for (int i = 1; i < 8; ++i) neighbours += (a[i].rkey() >> 8) == (a[i - 1].rkey() >> 8) + 1;
  CHECK(neighbours < 2);
  // Re-registering a slot gives a new key; the old one names nothing.
  const uint32_t stale = a[3].rkey();
  a[3].mr.reset();
  Buffer again = p.a.reg(64);
  CHECK(again.rkey() != stale);
}

namespace {

// A third HCA whose QP is aimed at B's QP, which is connected to A.
void stranger_is_dropped(const FabricOptions& fo) {
  Pair p(fo);
  p.connect();
  Host c(p.fabric, Pair::default_host());
  ConnectOptions oc;
  oc.timeout = 8;  // ~1 ms: it will not be answered
  oc.retry_cnt = 2;
  to_init(c, oc);
  to_rtr(c, p.b, oc);  // dest_qpn = B's QPN, B's address
  to_rts(c, oc);

  std::vector<uint8_t> arena(3 * 4096, kCanary);
  auto target = must(p.b.dev->reg_mr(*p.b.pd, arena.data() + 4096, 4096, all_remote()));
  Buffer inbox = p.b.reg(4096, all_remote(), kCanary);
  REQUIRE(p.b.post_recv(inbox, 0, 4096, 7) == Errc::ok);
  Buffer src = c.reg(4096, all_remote(), 0x66);
  const uint64_t dropped = p.b.counters().rx_dropped;
  const uint64_t b_rx_before = p.b.snapshot().expected_psn;

  // The stranger knows everything: QPN, address, rkey, VA. It writes, then sends.
  Sge sge{src.addr(), 256, src.lkey()};
  SendWr w = make_wr(WrOpcode::rdma_write, &sge, 1, 1);
  w.remote_addr = reinterpret_cast<uintptr_t>(arena.data()) + 4096;
  w.rkey = target->rkey();
  REQUIRE(c.post(w) == Errc::ok);
  REQUIRE(c.post(make_wr(WrOpcode::send, &sge, 1, 2)) == Errc::ok);
  c.ring();
  Completion first = p.wait_send(c);
  Completion second = p.wait_send(c);
  CHECK(first.status == IBV_WC_RETRY_EXC_ERR);  // nobody answered it
  CHECK(second.status == IBV_WC_WR_FLUSH_ERR);
  CHECK(all_canary(arena));
  CHECK(all_canary(inbox.mem));
  CHECK(p.b.counters().rx_dropped > dropped);
  CHECK(p.b.qp->state() == hw::QpState::rts);  // B's connection is unharmed
  CHECK(p.b.snapshot().expected_psn == b_rx_before);
  Completion none;
  CHECK_FALSE(p.b.rcq->poll(&none));

  // The real peer still gets through, to the same receive.
  Buffer a_src = p.a.reg(256, all_remote(), 0x77);
  Sge asge{a_src.addr(), 256, a_src.lkey()};
  REQUIRE(p.a.post_and_ring(make_wr(WrOpcode::send, &asge, 1, 3)) == Errc::ok);
  CHECK(p.wait_send(p.a).status == IBV_WC_SUCCESS);
  Completion r = p.wait_recv(p.b);
  CHECK(r.status == IBV_WC_SUCCESS);
  CHECK(r.byte_len == 256);
  CHECK(inbox.mem[0] == 0x77);
  CHECK(inbox.mem[256] == kCanary);
}

}  // namespace

TEST_CASE("a QP drops requests from an HCA it is not connected to (in-process wire)") {
  stranger_is_dropped(FabricOptions{});
}

TEST_CASE("a QP drops requests from an HCA it is not connected to (UDP wire, threaded)") {
  FabricOptions fo;
  fo.mode = sim::ExecMode::threaded;
  fo.wire = sim::WireKind::udp;
  stranger_is_dropped(fo);
}

namespace {

// Addresses this test binds itself: 127.3.N.x with N from the process ID, so that two runs of
// the suite on one machine do not collide.
uint32_t own_address(uint32_t host) {
  return 0x7f030000u | ((static_cast<uint32_t>(::getpid()) % 250 + 2) << 8) | host;
}

sockaddr_in bound_address(sim::Fabric& fabric, uint32_t ipv4) {
  const int fd = fabric.impl().shared.wire->wait_fd(sim::Endpoint{hw::IpAddress::v4(ipv4), 4791});
  REQUIRE(fd >= 0);
  sockaddr_in sa{};
  socklen_t len = sizeof sa;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) == 0);
  return sa;
}

// A UDP socket of this process bound to `ipv4` (port chosen by the kernel).
int raw_socket(uint32_t ipv4) {
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(ipv4);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
  return fd;
}

uint16_t local_port(int fd) {
  sockaddr_in sa{};
  socklen_t len = sizeof sa;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) == 0);
  return ntohs(sa.sin_port);
}

// Sends `frame` (BTH..pad) with its ICRC from socket `fd` (bound to `src_ip`) to `dst`.
void send_forged(int fd, uint32_t src_ip, uint32_t dst_ip, std::vector<uint8_t> frame) {
  const sim::Endpoint src{hw::IpAddress::v4(src_ip), local_port(fd)},
      dst{hw::IpAddress::v4(dst_ip), 4791};
  const uint32_t icrc = sim::roce_icrc(src, dst, frame.data(), frame.size());
  for (int i = 0; i < 4; ++i) frame.push_back(static_cast<uint8_t>(icrc >> (8 * i)));
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_addr.s_addr = htonl(dst_ip);
  to.sin_port = htons(4791);
  REQUIRE(::sendto(fd, frame.data(), frame.size(), 0, reinterpret_cast<sockaddr*>(&to),
                   sizeof to) == static_cast<ssize_t>(frame.size()));
}

}  // namespace

TEST_CASE("the UDP wire binds only the address it is given, loopback by default") {
  FabricOptions fo;
  fo.wire = sim::WireKind::udp;
  auto fabric = make_fabric(fo);
  auto automatic = must(fabric->add_device({}));
  const sockaddr_in a = bound_address(*fabric, automatic->ipv4());
  CHECK(ntohl(a.sin_addr.s_addr) == automatic->ipv4());
  CHECK((automatic->ipv4() >> 24) == 127);  // loopback when no address is given
  CHECK(ntohs(a.sin_port) == 4791);
  sim::DeviceConfig dc;
  dc.address = hw::IpAddress::v4(own_address(213));  // given explicitly
  auto given = must(fabric->add_device(dc));
  const sockaddr_in g = bound_address(*fabric, given->ipv4());
  CHECK(ntohl(g.sin_addr.s_addr) == own_address(213));
  // Not the wildcard: another process may bind port 4791 on any other address.
  const int other = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(own_address(214));
  sa.sin_port = htons(4791);
  CHECK(::bind(other, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
  ::close(other);
}

TEST_CASE("a datagram forged by a local process from another address is dropped (UDP)") {
  FabricOptions fo;
  fo.wire = sim::WireKind::udp;
  Pair p(fo);
  p.connect();
  std::vector<uint8_t> arena(3 * 4096, kCanary);
  auto target = must(p.b.dev->reg_mr(*p.b.pd, arena.data() + 4096, 4096, all_remote()));
  const uint64_t va = reinterpret_cast<uintptr_t>(arena.data()) + 4096;
  const std::vector<uint8_t> payload(64, 0x66);
  const auto frame = write_only(p.b.qpn(), p.b.snapshot().expected_psn, va, target->rkey(),
                                payload);
  const uint64_t dropped = p.b.counters().rx_dropped;
  const uint64_t received = p.b.counters().packets_rx;
  // From a stranger's address: a correct frame in every other respect.
  const uint32_t stranger = own_address(215);
  const int fd = raw_socket(stranger);
  send_forged(fd, stranger, p.b.dev->ipv4(), frame);
  REQUIRE(p.run_until([&] { return p.b.counters().packets_rx > received; }, 5'000'000'000ull));
  CHECK(p.b.counters().rx_dropped == dropped + 1);
  CHECK(all_canary(arena));
  CHECK(p.b.qp->state() == hw::QpState::rts);
  ::close(fd);
  // Control: the same datagram from the connected peer's address (another port on it) is
  // accepted. RoCEv2 uses the UDP source port for entropy only, so the address is what
  // identifies the peer; a process that can send from that address is the peer.
  const int peer_fd = raw_socket(p.a.dev->ipv4());
  send_forged(peer_fd, p.a.dev->ipv4(), p.b.dev->ipv4(), frame);
  REQUIRE(p.run_until([&] { return arena[4096] == 0x66; }, 5'000'000'000ull));
  CHECK(arena[4096 + 64] == kCanary);
  ::close(peer_fd);
}
