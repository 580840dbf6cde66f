// SPDX-License-Identifier: BSD-3-Clause
// rdmacm-peer: the other implementation for interoperation tests. It speaks tools/cm-peer's
// protocol, but through librdmacm and libibverbs only (no rnicdv), so that run with the uverbs
// shim preloaded it is the unmodified rdma_cm stack on one end and rnicdv's own CM on the other.
//
//   rdmacm-peer server --addr IP --port N [--messages N] [--greeting N] [--reject 1]
//   rdmacm-peer client --peer IP --port N [--messages N] [--greeting N] [--tos N]
//
// The client's --tos sets its ID's type of service (RDMA_OPTION_ID_TOS). The server prints
// "path traffic class T" once it has the request: the class its QP's RTR address vector gets
// (rdma_init_qp_attr), which the kernel's CM takes from the REQ's primary path; and "route
// traffic class T", the class of the route librdmacm queried for the new ID, the same path.
//
// With --reject 1 the server rejects the request with the private data "go away"; the client
// then prints "rejected: reason R, private data 'go away'" and exits 3. A client whose
// address resolution fails prints "address error: status S" and exits 4.
//
// Protocol (cm-peer.cc): the REQ carries "hello from cm-peer" and the REP "welcome" as private
// data; the server sends N greetings ("greeting i") and echoes each "message i" of the client
// as "echo: message i" (256-byte messages); the client disconnects once it has them all.
// Progress lines go to stdout; exit status 0 on success, 1 on failure, 2 on bad usage.
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr uint32_t kMsgBytes = 256;
constexpr uint32_t kSlots = 64;
constexpr char kHello[] = "hello from cm-peer";
constexpr char kWelcome[] = "welcome";

struct Args {
  bool server = false;
  std::string addr, peer;
  uint16_t port = 7471;
  uint32_t messages = 16, greeting = 4;
  bool reject = false;
  int tos = -1;  // client: RDMA_OPTION_ID_TOS, when given
};
constexpr char kGoAway[] = "go away";

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr, "rdmacm-peer: %s\nusage: rdmacm-peer server|client [--addr IP] [--peer IP] "
                       "[--port N] [--messages N] [--greeting N] [--tos N]\n", why);
  std::exit(2);
}

int die(const char* what) {
  std::fprintf(stderr, "rdmacm-peer: %s: %s\n", what, std::strerror(errno));
  return 1;
}

void say(const char* text) {
  std::printf("%s\n", text);
  std::fflush(stdout);
}

// Waits for the next event on `ch`; the caller acks it.
rdma_cm_event* next(rdma_event_channel* ch) {
  rdma_cm_event* ev = nullptr;
  return rdma_get_cm_event(ch, &ev) == 0 ? ev : nullptr;
}

struct Peer {
  rdma_cm_id* id = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  ibv_mr* mr = nullptr;
  std::vector<char> mem = std::vector<char>(kSlots * kMsgBytes);
  uint32_t sends = 0;

  bool setup(rdma_cm_id* cm_id) {
    id = cm_id;
    pd = ibv_alloc_pd(id->verbs);
    cq = pd ? ibv_create_cq(id->verbs, 2 * kSlots, nullptr, nullptr, 0) : nullptr;
    const int access = IBV_ACCESS_LOCAL_WRITE;  // an int: ibv_reg_mr mixes it with another enum
    mr = cq ? ibv_reg_mr(pd, mem.data(), mem.size(), access) : nullptr;
    if (!mr) return false;
    ibv_qp_init_attr attr{};
    attr.send_cq = attr.recv_cq = cq;
    attr.qp_type = IBV_QPT_RC;
    attr.cap.max_send_wr = attr.cap.max_recv_wr = kSlots;
    attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
    return rdma_create_qp(id, pd, &attr) == 0;
  }
  // After rdma_destroy_qp: what the QP used.
  void release() {
    if (mr) ibv_dereg_mr(mr);
    if (cq) ibv_destroy_cq(cq);
    if (pd) ibv_dealloc_pd(pd);
    mr = nullptr;
    cq = nullptr;
    pd = nullptr;
  }
  char* slot(uint32_t i) { return mem.data() + i * kMsgBytes; }
  bool post_recv(uint32_t i) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(slot(i)), kMsgBytes, mr->lkey};
    ibv_recv_wr wr{}, *bad = nullptr;
    wr.wr_id = i;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    return ibv_post_recv(id->qp, &wr, &bad) == 0;
  }
  bool send(const char* text) {
    const uint32_t i = kSlots / 2 + sends++ % (kSlots / 2);
    std::snprintf(slot(i), kMsgBytes, "%s", text);
    ibv_sge sge{reinterpret_cast<uintptr_t>(slot(i)), kMsgBytes, mr->lkey};
    ibv_send_wr wr{}, *bad = nullptr;
    wr.wr_id = (1ull << 32) | i;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    return ibv_post_send(id->qp, &wr, &bad) == 0;
  }
  // Polls until `recvs` messages arrived (each given to on_recv) and `sends_done` sends
  // completed, or an error.
  template <class F>
  bool run(uint32_t recvs, uint32_t sends_wanted, F on_recv) {
    uint32_t got = 0, sent = 0;
    while (got < recvs || sent < sends_wanted) {
      ibv_wc wc[16];
      const int n = ibv_poll_cq(cq, 16, wc);
      if (n < 0) return false;
      for (int k = 0; k < n; ++k) {
        if (wc[k].status != IBV_WC_SUCCESS) {
          std::fprintf(stderr, "rdmacm-peer: wr %#llx: %s\n",
                       static_cast<unsigned long long>(wc[k].wr_id), ibv_wc_status_str(wc[k].status));
          return false;
        }
        if (wc[k].wr_id >> 32) {
          ++sent;
        } else {
          ++got;
          if (!on_recv(static_cast<uint32_t>(wc[k].wr_id), sent)) return false;
        }
      }
    }
    return true;
  }
};

int run_server(const Args& a, rdma_event_channel* ch) {
  rdma_cm_id* listen_id = nullptr;
  if (rdma_create_id(ch, &listen_id, nullptr, RDMA_PS_TCP)) return die("rdma_create_id");
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(a.port);
  if (inet_pton(AF_INET, a.addr.c_str(), &sa.sin_addr) != 1) usage("--addr is not IPv4");
  if (rdma_bind_addr(listen_id, reinterpret_cast<sockaddr*>(&sa)) || rdma_listen(listen_id, 4))
    return die("rdma_bind_addr/rdma_listen");
  say("listening");
  rdma_cm_event* ev = next(ch);
  if (!ev || ev->event != RDMA_CM_EVENT_CONNECT_REQUEST) return die("no CONNECT_REQUEST");
  const auto* pd = static_cast<const char*>(ev->param.conn.private_data);
  if (ev->param.conn.private_data_len < sizeof kHello || std::memcmp(pd, kHello, sizeof kHello)) {
    std::fprintf(stderr, "rdmacm-peer: the REQ's private data is not \"%s\"\n", kHello);
    return 1;
  }
  std::printf("request: %s\n", pd);
  Peer p;
  rdma_cm_id* id = ev->id;
  rdma_ack_cm_event(ev);
  if (a.reject) {
    if (rdma_reject(id, kGoAway, sizeof kGoAway)) return die("rdma_reject");
    say("rejected");
    rdma_destroy_id(id);
    rdma_destroy_id(listen_id);
    return 0;
  }
  if (!p.setup(id)) return die("QP set-up");
  ibv_qp_attr rtr{};
  int rtr_mask = 0;
  rtr.qp_state = IBV_QPS_RTR;
  if (rdma_init_qp_attr(id, &rtr, &rtr_mask)) return die("rdma_init_qp_attr");
  std::printf("path traffic class %u\n", unsigned{rtr.ah_attr.grh.traffic_class});
  // And the route librdmacm queried for the new ID (rdma_query_route): the REQ's path too.
  if (id->route.num_paths < 1) return die("no path in the request's route");
  std::printf("route traffic class %u\n", unsigned{id->route.path_rec[0].traffic_class});
  for (uint32_t i = 0; i < a.messages; ++i)
    if (!p.post_recv(i)) return die("ibv_post_recv");
  rdma_conn_param cp{};
  cp.private_data = kWelcome;
  cp.private_data_len = sizeof kWelcome;
  cp.responder_resources = cp.initiator_depth = 1;
  cp.rnr_retry_count = 7;
  if (rdma_accept(id, &cp)) return die("rdma_accept");
  ev = next(ch);
  if (!ev || ev->event != RDMA_CM_EVENT_ESTABLISHED) return die("no ESTABLISHED");
  rdma_ack_cm_event(ev);
  say("established");
  for (uint32_t i = 0; i < a.greeting; ++i) {
    char text[32];
    std::snprintf(text, sizeof text, "greeting %u", i);
    if (!p.send(text)) return die("ibv_post_send");
  }
  const bool ok = p.run(a.messages, a.greeting + a.messages, [&](uint32_t slot, uint32_t) {
    char text[kMsgBytes];
    std::snprintf(text, sizeof text, "echo: %s", p.slot(slot));
    return p.send(text);
  });
  if (!ok) return 1;
  ev = next(ch);
  if (!ev || ev->event != RDMA_CM_EVENT_DISCONNECTED) return die("no DISCONNECTED");
  rdma_ack_cm_event(ev);
  rdma_disconnect(id);
  std::printf("disconnected after %u messages\n", a.messages);
  rdma_destroy_qp(id);
  p.release();
  rdma_destroy_id(id);
  rdma_destroy_id(listen_id);
  return 0;
}

int run_client(const Args& a, rdma_event_channel* ch) {
  rdma_cm_id* id = nullptr;
  if (rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP)) return die("rdma_create_id");
  if (a.tos >= 0) {
    uint8_t tos = static_cast<uint8_t>(a.tos);
    if (rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof tos))
      return die("rdma_set_option(RDMA_OPTION_ID_TOS)");
  }
  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  dst.sin_port = htons(a.port);
  if (inet_pton(AF_INET, a.peer.c_str(), &dst.sin_addr) != 1) usage("--peer is not IPv4");
  if (rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&dst), 2000))
    return die("rdma_resolve_addr");
  rdma_cm_event* ev = next(ch);
  if (ev && ev->event == RDMA_CM_EVENT_ADDR_ERROR) {
    std::printf("address error: status %d\n", ev->status);
    rdma_ack_cm_event(ev);
    rdma_destroy_id(id);
    return 4;
  }
  if (!ev || ev->event != RDMA_CM_EVENT_ADDR_RESOLVED) return die("no ADDR_RESOLVED");
  rdma_ack_cm_event(ev);
  if (rdma_resolve_route(id, 2000)) return die("rdma_resolve_route");
  ev = next(ch);
  if (!ev || ev->event != RDMA_CM_EVENT_ROUTE_RESOLVED) return die("no ROUTE_RESOLVED");
  rdma_ack_cm_event(ev);
  Peer p;
  if (!p.setup(id)) return die("QP set-up");
  for (uint32_t i = 0; i < a.messages + a.greeting; ++i)
    if (!p.post_recv(i)) return die("ibv_post_recv");
  rdma_conn_param cp{};
  cp.private_data = kHello;
  cp.private_data_len = sizeof kHello;
  cp.responder_resources = cp.initiator_depth = 1;
  cp.retry_count = cp.rnr_retry_count = 7;
  if (rdma_connect(id, &cp)) return die("rdma_connect");
  ev = next(ch);
  if (ev && ev->event == RDMA_CM_EVENT_REJECTED) {
    const auto* why = static_cast<const char*>(ev->param.conn.private_data);
    const bool has = why && ev->param.conn.private_data_len >= sizeof kGoAway;
    std::printf("rejected: reason %d, private data '%s'\n", ev->status, has ? why : "");
    rdma_ack_cm_event(ev);
    rdma_destroy_qp(id);
    p.release();
    rdma_destroy_id(id);
    return 3;
  }
  if (!ev || ev->event != RDMA_CM_EVENT_ESTABLISHED) {
    std::fprintf(stderr, "rdmacm-peer: %s (status %d) instead of ESTABLISHED\n",
                 ev ? rdma_event_str(ev->event) : "no event", ev ? ev->status : 0);
    return 1;
  }
  const auto* rep = static_cast<const char*>(ev->param.conn.private_data);
  const bool welcomed = ev->param.conn.private_data_len >= sizeof kWelcome &&
                        std::memcmp(rep, kWelcome, sizeof kWelcome) == 0;
  std::printf("established: %s\n", welcomed ? rep : "(no welcome)");
  rdma_ack_cm_event(ev);
  if (!welcomed) return 1;
  for (uint32_t i = 0; i < a.messages; ++i) {
    char text[32];
    std::snprintf(text, sizeof text, "message %u", i);
    if (!p.send(text)) return die("ibv_post_send");
  }
  uint32_t greetings = 0, echoes = 0;
  const bool ok = p.run(a.messages + a.greeting, a.messages, [&](uint32_t slot, uint32_t) {
    if (std::strncmp(p.slot(slot), "greeting ", 9) == 0) return ++greetings, true;
    if (std::strncmp(p.slot(slot), "echo: message ", 14) == 0) return ++echoes, true;
    std::fprintf(stderr, "rdmacm-peer: unexpected message '%s'\n", p.slot(slot));
    return false;
  });
  std::printf("received %u greetings and %u echoes\n", greetings, echoes);
  if (!ok || greetings != a.greeting || echoes != a.messages) return 1;
  if (rdma_disconnect(id)) return die("rdma_disconnect");
  ev = next(ch);
  if (!ev || ev->event != RDMA_CM_EVENT_DISCONNECTED) return die("no DISCONNECTED");
  rdma_ack_cm_event(ev);
  say("disconnected");
  rdma_destroy_qp(id);
  p.release();
  rdma_destroy_id(id);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (argc < 2) usage("no role");
  const std::string role = argv[1];
  if (role != "server" && role != "client") usage("the role is server or client");
  a.server = role == "server";
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string opt = argv[i];
    const char* v = argv[i + 1];
    if (opt == "--addr") a.addr = v;
    else if (opt == "--peer") a.peer = v;
    else if (opt == "--port") a.port = static_cast<uint16_t>(std::atoi(v));
    else if (opt == "--messages") a.messages = static_cast<uint32_t>(std::atoi(v));
    else if (opt == "--greeting") a.greeting = static_cast<uint32_t>(std::atoi(v));
    else if (opt == "--reject") a.reject = std::atoi(v) != 0;
    else if (opt == "--tos") a.tos = std::atoi(v);
    else usage(("unknown option " + opt).c_str());
  }
  if (a.server ? a.addr.empty() : a.peer.empty()) usage("server needs --addr, client --peer");
  if (a.messages + a.greeting > kSlots / 2) usage("at most 32 messages and greetings in all");
  rdma_event_channel* ch = rdma_create_event_channel();
  if (!ch) return die("rdma_create_event_channel");
  const int rc = a.server ? run_server(a, ch) : run_client(a, ch);
  rdma_destroy_event_channel(ch);
  return rc;
}
