// SPDX-License-Identifier: BSD-3-Clause
// The UDP wire: 127.0.0.x addressing, exchange over loopback, hostile datagrams, faults.
#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "faults/schedule.h"
#include "wire/frame.h"
#include "wire/icrc.h"
#include "wire/wire.h"
#include "wire_test_util.h"

using namespace rnicdv;
using namespace rnicdv::sim;
using namespace rnicdv::sim::test;

namespace {

std::unique_ptr<Wire> udp_wire(WireConfig config = {}) {
  auto made = make_udp_wire(config);
  REQUIRE(made.is_ok());
  return std::move(made.value());
}

sockaddr_in sockaddr_of(const Endpoint& ep) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(ep.ip.ipv4());
  sa.sin_port = htons(ep.port);
  return sa;
}

// A plain UDP socket bound to `ep`, or -1.
int bind_plain(const Endpoint& ep) {
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  const sockaddr_in sa = sockaddr_of(ep);
  if (fd >= 0 && ::bind(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof(sa)) == 0) return fd;
  if (fd >= 0) ::close(fd);
  return -1;
}

// Polls `local` until `want` datagrams were delivered or ~10 s passed (loopback delivery is
// immediate; the bound only guards against a hang on a loaded machine).
size_t poll_until(Wire& wire, const Endpoint& local, size_t want) {
  size_t got = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (got < want && std::chrono::steady_clock::now() < deadline) {
    const size_t n = wire.poll(local, 64);
    got += n;
    if (n == 0) {
      pollfd p{wire.wait_fd(local), POLLIN, 0};
      ::poll(&p, 1, 10);
    }
  }
  return got;
}

// Polls until the counters show `want` receive-side drops, or ~10 s passed.
WireCounters wait_for_drops(Wire& wire, const Endpoint& local, uint64_t want) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  WireCounters c = wire.counters();
  while (c.dropped_icrc + c.dropped_malformed < want &&
         std::chrono::steady_clock::now() < deadline) {
    wire.poll(local, 64);
    pollfd p{wire.wait_fd(local), POLLIN, 0};
    ::poll(&p, 1, 10);
    c = wire.counters();
  }
  return c;
}

}  // namespace

TEST_CASE("Two UDP endpoints on 127.0.0.x exchange datagrams", "[udp]") {
  const uint16_t port = free_udp_port();
  auto wire = udp_wire();
  CHECK(wire->kind() == WireKind::udp);
  RecordingSink sa, sb;
  const Endpoint a{v4(127, 0, 0, 2), port}, b{v4(127, 0, 0, 3), port};
  REQUIRE(wire->attach(a, &sa).is_ok());
  REQUIRE(wire->attach(b, &sb).is_ok());
  CHECK(wire->wait_fd(a) >= 0);
  CHECK(wire->wait_fd(a) != wire->wait_fd(b));

  std::vector<std::vector<uint8_t>> sent;
  for (uint32_t i = 0; i < 50; ++i) {
    sent.push_back(tagged_datagram(1, i, 1 + i * 80));  // up to ~4 KiB
    wire->transmit(a, b, sent.back().data(), sent.back().size());
  }
  const auto big = datagram(0x04, 1, 1, {}, std::vector<uint8_t>(kMaxDatagramLen - 12, 7));
  REQUIRE(big.size() == kMaxDatagramLen);
  wire->transmit(b, a, big.data(), big.size());

  CHECK(poll_until(*wire, b, 50) == 50);
  CHECK(poll_until(*wire, a, 1) == 1);
  const auto at_b = sb.take();
  REQUIRE(at_b.size() == 50);
  for (uint32_t i = 0; i < 50; ++i) {
    CHECK(at_b[i].src == a);
    CHECK(at_b[i].dst == b);
    CHECK(at_b[i].bytes == sent[i]);
  }
  const auto at_a = sa.take();
  REQUIRE(at_a.size() == 1);
  CHECK(at_a[0].bytes == big);
  CHECK(at_a[0].src == b);

  const WireCounters c = wire->counters();
  CHECK(c.frames_tx == 51);
  CHECK(c.frames_rx == 51);
  CHECK(c.dropped_icrc == 0);
  CHECK(c.dropped_send_error == 0);
}

TEST_CASE("Each UDP socket is bound to its own address only", "[udp]") {
  const uint16_t port = free_udp_port();
  auto wire = udp_wire();
  RecordingSink s;
  const Endpoint a{v4(127, 0, 0, 5), port};
  REQUIRE(wire->attach(a, &s).is_ok());
  sockaddr_in bound{};
  socklen_t len = sizeof(bound);
  REQUIRE(::getsockname(wire->wait_fd(a), reinterpret_cast<sockaddr*>(&bound), &len) == 0);
  CHECK(ntohl(bound.sin_addr.s_addr) == a.ip.ipv4());  // never INADDR_ANY
  CHECK(ntohs(bound.sin_port) == port);
  // The same port on another loopback address is still free.
  const int other = bind_plain(Endpoint{v4(127, 0, 0, 6), port});
  CHECK(other >= 0);
  if (other >= 0) ::close(other);
  // DF on every datagram, as the ICRC's pseudo header assumes.
  int pmtu = -1;
  socklen_t optlen = sizeof(pmtu);
  REQUIRE(::getsockopt(wire->wait_fd(a), IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, &optlen) == 0);
  CHECK(pmtu == IP_PMTUDISC_DO);
}

TEST_CASE("UDP auto-addressing picks distinct addresses and skips taken ones", "[udp]") {
  const uint16_t port = free_udp_port();
  // Someone else (another process, say) holds 127.0.0.2 on this port.
  const int squatter = bind_plain(Endpoint{v4(127, 0, 0, 2), port});
  REQUIRE(squatter >= 0);
  auto wire = udp_wire();
  RecordingSink s1, s2;
  auto first = wire->attach(Endpoint{IpAddress{}, port}, &s1);
  REQUIRE(first.is_ok());
  auto second = wire->attach(Endpoint{IpAddress{}, port}, &s2);
  REQUIRE(second.is_ok());
  CHECK(first->ip == v4(127, 0, 0, 3));
  CHECK(second->ip == v4(127, 0, 0, 4));
  CHECK(first->port == port);

  // A second wire (as in another process) gets yet another address.
  auto other_wire = udp_wire();
  RecordingSink s3;
  auto third = other_wire->attach(Endpoint{IpAddress{}, port}, &s3);
  REQUIRE(third.is_ok());
  CHECK(third->ip == v4(127, 0, 0, 5));
  ::close(squatter);
}

TEST_CASE("An explicit UDP address already in use gives address_in_use naming it", "[udp]") {
  const uint16_t port = free_udp_port();
  const Endpoint taken{v4(127, 0, 0, 7), port};
  const int squatter = bind_plain(taken);
  REQUIRE(squatter >= 0);
  auto wire = udp_wire();
  RecordingSink s;
  auto r = wire->attach(taken, &s);
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().code() == Errc::address_in_use);
  CHECK_THAT(r.status().message(), Catch::Contains("127.0.0.7:" + std::to_string(port)));
  ::close(squatter);

  // Attaching twice in one wire is the same error.
  REQUIRE(wire->attach(taken, &s).is_ok());
  auto twice = wire->attach(taken, &s);
  REQUIRE_FALSE(twice.is_ok());
  CHECK(twice.status().code() == Errc::address_in_use);

  // An address this host does not have is a different error.
  auto foreign = wire->attach(Endpoint{v4(192, 0, 2, 1), port}, &s);
  REQUIRE_FALSE(foreign.is_ok());
  CHECK(foreign.status().code() == Errc::not_found);
  CHECK_THAT(foreign.status().message(), Catch::Contains("192.0.2.1"));
}

TEST_CASE("Hostile datagrams are dropped and counted, never delivered", "[udp]") {
  const uint16_t port = free_udp_port();
  auto wire = udp_wire();
  RecordingSink s;
  const Endpoint local{v4(127, 0, 0, 3), port};
  REQUIRE(wire->attach(local, &s).is_ok());
  const Endpoint attacker{v4(127, 0, 0, 8), port};
  const int raw = bind_plain(attacker);
  REQUIRE(raw >= 0);
  const sockaddr_in to = sockaddr_of(local);
  auto send_raw = [&](const std::vector<uint8_t>& bytes) {
    REQUIRE(::sendto(raw, bytes.data(), bytes.size(), 0, reinterpret_cast<const sockaddr*>(&to),
                     sizeof(to)) == static_cast<ssize_t>(bytes.size()));
  };

  send_raw({});                                                   // empty
  send_raw(std::vector<uint8_t>(15, 0xEE));                       // runt: shorter than BTH + ICRC
  send_raw(std::vector<uint8_t>(kMaxWireDatagramLen + 1, 0x01));  // oversize
  send_raw(std::vector<uint8_t>(9000, 0x02));                     // far oversize
  std::vector<uint8_t> bad_icrc = tagged_datagram(9, 9);
  bad_icrc.resize(bad_icrc.size() + 4, 0);  // zero ICRC
  send_raw(bad_icrc);
  std::vector<uint8_t> garbage(300);
  for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = static_cast<uint8_t>(i * 131 + 7);
  send_raw(garbage);

  const WireCounters c = wait_for_drops(*wire, local, 6);
  CHECK(c.dropped_malformed == 4);
  CHECK(c.dropped_icrc == 2);
  CHECK(c.frames_rx == 0);
  CHECK(s.count() == 0);

  // A well-formed datagram sent the same raw way, with the ICRC computed over the pseudo
  // header, is delivered: the receiver rebuilds exactly the header the kernel sent.
  std::vector<uint8_t> good = tagged_datagram(9, 10);
  const size_t len = good.size();
  good.resize(len + 4);
  store_icrc(&good[len], roce_icrc(attacker, local, good.data(), len));
  send_raw(good);
  CHECK(poll_until(*wire, local, 1) == 1);
  const auto got = s.take();
  REQUIRE(got.size() == 1);
  CHECK(got[0].src == attacker);
  CHECK(got[0].bytes == std::vector<uint8_t>(good.begin(), good.begin() + len));
  ::close(raw);
}

TEST_CASE("UDP transmit from an endpoint this wire does not own is dropped and counted", "[udp]") {
  auto wire = udp_wire();
  const auto d = tagged_datagram(1, 1);
  wire->transmit(Endpoint{v4(127, 0, 0, 9), 4791}, Endpoint{v4(127, 0, 0, 10), 4791}, d.data(),
                 d.size());
  const WireCounters c = wire->counters();
  CHECK(c.frames_tx == 1);
  CHECK(c.dropped_send_error == 1);
  CHECK(wire->poll(Endpoint{v4(127, 0, 0, 9), 4791}, 8) == 0);
  CHECK(wire->wait_fd(Endpoint{v4(127, 0, 0, 9), 4791}) == -1);
}

TEST_CASE("UDP faults: corruption dies at the ICRC, delayed frames leave with the sender's poll",
          "[udp][faults]") {
  const uint16_t port = free_udp_port();
  VirtualClock clock;
  WireConfig config;
  config.clock = &clock;
  config.faults.corrupt = 1.0;
  auto corrupting = udp_wire(config);
  RecordingSink s1, s2;
  const Endpoint a{v4(127, 0, 0, 2), port}, b{v4(127, 0, 0, 3), port};
  REQUIRE(corrupting->attach(a, &s1).is_ok());
  REQUIRE(corrupting->attach(b, &s2).is_ok());
  for (uint32_t i = 0; i < 20; ++i) {
    const auto d = tagged_datagram(1, i, 100);
    corrupting->transmit(a, b, d.data(), d.size());
  }
  const WireCounters c = wait_for_drops(*corrupting, b, 20);
  CHECK(c.faults_corrupted == 20);
  CHECK(c.dropped_icrc == 20);
  CHECK(s2.count() == 0);
  corrupting.reset();

  config.faults = FaultConfig{};
  config.faults.delay = 1.0;
  config.faults.max_delay_ns = 50'000;
  auto delaying = udp_wire(config);
  REQUIRE(delaying->attach(a, &s1).is_ok());
  REQUIRE(delaying->attach(b, &s2).is_ok());
  const auto d = tagged_datagram(1, 1);
  delaying->transmit(a, b, d.data(), d.size());
  CHECK(delaying->next_delivery_ns(a) <= clock.now_ns());  // in the outbox: look now
  CHECK(delaying->poll(a, 8) == 0);                        // moves it to the holding area
  const uint64_t due = delaying->next_delivery_ns(a);
  CHECK(due > clock.now_ns());
  CHECK(due <= clock.now_ns() + 50'000);
  // Not sent before it is due, however long the receiver waits.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(delaying->poll(b, 8) == 0);
  clock.set(due);
  CHECK(delaying->poll(a, 8) == 0);  // the sender's poll sends it
  CHECK(delaying->next_delivery_ns(a) == UINT64_MAX);
  CHECK(poll_until(*delaying, b, 1) == 1);
  CHECK(s2.take().at(0).bytes == d);
}

TEST_CASE("UDP faults of a fault specification: a reordered frame is held, then sent",
          "[udp][faults]") {
  // Frame rules come from the fabric's specification alone (no FaultConfig): the endpoints
  // still need their outbox for the frames they hold back.
  const uint16_t port = free_udp_port();
  VirtualClock clock;
  auto spec = faults::parse_fault_spec("seed=1; reorder p=1 hold=40us");
  REQUIRE(spec.is_ok());
  auto schedule = faults::FaultSchedule::create(std::move(spec).value(), 1, &clock, "");
  REQUIRE(schedule.is_ok());
  WireConfig config;
  config.clock = &clock;
  config.schedule = schedule.value().get();
  auto wire = udp_wire(config);
  RecordingSink s1, s2;
  const Endpoint a{v4(127, 0, 0, 2), port}, b{v4(127, 0, 0, 3), port};
  REQUIRE(wire->attach(a, &s1).is_ok());
  REQUIRE(wire->attach(b, &s2).is_ok());
  const auto d = tagged_datagram(1, 1);
  wire->transmit(a, b, d.data(), d.size());
  CHECK(wire->poll(a, 8) == 0);  // moves it to the holding area
  const uint64_t due = wire->next_delivery_ns(a);
  CHECK(due >= clock.now_ns() + 20'000);
  CHECK(due <= clock.now_ns() + 40'000);
  clock.set(due);
  CHECK(wire->poll(a, 8) == 0);  // the sender's poll sends it
  CHECK(poll_until(*wire, b, 1) == 1);
  CHECK(s2.take().at(0).bytes == d);
  CHECK(wire->counters().faults_reordered == 1);
}

TEST_CASE("On the loopback link the kernel's IPv4 header is the one the ICRC assumes", "[udp]") {
  // Capture our own datagram on lo with a packet socket (needs CAP_NET_RAW) and check its
  // ICRC over the headers actually sent: ID 0, DF, real lengths (IBA Annex A17.3.3;
  // docs/design.md, "Protocol notes").
  const int sniffer = ::socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_IP));
  if (sniffer < 0) {
    WARN("skipped: no packet socket (needs CAP_NET_RAW): " << std::strerror(errno));
    return;
  }
  sockaddr_ll ll{};
  ll.sll_family = AF_PACKET;
  ll.sll_protocol = htons(ETH_P_IP);
  ll.sll_ifindex = static_cast<int>(::if_nametoindex("lo"));
  REQUIRE(::bind(sniffer, reinterpret_cast<sockaddr*>(&ll), sizeof(ll)) == 0);

  const uint16_t port = free_udp_port();
  auto wire = udp_wire();
  RecordingSink sa, sb;
  const Endpoint a{v4(127, 0, 0, 2), port}, b{v4(127, 0, 0, 3), port};
  REQUIRE(wire->attach(a, &sa).is_ok());
  REQUIRE(wire->attach(b, &sb).is_ok());
  const auto d = datagram(0x0A, 0x33, 5, reth(0x1000, 0x99, 40), std::vector<uint8_t>(40, 3));
  wire->transmit(a, b, d.data(), d.size());

  bool seen = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  std::vector<uint8_t> buf(65536);
  while (!seen && std::chrono::steady_clock::now() < deadline) {
    pollfd p{sniffer, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = ::recv(sniffer, buf.data(), buf.size(), 0);
    if (n <= 0) continue;
    // Loopback skips checksum completion (CHECKSUM_PARTIAL): the captured UDP checksum holds
    // only the pseudo-header sum. The ICRC masks that field; clear it so the parser skips it.
    if (n >= static_cast<ssize_t>(kRoceEncapLenIpv4)) buf[40] = buf[41] = 0;
    ParsedRoceFrame f;
    if (parse_roce_frame(buf.data(), static_cast<size_t>(n), &f) != FrameError::ok) continue;
    if (f.src != a || f.dst != b) continue;  // someone else's traffic
    seen = true;
    CHECK(get16(f.ip_header + 4) == 0);             // IPv4 ID
    CHECK((get16(f.ip_header + 6) & 0x4000) != 0);  // DF
    CHECK(std::vector<uint8_t>(f.datagram, f.datagram + f.datagram_len) == d);
    CHECK(roce_frame_icrc_ok(f));
  }
  ::close(sniffer);
  CHECK(seen);
}

namespace {

// Records the addresses the wire reports gone.
class GoneSink final : public WireSink {
 public:
  void on_datagram(const Endpoint&, const Endpoint&, const uint8_t*, size_t) override {
    ++datagrams;
  }
  void on_unreachable(const Endpoint& peer) override { gone.push_back(peer); }
  std::vector<Endpoint> gone;
  size_t datagrams = 0;
};

}  // namespace

TEST_CASE("A UDP frame to an address whose socket is closed reports that peer gone to the sender",
          "[udp]") {
  const uint16_t port = free_udp_port();
  auto wire = udp_wire();
  GoneSink sa;
  RecordingSink sc;
  const Endpoint a{v4(127, 0, 0, 2), port}, c{v4(127, 0, 0, 4), port};
  const Endpoint dead{v4(127, 0, 0, 3), port};
  REQUIRE(wire->attach(a, &sa).is_ok());
  REQUIRE(wire->attach(c, &sc).is_ok());
  // A port that was bound and closed, as a process that ended leaves it.
  const int fd = bind_plain(dead);
  REQUIRE(fd >= 0);
  ::close(fd);

  const auto frame = tagged_datagram(1, 0, 64);
  wire->transmit(a, dead, frame.data(), frame.size());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (sa.gone.empty() && std::chrono::steady_clock::now() < deadline) {
    wire->poll(a, 64);
    pollfd p{wire->wait_fd(a), POLLIN, 0};
    ::poll(&p, 1, 10);
  }
  REQUIRE(sa.gone.size() == 1);
  CHECK(sa.gone[0] == dead);
  CHECK(wire->counters().peers_unreachable == 1);

  // The error is the dead peer's alone: frames to a live peer, sent while a refusal is
  // pending on the socket, all arrive.
  for (uint32_t i = 0; i < 3; ++i) wire->transmit(a, dead, frame.data(), frame.size());
  ::usleep(20'000);  // the refusals come back before the next frames leave
  for (uint32_t i = 0; i < 10; ++i) {
    const auto to_c = tagged_datagram(2, i, 64);
    wire->transmit(a, c, to_c.data(), to_c.size());
  }
  CHECK(poll_until(*wire, c, 10) == 10);
  CHECK(wire->counters().dropped_send_error == 0);
  for (int i = 0; i < 50 && wire->counters().peers_unreachable < 4; ++i) {
    wire->poll(a, 64);
    ::usleep(1000);
  }
  CHECK(wire->counters().peers_unreachable == 4);
  CHECK(sa.datagrams == 0);
}
