// SPDX-License-Identifier: BSD-3-Clause
#include "oob_protocol.h"

#include <endian.h>

#include <algorithm>
#include <cstdlib>
#include <cinttypes>
#include <cstdio>
#include <chrono>
#include <cstring>

namespace rnicperf {

using rnicdv::Errc;
using rnicdv::Result;
using rnicdv::Status;

namespace {

constexpr uint32_t tag(const char (&s)[5]) {
  return (uint32_t(uint8_t(s[0])) << 24) | (uint32_t(uint8_t(s[1])) << 16) |
         (uint32_t(uint8_t(s[2])) << 8) | uint32_t(uint8_t(s[3]));
}
constexpr uint32_t kTagParams = tag("PRMS");
constexpr uint32_t kTagRecords = tag("RECS");
constexpr uint32_t kTagBarrier = tag("SYNC");
constexpr uint32_t kTagDone = tag("DONE");
constexpr uint32_t kTagBw = tag("BWRS");
constexpr uint32_t kTagAbort = tag("ABRT");
constexpr uint32_t kTagAlive = tag("ALIV");
constexpr size_t kMaxBody = 1u << 20;

void put_be64(uint8_t* p, uint64_t v) {
  for (int i = 7; i >= 0; --i) {
    p[i] = static_cast<uint8_t>(v);
    v >>= 8;
  }
}
uint64_t get_be64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}
void put_be32(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v >> 24);
  p[1] = static_cast<uint8_t>(v >> 16);
  p[2] = static_cast<uint8_t>(v >> 8);
  p[3] = static_cast<uint8_t>(v);
}
uint32_t get_be32(const uint8_t* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | p[3];
}
uint64_t double_bits(double d) {
  uint64_t u;
  std::memcpy(&u, &d, sizeof u);
  return u;
}
double bits_double(uint64_t u) {
  double d;
  std::memcpy(&d, &u, sizeof d);
  return d;
}

std::string tag_text(uint32_t t) {
  char s[5] = {char(t >> 24), char(t >> 16), char(t >> 8), char(t), 0};
  for (int i = 0; i < 4; ++i)
    if (s[i] < 0x20 || s[i] > 0x7e) s[i] = '?';
  return s;
}

// Parses exactly `digits` lower- or upper-case hex digits.
bool parse_hex(const char* p, int digits, uint64_t* out) {
  uint64_t v = 0;
  for (int i = 0; i < digits; ++i) {
    char c = p[i];
    int d;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F')
      d = c - 'A' + 10;
    else
      return false;
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  *out = v;
  return true;
}

}  // namespace

TestParams params_from_options(const Options& o, uint32_t mtu_bytes) {
  TestParams p;
  p.verb = static_cast<uint32_t>(o.test.verb);
  p.kind = static_cast<uint32_t>(o.test.kind);
  p.size = o.size;
  p.all_sizes = o.all_sizes;
  p.sweep_max = o.all_sizes ? o.sweep_max : 0;
  p.iterations = o.duration_s ? 0 : o.iterations;
  p.duration_s = o.duration_s;
  p.margin_s = o.duration_s ? o.margin_s : 0;
  p.num_qps = o.num_qps;
  p.bidirectional = o.bidirectional;
  p.rdma_cm = o.rdma_cm;
  p.early_post = o.early_post;
  p.mtu = mtu_bytes;
  p.post_list = o.post_list;
  p.reversed = o.reversed;
  p.connection = o.ud ? 1 : o.uc ? 2 : o.xrc ? 3 : 0;
  p.dual_port = o.dual_port;
  p.report_per_port = o.report_per_port;
  return p;
}

void encode_params(const TestParams& p, uint8_t out[kTestParamsWireSize]) {
  const uint64_t fields[kTestParamsFields] = {
      p.verb,       p.kind,      p.size,     p.all_sizes,     p.sweep_max, p.iterations,
      p.duration_s, p.margin_s,  p.num_qps,  p.bidirectional, p.rdma_cm,   p.early_post,
      p.mtu,        p.post_list, p.reversed, p.connection,    p.dual_port, p.report_per_port};
  for (size_t i = 0; i < kTestParamsFields; ++i) put_be64(out + 8 * i, fields[i]);
}

TestParams decode_params(const uint8_t in[kTestParamsWireSize]) {
  uint64_t f[kTestParamsFields];
  for (size_t i = 0; i < kTestParamsFields; ++i) f[i] = get_be64(in + 8 * i);
  TestParams p;
  p.verb = static_cast<uint32_t>(f[0]);
  p.kind = static_cast<uint32_t>(f[1]);
  p.size = f[2];
  p.all_sizes = static_cast<uint32_t>(f[3]);
  p.sweep_max = f[4];
  p.iterations = f[5];
  p.duration_s = static_cast<uint32_t>(f[6]);
  p.margin_s = static_cast<uint32_t>(f[7]);
  p.num_qps = static_cast<uint32_t>(f[8]);
  p.bidirectional = static_cast<uint32_t>(f[9]);
  p.rdma_cm = static_cast<uint32_t>(f[10]);
  p.early_post = static_cast<uint32_t>(f[11]);
  p.mtu = static_cast<uint32_t>(f[12]);
  p.post_list = static_cast<uint32_t>(f[13]);
  p.reversed = static_cast<uint32_t>(f[14]);
  p.connection = static_cast<uint32_t>(f[15]);
  p.dual_port = static_cast<uint32_t>(f[16]);
  p.report_per_port = static_cast<uint32_t>(f[17]);
  return p;
}

std::string params_mismatch(const TestParams& l, const TestParams& r) {
  auto test_of = [](const TestParams& p) {
    if (p.verb > 3 || p.kind > 1) return std::string("?");
    return std::string(test_name({static_cast<Verb>(p.verb), static_cast<Kind>(p.kind)}));
  };
  auto num = [](const char* name, uint64_t a, uint64_t b) {
    char buf[128];
    std::snprintf(buf, sizeof buf, "%s local=%" PRIu64 " remote=%" PRIu64, name, a, b);
    return std::string(buf);
  };
  auto on_off = [](const char* name, uint32_t a, uint32_t b) {
    return std::string(name) + " local=" + (a ? "on" : "off") + " remote=" + (b ? "on" : "off");
  };
  if (l.verb != r.verb || l.kind != r.kind)
    return "test local=" + test_of(l) + " remote=" + test_of(r);
  if (l.all_sizes != r.all_sizes) return on_off("all sizes (-a)", l.all_sizes, r.all_sizes);
  if (l.all_sizes && l.sweep_max != r.sweep_max)
    return num("largest size", l.sweep_max, r.sweep_max);
  if (!l.all_sizes && l.size != r.size) return num("size", l.size, r.size);
  if (l.duration_s != r.duration_s) return num("duration", l.duration_s, r.duration_s);
  if (l.margin_s != r.margin_s) return num("margin", l.margin_s, r.margin_s);
  if (l.iterations != r.iterations) return num("iterations", l.iterations, r.iterations);
  // Before the QP count, which -O doubles.
  if (l.dual_port != r.dual_port) return on_off("dual port (-O)", l.dual_port, r.dual_port);
  if (l.report_per_port != r.report_per_port)
    return on_off("report per port (--report-per-port)", l.report_per_port, r.report_per_port);
  if (l.num_qps != r.num_qps) return num("qps", l.num_qps, r.num_qps);
  if (l.bidirectional != r.bidirectional)
    return on_off("bidirectional (-b)", l.bidirectional, r.bidirectional);
  if (l.rdma_cm != r.rdma_cm) return on_off("rdma_cm (-R)", l.rdma_cm, r.rdma_cm);
  if (l.reversed != r.reversed) return on_off("reversed (--reversed)", l.reversed, r.reversed);
  if (l.connection != r.connection) {
    auto name = [](uint32_t c) {
      return c == 1 ? "UD" : c == 2 ? "UC" : c == 3 ? "XRC" : c == 0 ? "RC" : "?";
    };
    return std::string("connection type (-c) local=") + name(l.connection) +
           " remote=" + name(r.connection);
  }
  return {};
}

std::string encode_record(const PeerRecord& r) {
  char buf[kPeerRecordSize + 1];
  int n = std::snprintf(buf, sizeof buf,
                        "%04x:%04x:%06x:%06x:%08x:%016llx:"
                        "%02x:%02x:%02x:%02x:%02x:%02x:%02x:%02x:"
                        "%02x:%02x:%02x:%02x:%02x:%02x:%02x:%02x:%08x:",
                        r.lid, r.out_reads, r.qpn & 0xffffff, r.psn & 0xffffff, r.rkey,
                        static_cast<unsigned long long>(r.vaddr), r.gid[0], r.gid[1], r.gid[2],
                        r.gid[3], r.gid[4], r.gid[5], r.gid[6], r.gid[7], r.gid[8], r.gid[9],
                        r.gid[10], r.gid[11], r.gid[12], r.gid[13], r.gid[14], r.gid[15], r.srqn);
  std::string s(buf, static_cast<size_t>(n));
  s.resize(kPeerRecordSize, '\0');
  return s;
}

void encode_perftest_dest(const PeerRecord& r, int32_t gid_index, uint8_t out[kPerftestDestSize]) {
  std::memset(out, 0, kPerftestDestSize);
  const auto put32 = [&](size_t at, uint32_t v) {
    v = htobe32(v);
    std::memcpy(out + at, &v, 4);
  };
  put32(0, r.lid);
  put32(4, r.out_reads);
  put32(8, r.qpn);
  put32(12, r.psn);
  put32(16, r.rkey);
  const uint64_t vaddr = htobe64(r.vaddr);
  std::memcpy(out + 24, &vaddr, 8);
  std::memcpy(out + 32, r.gid, 16);
  put32(48, r.srqn);
  put32(52, static_cast<uint32_t>(gid_index));
}

PeerRecord decode_perftest_dest(const uint8_t in[kPerftestDestSize]) {
  const auto get32 = [&](size_t at) {
    uint32_t v;
    std::memcpy(&v, in + at, 4);
    return be32toh(v);
  };
  PeerRecord r;
  r.lid = static_cast<uint16_t>(get32(0));
  r.out_reads = static_cast<uint16_t>(get32(4));
  r.qpn = get32(8) & 0xffffff;
  r.psn = get32(12) & 0xffffff;
  r.rkey = get32(16);
  uint64_t vaddr;
  std::memcpy(&vaddr, in + 24, 8);
  r.vaddr = be64toh(vaddr);
  std::memcpy(r.gid, in + 32, 16);
  r.srqn = get32(48);
  r.gid_index = static_cast<int32_t>(get32(52));
  return r;
}

Result<PeerRecord> decode_record(const char* text, size_t len) {
  auto bad = [&](const char* what) {
    std::string shown(text, strnlen(text, len));
    if (shown.size() > 40) shown = shown.substr(0, 40) + "...";
    return Status::error(Errc::protocol_error, "malformed peer record (%s): '%s'", what,
                         shown.c_str());
  };
  if (len != kPeerRecordSize || text[kPeerRecordSize - 1] != '\0') return bad("length");
  // Layout: field widths, each followed by ':'.
  static constexpr int kWidths[] = {4, 4, 6, 6, 8, 16, 2, 2, 2, 2, 2, 2,
                                    2, 2, 2, 2, 2, 2,  2, 2, 2, 2, 8};
  uint64_t v[23];
  size_t pos = 0;
  for (int i = 0; i < 23; ++i) {
    if (!parse_hex(text + pos, kWidths[i], &v[i])) return bad("field");
    pos += static_cast<size_t>(kWidths[i]);
    if (text[pos] != ':') return bad("separator");
    ++pos;
  }
  if (pos != kPeerRecordSize - 1) return bad("length");
  PeerRecord r;
  r.lid = static_cast<uint16_t>(v[0]);
  r.out_reads = static_cast<uint16_t>(v[1]);
  r.qpn = static_cast<uint32_t>(v[2]);
  r.psn = static_cast<uint32_t>(v[3]);
  r.rkey = static_cast<uint32_t>(v[4]);
  r.vaddr = v[5];
  for (int i = 0; i < 16; ++i) r.gid[i] = static_cast<uint8_t>(v[6 + i]);
  r.srqn = static_cast<uint32_t>(v[22]);
  return r;
}

Status OobSession::send_tagged(uint32_t t, const void* body, size_t len) {
  uint8_t head[8];
  put_be32(head, t);
  put_be32(head + 4, static_cast<uint32_t>(len));
  RNICDV_TRY(ch_.send_all(head, sizeof head, timeout_ms_));
  if (len == 0) return Status::ok();
  return ch_.send_all(body, len, timeout_ms_);
}

Status OobSession::recv_tagged(uint32_t t, void* body, size_t len, uint32_t timeout_ms) {
  uint8_t head[8];
  uint32_t got = 0, got_len = 0;
  // A sign of life restarts the wait only if it reports progress (more operations done than
  // the last one said): a peer that sends nothing but keep-alives is cut off after the same
  // wait as a silent one.
  const uint32_t wait_ms = timeout_ms ? timeout_ms : timeout_ms_;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  uint64_t progress = 0;
  bool first_alive = true;
  auto timed_out = [&] {
    return first_alive
               ? Status::error(Errc::timeout, "no answer from %s for %u ms", ch_.peer().c_str(),
                               wait_ms)
               : Status::error(Errc::timeout,
                               "no progress from %s for %u ms (signs of life, the same count)",
                               ch_.peer().c_str(), wait_ms);
  };
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return timed_out();
    if (Status s = ch_.recv_all(head, sizeof head, static_cast<uint32_t>(left.count())); !s)
      return s.code() == Errc::timeout ? timed_out() : s;
    got = get_be32(head);
    got_len = get_be32(head + 4);
    if (got != kTagAlive) break;
    if (got_len != 8)
      return Status::error(Errc::protocol_error, "a sign of life from %s with %u bytes, not 8",
                           ch_.peer().c_str(), got_len);
    uint8_t count[8];
    RNICDV_TRY(ch_.recv_all(count, sizeof count, timeout_ms_));
    const uint64_t n = get_be64(count);
    if (first_alive || n > progress) {
      deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
      progress = n;
      first_alive = false;
    }
  }
  if (got == kTagAbort && got_len < 4096) {
    std::string why(got_len, '\0');
    RNICDV_TRY(ch_.recv_all(why.data(), got_len, timeout_ms_));
    return Status(Errc::disconnected, "peer failed: " + why);
  }
  if (got != t || got_len != len || got_len > kMaxBody)
    return Status::error(Errc::protocol_error,
                         "unexpected message from %s: got '%s' (%u bytes), expected '%s' (%zu)",
                         ch_.peer().c_str(), tag_text(got).c_str(), got_len, tag_text(t).c_str(),
                         len);
  if (len == 0) return Status::ok();
  return ch_.recv_all(body, len, timeout_ms_);
}

Result<PeerKind> OobSession::hello() {
  char mine[16] = {};
  std::memcpy(mine, kPerftestVersion, sizeof kPerftestVersion - 1);
  std::memcpy(mine + sizeof kPerftestVersion, kRnicperfMark, sizeof kRnicperfMark - 1);
  char theirs[16] = {};
  const auto classify = [&]() -> Result<PeerKind> {
    if (std::memcmp(theirs, mine, sizeof mine) == 0) return PeerKind::rnicperf;
    char version[17] = {};
    std::memcpy(version, theirs, sizeof theirs);
    const double v = std::atof(version);
    if (std::memchr(theirs, 0, sizeof theirs) && v >= 5.70) return PeerKind::perftest;
    std::string shown;
    for (char c : theirs) shown += (c >= 0x20 && c < 0x7f) ? c : '.';
    return Status::error(Errc::protocol_error,
                         "%s speaks neither rnicperf's nor perftest's exchange (first 16 bytes "
                         "'%s'; perftest sends its version, 5.70 or later)",
                         ch_.peer().c_str(), shown.c_str());
  };
  if (client_) {
    RNICDV_TRY(ch_.send_all(mine, sizeof mine, timeout_ms_));
    RNICDV_TRY(ch_.recv_all(theirs, sizeof theirs, timeout_ms_));
    return classify();
  }
  RNICDV_TRY(ch_.recv_all(theirs, sizeof theirs, timeout_ms_));
  Result<PeerKind> kind = classify();
  if (!kind) return kind;
  if (*kind == PeerKind::perftest)
    std::memset(mine + sizeof kPerftestVersion, 0, sizeof mine - sizeof kPerftestVersion);
  RNICDV_TRY(ch_.send_all(mine, sizeof mine, timeout_ms_));
  return kind;
}

Status OobSession::swap(const void* mine, void* theirs, size_t len, uint32_t timeout_ms) {
  if (timeout_ms == 0) timeout_ms = timeout_ms_;
  if (client_) {
    RNICDV_TRY(ch_.send_all(mine, len, timeout_ms_));
    return ch_.recv_all(theirs, len, timeout_ms);
  }
  RNICDV_TRY(ch_.recv_all(theirs, len, timeout_ms));
  return ch_.send_all(mine, len, timeout_ms_);
}

Status OobSession::perftest_sys_data(uint32_t* cycle_buffer, uint32_t* cache_line) {
  for (uint32_t* v : {cycle_buffer, cache_line}) {
    const uint32_t mine = htobe32(*v);
    uint32_t theirs = 0;
    RNICDV_TRY(swap(&mine, &theirs, 4, 0));
    *v = std::max(*v, be32toh(theirs));
  }
  return Status::ok();
}

Status OobSession::perftest_mtu(uint8_t local_code, uint8_t* negotiated_code) {
  const char mine[2] = {static_cast<char>('0' + local_code), 0};
  char theirs[2] = {};
  RNICDV_TRY(swap(mine, theirs, 2, 0));
  const int remote = theirs[0] - '0';
  // perftest keeps its own MTU when the peer's is not a valid code (check_mtu).
  *negotiated_code = (theirs[1] == 0 && remote >= 1 && remote <= 5)
                         ? static_cast<uint8_t>(std::min<int>(local_code, remote))
                         : local_code;
  return Status::ok();
}

Status OobSession::perftest_handshake(const PeerRecord& local, PeerRecord* remote,
                                      uint32_t timeout_ms) {
  if (ch_.over_rdma_cm()) {
    uint8_t mine[kPerftestDestSize], theirs[kPerftestDestSize] = {};
    encode_perftest_dest(local, local.gid_index >= 0 ? local.gid_index : gid_index_, mine);
    RNICDV_TRY(swap(mine, theirs, kPerftestDestSize, timeout_ms));
    *remote = decode_perftest_dest(theirs);
    return Status::ok();
  }
  const std::string mine = encode_record(local);
  char theirs[kPeerRecordSize] = {};
  RNICDV_TRY(swap(mine.data(), theirs, kPeerRecordSize, timeout_ms));
  RNICDV_ASSIGN_OR_RETURN(*remote, decode_record(theirs, kPeerRecordSize));
  return Status::ok();
}

Status OobSession::perftest_reports(const BandwidthResult& local, BandwidthResult* remote,
                                    bool per_port, uint32_t timeout_ms) {
  const auto bits = [](double d) {
    uint64_t u;
    std::memcpy(&u, &d, 8);
    return u;
  };
  // perftest's order; the per-port four only when both sides report per port.
  const uint64_t mine[9] = {local.size,
                            local.iterations,
                            bits(local.bw_peak),
                            bits(local.bw_avg),
                            bits(local.msg_rate),
                            bits(local.port[0].bw_avg),
                            bits(local.port[0].msg_rate),
                            bits(local.port[1].bw_avg),
                            bits(local.port[1].msg_rate)};
  uint64_t theirs[9] = {};
  const int fields = per_port ? 9 : 5;
  for (int i = 0; i < fields; ++i) {
    const uint64_t out = htobe64(mine[i]);
    uint64_t in = 0;
    RNICDV_TRY(swap(&out, &in, 8, timeout_ms));
    theirs[i] = be64toh(in);
  }
  remote->size = theirs[0];
  remote->iterations = theirs[1];
  std::memcpy(&remote->bw_peak, &theirs[2], 8);
  std::memcpy(&remote->bw_avg, &theirs[3], 8);
  std::memcpy(&remote->msg_rate, &theirs[4], 8);
  std::memcpy(&remote->port[0].bw_avg, &theirs[5], 8);
  std::memcpy(&remote->port[0].msg_rate, &theirs[6], 8);
  std::memcpy(&remote->port[1].bw_avg, &theirs[7], 8);
  std::memcpy(&remote->port[1].msg_rate, &theirs[8], 8);
  return Status::ok();
}

Status OobSession::perftest_done() {
  if (ch_.over_rdma_cm()) return Status::ok();
  static const char kDone[] = "done";
  RNICDV_TRY(ch_.send_all(kDone, sizeof kDone, timeout_ms_));
  // perftest writes its own "done" as it closes. Reading it first keeps this end from closing
  // on unread bytes, whose reset could reach perftest before its write and fail it (EPIPE).
  char theirs[sizeof kDone];
  (void)ch_.recv_all(theirs, sizeof theirs, 2000);
  return Status::ok();
}

Status OobSession::negotiate(const TestParams& local, TestParams* remote,
                             uint32_t* negotiated_mtu) {
  uint8_t mine[kTestParamsWireSize], theirs[kTestParamsWireSize];
  encode_params(local, mine);
  if (client_) {
    RNICDV_TRY(send_tagged(kTagParams, mine, sizeof mine));
    RNICDV_TRY(recv_tagged(kTagParams, theirs, sizeof theirs, 0));
  } else {
    RNICDV_TRY(recv_tagged(kTagParams, theirs, sizeof theirs, 0));
    RNICDV_TRY(send_tagged(kTagParams, mine, sizeof mine));
  }
  *remote = decode_params(theirs);
  TestParams l = local, r = *remote;
  // The client chooses --early-post; the server follows.
  l.early_post = r.early_post = 0;
  if (std::string why = params_mismatch(l, r); !why.empty())
    return Status(Errc::invalid_argument, "parameter mismatch: " + why);
  *negotiated_mtu = std::min(local.mtu, remote->mtu);
  return Status::ok();
}

Status OobSession::exchange_records(const std::vector<PeerRecord>& local,
                                    std::vector<PeerRecord>* remote) {
  std::string mine;
  for (const auto& r : local) mine += encode_record(r);
  std::string theirs(mine.size(), '\0');
  if (client_) {
    RNICDV_TRY(send_tagged(kTagRecords, mine.data(), mine.size()));
    RNICDV_TRY(recv_tagged(kTagRecords, theirs.data(), theirs.size(), 0));
  } else {
    RNICDV_TRY(recv_tagged(kTagRecords, theirs.data(), theirs.size(), 0));
    RNICDV_TRY(send_tagged(kTagRecords, mine.data(), mine.size()));
  }
  remote->clear();
  for (size_t off = 0; off < theirs.size(); off += kPeerRecordSize) {
    RNICDV_ASSIGN_OR_RETURN(PeerRecord r, decode_record(theirs.data() + off, kPeerRecordSize));
    remote->push_back(r);
  }
  return Status::ok();
}

Status OobSession::barrier(uint32_t phase, uint32_t timeout_ms) {
  uint8_t mine[4], theirs[4];
  put_be32(mine, phase);
  if (client_) {
    RNICDV_TRY(send_tagged(kTagBarrier, mine, 4));
    RNICDV_TRY(recv_tagged(kTagBarrier, theirs, 4, timeout_ms));
  } else {
    RNICDV_TRY(recv_tagged(kTagBarrier, theirs, 4, timeout_ms));
    RNICDV_TRY(send_tagged(kTagBarrier, mine, 4));
  }
  if (get_be32(theirs) != phase)
    return Status::error(Errc::protocol_error, "%s is at step %u, this side at step %u",
                         ch_.peer().c_str(), get_be32(theirs), phase);
  return Status::ok();
}

Status OobSession::send_done(uint64_t count) {
  uint8_t body[8];
  put_be64(body, count);
  return send_tagged(kTagDone, body, sizeof body);
}

Status OobSession::recv_done(uint64_t* count, uint32_t timeout_ms) {
  uint8_t body[8];
  RNICDV_TRY(recv_tagged(kTagDone, body, sizeof body, timeout_ms));
  *count = get_be64(body);
  return Status::ok();
}

namespace {
constexpr size_t kBwBody = 72;
void encode_bw(const BandwidthResult& r, uint8_t out[kBwBody]) {
  put_be64(out, r.size);
  put_be64(out + 8, r.iterations);
  put_be64(out + 16, double_bits(r.bw_peak));
  put_be64(out + 24, double_bits(r.bw_avg));
  put_be64(out + 32, double_bits(r.msg_rate));
  for (size_t p = 0; p < 2; ++p) {
    put_be64(out + 40 + 16 * p, double_bits(r.port[p].bw_avg));
    put_be64(out + 48 + 16 * p, double_bits(r.port[p].msg_rate));
  }
}
BandwidthResult decode_bw(const uint8_t in[kBwBody]) {
  BandwidthResult r;
  r.size = get_be64(in);
  r.iterations = get_be64(in + 8);
  r.bw_peak = bits_double(get_be64(in + 16));
  r.bw_avg = bits_double(get_be64(in + 24));
  r.msg_rate = bits_double(get_be64(in + 32));
  for (size_t p = 0; p < 2; ++p) {
    r.port[p].bw_avg = bits_double(get_be64(in + 40 + 16 * p));
    r.port[p].msg_rate = bits_double(get_be64(in + 48 + 16 * p));
  }
  return r;
}
}  // namespace

Status OobSession::send_bw(const BandwidthResult& r) {
  uint8_t body[kBwBody];
  encode_bw(r, body);
  return send_tagged(kTagBw, body, sizeof body);
}

Status OobSession::recv_bw(BandwidthResult* r, uint32_t timeout_ms) {
  uint8_t body[kBwBody];
  RNICDV_TRY(recv_tagged(kTagBw, body, sizeof body, timeout_ms));
  *r = decode_bw(body);
  return Status::ok();
}

Status OobSession::exchange_bw(const BandwidthResult& local, BandwidthResult* remote) {
  if (client_) {
    RNICDV_TRY(send_bw(local));
    return recv_bw(remote, 0);
  }
  RNICDV_TRY(recv_bw(remote, 0));
  return send_bw(local);
}

Status OobSession::send_alive(uint64_t progress) {
  uint8_t body[8];
  put_be64(body, progress);
  return send_tagged(kTagAlive, body, sizeof body);
}

void OobSession::send_abort(const std::string& why) {
  if (!ch_.valid()) return;
  std::string text = why.substr(0, 1024);
  uint8_t head[8];
  put_be32(head, kTagAbort);
  put_be32(head + 4, static_cast<uint32_t>(text.size()));
  if (ch_.send_all(head, sizeof head, 1000)) (void)ch_.send_all(text.data(), text.size(), 1000);
}

}  // namespace rnicperf
