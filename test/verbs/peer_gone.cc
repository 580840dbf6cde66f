// SPDX-License-Identifier: BSD-3-Clause
// peer-gone: how an rdma_cm connection's survivor learns that the process at the other end
// ended. Linked against librdmacm and libibverbs only; run with the uverbs shim preloaded
// (run_peer_gone.sh). Times are CLOCK_REALTIME in nanoseconds, printed for the script.
//
//   peer-gone server --addr IP --port N --then idle|send|disconnect|disconnect-on-usr1
//   peer-gone client --peer IP --port N --end wait|exit|exit-on-dreq
//
// The server accepts one connection and prints "established"; then, by --then:
//   idle                waits for DISCONNECTED
//   send                posts a SEND every 10 ms (errors are expected once the peer is gone)
//   disconnect          calls rdma_disconnect 200 ms after ESTABLISHED ("disconnect at T")
//   disconnect-on-usr1  calls rdma_disconnect when SIGUSR1 arrives ("disconnect at T")
// and prints "disconnected at T" when DISCONNECTED arrives (exit 0), or gives up after 60 s
// (exit 1). The client connects, prints "established", and by --end:
//   wait          waits to be killed
//   exit          calls exit(0) 300 ms later, connection and all ("exiting at T")
//   exit-on-dreq  calls exit(0) as soon as DISCONNECTED (the server's DREQ) arrives, without
//                 rdma_disconnect or any clean-up ("exiting at T")
//   exit-in-handler  registers and deregisters memory in a loop until a timer (1 to 40 ms)
//                 whose handler calls exit(0) interrupts it, most likely inside a command
//   exit-in-get-event  waits in rdma_get_cm_event until a timer (100 ms) whose handler calls
//                 exit(0) interrupts the wait
//   exit-in-ucma  creates and destroys rdma_cm IDs in a loop until a timer (1 to 40 ms) whose
//                 handler calls exit(0) interrupts it, most likely inside an rdma_cm command
//   exit-in-two-threads  300 ms later, the main thread and a second one call exit(0) at once
//                 (as rping's client does on an error its rdma_cm thread sees)
#include <arpa/inet.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <signal.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "peer-gone: %s\nusage: peer-gone server --addr IP --port N --then "
               "idle|send|disconnect|disconnect-on-usr1\n"
               "       peer-gone client --peer IP --port N --end wait|exit|exit-on-dreq\n",
               why);
  std::exit(2);
}

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "peer-gone: %s: %s\n", what, std::strerror(errno));
  std::exit(1);
}

long long now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return ts.tv_sec * 1'000'000'000LL + ts.tv_nsec;
}

void say(const char* what) {
  std::printf("%s at %lld\n", what, now_ns());
  std::fflush(stdout);
}

rdma_cm_event* expect(rdma_event_channel* ch, rdma_cm_event_type type) {
  rdma_cm_event* ev = nullptr;
  if (rdma_get_cm_event(ch, &ev)) fail("rdma_get_cm_event");
  if (ev->event != type) {
    std::fprintf(stderr, "peer-gone: %s (status %d) instead of %s\n", rdma_event_str(ev->event),
                 ev->status, rdma_event_str(type));
    std::exit(1);
  }
  return ev;
}

sockaddr_in addr_of(const std::string& ip, uint16_t port) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  if (inet_pton(AF_INET, ip.c_str(), &sa.sin_addr) != 1) usage("not an IPv4 address");
  return sa;
}

struct Qp {
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  ibv_mr* mr = nullptr;
  std::vector<char> mem = std::vector<char>(64 * 256);

  void setup(rdma_cm_id* id) {
    pd = ibv_alloc_pd(id->verbs);
    cq = pd ? ibv_create_cq(id->verbs, 256, nullptr, nullptr, 0) : nullptr;
    const int access = IBV_ACCESS_LOCAL_WRITE;
    mr = cq ? ibv_reg_mr(pd, mem.data(), mem.size(), access) : nullptr;
    if (!mr) fail("PD, CQ and MR");
    ibv_qp_init_attr a{};
    a.send_cq = a.recv_cq = cq;
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_wr = a.cap.max_recv_wr = 64;
    a.cap.max_send_sge = a.cap.max_recv_sge = 1;
    if (rdma_create_qp(id, pd, &a)) fail("rdma_create_qp");
    for (uint32_t i = 0; i < 32; ++i) {
      ibv_sge sge{reinterpret_cast<uintptr_t>(mem.data() + i * 256), 256, mr->lkey};
      ibv_recv_wr wr{}, *bad = nullptr;
      wr.sg_list = &sge;
      wr.num_sge = 1;
      if (ibv_post_recv(id->qp, &wr, &bad)) fail("ibv_post_recv");
    }
  }
};

rdma_conn_param conn_param() {
  rdma_conn_param cp{};
  cp.responder_resources = cp.initiator_depth = 1;
  cp.retry_count = cp.rnr_retry_count = 7;
  return cp;
}

void exit_now(int) { std::exit(0); }

volatile sig_atomic_t g_usr1 = 0;
void on_usr1(int) { g_usr1 = 1; }

int run_server(const std::string& addr, uint16_t port, const std::string& then) {
  if (then != "idle" && then != "send" && then != "disconnect" && then != "disconnect-on-usr1")
    usage("unknown --then");
  struct sigaction sa{};
  sa.sa_handler = on_usr1;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGUSR1, &sa, nullptr)) fail("sigaction");
  rdma_event_channel* ch = rdma_create_event_channel();
  if (!ch) fail("rdma_create_event_channel");
  rdma_cm_id* l = nullptr;
  if (rdma_create_id(ch, &l, nullptr, RDMA_PS_TCP)) fail("rdma_create_id");
  sockaddr_in where = addr_of(addr, port);
  if (rdma_bind_addr(l, reinterpret_cast<sockaddr*>(&where)) || rdma_listen(l, 4))
    fail("rdma_bind_addr/rdma_listen");
  say("listening");
  rdma_cm_event* ev = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
  rdma_cm_id* id = ev->id;
  rdma_ack_cm_event(ev);
  Qp q;
  q.setup(id);
  rdma_conn_param cp = conn_param();
  if (rdma_accept(id, &cp)) fail("rdma_accept");
  rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ESTABLISHED));
  say("established");
  if (fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK)) fail("fcntl");
  const long long established = now_ns();
  bool disconnect_sent = false;
  uint64_t sent = 0, errors = 0;
  while (now_ns() - established < 60'000'000'000LL) {
    const bool due = (then == "disconnect" && now_ns() - established > 200'000'000LL) ||
                     (then == "disconnect-on-usr1" && g_usr1);
    if (due && !disconnect_sent) {
      disconnect_sent = true;
      say("disconnect");
      if (rdma_disconnect(id)) fail("rdma_disconnect");
    }
    if (then == "send") {
      ibv_sge sge{reinterpret_cast<uintptr_t>(q.mem.data() + 32 * 256), 256, q.mr->lkey};
      ibv_send_wr wr{}, *bad = nullptr;
      wr.opcode = IBV_WR_SEND;
      wr.send_flags = IBV_SEND_SIGNALED;
      wr.sg_list = &sge;
      wr.num_sge = 1;
      if (ibv_post_send(id->qp, &wr, &bad) == 0) ++sent;
      ibv_wc wc[16];
      for (int n; (n = ibv_poll_cq(q.cq, 16, wc)) > 0;)
        for (int i = 0; i < n; ++i) errors += wc[i].status != IBV_WC_SUCCESS;
    }
    ev = nullptr;
    if (rdma_get_cm_event(ch, &ev) == 0) {
      const rdma_cm_event_type type = ev->event;
      rdma_ack_cm_event(ev);
      if (type == RDMA_CM_EVENT_DISCONNECTED) {
        say("disconnected");
        std::printf("%llu sends posted, %llu completed in error\n",
                    static_cast<unsigned long long>(sent), static_cast<unsigned long long>(errors));
        return 0;
      }
      std::fprintf(stderr, "peer-gone: unexpected %s\n", rdma_event_str(type));
      return 1;
    }
    if (errno != EAGAIN) fail("rdma_get_cm_event");
    pollfd p{ch->fd, POLLIN, 0};
    ::poll(&p, 1, 10);
  }
  std::fprintf(stderr, "peer-gone: no DISCONNECTED within 60 s\n");
  return 1;
}

int run_client(const std::string& peer, uint16_t port, const std::string& end) {
  if (end != "wait" && end != "exit" && end != "exit-on-dreq" && end != "exit-in-handler" &&
      end != "exit-in-get-event" && end != "exit-in-ucma" && end != "exit-in-two-threads")
    usage("unknown --end");
  rdma_event_channel* ch = rdma_create_event_channel();
  if (!ch) fail("rdma_create_event_channel");
  rdma_cm_id* id = nullptr;
  if (rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP)) fail("rdma_create_id");
  sockaddr_in dst = addr_of(peer, port);
  if (rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&dst), 2000))
    fail("rdma_resolve_addr");
  rdma_cm_event* ev = nullptr;
  if (rdma_get_cm_event(ch, &ev)) fail("rdma_get_cm_event");
  if (ev->event != RDMA_CM_EVENT_ADDR_RESOLVED) {
    // Nobody at the address yet: the script starts the client again.
    std::printf("not yet: %s\n", rdma_event_str(ev->event));
    return 3;
  }
  rdma_ack_cm_event(ev);
  if (rdma_resolve_route(id, 2000)) fail("rdma_resolve_route");
  rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED));
  Qp q;
  q.setup(id);
  rdma_conn_param cp = conn_param();
  if (rdma_connect(id, &cp)) fail("rdma_connect");
  if (rdma_get_cm_event(ch, &ev)) fail("rdma_get_cm_event");
  if (ev->event == RDMA_CM_EVENT_REJECTED) {
    std::printf("not yet: %s\n", rdma_event_str(ev->event));
    return 3;
  }
  if (ev->event != RDMA_CM_EVENT_ESTABLISHED) {
    std::fprintf(stderr, "peer-gone: %s instead of ESTABLISHED\n", rdma_event_str(ev->event));
    return 1;
  }
  rdma_ack_cm_event(ev);
  say("established");
  if (end == "wait") {
    for (;;) ::pause();
  }
  if (end == "exit-in-handler" || end == "exit-in-get-event" || end == "exit-in-ucma") {
    struct sigaction sa{};
    sa.sa_handler = exit_now;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGALRM, &sa, nullptr)) fail("sigaction");
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    itimerval t{};
    t.it_value.tv_usec = end == "exit-in-get-event" ? 100'000 : 1000 + ts.tv_nsec % 39000;
    if (setitimer(ITIMER_REAL, &t, nullptr)) fail("setitimer");
    if (end == "exit-in-ucma") {
      for (;;) {
        rdma_cm_id* other = nullptr;
        if (rdma_create_id(ch, &other, nullptr, RDMA_PS_TCP) || rdma_destroy_id(other))
          fail("rdma_create_id/rdma_destroy_id");
      }
    }
    if (end == "exit-in-get-event") {
      rdma_get_cm_event(ch, &ev);  // nothing comes: the handler ends the process here
      std::fprintf(stderr, "peer-gone: an event came: %s\n", rdma_event_str(ev->event));
      std::exit(1);
    }
    const int access = IBV_ACCESS_LOCAL_WRITE;
    for (;;) {
      ibv_mr* mr = ibv_reg_mr(q.pd, q.mem.data(), q.mem.size(), access);
      if (!mr || ibv_dereg_mr(mr)) fail("ibv_reg_mr/ibv_dereg_mr");
    }
  }
  if (end == "exit-in-two-threads") {
    ::usleep(300'000);
    static pthread_barrier_t both;
    pthread_barrier_init(&both, nullptr, 2);
    pthread_t other;
    const int rc = pthread_create(
        &other, nullptr,
        [](void*) -> void* {
          pthread_barrier_wait(&both);
          std::exit(0);
        },
        nullptr);
    if (rc != 0) {
      errno = rc;
      fail("pthread_create");
    }
    say("exiting");
    pthread_barrier_wait(&both);
    std::exit(0);
  }
  if (end == "exit") {
    ::usleep(300'000);
  } else {
    rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_DISCONNECTED));
  }
  say("exiting");
  std::exit(0);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) usage("no role");
  const std::string role = argv[1];
  std::string addr, peer, then, end;
  uint16_t port = 0;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string opt = argv[i];
    const char* v = argv[i + 1];
    if (opt == "--addr") addr = v;
    else if (opt == "--peer") peer = v;
    else if (opt == "--port") port = static_cast<uint16_t>(std::atoi(v));
    else if (opt == "--then") then = v;
    else if (opt == "--end") end = v;
    else usage(("unknown option " + opt).c_str());
  }
  if (role == "server" && !addr.empty() && port && !then.empty()) return run_server(addr, port, then);
  if (role == "client" && !peer.empty() && port && !end.empty()) return run_client(peer, port, end);
  usage("server needs --addr, --port and --then; client --peer, --port and --end");
}
