// SPDX-License-Identifier: BSD-3-Clause
// What the two ends say over the control channel, in order (perftest_communication.c):
//  1. a 16-byte hello: perftest's version field ("6.06", NUL-padded) with rnicperf's mark
//     after the version's NUL. perftest reads the version (atof) and ignores the rest; two
//     rnicperf ends see each other's mark and go on with rnicperf's exchange below. Against a
//     perftest peer, rnicperf speaks perftest's own exchange instead (perftest_peer.cc and the
//     perftest_* calls below), so a perftest peer never sees anything of rnicperf's;
//  2. the parameter-negotiation record: both ends send theirs and both compare, so a
//     mismatch is reported on both sides ("parameter mismatch: test local=write_lat
//     remote=read_lat"); the MTU is negotiated down to the smaller one;
//  3. per QP, perftest's fixed-format ASCII record LID:OUT:QPN:PSN:RKEY:VADDR:GID:SRQN (108
//     bytes with the NUL); the GID carries the peer HCA's address, so a client needs only the
//     server's TCP address, and with -c XRC the SRQN names the side's XRC SRQ (0 otherwise);
//  4. barriers (a tagged phase number) around each measurement, and results. In an endless
//     run where both sides loop (send_bw, -b) each side sends its DONE when it stops: one
//     arriving during the run is what stops the other side.
// Every exchange is symmetric: the client writes then reads, the server reads then writes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "oob_channel.h"
#include "options.h"
#include "rnicdv/status.h"
#include "stats.h"

namespace rnicperf {

inline constexpr char kPerftestVersion[] = "6.06";  // what Debian's perftest 4.5 sends
inline constexpr char kRnicperfMark[] = "rnicperf/6";
enum class PeerKind : uint8_t { rnicperf, perftest };

// The parameters both ends must agree on (and the MTU, which they negotiate).
struct TestParams {
  uint32_t verb = 0;
  uint32_t kind = 0;
  uint64_t size = 0;  // ignored when all_sizes
  uint32_t all_sizes = 0;
  uint64_t sweep_max = 0;  // with all_sizes
  uint64_t iterations = 0;
  uint32_t duration_s = 0;
  uint32_t margin_s = 0;
  uint32_t num_qps = 0;
  uint32_t bidirectional = 0;
  uint32_t rdma_cm = 0;
  uint32_t early_post = 0;  // client's; the server follows it
  uint32_t mtu = 0;         // bytes; negotiated to the smaller
  uint32_t post_list = 0;   // informational
  uint32_t reversed = 0;    // --reversed: the server sends
  uint32_t connection = 0;  // -c: 0 RC, 1 UD, 2 UC, 3 XRC
  uint32_t dual_port = 0;   // -O: num_qps is twice -q, half of them on each port
  uint32_t report_per_port = 0;  // --report-per-port: the result carries each port's share
};
inline constexpr size_t kTestParamsFields = 18;
inline constexpr size_t kTestParamsWireSize = kTestParamsFields * 8;

TestParams params_from_options(const Options& o, uint32_t mtu_bytes);
void encode_params(const TestParams& p, uint8_t out[kTestParamsWireSize]);
TestParams decode_params(const uint8_t in[kTestParamsWireSize]);
// "" when they agree, else "test local=write_lat remote=read_lat" (the first mismatch).
std::string params_mismatch(const TestParams& local, const TestParams& remote);

// perftest's per-QP record (KEY_PRINT_FMT_GID): 107 characters and a NUL.
struct PeerRecord {
  uint16_t lid = 0;
  uint16_t out_reads = 0;
  uint32_t qpn = 0;  // 24 bits
  uint32_t psn = 0;  // 24 bits
  uint32_t rkey = 0;
  uint64_t vaddr = 0;
  uint8_t gid[16] = {};
  uint32_t srqn = 0;
  // The GID's index in its port's table: only perftest's binary record (-z) carries it; -1 in
  // a record to send: the session's (set_perftest_gid_index).
  int32_t gid_index = -1;
};
inline constexpr size_t kPeerRecordSize = 108;
std::string encode_record(const PeerRecord& r);  // exactly kPeerRecordSize bytes, NUL last
rnicdv::Result<PeerRecord> decode_record(const char* text, size_t len);

// The same record as perftest sends it over rdma_cm (-z: rdma_write_keys at 4.5-0.17): its
// struct pingpong_dest, each integer big-endian. lid 0, out_reads 4, qpn 8, psn 12, rkey
// 16, 4 bytes of padding, vaddr 24, gid 32, srqn 48, gid_index 52.
inline constexpr size_t kPerftestDestSize = 56;
void encode_perftest_dest(const PeerRecord& r, int32_t gid_index,
                          uint8_t out[kPerftestDestSize]);
PeerRecord decode_perftest_dest(const uint8_t in[kPerftestDestSize]);

// Control-channel session. Every wait is bounded by `timeout_ms`.
class OobSession {
 public:
  OobSession(OobChannel channel, bool client, uint32_t timeout_ms)
      : ch_(std::move(channel)), client_(client), timeout_ms_(timeout_ms) {}

  // The 16-byte versions; says whether the peer is rnicperf or perftest (5.70 or later, as
  // perftest's check_version_compatibility requires). A server answers a perftest client
  // with perftest's version alone.
  rnicdv::Result<PeerKind> hello();
  // Sends ours, receives theirs; Errc::invalid_argument "parameter mismatch: ..." on either
  // side when they differ. On success `*negotiated_mtu` is the smaller MTU.
  rnicdv::Status negotiate(const TestParams& local, TestParams* remote, uint32_t* negotiated_mtu);
  rnicdv::Status exchange_records(const std::vector<PeerRecord>& local,
                                  std::vector<PeerRecord>* remote);
  // Both ends reach the same numbered point; a different number is a protocol error.
  rnicdv::Status barrier(uint32_t phase, uint32_t timeout_ms = 0);
  // One end tells the other it is done (with a count), or waits for that.
  rnicdv::Status send_done(uint64_t count);
  rnicdv::Status recv_done(uint64_t* count, uint32_t timeout_ms);
  // Bandwidth results (perftest sends its bw_report_data the same way).
  rnicdv::Status exchange_bw(const BandwidthResult& local, BandwidthResult* remote);
  rnicdv::Status send_bw(const BandwidthResult& r);
  rnicdv::Status recv_bw(BandwidthResult* r, uint32_t timeout_ms);
  // Reports a failure to the peer so that it stops waiting (best effort).
  void send_abort(const std::string& why);
  // A sign of life while this side measures and the peer waits; a waiting recv restarts its
  // timeout on each. Sent from the reporter thread only while the main thread is measuring.
  // A sign of life carrying the operations done so far (restarts the peer's wait only when
  // they grew).
  rnicdv::Status send_alive(uint64_t progress);

  // ---- perftest's exchange (perftest_communication.c at 4.5-0.17), after hello(). Each
  // message is one write of a fixed size; the client writes first, the server reads first.
  // check_sys_data: page size and cache-line size, big-endian int32; both keep the larger.
  rnicdv::Status perftest_sys_data(uint32_t* cycle_buffer, uint32_t* cache_line);
  // check_mtu: the ibv_mtu code as one ASCII digit and a NUL; both keep the smaller.
  rnicdv::Status perftest_mtu(uint8_t local_code, uint8_t* negotiated_code);
  // ctx_hand_shake: the 108-byte records, ours out and theirs in; also every barrier. Over
  // rdma_cm (-z) the 56-byte binary form instead, carrying the record's own GID index, or
  // set_perftest_gid_index's when it has none.
  void set_perftest_gid_index(int32_t index) { gid_index_ = index; }
  rnicdv::Status perftest_handshake(const PeerRecord& local, PeerRecord* remote,
                                    uint32_t timeout_ms = 0);
  // xchg_bw_reports: size, iterations, peak, average and message rate, each 8 bytes
  // big-endian (doubles byte-swapped as integers), one exchange each; with `per_port`
  // (--report-per-port on both sides) then each port's average and message rate: port 1's
  // bandwidth, port 1's rate, port 2's bandwidth, port 2's rate.
  rnicdv::Status perftest_reports(const BandwidthResult& local, BandwidthResult* remote,
                                  bool per_port = false, uint32_t timeout_ms = 0);
  // ctx_close_connection's last word: "done" and its NUL; perftest never reads it. Over
  // rdma_cm perftest says nothing more: nothing is sent.
  rnicdv::Status perftest_done();

  OobChannel& channel() { return ch_; }
  bool is_client() const { return client_; }
  uint32_t timeout_ms() const { return timeout_ms_; }

 private:
  // One perftest exchange: the client sends then receives, the server the other way round.
  rnicdv::Status swap(const void* mine, void* theirs, size_t len, uint32_t timeout_ms);
  rnicdv::Status send_tagged(uint32_t tag, const void* body, size_t len);
  rnicdv::Status recv_tagged(uint32_t tag, void* body, size_t len, uint32_t timeout_ms);
  OobChannel ch_;
  bool client_;
  uint32_t timeout_ms_;
  int32_t gid_index_ = -1;
};

}  // namespace rnicperf
