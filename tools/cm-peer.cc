// SPDX-License-Identifier: BSD-3-Clause
// cm-peer: one end of a connection over the simulated fabric's UDP wire, in its own process
// (or network namespace). The server accepts one connection, posts a greeting while its QP is
// still in RTR (early posting), echoes every message back and exits once disconnected; the
// client connects, checks the greeting and the echoes, and disconnects.
//
//   cm-peer server [--addr IP] [--port N] [--messages N] [--greeting N] [--timeout S]
//   cm-peer client --peer IP [--addr IP] [--port N] [--messages N] [--greeting N]
//
// --addr is this HCA's address, IPv4 or IPv6 (default: the first free 127.0.0.x, x >= 2);
// --peer the server's.
// Progress goes to stdout, one line each ("listening 127.0.0.3:7471", "established", ...),
// which the tests read. Exit status: 0 on success, 1 on failure, 2 on bad usage.
#include <arpa/inet.h>

#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "rnicdv/connection.h"
#include "rnicdv/rnicdv.h"
#include "rnicdv/sim/sim.h"

namespace {

using namespace rnicdv;
using Clock = std::chrono::steady_clock;

constexpr uint32_t kMsgBytes = 256;
constexpr uint32_t kSlots = 64;

struct Args {
  bool server = false;
  std::string addr;
  std::string peer;
  uint16_t port = 7471;
  uint32_t messages = 16;
  uint32_t greeting = 4;
  int timeout_s = 20;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "cm-peer: %s\nusage: cm-peer server|client [--addr IP] [--peer IP] [--port N] "
               "[--messages N] [--greeting N] [--timeout S]\n",
               why);
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  if (argc < 2) usage("no role");
  const std::string role = argv[1];
  if (role == "server")
    a.server = true;
  else if (role != "client")
    usage("the role is server or client");
  for (int i = 2; i < argc; ++i) {
    const std::string opt = argv[i];
    if (i + 1 >= argc) usage(("missing value for " + opt).c_str());
    const char* v = argv[++i];
    if (opt == "--addr")
      a.addr = v;
    else if (opt == "--peer")
      a.peer = v;
    else if (opt == "--port")
      a.port = static_cast<uint16_t>(std::atoi(v));
    else if (opt == "--messages")
      a.messages = static_cast<uint32_t>(std::atoi(v));
    else if (opt == "--greeting")
      a.greeting = static_cast<uint32_t>(std::atoi(v));
    else if (opt == "--timeout")
      a.timeout_s = std::atoi(v);
    else
      usage(("unknown option " + opt).c_str());
  }
  if (!a.server && a.peer.empty()) usage("a client needs --peer");
  if (a.messages + a.greeting > kSlots / 2) usage("at most 32 messages and greetings in all");
  return a;
}

[[gnu::format(printf, 1, 2)]] void say(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::vprintf(fmt, ap);
  va_end(ap);
  std::printf("\n");
  std::fflush(stdout);
}

int fail(const Status& st) {
  std::fprintf(stderr, "cm-peer: %s\n", st.message().c_str());
  return 1;
}

// The HCA, its QP and a buffer of kSlots message slots: the first half receives, the second
// half sends.
struct Endpoint {
  std::shared_ptr<sim::Fabric> fabric;
  std::optional<Device> dev;
  std::optional<ProtectionDomain> pd;
  std::optional<CompletionQueue> cq;
  std::optional<QueuePair> qp;
  std::vector<uint8_t> mem = std::vector<uint8_t>(kSlots * kMsgBytes);
  std::optional<MemoryRegion> mr;
  uint32_t recvs_done = 0, sends_done = 0, errors = 0;

  Status open(const std::string& addr) {
    sim::FabricConfig fc;
    fc.mode = sim::ExecMode::threaded;
    fc.wire = sim::WireKind::udp;
    RNICDV_ASSIGN_OR_RETURN(fabric, sim::Fabric::create(fc));
    sim::DeviceConfig dc;
    if (!addr.empty()) {
      Result<hw::IpAddress> ip = hw::IpAddress::parse(addr);
      if (!ip) return ip.status().prepend("--addr");
      dc.address = ip.value();
    }
    RNICDV_ASSIGN_OR_RETURN(dev, fabric->add_device(dc).and_then(&Device::wrap));
    RNICDV_ASSIGN_OR_RETURN(pd, dev->alloc_pd());
    RNICDV_ASSIGN_OR_RETURN(cq, dev->create_cq(256));
    RNICDV_ASSIGN_OR_RETURN(mr, pd->reg_mr(mem.data(), mem.size(), hw::access::local_write));
    QpConfig qc;
    qc.caps.max_send_wr = kSlots;
    qc.caps.max_recv_wr = kSlots;
    RNICDV_ASSIGN_OR_RETURN(qp, dev->create_qp(*pd, *cq, *cq, qc));
    return Status::ok();
  }

  Errc post_recv(uint32_t slot) {
    Sge sge = mr->sge(slot * kMsgBytes, kMsgBytes);
    RecvWr wr{slot, &sge, 1};
    return qp->post_recv(wr);
  }

  Errc post_send(uint32_t slot, const char* text) {
    uint8_t* p = mem.data() + slot * kMsgBytes;
    std::memset(p, 0, kMsgBytes);
    std::snprintf(reinterpret_cast<char*>(p), kMsgBytes, "%s", text);
    Sge sge = mr->sge(slot * kMsgBytes, kMsgBytes);
    SendWr wr;
    wr.wr_id = (1ull << 32) | slot;
    wr.opcode = WrOpcode::send;
    wr.flags = send_flags::signaled;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    return qp->post_send(wr);
  }

  // Polls once; calls on_recv(slot) for each message received.
  template <class OnRecv>
  void poll(OnRecv on_recv) {
    Completion wc[16];
    const int n = cq->poll(wc, 16);
    for (int i = 0; i < n; ++i) {
      if (wc[i].status != IBV_WC_SUCCESS) {
        ++errors;
        std::fprintf(stderr, "cm-peer: wr %#llx completed with status %u\n",
                     static_cast<unsigned long long>(wc[i].wr_id), wc[i].status);
        continue;
      }
      if (wc[i].wr_id >> 32) {
        ++sends_done;
      } else {
        ++recvs_done;
        on_recv(static_cast<uint32_t>(wc[i].wr_id));
      }
    }
  }

  const char* text(uint32_t slot) const {
    return reinterpret_cast<const char*>(mem.data() + slot * kMsgBytes);
  }
};

// Waits for the next connection event while handling async events (COMM_EST) and polling
// completions.
template <class OnRecv>
std::optional<ConnectionEvent> next_event(Endpoint& ep, Connection& c, Clock::time_point end,
                                          OnRecv on_recv) {
  while (Clock::now() < end) {
    ep.dev->process_events();
    ep.poll(on_recv);
    if (auto ev = c.wait_event(std::chrono::milliseconds(1))) return ev;
  }
  return std::nullopt;
}

int run_server(const Args& a) {
  Endpoint ep;
  if (Status st = ep.open(a.addr); !st) return fail(st);
  auto l = Listener::listen(*ep.dev, "", a.port);
  if (!l) return fail(l.status());
  say("listening %s", hw::cm_address_string({ep.dev->info().gid.ip(), a.port}).c_str());
  const auto end = Clock::now() + std::chrono::seconds(a.timeout_s);
  std::optional<ConnectionEvent> req = l->wait_event(std::chrono::seconds(a.timeout_s));
  if (!req || !req->request) return fail(Status::error(Errc::timeout, "no connection request"));
  say("request from %s: %s", hw::cm_address_string(req->request->remote_address()).c_str(),
      reinterpret_cast<const char*>(req->request->private_data().data()));
  // Receives go in before the REP leaves: INIT now, RTR at accept.
  if (Status st = ep.qp->to_init(); !st) return fail(st);
  for (uint32_t i = 0; i < a.messages; ++i)
    if (Errc e = ep.post_recv(i); e != Errc::ok)
      return fail(Status::error(e, "post_recv: %s", errc_name(e)));
  const char welcome[] = "welcome";
  auto conn = req->request->accept(
      *ep.qp, std::span(reinterpret_cast<const uint8_t*>(welcome), sizeof welcome));
  if (!conn) return fail(conn.status());
  // Early posting: the greeting goes out while the QP is still in RTR, withheld until the RTU.
  for (uint32_t i = 0; i < a.greeting; ++i) {
    char text[64];
    std::snprintf(text, sizeof text, "greeting %u", i);
    if (Errc e = ep.post_send(kSlots / 2 + i, text); e != Errc::ok)
      return fail(Status::error(e, "post_send in RTR: %s", errc_name(e)));
  }
  say("accepted, qp %s, %u sends withheld", hw::qp_state_name(ep.qp->state()), ep.qp->withheld());

  uint32_t echoed = 0;
  auto on_recv = [&](uint32_t slot) {
    char text[kMsgBytes];
    std::snprintf(text, sizeof text, "echo: %s", ep.text(slot));
    [[maybe_unused]] Errc e = ep.post_send(kSlots / 2 + a.greeting + echoed, text);
    ++echoed;
  };
  bool established = false;
  while (auto ev = next_event(ep, *conn, end, on_recv)) {
    if (ev->type == ConnectionEventType::established) {
      established = true;
      say("established");
      continue;
    }
    if (ev->type == ConnectionEventType::disconnected && established) {
      say("disconnected after %u messages", echoed);
      return echoed == a.messages && ep.errors == 0 ? 0 : 1;
    }
    return fail(ev->status);
  }
  return fail(Status::error(Errc::timeout, "%s: still %s after %d s", conn->name().c_str(),
                            connection_state_name(conn->state()), a.timeout_s));
}

int run_client(const Args& a) {
  Endpoint ep;
  if (Status st = ep.open(a.addr); !st) return fail(st);
  const auto end = Clock::now() + std::chrono::seconds(a.timeout_s);
  ConnectionOptions o;
  o.timeout = std::chrono::seconds(a.timeout_s / 2 > 0 ? a.timeout_s / 2 : 1);
  const char hello[] = "hello from cm-peer";
  auto conn = Connection::connect(
      *ep.qp, a.peer, a.port, std::span(reinterpret_cast<const uint8_t*>(hello), sizeof hello), o);
  if (!conn) return fail(conn.status());
  say("connecting %s", conn->name().c_str());
  // The QP is in INIT now; the REP has not been processed yet, so nothing can arrive before.
  for (uint32_t i = 0; i < a.messages + a.greeting; ++i)
    if (Errc e = ep.post_recv(i); e != Errc::ok)
      return fail(Status::error(e, "post_recv: %s", errc_name(e)));

  uint32_t greetings = 0, echoes = 0;
  bool bad = false;
  auto on_recv = [&](uint32_t slot) {
    const char* t = ep.text(slot);
    if (std::strncmp(t, "greeting ", 9) == 0)
      ++greetings;
    else if (std::strncmp(t, "echo: message ", 14) == 0)
      ++echoes;
    else
      bad = true;
  };
  auto ev = next_event(ep, *conn, end, on_recv);
  if (!ev) return fail(Status::error(Errc::timeout, "%s: no event", conn->name().c_str()));
  if (ev->type != ConnectionEventType::established) return fail(ev->status);
  say("established: %s", reinterpret_cast<const char*>(ev->private_data.data()));
  for (uint32_t i = 0; i < a.messages; ++i) {
    char text[64];
    std::snprintf(text, sizeof text, "message %u", i);
    if (Errc e = ep.post_send(kSlots / 2 + i, text); e != Errc::ok)
      return fail(Status::error(e, "post_send: %s", errc_name(e)));
  }
  while ((echoes < a.messages || greetings < a.greeting || ep.sends_done < a.messages) &&
         Clock::now() < end && ep.errors == 0)
    ep.poll(on_recv);
  say("received %u greetings and %u echoes", greetings, echoes);
  if (bad || ep.errors || echoes != a.messages || greetings != a.greeting)
    return fail(Status::error(Errc::protocol_error, "expected %u greetings and %u echoes",
                              a.greeting, a.messages));
  if (Status st = conn->disconnect(); !st) return fail(st);
  while (auto dev = next_event(ep, *conn, end, on_recv)) {
    if (dev->type == ConnectionEventType::disconnected) {
      say("disconnected");
      return 0;
    }
  }
  return fail(Status::error(Errc::timeout, "%s: no DISCONNECTED", conn->name().c_str()));
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  return a.server ? run_server(a) : run_client(a);
}
