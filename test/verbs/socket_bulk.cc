// SPDX-License-Identifier: BSD-3-Clause
// socket-bulk: a bulk transfer over plain TCP sockets, every byte verified. It knows nothing of
// RDMA: run with librspreload.so preloaded (after the uverbs shim) its sockets are rsockets
// over the simulated HCA, as any sockets program's are under rsockets.
//
//   socket-bulk server ADDR PORT BYTES [--poll]
//   socket-bulk client ADDR PORT BYTES [--poll]
//
// The client connects to ADDR:PORT and sends BYTES bytes of a pattern that depends on each
// byte's offset, in writes whose sizes vary (1 byte to 192 KiB); the server accepts one
// connection, reads in reads whose sizes vary too, checks every byte against the pattern and
// the count, then answers one byte, which the client waits for before it closes. With --poll
// both sides use non-blocking sockets and wait in poll(), the event-driven path; otherwise
// they block in send() and recv().
//
// The server prints "verified N bytes" and exits 0 when all N bytes came in order; each side
// prints what went wrong and exits 1 otherwise (2: bad usage). A refused connection prints
// "Connection refused", which run_rdmacm.sh takes as "the server is not listening yet".
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

// The byte at `offset`: a mix of the offset, so that a lost, repeated or reordered chunk of
// any length shows.
uint8_t pattern_at(uint64_t offset) {
  uint64_t x = (offset >> 3) * 0x9e3779b97f4a7c15ull;
  x ^= x >> 29;
  return static_cast<uint8_t>(x >> (8 * (offset & 7)));
}

void fill_pattern(uint8_t* p, uint64_t offset, size_t n) {
  for (size_t i = 0; i < n; ++i) p[i] = pattern_at(offset + i);
}

// Chunk sizes from 1 byte to 192 KiB, from a fixed sequence.
size_t next_size(uint64_t* state) {
  *state = *state * 6364136223846793005ull + 1442695040888963407ull;
  const uint64_t r = *state >> 33;
  switch (r % 4) {
    case 0:
      return 1 + r % 64;  // small writes
    case 1:
      return 1 + r % 8192;
    default:
      return 1 + r % (192 * 1024);
  }
}

bool wait_for(int fd, short events) {
  pollfd p{fd, events, 0};
  for (;;) {
    const int n = poll(&p, 1, 60'000);
    if (n > 0) return true;
    if (n == 0) {
      std::fprintf(stderr, "socket-bulk: poll: nothing for 60 s\n");
      return false;
    }
    if (errno != EINTR) {
      std::perror("socket-bulk: poll");
      return false;
    }
  }
}

bool set_nonblocking(int fd) {
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    std::perror("socket-bulk: fcntl(O_NONBLOCK)");
    return false;
  }
  return true;
}

// Sends n bytes; false on an error.
bool send_all(int fd, const uint8_t* p, size_t n, bool use_poll) {
  while (n > 0) {
    const ssize_t w = send(fd, p, n, 0);
    if (w > 0) {
      p += w;
      n -= static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && use_poll && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_for(fd, POLLOUT)) return false;
      continue;
    }
    std::perror("socket-bulk: send");
    return false;
  }
  return true;
}

// Receives up to n bytes (at least one); 0 at the end of the stream, -1 on an error.
ssize_t recv_some(int fd, uint8_t* p, size_t n, bool use_poll) {
  for (;;) {
    const ssize_t r = recv(fd, p, n, 0);
    if (r >= 0) return r;
    if (errno == EINTR) continue;
    if (use_poll && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_for(fd, POLLIN)) return -1;
      continue;
    }
    std::perror("socket-bulk: recv");
    return -1;
  }
}

sockaddr_in address(const char* ip, const char* port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(std::strtoul(port, nullptr, 10)));
  if (inet_pton(AF_INET, ip, &a.sin_addr) != 1) {
    std::fprintf(stderr, "socket-bulk: bad IPv4 address '%s'\n", ip);
    std::exit(2);
  }
  return a;
}

int run_server(const sockaddr_in& at, uint64_t total, bool use_poll) {
  const int ls = socket(AF_INET, SOCK_STREAM, 0);
  if (ls < 0) {
    std::perror("socket-bulk: socket");
    return 1;
  }
  const int one = 1;
  (void)setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(ls, reinterpret_cast<const sockaddr*>(&at), sizeof at) != 0 || listen(ls, 1) != 0) {
    std::perror("socket-bulk: bind/listen");
    return 1;
  }
  const int s = accept(ls, nullptr, nullptr);
  if (s < 0) {
    std::perror("socket-bulk: accept");
    return 1;
  }
  if (use_poll && !set_nonblocking(s)) return 1;
  const auto start = std::chrono::steady_clock::now();
  std::vector<uint8_t> buf(192 * 1024);
  uint64_t got = 0;
  uint64_t sizes = 7;
  while (got < total) {
    const size_t want = std::min<uint64_t>(next_size(&sizes), total - got);
    const ssize_t r = recv_some(s, buf.data(), want, use_poll);
    if (r < 0) return 1;
    if (r == 0) {
      std::fprintf(stderr, "socket-bulk: the stream ended after %llu of %llu bytes\n",
                   static_cast<unsigned long long>(got), static_cast<unsigned long long>(total));
      return 1;
    }
    for (ssize_t i = 0; i < r; ++i) {
      if (buf[static_cast<size_t>(i)] != pattern_at(got + static_cast<uint64_t>(i))) {
        std::fprintf(stderr, "socket-bulk: byte %llu is %#x, expected %#x\n",
                     static_cast<unsigned long long>(got + static_cast<uint64_t>(i)),
                     buf[static_cast<size_t>(i)], pattern_at(got + static_cast<uint64_t>(i)));
        return 1;
      }
    }
    got += static_cast<uint64_t>(r);
  }
  // Nothing beyond the count, then the answer the client waits for.
  const uint8_t done = 0x5a;
  if (!send_all(s, &done, 1, use_poll)) return 1;
  const ssize_t extra = recv_some(s, buf.data(), 1, use_poll);
  if (extra != 0) {
    std::fprintf(stderr, "socket-bulk: %s after the %llu bytes\n",
                 extra > 0 ? "more data" : "an error", static_cast<unsigned long long>(total));
    return 1;
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("verified %llu bytes in %.2f s (%.1f MB/s)\n", static_cast<unsigned long long>(got),
              secs, static_cast<double>(got) / secs / 1e6);
  close(s);
  close(ls);
  return 0;
}

int run_client(const sockaddr_in& to, uint64_t total, bool use_poll) {
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  if (s < 0) {
    std::perror("socket-bulk: socket");
    return 1;
  }
  if (connect(s, reinterpret_cast<const sockaddr*>(&to), sizeof to) != 0) {
    std::perror("socket-bulk: connect");  // "Connection refused": not listening yet
    return 1;
  }
  if (use_poll && !set_nonblocking(s)) return 1;
  std::vector<uint8_t> buf(192 * 1024);
  uint64_t sent = 0;
  uint64_t sizes = 11;
  while (sent < total) {
    const size_t n = std::min<uint64_t>(next_size(&sizes), total - sent);
    fill_pattern(buf.data(), sent, n);
    if (!send_all(s, buf.data(), n, use_poll)) return 1;
    sent += n;
  }
  uint8_t done = 0;
  const ssize_t r = recv_some(s, &done, 1, use_poll);
  if (r != 1 || done != 0x5a) {
    std::fprintf(stderr, "socket-bulk: no answer from the server after %llu bytes\n",
                 static_cast<unsigned long long>(sent));
    return 1;
  }
  std::printf("sent %llu bytes\n", static_cast<unsigned long long>(sent));
  close(s);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5 || argc > 6 || (argc == 6 && std::string(argv[5]) != "--poll")) {
    std::fprintf(stderr, "usage: socket-bulk server|client ADDR PORT BYTES [--poll]\n");
    return 2;
  }
  const std::string mode = argv[1];
  const sockaddr_in at = address(argv[2], argv[3]);
  char* end = nullptr;
  const uint64_t total = std::strtoull(argv[4], &end, 10);
  if (!end || *end != '\0' || total == 0) {
    std::fprintf(stderr, "socket-bulk: bad byte count '%s'\n", argv[4]);
    return 2;
  }
  const bool use_poll = argc == 6;
  // Output is read by the test script after the program ends.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (mode == "server") return run_server(at, total, use_poll);
  if (mode == "client") return run_client(at, total, use_poll);
  std::fprintf(stderr, "socket-bulk: unknown mode '%s'\n", mode.c_str());
  return 2;
}
