// SPDX-License-Identifier: BSD-3-Clause
// A run against perftest itself: the messages perftest's program of the same test sends in
// this role (perftest_communication.c and the tests' main() at perftest 4.5-0.17, Debian's
// perftest 4.5), in the same order, sizes and formats, so that rnicperf and ib_write_lat,
// ib_read_lat, ib_send_lat, ib_atomic_lat, ib_write_bw, ib_read_bw, ib_send_bw or
// ib_atomic_bw measure against each other, either one the server.
//
//   prologue   versions (hello), page and cache-line sizes, MTU code. perftest 4.5 cannot run
//              without its versions (with --dont_xchg_versions it stops: "not compatible
//              with versions older than 5.70"), so rnicperf always sends them
//   records    the 108-byte record at every handshake. There is one per QP, n of them (1, -q,
//              twice that with -O, or 2 in -c XRC's latency tests, where perftest doubles
//              num_of_qps), each with the GID of its QP's port, and each goes at its QP's
//              turn: before the QPs connect, every QP's turn (write_lat, read_lat and
//              atomic_lat shake hands once more first); after, the send tests shake hands
//              once, print the addresses and take every QP's turn, the others take every
//              QP's turn, print the addresses and shake hands once. A handshake that is no
//              QP's turn carries QP 0's record
//   write_lat  nothing more: the server writes first, each write's last byte is its number
//   read_lat   the server waits in a last handshake until the client has read; "done"
//              (atomic_lat the same)
//   send_lat   a handshake once the receives are posted, per size; the client sends first;
//              a last handshake; "done"
//   write_bw   the server waits in a handshake until the client has written; the client's
//              last row goes over as 5 x 8 bytes (9 with --report-per-port: each port's
//              average and rate), the server prints it; a handshake; "done" (read_bw and
//              atomic_bw the same)
//   send_bw    a handshake once the receives are posted (per size with -a, and one after
//              each size then), a last handshake; "done". With --run_infinitely, nothing
//              after the first handshake: each side runs until it is stopped, an rnicperf
//              receiver until the perftest sender's connection closes
//
// With --reversed (both sides given it) the server posts and the client is posted to, as
// perftest swaps its "machine"; each exchange keeps its TCP order.
//
// With -z (perftest's -z or -R) the same messages go as SENDs on the rdma_cm control QP, the
// record as perftest's binary struct pingpong_dest, and no "done". With -R -z too, a
// handshake, the CM connection of the test QP and a handshake come first, and the QP is not
// brought up from the records (perftest's create_rdma_cm_connection).
//
// A -D bandwidth run exchanges the same: each side times its own window (a receiver's from its
// first message, as perftest's) and ends by its own clock.
//
// Nothing is negotiated, as between two perftest ends: both are given the same size (or -a),
// iterations or duration, -q and -O. perftest's exchange has no room for rnicperf's extras
// (early posting, first reply), nor for -b and a latency test's -D, which perftest exchanges
// differently (nor for an endless run but send_bw's, nor -R without -z).
#include "bandwidth_loops.h"
#include "cm_connect.h"
#include "latency_loops.h"
#include "session_impl.h"

namespace rnicperf::detail {

namespace {

// perftest waits without limit while its peer measures; rnicperf waits up to a day.
constexpr uint32_t kMeasureWaitMs = 24u * 3600 * 1000;

uint8_t mtu_code_of(uint32_t bytes) {
  uint8_t code = 1;
  while (code < 5 && (128u << code) < bytes) ++code;
  return code;
}

Status check_supported(const Options& o) {
  const char* name = test_name(o.test);
  const auto refuse = [&](const char* what) {
    return Status::error(Errc::invalid_argument,
                         "%s: the peer is perftest, whose exchange has no room for %s (it needs "
                         "an rnicperf peer)",
                         name, what);
  };
  if (o.bidirectional) return refuse("-b");
  // perftest's endless send_bw has no exchange after the start: rnicperf's runs too (below).
  if (o.run_infinitely && o.test.verb != Verb::send) return refuse("--run_infinitely");
  // A -D bandwidth run exchanges what an iteration run does (each side times its own window);
  // rnicperf's -D ping-pong tells the responder its end, which perftest's does not read.
  if (o.duration_s && !o.run_infinitely && o.test.kind == Kind::latency)
    return refuse("-D in a latency test");
  // perftest's -R implies its -z: the parameters go over rdma_cm, so this end needs -z too.
  if (o.rdma_cm && !o.com_rdma_cm)
    return refuse("-R without -z (perftest's -R exchanges over rdma_cm: add -z)");
  if (o.rdma_cm && o.ud) return refuse("-c UD with -R (perftest's UD QPs meet otherwise)");
  if (o.early_post) return refuse("--early-post");
  return Status::ok();
}

}  // namespace

Status Session::run_with_perftest() {
  perftest_peer_ = true;
  RNICDV_TRY(check_supported(o_));
  if (o_.run_infinitely && o_.com_rdma_cm && !sends())
    return Status::error(Errc::invalid_argument,
                         "%s: the peer is perftest, and an endless receiver over rdma_cm (-z) "
                         "cannot tell when perftest's sender stops: perftest ends by a signal, "
                         "and only a TCP channel closes with it (run the receiver without -z)",
                         test_name(o_.test));
  // rnicperf's buffers do not depend on the page and cache-line sizes; the MTU does matter.
  uint32_t cycle_buffer = 4096, cache_line = 64;
  RNICDV_TRY(oob_->perftest_sys_data(&cycle_buffer, &cache_line));
  uint8_t code = 0;
  RNICDV_TRY(oob_->perftest_mtu(mtu_code_of(ep_->mtu_bytes(o_)), &code));
  const uint32_t mtu = 128u << code;
  const std::vector<uint64_t> sizes = sizes_of(o_, mtu, s_.quiet);
  RNICDV_TRY(create_endpoint(sizes.back(), 0, mtu));

  // Over rdma_cm (-z) perftest's binary record also carries the GID index.
  oob_->set_perftest_gid_index(static_cast<int32_t>(ep_->device().info().gid_index));
  // One record per QP, each QP's at its turn (perftest's ctx_hand_shake of my_dest[i]); the
  // handshakes that are no QP's turn carry QP 0's.
  const std::vector<PeerRecord> mine = ep_->local_records();
  std::vector<PeerRecord> theirs(mine.size());
  const auto handshake = [&](size_t qp = 0) {
    return oob_->perftest_handshake(mine[qp], &theirs[qp]);
  };
  const auto each_qp = [&]() -> Status {
    for (size_t i = 0; i < mine.size(); ++i) RNICDV_TRY(handshake(i));
    return Status::ok();
  };
  if (o_.rdma_cm) {
    // -R (perftest's create_rdma_cm_connection): a handshake, the CM connects QP 0 on port
    // -p (perftest's server starts to listen only after that handshake, so a REQ may find
    // nobody yet and is sent again), a handshake.
    CmRendezvous meet;
    meet.sync = [&] { return handshake(); };
    meet.address = s_.client ? oob_->channel().peer_ip() : std::string();  // -z's, resolved
    meet.retry_refused = true;
    RNICDV_TRY(cm_connect(*ep_, meet, o_, s_.client, mtu, &conn_));
    RNICDV_TRY(handshake());
  }
  // write_lat, read_lat and atomic_lat shake hands once before the QPs' turns; send_lat does
  // not, nor do the bandwidth tests. The QPNs, PSNs and GIDs come from the QPs' turns (perftest
  // sends the same records every time).
  if (o_.test.kind == Kind::latency && o_.test.verb != Verb::send) RNICDV_TRY(handshake());
  RNICDV_TRY(each_qp());
  if (!o_.rdma_cm) RNICDV_TRY(ep_->connect(theirs, mtu, false));
  // After the QPs connect: the send tests shake hands once, then each QP's turn; the others
  // each QP's turn, then once.
  const bool send = o_.test.verb == Verb::send;
  RNICDV_TRY(send ? handshake() : each_qp());
  if (o_.rdma_cm) RNICDV_TRY(ep_->set_remote(theirs));  // the CM set the rest
  print_addresses();
  RNICDV_TRY(send ? each_qp() : handshake());
  RNICDV_TRY(ep_->set_remote(theirs));

  RunContext base = base_context(sizes.front());
  base.perftest_peer = true;
  Status st;
  if (o_.test.kind == Kind::latency)
    st = perftest_latency(sizes, base);
  else if (o_.test.verb == Verb::send)
    st = perftest_send_bw(sizes, base);
  else
    st = perftest_write_bw(sizes, base);  // read_bw and atomic_bw exchange as write_bw does
  if (!st) return st;
  if (o_.use_event) json_.set_completion_events(ep_->events_taken());
  if (ep_->recv_post_calls() > 0) json_.set_receive_post_calls(ep_->recv_post_calls());
  if (o_.post_send_lists()) json_.set_post_send_calls(post_send_calls_);
  if (o_.out_json && !s_.quiet) RNICDV_TRY(json_.write(o_.json_path));
  return Status::ok();
}

Status Session::perftest_latency(const std::vector<uint64_t>& sizes, RunContext& base) {
  const PeerRecord mine = ep_->local_records()[0];
  PeerRecord theirs;
  if ((o_.test.verb == Verb::read || o_.test.verb == Verb::atomic) && !s_.client) {
    // The READ (or atomic) server only answers: it waits in the closing handshake until the
    // client is done.
    RNICDV_TRY(oob_->perftest_handshake(mine, &theirs, kMeasureWaitMs));
    return oob_->perftest_done();
  }
  print(latency_table_header());
  for (uint64_t size : sizes) {
    RunContext c = base;
    c.size = size;
    progress_.store(0, std::memory_order_relaxed);
    if (o_.test.verb == Verb::send) {
      // perftest's send_lat posts its receives for each size, then a handshake, so that no
      // SEND comes before the receives are there (on UD it would be lost).
      RNICDV_TRY(ep_->refill_receives());
      RNICDV_TRY(oob_->perftest_handshake(mine, &theirs));
    }
    RNICDV_TRY(latency_size(c));
  }
  print(result_line());
  if (o_.test.verb == Verb::write) return Status::ok();  // perftest's write_lat just exits
  RNICDV_TRY(oob_->perftest_handshake(mine, &theirs));
  return oob_->perftest_done();
}

Status Session::perftest_write_bw(const std::vector<uint64_t>& sizes, RunContext& base) {
  const PeerRecord mine = ep_->local_records()[0];
  PeerRecord theirs;
  print(o_.cpu_util ? with_cpu_util_header(bw_table_header()) : bw_table_header());
  if (sends()) {
    for (uint64_t size : sizes) {
      RunContext c = base;
      c.size = size;
      progress_.store(0, std::memory_order_relaxed);
      RNICDV_TRY(bandwidth_size(c));
    }
    print(table_line());
    RNICDV_TRY(oob_->perftest_handshake(mine, &theirs));
    BandwidthResult server_report;  // perftest's server sends one it never filled
    RNICDV_TRY(oob_->perftest_reports(last_bw_, &server_report, o_.report_per_port));
  } else {
    // The WRITE server does nothing while the client writes; it prints the client's last row.
    RNICDV_TRY(oob_->perftest_handshake(mine, &theirs, kMeasureWaitMs));
    BandwidthResult client_report;
    RNICDV_TRY(oob_->perftest_reports(BandwidthResult{}, &client_report, o_.report_per_port));
    print_bandwidth(client_report);
    json_.add(client_report);
    print(table_line());
  }
  RNICDV_TRY(oob_->perftest_handshake(mine, &theirs));
  return oob_->perftest_done();
}

Status Session::perftest_send_bw(const std::vector<uint64_t>& sizes, RunContext& base) {
  const PeerRecord mine = ep_->local_records()[0];
  PeerRecord theirs;
  print(o_.cpu_util ? with_cpu_util_header(bw_table_header()) : bw_table_header());
  for (uint64_t size : sizes) {
    RunContext c = base;
    c.size = size;
    // The server's receives are posted before it answers this handshake: the client sends
    // as soon as it has the answer.
    if (!sends()) RNICDV_TRY(ep_->refill_receives());
    RNICDV_TRY(oob_->perftest_handshake(mine, &theirs));
    progress_.store(0, std::memory_order_relaxed);
    RNICDV_TRY(bandwidth_size(c));
    if (o_.all_sizes) RNICDV_TRY(oob_->perftest_handshake(mine, &theirs));
  }
  print(table_line());
  // perftest's endless run ends by a signal, with no closing exchange: rnicperf's end closes
  // the connection (a perftest receiver goes on until it is stopped; an rnicperf receiver
  // ends when the perftest sender's connection closes).
  if (o_.run_infinitely) return Status::ok();
  RNICDV_TRY(oob_->perftest_handshake(mine, &theirs));
  return oob_->perftest_done();
}

}  // namespace rnicperf::detail
