// SPDX-License-Identifier: BSD-3-Clause
// exit-in-handler: a verbs program whose timer handler calls exit(0) while the program is in
// the middle of its verbs or rdma_cm commands. Linked against libibverbs and librdmacm only;
// run with the uverbs shim preloaded (run_exit_in_handler.sh), it must end, with status 0,
// however the timer falls.
//
//   exit-in-handler KIND SEED [ADDR]
//
// KIND is the work the main thread loops over until the timer fires:
//   context  open and close the device, allocate and free a PD, register and deregister an MR
//   cq       create and destroy CQs (one on a completion channel)
//   qp       create RC QPs, move them to INIT, RTR and RTS, destroy them
//   post     SENDs between two connected QPs, posted and polled
//   rdmacm   rdma_cm IDs: create, bind, resolve the address and route of ADDR, listen, destroy
//   connect  an rdma_cm connection to itself through a listener on ADDR, then its teardown
// SEED picks the timer's interval (1 to 40 ms, or to EXIT_IN_HANDLER_MAX_MS, after the first
// command is done). ADDR is this
// process's device address (RNICDV_SIM_ADDR), for the rdma_cm kinds.
// Exit status: 0 from the handler; 1 on a failed set-up; 2 on bad usage.
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <signal.h>
#include <sys/time.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "exit-in-handler: %s\nusage: exit-in-handler "
               "context|cq|qp|post|rdmacm|connect SEED [ADDR]\n",
               why);
  std::exit(2);
}

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "exit-in-handler: %s: %s\n", what, std::strerror(errno));
  std::exit(1);
}

// Connections made and ended (the connect kind), reported by the handler on request.
volatile sig_atomic_t g_rounds = 0;

void on_timer(int) {
  if (std::getenv("EXIT_IN_HANDLER_MAX_MS")) std::fprintf(stderr, "%d rounds\n", int{g_rounds});
  std::exit(0);
}

// Arms the one-shot timer whose handler ends the process.
void arm(unsigned seed) {
  std::srand(seed);
  const char* max_ms = std::getenv("EXIT_IN_HANDLER_MAX_MS");
  const long span_us = (max_ms ? std::atol(max_ms) : 40) * 1000 - 1000;
  const long us = 1000 + std::rand() % (span_us > 0 ? span_us : 1);
  struct sigaction sa{};
  sa.sa_handler = on_timer;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGALRM, &sa, nullptr) != 0) fail("sigaction");
  itimerval t{};
  t.it_value.tv_sec = us / 1000000;
  t.it_value.tv_usec = us % 1000000;
  if (setitimer(ITIMER_REAL, &t, nullptr) != 0) fail("setitimer");
}

ibv_context* open_first() {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list || n == 0) fail("no device");
  ibv_context* ctx = ibv_open_device(list[0]);
  ibv_free_device_list(list);
  if (!ctx) fail("ibv_open_device");
  return ctx;
}

ibv_qp* make_qp(ibv_pd* pd, ibv_cq* cq) {
  ibv_qp_init_attr a{};
  a.send_cq = a.recv_cq = cq;
  a.qp_type = IBV_QPT_RC;
  a.cap.max_send_wr = a.cap.max_recv_wr = 16;
  a.cap.max_send_sge = a.cap.max_recv_sge = 1;
  return ibv_create_qp(pd, &a);
}

union ibv_gid port_gid(ibv_context* ctx) {
  union ibv_gid gid{};
  if (ibv_query_gid(ctx, 1, 3, &gid) != 0) fail("ibv_query_gid");
  return gid;
}

// INIT, RTR towards `remote_qpn` at `gid`, RTS.
bool connect_qp(ibv_qp* qp, uint32_t remote_qpn, const union ibv_gid& gid) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    return false;
  a = {};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = remote_qpn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 1;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = gid;
  a.ah_attr.grh.sgid_index = 3;
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.port_num = 1;
  if (ibv_modify_qp(qp, &a,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    return false;
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 1;
  return ibv_modify_qp(qp, &a,
                       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                           IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) == 0;
}

[[noreturn]] void loop_context(unsigned seed) {
  std::vector<char> buf(1 << 16);
  const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  for (bool armed = false;; armed = true) {
    ibv_context* ctx = open_first();
    ibv_pd* pd = ibv_alloc_pd(ctx);
    if (!pd) fail("ibv_alloc_pd");
    for (int i = 0; i < 8; ++i) {
      ibv_mr* mr = ibv_reg_mr(pd, buf.data(), buf.size(), access);
      if (!mr) fail("ibv_reg_mr");
      if (!armed && i == 0) arm(seed);
      if (ibv_dereg_mr(mr)) fail("ibv_dereg_mr");
    }
    if (ibv_dealloc_pd(pd)) fail("ibv_dealloc_pd");
    if (ibv_close_device(ctx)) fail("ibv_close_device");
  }
}

[[noreturn]] void loop_cq(unsigned seed) {
  ibv_context* ctx = open_first();
  ibv_comp_channel* ch = ibv_create_comp_channel(ctx);
  if (!ch) fail("ibv_create_comp_channel");
  arm(seed);
  for (;;) {
    ibv_cq* a = ibv_create_cq(ctx, 64, nullptr, nullptr, 0);
    ibv_cq* b = ibv_create_cq(ctx, 256, nullptr, ch, 0);
    if (!a || !b) fail("ibv_create_cq");
    if (ibv_req_notify_cq(b, 0)) fail("ibv_req_notify_cq");
    if (ibv_destroy_cq(a) || ibv_destroy_cq(b)) fail("ibv_destroy_cq");
  }
}

[[noreturn]] void loop_qp(unsigned seed) {
  ibv_context* ctx = open_first();
  ibv_pd* pd = ibv_alloc_pd(ctx);
  ibv_cq* cq = pd ? ibv_create_cq(ctx, 64, nullptr, nullptr, 0) : nullptr;
  if (!cq) fail("PD and CQ");
  const union ibv_gid gid = port_gid(ctx);
  arm(seed);
  for (;;) {
    ibv_qp* a = make_qp(pd, cq);
    ibv_qp* b = make_qp(pd, cq);
    if (!a || !b) fail("ibv_create_qp");
    if (!connect_qp(a, b->qp_num, gid) || !connect_qp(b, a->qp_num, gid)) fail("ibv_modify_qp");
    if (ibv_destroy_qp(a) || ibv_destroy_qp(b)) fail("ibv_destroy_qp");
  }
}

[[noreturn]] void loop_post(unsigned seed) {
  ibv_context* ctx = open_first();
  ibv_pd* pd = ibv_alloc_pd(ctx);
  ibv_cq* cq = pd ? ibv_create_cq(ctx, 64, nullptr, nullptr, 0) : nullptr;
  if (!cq) fail("PD and CQ");
  std::vector<char> buf(8192);
  const int access = IBV_ACCESS_LOCAL_WRITE;
  ibv_mr* mr = ibv_reg_mr(pd, buf.data(), buf.size(), access);
  ibv_qp* a = mr ? make_qp(pd, cq) : nullptr;
  ibv_qp* b = a ? make_qp(pd, cq) : nullptr;
  if (!b) fail("MR and QPs");
  const union ibv_gid gid = port_gid(ctx);
  if (!connect_qp(a, b->qp_num, gid) || !connect_qp(b, a->qp_num, gid)) fail("ibv_modify_qp");
  arm(seed);
  for (;;) {
    ibv_sge rs{reinterpret_cast<uintptr_t>(buf.data()), 4096, mr->lkey};
    ibv_recv_wr rwr{}, *rbad = nullptr;
    rwr.sg_list = &rs;
    rwr.num_sge = 1;
    if (ibv_post_recv(b, &rwr, &rbad)) fail("ibv_post_recv");
    ibv_sge ss{reinterpret_cast<uintptr_t>(buf.data() + 4096), 4096, mr->lkey};
    ibv_send_wr swr{}, *sbad = nullptr;
    swr.opcode = IBV_WR_SEND;
    swr.send_flags = IBV_SEND_SIGNALED;
    swr.sg_list = &ss;
    swr.num_sge = 1;
    if (ibv_post_send(a, &swr, &sbad)) fail("ibv_post_send");
    for (int done = 0; done < 2;) {
      ibv_wc wc[2];
      const int n = ibv_poll_cq(cq, 2, wc);
      if (n < 0) fail("ibv_poll_cq");
      for (int i = 0; i < n; ++i)
        if (wc[i].status != IBV_WC_SUCCESS) fail(ibv_wc_status_str(wc[i].status));
      done += n;
    }
  }
}

sockaddr_in addr_of(const char* ip, uint16_t port) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  if (inet_pton(AF_INET, ip, &sa.sin_addr) != 1) usage("ADDR is not an IPv4 address");
  return sa;
}

rdma_cm_event* expect(rdma_event_channel* ch, rdma_cm_event_type type) {
  rdma_cm_event* ev = nullptr;
  if (rdma_get_cm_event(ch, &ev)) fail("rdma_get_cm_event");
  if (ev->event != type) {
    std::fprintf(stderr, "exit-in-handler: %s (status %d) instead of %s\n",
                 rdma_event_str(ev->event), ev->status, rdma_event_str(type));
    std::exit(1);
  }
  return ev;
}

void ack(rdma_cm_event* ev) {
  if (rdma_ack_cm_event(ev)) fail("rdma_ack_cm_event");
}

[[noreturn]] void loop_rdmacm(unsigned seed, const char* ip) {
  rdma_event_channel* ch = rdma_create_event_channel();
  if (!ch) fail("rdma_create_event_channel");
  sockaddr_in self = addr_of(ip, 0);
  for (uint32_t round = 0;; ++round) {
    rdma_cm_id* l = nullptr;
    rdma_cm_id* c = nullptr;
    if (rdma_create_id(ch, &l, nullptr, RDMA_PS_TCP) || rdma_create_id(ch, &c, nullptr, RDMA_PS_TCP))
      fail("rdma_create_id");
    sockaddr_in port = addr_of(ip, static_cast<uint16_t>(20000 + round % 20000));
    if (rdma_bind_addr(l, reinterpret_cast<sockaddr*>(&port)) == 0 && rdma_listen(l, 4) != 0)
      fail("rdma_listen");
    if (rdma_resolve_addr(c, reinterpret_cast<sockaddr*>(&self), reinterpret_cast<sockaddr*>(&port),
                          2000))
      fail("rdma_resolve_addr");
    ack(expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
    if (rdma_resolve_route(c, 2000)) fail("rdma_resolve_route");
    ack(expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED));
    if (round == 0) arm(seed);
    if (rdma_destroy_id(c) || rdma_destroy_id(l)) fail("rdma_destroy_id");
  }
}

[[noreturn]] void loop_connect(unsigned seed, const char* ip) {
  rdma_event_channel* ch = rdma_create_event_channel();
  if (!ch) fail("rdma_create_event_channel");
  rdma_cm_id* l = nullptr;
  if (rdma_create_id(ch, &l, nullptr, RDMA_PS_TCP)) fail("rdma_create_id");
  sockaddr_in where = addr_of(ip, 7400);
  if (rdma_bind_addr(l, reinterpret_cast<sockaddr*>(&where)) || rdma_listen(l, 4))
    fail("rdma_bind_addr/rdma_listen");
  ibv_pd* pd = ibv_alloc_pd(l->verbs);
  ibv_cq* cq = pd ? ibv_create_cq(l->verbs, 64, nullptr, nullptr, 0) : nullptr;
  if (!cq) fail("PD and CQ");
  ibv_qp_init_attr qa{};
  qa.send_cq = qa.recv_cq = cq;
  qa.qp_type = IBV_QPT_RC;
  qa.cap.max_send_wr = qa.cap.max_recv_wr = 4;
  qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
  for (bool armed = false;; armed = true) {
    rdma_cm_id* c = nullptr;
    if (rdma_create_id(ch, &c, nullptr, RDMA_PS_TCP)) fail("rdma_create_id");
    if (rdma_resolve_addr(c, nullptr, reinterpret_cast<sockaddr*>(&where), 2000))
      fail("rdma_resolve_addr");
    ack(expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
    if (rdma_resolve_route(c, 2000)) fail("rdma_resolve_route");
    ack(expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED));
    if (rdma_create_qp(c, pd, &qa)) fail("rdma_create_qp (active)");
    rdma_conn_param cp{};
    cp.responder_resources = cp.initiator_depth = 1;
    cp.retry_count = cp.rnr_retry_count = 7;
    if (!armed) arm(seed);
    if (rdma_connect(c, &cp)) fail("rdma_connect");
    rdma_cm_event* req = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
    rdma_cm_id* s = req->id;
    ack(req);
    if (rdma_create_qp(s, pd, &qa)) fail("rdma_create_qp (passive)");
    if (rdma_accept(s, &cp)) fail("rdma_accept");
    // ESTABLISHED on both IDs, in either order.
    for (int i = 0; i < 2; ++i) ack(expect(ch, RDMA_CM_EVENT_ESTABLISHED));
    if (rdma_disconnect(c)) fail("rdma_disconnect");
    for (int i = 0; i < 2; ++i) ack(expect(ch, RDMA_CM_EVENT_DISCONNECTED));
    g_rounds = g_rounds + 1;
    rdma_destroy_qp(c);
    rdma_destroy_qp(s);
    if (rdma_destroy_id(s) || rdma_destroy_id(c)) fail("rdma_destroy_id");
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) usage("KIND and SEED expected");
  const std::string kind = argv[1];
  const auto seed = static_cast<unsigned>(std::strtoul(argv[2], nullptr, 10));
  const char* ip = argc > 3 ? argv[3] : nullptr;
  if ((kind == "rdmacm" || kind == "connect") && !ip) usage("the rdma_cm kinds need ADDR");
  if (kind == "context") loop_context(seed);
  if (kind == "cq") loop_cq(seed);
  if (kind == "qp") loop_qp(seed);
  if (kind == "post") loop_post(seed);
  if (kind == "rdmacm") loop_rdmacm(seed, ip);
  if (kind == "connect") loop_connect(seed, ip);
  usage("unknown KIND");
}
