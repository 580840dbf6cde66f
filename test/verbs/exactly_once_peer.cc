// SPDX-License-Identifier: BSD-3-Clause
// exactly-once-peer: one end of a two-process check that the device places inbound data
// once. libibverbs only; run with the uverbs shim preloaded, each process on its own
// simulated HCA (RNICDV_SIM_ADDR), the two meeting over TCP to trade QP numbers and keys.
//
//   exactly-once-peer server|client --port N [--peer IP] --mode MODE [--rounds N] [--bytes N]
//
// Modes, each a loop of round trips in which a process stores into a buffer the device
// writes, and checks that its store stays:
//   write-inline, write: riostream's latency pattern. One buffer is both the RDMA WRITE target
//     and its source. Each side waits for the peer's marker in the buffer's last 8 bytes,
//     stores its own marker there and WRITEs the whole buffer back (inline, or from the
//     registered buffer), then checks that the word holds its own marker until the peer's
//     next one arrives. A WRITE placed a second time puts the peer's old marker back.
//   read: the client WRITEs a marker into the server's buffer and READs the buffer back. As
//     soon as the marker shows in its local buffer (before the completion) it stores a value
//     of its own there, and after the READ's completion that value must still be there.
//   atomic: the client's FETCH_AND_ADDs on the server's counter. Each returns the count of
//     the ones before it, and the same store-after-arrival check applies to the 8-byte
//     result; at the end the server's counter holds exactly the number of atomics.
//
// Prints one line, "rounds R violations V", and exits 0 when V is 0 and every round ran;
// 1 on a violation or a stall (with the first few violations described on stderr), 2 on a
// set-up failure.
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

constexpr uint8_t kGidIndex = 3;  // ::ffff:a.b.c.d, RoCE v2
constexpr auto kStall = std::chrono::seconds(20);
constexpr int kSignalEvery = 16;  // unsignaled WRITEs, with a signaled one this often

enum class Mode { write_inline, write, read, atomic };

struct Args {
  bool server = false;
  std::string peer = "127.0.0.1";
  uint16_t port = 0;
  Mode mode = Mode::write_inline;
  long rounds = 2000;
  uint32_t bytes = 64;
};

struct Remote {
  uint32_t qpn;
  uint32_t rkey;
  uint64_t addr;
  ibv_gid gid;
};

[[noreturn]] void fail_setup(const char* what) {
  std::fprintf(stderr, "exactly-once-peer: %s: %s\n", what, std::strerror(errno));
  std::exit(2);
}

bool parse(int argc, char** argv, Args& a) {
  if (argc < 2) return false;
  const std::string role = argv[1];
  if (role != "server" && role != "client") return false;
  a.server = role == "server";
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--port") {
      a.port = static_cast<uint16_t>(std::atoi(v.c_str()));
    } else if (k == "--peer") {
      a.peer = v;
    } else if (k == "--rounds") {
      a.rounds = std::atol(v.c_str());
    } else if (k == "--bytes") {
      a.bytes = static_cast<uint32_t>(std::atoi(v.c_str()));
    } else if (k == "--mode") {
      if (v == "write-inline") a.mode = Mode::write_inline;
      else if (v == "write") a.mode = Mode::write;
      else if (v == "read") a.mode = Mode::read;
      else if (v == "atomic") a.mode = Mode::atomic;
      else return false;
    } else {
      return false;
    }
  }
  return a.port != 0 && a.rounds > 0 && a.bytes >= 8 && a.bytes <= 4096;
}

// The TCP side channel: the server accepts one connection, the client retries until the
// server listens.
int side_channel(const Args& a) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(a.port);
  const auto deadline = std::chrono::steady_clock::now() + kStall;
  if (a.server) {
    const int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int one = 1;
    ::setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (s < 0 || ::bind(s, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || ::listen(s, 1) != 0)
      fail_setup("listen");
    std::printf("listening\n");
    std::fflush(stdout);
    const int c = ::accept(s, nullptr, nullptr);
    ::close(s);
    if (c < 0) fail_setup("accept");
    return c;
  }
  if (::inet_pton(AF_INET, a.peer.c_str(), &sa.sin_addr) != 1) fail_setup("--peer");
  for (;;) {
    const int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (::connect(s, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0) return s;
    ::close(s);
    if (std::chrono::steady_clock::now() > deadline) fail_setup("connect");
    ::usleep(10'000);
  }
}

void exchange(int fd, const void* out, void* in, size_t n) {
  if (::write(fd, out, n) != static_cast<ssize_t>(n)) fail_setup("side channel write");
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::read(fd, static_cast<uint8_t*>(in) + got, n - got);
    if (r <= 0) fail_setup("side channel read");
    got += static_cast<size_t>(r);
  }
}

struct Verbs {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  ibv_mr* mr = nullptr;
  uint8_t* buf = nullptr;  // 2 pages: the echoed buffer, then 8-byte source/result words
  static constexpr size_t kBufBytes = 8192;

  Verbs() {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (!list || n == 0) fail_setup("no device");
    ctx = ibv_open_device(list[0]);
    ibv_free_device_list(list);
    if (!ctx) fail_setup("ibv_open_device");
    pd = ibv_alloc_pd(ctx);
    cq = ibv_create_cq(ctx, 256, nullptr, nullptr, 0);
    buf = static_cast<uint8_t*>(std::aligned_alloc(4096, kBufBytes));
    if (!pd || !cq || !buf) fail_setup("pd, cq or buffer");
    std::memset(buf, 0, kBufBytes);
    mr = ibv_reg_mr(pd, buf, kBufBytes,
                    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                        IBV_ACCESS_REMOTE_ATOMIC);
    ibv_qp_init_attr init{};
    init.send_cq = cq;
    init.recv_cq = cq;
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = 64;
    init.cap.max_recv_wr = 1;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    init.cap.max_inline_data = 64;
    qp = ibv_create_qp(pd, &init);
    if (!mr || !qp) fail_setup("mr or qp");
  }

  Remote local() const {
    Remote r{qp->qp_num, mr->rkey, reinterpret_cast<uintptr_t>(buf), {}};
    if (ibv_query_gid(ctx, 1, kGidIndex, &r.gid) != 0) fail_setup("ibv_query_gid");
    return r;
  }

  void connect(const Remote& peer) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
      fail_setup("INIT");
    a = {};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_4096;
    a.dest_qp_num = peer.qpn;
    a.max_dest_rd_atomic = 16;
    a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = peer.gid;
    a.ah_attr.grh.sgid_index = kGidIndex;
    a.ah_attr.grh.hop_limit = 64;
    a.ah_attr.port_num = 1;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
      fail_setup("RTR");
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 16;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                  IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
      fail_setup("RTS");
  }
};

// The round-trip loops. A violation is described on stderr (the first few) and counted.
class Checker {
 public:
  Checker(Verbs& v, const Remote& peer, const Args& a) : v_(v), peer_(peer), a_(a) {}

  long violations() const { return violations_; }
  long rounds_done() const { return rounds_done_; }

  // riostream's pattern: the client writes marker 1, 3, 5, ..., the server 2, 4, 6, ...
  bool echo() {
    const uint64_t first_own = a_.server ? 2 : 1;
    uint64_t* word = reinterpret_cast<uint64_t*>(v_.buf + a_.bytes - 8);
    if (!a_.server && !post_echo(first_own)) return false;
    for (long r = 0; r < a_.rounds; ++r) {
      const uint64_t mine = first_own + 2 * static_cast<uint64_t>(r);
      const uint64_t peers = a_.server ? mine - 1 : mine + 1;
      // Before the peer's marker: our last one (none yet in round 0 for the server).
      const uint64_t kept = a_.server ? mine - 2 : mine;
      const auto deadline = std::chrono::steady_clock::now() + kStall;
      for (;;) {
        const uint64_t seen = __atomic_load_n(word, __ATOMIC_ACQUIRE);
        if (seen == peers) break;
        if (seen != kept) {
          violation("round %llu: the word went from our %llu to %llu before the peer's %llu", r,
                    kept, seen, peers);
          return false;
        }
        if (std::chrono::steady_clock::now() > deadline) return stalled(r, seen);
      }
      if (a_.server) {
        if (!post_echo(mine)) return false;
      } else if (r + 1 < a_.rounds) {
        if (!post_echo(mine + 2)) return false;
      }
      ++rounds_done_;
    }
    return drain();
  }

  // The client READs back what it WRITEs into the server's buffer, and stores over the
  // READ's data in its own buffer as soon as it shows.
  bool read_back() {
    uint64_t* local = reinterpret_cast<uint64_t*>(v_.buf + a_.bytes - 8);
    uint64_t* source = reinterpret_cast<uint64_t*>(v_.buf + 4096);
    for (long r = 0; r < a_.rounds; ++r) {
      const uint64_t marker = 0x5245414400000000ull + static_cast<uint64_t>(r) * 2 + 1;
      const uint64_t ours = marker + 1;
      *source = marker;
      ibv_sge ws{reinterpret_cast<uintptr_t>(source), 8, v_.mr->lkey};
      if (!post(IBV_WR_RDMA_WRITE, ws, peer_.addr + a_.bytes - 8, 0, IBV_SEND_INLINE)) return false;
      ibv_sge rs{reinterpret_cast<uintptr_t>(v_.buf), a_.bytes, v_.mr->lkey};
      if (!post(IBV_WR_RDMA_READ, rs, peer_.addr, 0, IBV_SEND_SIGNALED)) return false;
      if (!await_then_store(local, marker, ours, r)) return false;
      if (!wait_completion(r)) return false;
      if (const uint64_t after = __atomic_load_n(local, __ATOMIC_ACQUIRE); after != ours) {
        violation("round %llu: READ data placed again over our %llu (now %llu)", r, ours, after);
        return false;
      }
      ++rounds_done_;
    }
    return true;
  }

  // The client's FETCH_AND_ADD(1) on the server's counter: round r fetches r.
  bool atomics() {
    uint64_t* result = reinterpret_cast<uint64_t*>(v_.buf + 4096);
    for (long r = 0; r < a_.rounds; ++r) {
      const uint64_t empty = ~static_cast<uint64_t>(r);
      const uint64_t ours = 0xA70A000000000000ull + static_cast<uint64_t>(r);
      __atomic_store_n(result, empty, __ATOMIC_RELEASE);
      ibv_sge s{reinterpret_cast<uintptr_t>(result), 8, v_.mr->lkey};
      if (!post(IBV_WR_ATOMIC_FETCH_AND_ADD, s, peer_.addr, 1, IBV_SEND_SIGNALED)) return false;
      const auto deadline = std::chrono::steady_clock::now() + kStall;
      uint64_t fetched = empty;
      while ((fetched = __atomic_load_n(result, __ATOMIC_ACQUIRE)) == empty)
        if (std::chrono::steady_clock::now() > deadline) return stalled(r, fetched);
      if (fetched != static_cast<uint64_t>(r)) {
        violation("round %llu: FETCH_AND_ADD fetched %llu, expected %llu (one ran twice, or not)",
                  r, fetched, r);
        return false;
      }
      __atomic_store_n(result, ours, __ATOMIC_RELEASE);
      if (!wait_completion(r)) return false;
      if (const uint64_t after = __atomic_load_n(result, __ATOMIC_ACQUIRE); after != ours) {
        violation("round %llu: the atomic's result placed again over our %llu (now %llu)", r,
                  ours, after);
        return false;
      }
      ++rounds_done_;
    }
    return true;
  }

 private:
  bool post(ibv_wr_opcode op, ibv_sge& sge, uint64_t remote_addr, uint64_t add, int flags) {
    ibv_send_wr wr{};
    wr.wr_id = posted_++;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = op;
    wr.send_flags = flags;
    if (op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
      wr.wr.atomic.remote_addr = remote_addr;
      wr.wr.atomic.rkey = peer_.rkey;
      wr.wr.atomic.compare_add = add;
    } else {
      wr.wr.rdma.remote_addr = remote_addr;
      wr.wr.rdma.rkey = peer_.rkey;
    }
    ibv_send_wr* bad = nullptr;
    if (const int rc = ibv_post_send(v_.qp, &wr, &bad); rc != 0) {
      std::fprintf(stderr, "exactly-once-peer: ibv_post_send: %s\n", std::strerror(rc));
      return false;
    }
    return true;
  }

  bool post_echo(uint64_t marker) {
    __atomic_store_n(reinterpret_cast<uint64_t*>(v_.buf + a_.bytes - 8), marker, __ATOMIC_RELEASE);
    ibv_sge sge{reinterpret_cast<uintptr_t>(v_.buf), a_.bytes, v_.mr->lkey};
    const bool signaled = (posted_ % kSignalEvery) == kSignalEvery - 1;
    const int flags = (a_.mode == Mode::write_inline ? IBV_SEND_INLINE : 0) |
                      (signaled ? IBV_SEND_SIGNALED : 0);
    if (!post(IBV_WR_RDMA_WRITE, sge, peer_.addr, 0, flags)) return false;
    if (signaled) ++unreaped_;
    return reap(1);  // at most one signaled WRITE outstanding
  }

  // Takes completions until `left` signaled ones are outstanding.
  bool reap(int left) {
    const auto deadline = std::chrono::steady_clock::now() + kStall;
    while (unreaped_ > left) {
      ibv_wc wc{};
      const int n = ibv_poll_cq(v_.cq, 1, &wc);
      if (n < 0) return false;
      if (n == 1) {
        if (wc.status != IBV_WC_SUCCESS) {
          std::fprintf(stderr, "exactly-once-peer: completion in error: %s\n",
                       ibv_wc_status_str(wc.status));
          return false;
        }
        --unreaped_;
      } else if (std::chrono::steady_clock::now() > deadline) {
        return stalled(rounds_done_, 0);
      }
    }
    return true;
  }

  bool drain() { return reap(0); }

  bool wait_completion(long) {
    ++unreaped_;
    return reap(0);
  }

  bool await_then_store(uint64_t* word, uint64_t expected, uint64_t ours, long r) {
    const auto deadline = std::chrono::steady_clock::now() + kStall;
    uint64_t seen = 0;
    while ((seen = __atomic_load_n(word, __ATOMIC_ACQUIRE)) != expected)
      if (std::chrono::steady_clock::now() > deadline) return stalled(r, seen);
    __atomic_store_n(word, ours, __ATOMIC_RELEASE);
    return true;
  }

  template <class... T>
  void violation(const char* fmt, T... args) {
    ++violations_;
    std::fprintf(stderr, "exactly-once-peer %s: ", a_.server ? "server" : "client");
    std::fprintf(stderr, fmt, static_cast<unsigned long long>(args)...);
    std::fprintf(stderr, "\n");
  }

  bool stalled(long r, uint64_t seen) {
    std::fprintf(stderr, "exactly-once-peer %s: round %ld: nothing for %lld s (word %llu)\n",
                 a_.server ? "server" : "client", r, static_cast<long long>(kStall.count()),
                 static_cast<unsigned long long>(seen));
    return false;
  }

  Verbs& v_;
  Remote peer_;
  const Args& a_;
  long violations_ = 0;
  long rounds_done_ = 0;
  uint64_t posted_ = 0;
  int unreaped_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (!parse(argc, argv, a)) {
    std::fprintf(stderr,
                 "usage: exactly-once-peer server|client --port N [--peer IP] "
                 "--mode write-inline|write|read|atomic [--rounds N] [--bytes 8..4096]\n");
    return 2;
  }
  if (a.mode == Mode::write_inline && a.bytes > 64) a.bytes = 64;  // the QP's inline limit
  Verbs v;
  const int fd = side_channel(a);
  const Remote me = v.local();
  Remote peer{};
  exchange(fd, &me, &peer, sizeof me);
  v.connect(peer);
  char go = 'g';
  exchange(fd, &go, &go, 1);  // both in RTS before the first request

  Checker c(v, peer, a);
  bool ok = true;
  const bool passive = a.server && (a.mode == Mode::read || a.mode == Mode::atomic);
  if (a.mode == Mode::write_inline || a.mode == Mode::write) {
    ok = c.echo();
  } else if (!passive) {
    ok = a.mode == Mode::read ? c.read_back() : c.atomics();
  }
  // The client says how it went; the passive server reports its counter for the atomics.
  char done = ok ? 'y' : 'n', peer_done = 'n';
  exchange(fd, &done, &peer_done, 1);
  long rounds = c.rounds_done();
  if (passive) {
    ok = peer_done == 'y';
    if (a.mode == Mode::atomic) {
      const uint64_t counter = __atomic_load_n(reinterpret_cast<uint64_t*>(v.buf), __ATOMIC_ACQUIRE);
      if (counter != static_cast<uint64_t>(a.rounds)) {
        std::fprintf(stderr, "exactly-once-peer server: the counter is %llu after %ld atomics\n",
                     static_cast<unsigned long long>(counter), a.rounds);
        ok = false;
      }
    }
    rounds = ok ? a.rounds : 0;
  }
  std::printf("rounds %ld violations %ld\n", rounds, c.violations());
  ::close(fd);
  ibv_destroy_qp(v.qp);
  ibv_dereg_mr(v.mr);
  ibv_destroy_cq(v.cq);
  ibv_dealloc_pd(v.pd);
  ibv_close_device(v.ctx);
  std::free(v.buf);
  return ok && rounds == a.rounds && c.violations() == 0 ? 0 : 1;
}
