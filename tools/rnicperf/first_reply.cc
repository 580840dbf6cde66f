// SPDX-License-Identifier: BSD-3-Clause
#include "first_reply.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <thread>

#include "clock.h"
#include "cm_connect.h"
#include "json.h"
#include "report_json.h"
#include "rnicdv/connection.h"
#include "rnicdv/rnicdv.h"
#include "rnicdv/sim/sim.h"

namespace rnicperf {

using rnicdv::Completion;
using rnicdv::Connection;
using rnicdv::ConnectionEventType;
using rnicdv::Errc;
using rnicdv::Result;
using rnicdv::Status;
namespace send_flags = rnicdv::send_flags;

namespace {

constexpr uint32_t kMsgBytes = 8;  // request and reply: inline SENDs

enum class Way : uint8_t { early, queue };
struct RowSpec {
  Way way;
  bool rtu_lost;
};
constexpr RowSpec kRows[] = {{Way::early, false}, {Way::queue, false}, {Way::early, true},
                             {Way::queue, true}};
constexpr size_t kNumRows = sizeof kRows / sizeof kRows[0];

// One side: a device, a PD, one CQ per direction (shared by its QPs), a registered buffer.
struct Side {
  std::optional<rnicdv::Device> dev;
  std::optional<rnicdv::ProtectionDomain> pd;
  std::optional<rnicdv::CompletionQueue> send_cq, recv_cq;
  std::vector<uint8_t> buf = std::vector<uint8_t>(4096);
  std::optional<rnicdv::MemoryRegion> mr;

  Status open(std::shared_ptr<rnicdv::sim::Device> hw) {
    RNICDV_ASSIGN_OR_RETURN(dev, rnicdv::Device::wrap(std::move(hw)));
    RNICDV_ASSIGN_OR_RETURN(pd, dev->alloc_pd());
    RNICDV_ASSIGN_OR_RETURN(send_cq, dev->create_cq(64));
    RNICDV_ASSIGN_OR_RETURN(recv_cq, dev->create_cq(64));
    RNICDV_ASSIGN_OR_RETURN(mr,
                            pd->reg_mr(buf.data(), buf.size(), rnicdv::hw::access::local_write));
    return Status::ok();
  }

  Result<rnicdv::QueuePair> fresh_qp(rnicdv::EarlyPost policy) {
    rnicdv::QpConfig config;
    config.early_post = policy;
    config.caps.max_send_wr = 8;
    config.caps.max_recv_wr = 8;
    config.caps.max_inline_data = 64;
    RNICDV_ASSIGN_OR_RETURN(rnicdv::QueuePair qp, dev->create_qp(*pd, *send_cq, *recv_cq, config));
    RNICDV_TRY(qp.to_init());
    rnicdv::Sge sge{reinterpret_cast<uint64_t>(buf.data()), kMsgBytes, mr->lkey()};
    rnicdv::RecvWr rwr;
    rwr.wr_id = 1;
    rwr.sg_list = &sge;
    rwr.num_sge = 1;
    if (Errc e = qp.post_recv(rwr); e != Errc::ok)
      return Status::error(e, "qp %#x: post the receive for the first message", qp.qpn());
    return qp;
  }
};

// Bounded busy wait on `cq` for one successful completion.
Status one_completion(rnicdv::CompletionQueue& cq, const char* what,
                      std::chrono::steady_clock::time_point deadline, Completion* out) {
  for (;;) {
    if (cq.poll(out, 1) == 1) {
      if (out->status != IBV_WC_SUCCESS)
        return Status::error(Errc::io_error, "first reply: %s completed with status %d", what,
                             out->status);
      return Status::ok();
    }
    if (std::chrono::steady_clock::now() > deadline)
      return Status::error(Errc::timeout, "first reply: no %s in time", what);
  }
}

struct Shared {
  std::atomic<uint32_t> server_ready{0};  // round r: the server's QP and receive are set
  std::atomic<uint32_t> server_done{0};   // round r: the server tore its connection down
  std::atomic<bool> failed{false};
  Status server_status = Status::ok();
};

rnicdv::ConnectionOptions cm_options(const Options& o) {
  rnicdv::ConnectionOptions c;
  c.timeout = std::chrono::milliseconds(o.timeout_s * 1000u);
  c.responder_resources = 1;
  c.initiator_depth = 1;
  apply_path_options(o, &c);
  return c;
}

// The server's event loop for one connection: the receive CQ, the device's async events
// (COMM_EST) and the connection's events, as a single-threaded consumer polls them. CM events
// are read on every pass, or every --cm-poll-us.
Status serve_one(Side& s, rnicdv::Listener& listener, rnicdv::QueuePair& qp, const Options& o,
                 Way way, bool* released_early) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(o.timeout_s);
  const rnicdv::ConnectionOptions options = cm_options(o);
  std::optional<Connection> conn;
  while (!conn) {
    auto ev = listener.wait_event(std::chrono::milliseconds(o.timeout_s * 1000u));
    if (!ev) return Status::error(Errc::timeout, "first reply: no connection request in time");
    if (ev->type != ConnectionEventType::connect_request || !ev->request) continue;
    RNICDV_ASSIGN_OR_RETURN(conn, ev->request->accept(qp, {}, options));
  }
  const auto period = std::chrono::microseconds(o.cm_poll_us);
  auto next_cm = std::chrono::steady_clock::now();
  const uint64_t reply = 0x7265706c79ull;  // "reply"
  bool established = false, queued = false, posted = false, reply_done = false;
  Completion wc;
  for (;;) {
    if (!posted && s.recv_cq->poll(&wc, 1) == 1) {
      if (wc.status != IBV_WC_SUCCESS)
        return Status::error(Errc::io_error, "first reply: the request's receive failed (%d)",
                             wc.status);
      if (way == Way::early || established) {
        if (Errc e = qp.post_message_inline(2, &reply, kMsgBytes, send_flags::signaled); e != Errc::ok)
          return Status::error(e, "first reply: qp %#x: post the reply", qp.qpn());
        posted = true;
      } else {
        queued = true;  // the consumer's own queue, until ESTABLISHED
      }
    }
    const auto now = std::chrono::steady_clock::now();
    if (!established && (period.count() == 0 || now >= next_cm)) {
      next_cm = now + period;
      s.dev->process_events();  // forwards COMM_EST
      // Whether the reply is already on its way (rung, not withheld) when the event is read.
      const bool out_before = posted && qp.withheld() == 0;
      if (auto ev = conn->poll_event()) {
        if (ev->type != ConnectionEventType::established)
          return Status(ev->status.code(), "first reply: server: " + ev->status.message());
        established = true;
        *released_early = out_before;
        if (queued) {
          if (Errc e = qp.post_message_inline(2, &reply, kMsgBytes, send_flags::signaled);
              e != Errc::ok)
            return Status::error(e, "first reply: qp %#x: post the queued reply", qp.qpn());
          posted = true;
        }
      }
    }
    if (posted && established) break;
    if (posted && s.send_cq->poll(&wc, 1) == 1) {
      if (wc.status != IBV_WC_SUCCESS)
        return Status::error(Errc::io_error, "first reply: the reply failed (%d)", wc.status);
      reply_done = true;
      // Sent before this loop read ESTABLISHED: read it now, as the application would.
      if (auto ev = conn->wait_event(std::chrono::milliseconds(o.timeout_s * 1000u)); ev &&
          ev->type == ConnectionEventType::established) {
        established = true;
        *released_early = true;
        break;
      }
      return Status::error(Errc::protocol_error, "first reply: server: no ESTABLISHED after the reply");
    }
    if (now > deadline) return Status::error(Errc::timeout, "first reply: server: no request in time");
  }
  if (!reply_done) {
    RNICDV_TRY(one_completion(*s.send_cq, "reply completion", deadline, &wc));
  }
  // The client disconnects once it has the reply.
  for (;;) {
    auto ev = conn->wait_event(std::chrono::milliseconds(o.timeout_s * 1000u));
    if (!ev) return Status::error(Errc::timeout, "first reply: server: no DREQ in time");
    if (ev->type == ConnectionEventType::disconnected) break;
  }
  return Status::ok();
}

void server_main(Side& s, const Options& o, Shared& sh, uint32_t rounds, FirstReplyResult* out) {
  auto listener = rnicdv::Listener::listen(*s.dev, "", o.port);
  if (!listener) {
    sh.server_status = listener.status();
    sh.failed = true;
    return;
  }
  for (uint32_t r = 0; r < rounds && !sh.failed; ++r) {
    const RowSpec spec = kRows[r % kNumRows];
    auto qp = s.fresh_qp(spec.way == Way::early ? rnicdv::EarlyPost::automatic
                                                : rnicdv::EarlyPost::strict);
    if (!qp) {
      sh.server_status = qp.status();
      sh.failed = true;
      return;
    }
    sh.server_ready.store(r + 1, std::memory_order_release);
    bool released_early = false;
    Status st = serve_one(s, *listener, qp.value(), o, spec.way, &released_early);
    if (!st) {
      sh.server_status = st;
      sh.failed = true;
      return;
    }
    if (released_early) ++out->rows[r % kNumRows].released_before_event;
    sh.server_done.store(r + 1, std::memory_order_release);
  }
}

// Waits (sleeping) until `counter` reaches `value` or the run failed.
bool await(const std::atomic<uint32_t>& counter, uint32_t value, const Shared& sh,
           std::chrono::steady_clock::time_point deadline) {
  while (counter.load(std::memory_order_acquire) < value) {
    if (sh.failed || std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return true;
}

// One connection from the client's side: connect, the request as soon as the QP can send,
// the reply. Returns the time from connect() to the reply's arrival.
Result<double> connect_once(Side& c, const std::string& server_ip, const Options& o) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(o.timeout_s);
  RNICDV_ASSIGN_OR_RETURN(rnicdv::QueuePair qp, c.fresh_qp(rnicdv::EarlyPost::automatic));
  const Clock& clock = Clock::get();
  const uint64_t request = 0x72657175657374ull;  // "request"
  const uint64_t t0 = clock.now();
  RNICDV_ASSIGN_OR_RETURN(Connection conn,
                          Connection::connect(qp, server_ip, o.port, {}, cm_options(o)));
  bool established = false;
  Completion wc;
  uint64_t t1 = 0;
  for (;;) {
    if (!established) {
      if (auto ev = conn.poll_event()) {
        if (ev->type != ConnectionEventType::established)
          return Status(ev->status.code(), "first reply: client: " + ev->status.message());
        established = true;
        if (Errc e = qp.post_message_inline(1, &request, kMsgBytes, send_flags::signaled);
            e != Errc::ok)
          return Status::error(e, "first reply: qp %#x: post the request", qp.qpn());
      }
    }
    if (c.recv_cq->poll(&wc, 1) == 1) {
      t1 = clock.now();
      if (wc.status != IBV_WC_SUCCESS)
        return Status::error(Errc::io_error, "first reply: the reply's receive failed (%d)",
                             wc.status);
      break;
    }
    if (std::chrono::steady_clock::now() > deadline)
      return Status::error(Errc::timeout, "first reply: client: no reply in time");
  }
  RNICDV_TRY(one_completion(*c.send_cq, "request completion", deadline, &wc));
  RNICDV_TRY(conn.disconnect());
  return clock.to_us(t1 - t0);
}

std::shared_ptr<rnicdv::sim::Fabric> make_fabric(const Options& o, Status* st) {
  rnicdv::sim::FabricConfig config;
  config.mode = rnicdv::sim::ExecMode::threaded;
  std::string wire = o.wire;
  if (wire.empty()) {
    const char* env = std::getenv("RNICDV_SIM_WIRE");
    wire = env && *env ? env : "inproc";
  }
  config.wire = wire == "udp" ? rnicdv::sim::WireKind::udp : rnicdv::sim::WireKind::inproc;
  if (wire == "dpdk") {
    *st = Status::error(Errc::unsupported, "--first-reply: not on the DPDK wire");
    return nullptr;
  }
  auto f = rnicdv::sim::Fabric::create(config);
  if (!f) {
    *st = f.status();
    return nullptr;
  }
  return f.value();
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const size_t k = static_cast<size_t>(std::ceil(p * static_cast<double>(v.size())));
  return v[std::min(v.size() - 1, k == 0 ? 0 : k - 1)];
}

}  // namespace

Result<FirstReplyResult> run_first_reply(const Options& o) {
  Status st = Status::ok();
  auto fabric = make_fabric(o, &st);
  if (!fabric) return st;
  RNICDV_ASSIGN_OR_RETURN(auto hw_server, fabric->add_device());
  RNICDV_ASSIGN_OR_RETURN(auto hw_client, fabric->add_device());
  Side server, client;
  RNICDV_TRY(server.open(hw_server));
  RNICDV_TRY(client.open(hw_client));
  const std::string server_ip = server.dev->hw().info().gid.ip().to_string();

  FirstReplyResult out;
  out.transport = server.dev->hw().info().transport + ", " + client.dev->hw().info().transport;
  for (const RowSpec& spec : kRows) {
    FirstReplyRow row;
    row.reply = spec.way == Way::early ? "early post" : "own queue";
    row.rtu = spec.rtu_lost ? "lost" : "delivered";
    out.rows.push_back(row);
  }
  const uint32_t rounds = o.first_reply * static_cast<uint32_t>(kNumRows);
  Shared sh;
  std::thread server_thread([&] { server_main(server, o, sh, rounds, &out); });
  rnicdv::sim::Device& client_dev = *hw_client;
  Status client_status = Status::ok();
  for (uint32_t r = 0; r < rounds; ++r) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(o.timeout_s);
    if (!await(sh.server_ready, r + 1, sh, deadline)) break;
    const RowSpec spec = kRows[r % kNumRows];
    client_dev.drop_outgoing_cm(rnicdv::sim::CmMessage::rtu, spec.rtu_lost ? 1 : 0);
    auto t = connect_once(client, server_ip, o);
    if (!t) {
      client_status = t.status();
      sh.failed = true;
      break;
    }
    out.rows[r % kNumRows].us.push_back(t.value());
    if (!await(sh.server_done, r + 1, sh, deadline)) break;
    if (r % kNumRows == kNumRows - 1 && (r + 1) % (kNumRows * 50) == 0)
      std::fprintf(stderr, " %zu of %u connections\n", (r + 1) / kNumRows, o.first_reply);
  }
  client_dev.drop_outgoing_cm(rnicdv::sim::CmMessage::rtu, 0);
  server_thread.join();
  if (!client_status) return client_status;
  if (!sh.server_status) return Status(sh.server_status).prepend("first reply server");
  for (const FirstReplyRow& row : out.rows)
    if (row.us.size() != o.first_reply)
      return Status::error(Errc::timeout, "first reply: %zu of %u connections completed",
                           row.us.size(), o.first_reply);
  return out;
}

Status report_first_reply(const Options& o, const FirstReplyResult& r) {
  std::printf("---------------------------------------------------------------------------------------\n");
  std::printf(" First reply on a fresh connection: client connect() to the reply's arrival\n");
  std::printf(" Fabric          : %s\n", r.transport.c_str());
  std::printf(" Server CM reads : %s\n",
              o.cm_poll_us ? (std::to_string(o.cm_poll_us) + " us apart").c_str()
                           : "every pass of its loop");
  std::printf("---------------------------------------------------------------------------------------\n");
  std::printf(" %-8s %-12s %-11s %14s %14s %14s %16s\n", "#conns", "reply", "RTU",
              "t_median[usec]", "t_p90[usec]", "t_p99[usec]", "before the event");
  for (const FirstReplyRow& row : r.rows)
    std::printf(" %-8zu %-12s %-11s %14.2f %14.2f %14.2f %16llu\n", row.us.size(), row.reply,
                row.rtu, percentile(row.us, 0.5), percentile(row.us, 0.9),
                percentile(row.us, 0.99), static_cast<unsigned long long>(row.released_before_event));
  const double ratio_rtu = percentile(r.rows[0].us, 0.5) / percentile(r.rows[1].us, 0.5);
  const double ratio_comm_est = percentile(r.rows[2].us, 0.5) / percentile(r.rows[3].us, 0.5);
  std::printf(" early post / own queue (medians): %.3f with the RTU, %.3f with COMM_EST\n",
              ratio_rtu, ratio_comm_est);
  std::printf("---------------------------------------------------------------------------------------\n");
  if (!o.out_json) return Status::ok();
  JsonWriter w;
  w.begin_object();
  w.field("test", "first_reply");
  w.field("connections", o.first_reply);
  w.field("cm_poll_us", o.cm_poll_us);
  w.field("fabric", r.transport);
  w.key("rows").begin_array();
  for (const FirstReplyRow& row : r.rows) {
    w.begin_object();
    w.field("reply", row.reply);
    w.field("rtu", row.rtu);
    w.field("t_median_us", percentile(row.us, 0.5));
    w.field("t_p90_us", percentile(row.us, 0.9));
    w.field("t_p99_us", percentile(row.us, 0.99));
    w.field("released_before_event", row.released_before_event);
    w.end_object();
  }
  w.end_array();
  w.field("ratio_early_vs_queue_rtu", ratio_rtu);
  w.field("ratio_early_vs_queue_comm_est", ratio_comm_est);
  w.end_object();
  return write_report_file(o.json_path, w.str());
}

}  // namespace rnicperf
