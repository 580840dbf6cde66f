// SPDX-License-Identifier: BSD-3-Clause
// rnicdv-bench-fabric: the baselines of the simulated-fabric figures, with nothing of the
// driver or the device model in them (docs/performance.md).
//
//   ring-pingpong  two threads ping-pong one frame at a time over the in-process wire's own
//                  lock-free ring (rnicdv/sim/mpsc_ring.h, with slots laid out as the wire's
//                  frames; one ring per direction);
//   ring-stream    one thread streams frames in bursts to another over the same ring;
//   udp-pingpong   two processes ping-pong one UDP datagram over 127.0.0.1 (blocking
//                  receives: each process sleeps until its datagram arrives);
//   udp-stream     one process streams datagrams in bursts (sendmmsg) to another, which
//                  takes them in batches (recvmmsg), over 127.0.0.1, and acknowledges every
//                  burst-th one so that the sender stays at most a window ahead.
//
// Frames are as long as the RoCEv2 datagram of an RDMA WRITE of `--size` bytes (BTH 12, RETH
// 16, payload, ICRC 4). Latency uses rnicperf's write_lat maths (a timestamp before every
// send; sample i = t[i+1] - t[i], halved; perftest's median of the kept samples). Prints one
// JSON object on stdout. Every wait gives up after 20 s without progress.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.h"
#include "clock.h"
#include "stats.h"
#include "rnicdv/sim/mpsc_ring.h"
#include "rnicdv/sim/sim.h"

namespace {

using rnicdv::sim::MpscRing;

// A slot as the in-process wire lays out its frames (hw/sim/src/wire/wire_frame.h): routing
// and timing first, then room for the largest datagram.
struct WireFrame {
  uint64_t due_ns;
  uint64_t sequence;
  uint32_t src_ipv4, dst_ipv4;
  uint16_t src_port, dst_port;
  uint32_t len;
  uint8_t flags;
  uint8_t bytes[rnicdv::sim::kMaxWireDatagramBytes];
};

constexpr uint32_t kRoceWriteOverhead = 12 + 16 + 4;  // BTH, RETH, ICRC
constexpr unsigned kRingLog2 = 9;                     // as the in-process wire

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "rnicdv-bench-fabric: %s\n", what.c_str());
  std::exit(1);
}

// A busy wait that yields the CPU after every 1024 empty polls (on a machine with fewer free
// cores than spinning threads, the peer may need this one's core to make progress) and gives
// up after 20 s without progress.
class Deadline {
 public:
  explicit Deadline(const char* what) : what_(what) { reset(); }
  void reset() { start_ = clock().now(); spins_ = 0; }
  void spin() {
    if ((++spins_ & 0x3ff) != 0) return;
    sched_yield();
    if (clock().now() - start_ > 20 * clock().ticks_per_sec())
      fail(std::string(what_) + ": no progress for 20 s");
  }

 private:
  static const rnicperf::Clock& clock() { return rnicperf::Clock::get(); }
  const char* what_;
  uint64_t start_ = 0;
  uint64_t spins_ = 0;
};

void send_frame(MpscRing<WireFrame>& ring, const uint8_t* bytes, uint32_t len, Deadline& d) {
  auto claim = ring.claim();
  while (!claim) {
    d.spin();
    claim = ring.claim();
  }
  claim.slot->len = len;
  std::memcpy(claim.slot->bytes, bytes, len);
  ring.publish(claim);
}

// Waits for the next frame, copies it out (as a receiver would) and frees its slot.
uint32_t receive_frame(MpscRing<WireFrame>& ring, uint8_t* into, Deadline& d) {
  WireFrame* f;
  while ((f = ring.front()) == nullptr) d.spin();
  const uint32_t len = f->len;
  std::memcpy(into, f->bytes, len);
  ring.pop();
  return len;
}

void print_latency(const char* what, std::vector<uint64_t>& tposted, uint32_t size) {
  std::vector<uint64_t> deltas(tposted.size() - 1);
  rnicperf::deltas_from_posts(tposted, deltas);
  const auto& clock = rnicperf::Clock::get();
  const rnicperf::LatencyResult r =
      rnicperf::compute_latency(deltas, clock.ticks_per_us(), 2, size, tposted.size());
  std::printf("{\"test\": \"%s\", \"size\": %u, \"iterations\": %zu, \"t_typical\": %.4f, "
              "\"t_avg\": %.4f, \"t_min\": %.4f, \"percentile_99\": %.4f}\n",
              what, size, tposted.size(), r.t_typical, r.t_avg, r.t_min, r.p99);
}

void ring_pingpong(uint32_t iters, uint32_t size) {
  auto to_server = std::make_unique<MpscRing<WireFrame>>(kRingLog2);
  auto to_client = std::make_unique<MpscRing<WireFrame>>(kRingLog2);
  const uint32_t len = size + kRoceWriteOverhead;
  std::thread server([&] {
    std::vector<uint8_t> buf(len);
    Deadline d("ring-pingpong server");
    for (uint32_t i = 0; i < iters; ++i) {
      receive_frame(*to_server, buf.data(), d);
      send_frame(*to_client, buf.data(), len, d);
      d.reset();
    }
  });
  std::vector<uint8_t> buf(len, 0x5a);
  std::vector<uint64_t> tposted(iters);
  const auto& clock = rnicperf::Clock::get();
  Deadline d("ring-pingpong client");
  for (uint32_t i = 0; i < iters; ++i) {
    tposted[i] = clock.now();
    buf[len - 1] = static_cast<uint8_t>(i);
    send_frame(*to_server, buf.data(), len, d);
    receive_frame(*to_client, buf.data(), d);
    d.reset();
  }
  server.join();
  print_latency("ring-pingpong", tposted, size);
}

void ring_stream(uint32_t messages, uint32_t size, uint32_t burst) {
  auto ring = std::make_unique<MpscRing<WireFrame>>(kRingLog2);
  const uint32_t len = size + kRoceWriteOverhead;
  const auto& clock = rnicperf::Clock::get();
  std::atomic<uint64_t> t_end{0};
  std::thread consumer([&] {
    std::vector<uint8_t> buf(len);
    Deadline d("ring-stream consumer");
    for (uint32_t i = 0; i < messages; ++i) {
      receive_frame(*ring, buf.data(), d);
      d.reset();
    }
    t_end.store(clock.now());
  });
  std::vector<uint8_t> buf(len, 0x5a);
  Deadline d("ring-stream producer");
  const uint64_t t0 = clock.now();
  for (uint32_t sent = 0; sent < messages;) {
    for (uint32_t j = 0; j < burst && sent < messages; ++j, ++sent)
      send_frame(*ring, buf.data(), len, d);
    d.reset();
  }
  consumer.join();
  const double secs = static_cast<double>(t_end.load() - t0) / clock.ticks_per_sec();
  std::printf("{\"test\": \"ring-stream\", \"size\": %u, \"messages\": %u, \"burst\": %u, "
              "\"msg_rate_mpps\": %.4f, \"ns_per_msg\": %.4f}\n",
              size, messages, burst, messages / secs / 1e6, secs * 1e9 / messages);
}

int udp_socket(sockaddr_in* bound) {
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (fd < 0) fail(std::string("socket: ") + std::strerror(errno));
  const timeval limit{20, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
    fail(std::string("bind 127.0.0.1: ") + std::strerror(errno));
  socklen_t l = sizeof *bound;
  getsockname(fd, reinterpret_cast<sockaddr*>(bound), &l);
  return fd;
}

// A blocking receive: the process sleeps until the datagram arrives (at most 20 s).
void udp_receive(int fd, uint8_t* buf, uint32_t len) {
  for (;;) {
    const ssize_t n = recv(fd, buf, len, 0);
    if (n >= 0) return;
    if (errno == EAGAIN || errno == EWOULDBLOCK) fail("udp-pingpong: no datagram for 20 s");
    if (errno != EINTR) fail(std::string("recv: ") + std::strerror(errno));
  }
}

void udp_send(int fd, const uint8_t* buf, uint32_t len) {
  while (send(fd, buf, len, 0) < 0)
    if (errno != EINTR && errno != ENOBUFS && errno != EAGAIN)
      fail(std::string("send: ") + std::strerror(errno));
}

// Two UDP sockets on 127.0.0.1 connected to each other, and a child process forked to use the
// second (`*server_fd`; the parent keeps the first, `*client_fd`). Returns the child's pid in
// the parent, 0 in the child.
pid_t udp_pair(int* client_fd, int* server_fd) {
  sockaddr_in ca{}, sa{};
  const int cfd = udp_socket(&ca);
  const int sfd = udp_socket(&sa);
  if (connect(cfd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 ||
      connect(sfd, reinterpret_cast<sockaddr*>(&ca), sizeof ca) != 0)
    fail(std::string("connect: ") + std::strerror(errno));
  std::fflush(stdout);
  const pid_t child = fork();
  if (child < 0) fail(std::string("fork: ") + std::strerror(errno));
  if (child == 0) {
    close(cfd);
  } else {
    close(sfd);
  }
  *client_fd = cfd;
  *server_fd = sfd;
  return child;
}

void udp_pingpong(uint32_t iters, uint32_t size) {
  int cfd = -1, sfd = -1;
  const uint32_t len = size + kRoceWriteOverhead;
  const pid_t child = udp_pair(&cfd, &sfd);
  if (child == 0) {
    std::vector<uint8_t> buf(len);
    for (uint32_t i = 0; i < iters; ++i) {
      udp_receive(sfd, buf.data(), len);
      udp_send(sfd, buf.data(), len);
    }
    std::_Exit(0);
  }
  std::vector<uint8_t> buf(len, 0x5a);
  std::vector<uint64_t> tposted(iters);
  const auto& clock = rnicperf::Clock::get();
  for (uint32_t i = 0; i < iters; ++i) {
    tposted[i] = clock.now();
    udp_send(cfd, buf.data(), len);
    udp_receive(cfd, buf.data(), len);
  }
  int status = 0;
  waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) fail("udp-pingpong: the server process failed");
  print_latency("udp-pingpong", tposted, size);
}

// The receiver acknowledges after every `burst` datagrams; the sender keeps at most four
// bursts unacknowledged (the simulated RC transport has a window too), so neither overruns
// the socket buffers.
void udp_stream(uint32_t messages, uint32_t size, uint32_t burst) {
  int cfd = -1, sfd = -1;
  const uint32_t len = size + kRoceWriteOverhead;
  const pid_t child = udp_pair(&cfd, &sfd);
  if (child == 0) {
    std::vector<uint8_t> bufs(size_t{burst} * len);
    std::vector<iovec> iov(burst);
    std::vector<mmsghdr> msgs(burst);
    for (uint32_t i = 0; i < burst; ++i) {
      iov[i] = {bufs.data() + size_t{i} * len, len};
      msgs[i].msg_hdr = msghdr{};
      msgs[i].msg_hdr.msg_iov = &iov[i];
      msgs[i].msg_hdr.msg_iovlen = 1;
    }
    uint32_t got = 0, acked = 0;
    while (got < messages) {
      const int n = recvmmsg(sfd, msgs.data(), burst, 0, nullptr);
      if (n < 0) {
        if (errno == EINTR) continue;
        std::_Exit(2);
      }
      got += static_cast<uint32_t>(n);
      while (got / burst > acked || (got == messages && acked * burst < messages)) {
        udp_send(sfd, bufs.data(), 8);
        ++acked;
      }
    }
    std::_Exit(0);
  }
  std::vector<uint8_t> buf(len, 0x5a);
  std::vector<iovec> iov(burst, iovec{buf.data(), len});
  std::vector<mmsghdr> msgs(burst);
  for (uint32_t i = 0; i < burst; ++i) {
    msgs[i].msg_hdr = msghdr{};
    msgs[i].msg_hdr.msg_iov = &iov[i];
    msgs[i].msg_hdr.msg_iovlen = 1;
  }
  const auto& clock = rnicperf::Clock::get();
  uint8_t ack[8];
  uint32_t sent = 0, acked = 0;
  const uint64_t t0 = clock.now();
  while (sent < messages) {
    while (sent / burst >= acked + 4) {
      udp_receive(cfd, ack, sizeof ack);
      ++acked;
    }
    const uint32_t n = std::min(burst, messages - sent);
    for (uint32_t done = 0; done < n;) {
      const int k = sendmmsg(cfd, msgs.data() + done, n - done, 0);
      if (k < 0) {
        if (errno != EINTR && errno != ENOBUFS && errno != EAGAIN)
          fail(std::string("sendmmsg: ") + std::strerror(errno));
        continue;
      }
      done += static_cast<uint32_t>(k);
    }
    sent += n;
  }
  while (acked * burst < messages) {
    udp_receive(cfd, ack, sizeof ack);
    ++acked;
  }
  const double secs = static_cast<double>(clock.now() - t0) / clock.ticks_per_sec();
  int status = 0;
  waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) fail("udp-stream: the receiver failed");
  std::printf("{\"test\": \"udp-stream\", \"size\": %u, \"messages\": %u, \"burst\": %u, "
              "\"msg_rate_mpps\": %.4f, \"ns_per_msg\": %.4f}\n",
              size, messages, burst, messages / secs / 1e6, secs * 1e9 / messages);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) fail("usage: rnicdv-bench-fabric ring-pingpong|ring-stream|udp-pingpong|udp-stream "
                     "[--iters N] [--size BYTES] [--burst N]");
  const std::string test = argv[1];
  uint32_t iters = 10000, size = 8, burst = 32;
  for (int i = 2; i + 1 < argc + 1; i += 2) {
    if (i + 1 >= argc) fail(std::string(argv[i]) + ": missing value");
    const std::string opt = argv[i];
    if (opt == "--iters") iters = rnicdv::bench::parse_count(argv[i], argv[i + 1], 100'000'000);
    else if (opt == "--size") size = rnicdv::bench::parse_count(argv[i], argv[i + 1], 100'000'000);
    else if (opt == "--burst") burst = rnicdv::bench::parse_count(argv[i], argv[i + 1], 100'000'000);
    else fail("unknown option '" + opt + "'");
  }
  if (size > rnicdv::sim::kMaxWireDatagramBytes - kRoceWriteOverhead) fail("--size: too large");
  if (iters < 4) fail("--iters: at least 4");
  if (test == "ring-pingpong") ring_pingpong(iters, size);
  else if (test == "ring-stream") ring_stream(iters, size, burst);
  else if (test == "udp-pingpong") udp_pingpong(iters, size);
  else if (test == "udp-stream") udp_stream(iters, size, burst);
  else fail("unknown test '" + test + "'");
  return 0;
}
