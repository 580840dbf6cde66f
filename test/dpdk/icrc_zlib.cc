// SPDX-License-Identifier: BSD-3-Clause
// The DPDK wire's frames checked by an independent oracle: every header field and checksum
// recomputed here from RFC 791/768, and the ICRC with zlib's crc32 over exactly what IBA
// A17.3.3 says it covers. A frame corrupted on the link fails that check and is dropped and
// counted by the receiver, never delivered.
#include "dpdk_env.h"

#include <zlib.h>

#include "device_impl.h"

using namespace rnicdv;
using namespace rnicdv::test;

namespace {

uint16_t be16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] << 8 | p[1]);
}

// RFC 1071 one's-complement sum, folded and inverted.
uint16_t inet_checksum(const std::vector<uint8_t>& bytes) {
  uint32_t sum = 0;
  for (size_t i = 0; i + 1 < bytes.size(); i += 2) sum += static_cast<uint32_t>(bytes[i] << 8 | bytes[i + 1]);
  if (bytes.size() % 2) sum += static_cast<uint32_t>(bytes.back() << 8);
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

// zlib's CRC-32 over the masked LRH (eight 0xFF), the IPv4 header with TOS, TTL and checksum
// set to ones, the UDP header with its checksum set to ones, the BTH with byte 4 set to ones,
// and everything after it up to the ICRC.
uint32_t zlib_icrc(const std::vector<uint8_t>& frame) {
  std::vector<uint8_t> covered(8, 0xFF);
  covered.insert(covered.end(), frame.begin() + 14, frame.end() - 4);
  uint8_t* ip = covered.data() + 8;
  ip[1] = 0xFF;
  ip[8] = 0xFF;
  ip[10] = ip[11] = 0xFF;
  uint8_t* udp = ip + 20;
  udp[6] = udp[7] = 0xFF;
  udp[8 + 4] = 0xFF;  // BTH byte 4
  return static_cast<uint32_t>(crc32(0, covered.data(), static_cast<uInt>(covered.size())));
}

uint32_t carried_icrc(const std::vector<uint8_t>& frame) {
  const uint8_t* p = frame.data() + frame.size() - 4;
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

// Every field of the Ethernet, IPv4 and UDP headers, checked without the wire's code.
void check_headers(const std::vector<uint8_t>& f) {
  REQUIRE(f.size() >= 14 + 20 + 8 + 12 + 4);
  CHECK(be16(f.data() + 12) == 0x0800);
  CHECK(f[0] == 0x02);  // locally administered unicast MACs
  CHECK(f[6] == 0x02);
  const uint8_t* ip = f.data() + 14;
  CHECK(ip[0] == 0x45);
  CHECK(be16(ip + 2) == f.size() - 14);
  CHECK(be16(ip + 4) == 0);       // identification
  CHECK(be16(ip + 6) == 0x4000);  // DF, offset 0
  CHECK(ip[8] == 64);
  CHECK(ip[9] == 17);
  CHECK(inet_checksum(std::vector<uint8_t>(ip, ip + 20)) == 0);
  const uint8_t* udp = ip + 20;
  CHECK(be16(udp + 2) == 4791);
  CHECK(be16(udp + 4) == f.size() - 14 - 20);
  CHECK(be16(udp + 6) != 0);  // a checksum is present
  // The UDP checksum over the pseudo header and segment verifies to 0.
  std::vector<uint8_t> pseudo(ip + 12, ip + 20);
  pseudo.push_back(0);
  pseudo.push_back(17);
  pseudo.push_back(udp[4]);
  pseudo.push_back(udp[5]);
  pseudo.insert(pseudo.end(), udp, f.data() + f.size());
  CHECK(inet_checksum(pseudo) == 0);
  // MACs follow the addresses: 02:00:a:b:c:d for a.b.c.d.
  CHECK(std::memcmp(f.data() + 2, ip + 16, 4) == 0);
  CHECK(std::memcmp(f.data() + 8, ip + 12, 4) == 0);
}

}  // namespace

TEST_CASE("every frame's headers, checksums and ICRC match an independent zlib computation",
          "[dpdk][icrc]") {
  TempPcap pcap("icrc");
  {
    Pair p = make_dpdk_pair(pcap.path);
    run_every_rc_opcode(p);
  }
  const auto frames = read_pcap(pcap.path);
  REQUIRE(frames.size() > 30);
  for (size_t i = 0; i < frames.size(); ++i) {
    INFO("frame " << i << " of " << frames.size() << ", " << frames[i].size() << " bytes");
    check_headers(frames[i]);
    CHECK(zlib_icrc(frames[i]) == carried_icrc(frames[i]));
  }
}

TEST_CASE("frames corrupted on the link fail the ICRC and are dropped and counted",
          "[dpdk][icrc]") {
  TempPcap pcap("corrupt");
  sim::FaultConfig faults;
  faults.corrupt = 1.0;  // every frame has one byte flipped after its ICRC was computed
  Pair p = make_dpdk_pair(pcap.path, faults);
  fill_pattern(p.a.bytes(0), 512, 3);
  const Sge sge = p.a.sge(0, 512);
  REQUIRE(p.a.qp->post_send(write_wr(1, &sge, 1, p.b.addr(0x2000), p.b.rkey())) == Errc::ok);
  // Nothing arrives, so the requester retries until its retry count runs out.
  auto got = poll_n(*p.fabric, *p.a.cq, 1, 60'000'000'000ull);
  REQUIRE(got.size() == 1);
  CHECK(got[0].status == IBV_WC_RETRY_EXC_ERR);

  const auto frames = read_pcap(pcap.path);
  REQUIRE(frames.size() >= 2);  // the request and its retries
  const sim::WireCounters wc = p.fabric->impl().shared.wire->counters();
  CHECK(wc.faults_corrupted == frames.size());
  CHECK(wc.frames_rx == 0);
  CHECK(wc.dropped_icrc == frames.size());
  CHECK(p.b.counters().packets_rx == 0);
  for (size_t i = 0; i < p.b.mem.size(); ++i)
    if (p.b.mem[i] != 0) FAIL("byte " << i << " of the target was written");
  for (const auto& f : frames) {
    // The UDP checksum was computed over the corrupted bytes, so only the ICRC tells.
    CHECK(zlib_icrc(f) != carried_icrc(f));
  }
}
