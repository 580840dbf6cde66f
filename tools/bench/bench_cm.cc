// SPDX-License-Identifier: BSD-3-Clause
// rnicdv-bench-cm: connection set-up through the project's CM (rnicdv/connection.h) between
// two processes on the simulated fabric's UDP wire, as a target with many initiators sees it
// (docs/performance.md, "Scale").
//
// The program forks a server (a Listener that accepts every request with a fresh QP on one
// CQ) and, in the parent, opens connections to it: first --serial of them one at a time (the
// baseline: one REQ/REP/RTU handshake with nothing else going on), then --connections of them
// with up to --window in flight. Each connection's set-up time runs from Connection::connect
// to its ESTABLISHED event. Every connection stays up until the end, so the last ones are made
// beside all the others, as on a target with that many connected QPs. Prints a JSON array of
// records (bench_util.h).
//
//   rnicdv-bench-cm [--connections N] [--window W] [--serial S] [--smoke]
#include <arpa/inet.h>
#include <poll.h>
#include <sys/epoll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bench_util.h"
#include "rnicdv/rnicdv.h"
#include "rnicdv/sim/sim.h"

using namespace rnicdv;
using namespace rnicdv::bench;

namespace {

constexpr uint16_t kPort = 7471;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "rnicdv-bench-cm: %s\n", what.c_str());
  std::exit(1);
}

template <class T>
T must(Result<T> r, const char* what) {
  if (!r) die(std::string(what) + ": " + r.status().message());
  return std::move(r).value();
}

// One end: a threaded fabric on the UDP wire, a device with room for every QP, one CQ.
struct End {
  std::shared_ptr<sim::Fabric> fabric;
  std::optional<Device> dev;
  std::optional<ProtectionDomain> pd;
  std::optional<CompletionQueue> cq;

  explicit End(uint32_t max_qp) {
    sim::FabricConfig fc;
    fc.mode = sim::ExecMode::threaded;
    fc.wire = sim::WireKind::udp;
    fabric = must(sim::Fabric::create(fc), "fabric");
    sim::DeviceConfig dc;
    dc.caps.max_qp = max_qp;
    dev.emplace(must(Device::wrap(must(fabric->add_device(dc), "device")), "wrap"));
    pd.emplace(must(dev->alloc_pd(), "pd"));
    cq.emplace(must(dev->create_cq(4096), "cq"));
  }
  QueuePair qp() {
    QpConfig qc;
    qc.caps.max_send_wr = 4;
    qc.caps.max_recv_wr = 4;
    return must(dev->create_qp(*pd, *cq, *cq, qc), "create qp");
  }
};

// The server: accepts until its parent closes `control` (read end), then exits.
int serve(int ready_fd, int control_fd, uint32_t max_qp) {
  End end(max_qp);
  Listener listener = must(Listener::listen(*end.dev, "", kPort), "listen");
  const std::string addr = end.dev->info().gid.to_string().substr(7);  // ::ffff:a.b.c.d
  const std::string line = addr + "\n";
  if (write(ready_fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) return 1;
  close(ready_fd);
  std::vector<QueuePair> qps;
  std::vector<Connection> conns;
  qps.reserve(max_qp);
  conns.reserve(max_qp);
  // epoll: a wake-up reads the events of the connections that have some, not of all of them.
  const int ep = epoll_create1(EPOLL_CLOEXEC);
  const auto watch = [ep](int fd, uint64_t tag) {
    epoll_event e{};
    e.events = EPOLLIN;
    e.data.u64 = tag;
    return epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e) == 0;
  };
  constexpr uint64_t kListener = ~uint64_t{0}, kControl = kListener - 1;
  if (ep < 0 || !watch(listener.event_fd(), kListener) || !watch(control_fd, kControl)) return 1;
  for (;;) {
    epoll_event evs[64];
    const int n = epoll_wait(ep, evs, 64, 1000);
    if (n < 0 && errno != EINTR) return 1;
    for (int i = 0; i < n; ++i) {
      uint64_t tag;
      std::memcpy(&tag, &evs[i].data, sizeof tag);  // epoll_event is packed
      if (tag == kControl) return 0;  // the parent is done (EOF)
      if (tag == kListener) {
        while (std::optional<ConnectionEvent> ev = listener.poll_event()) {
          if (ev->type != ConnectionEventType::connect_request) continue;
          qps.push_back(end.qp());
          conns.push_back(must(ev->request->accept(qps.back()), "accept"));
          if (!watch(conns.back().event_fd(), conns.size() - 1)) return 1;
        }
        continue;
      }
      // ESTABLISHED moves the passive QP to RTS by itself (release at establishment); the
      // events are only drained here.
      while (conns[tag].poll_event()) {
      }
    }
  }
}

struct Args {
  uint32_t connections = 1000, window = 32, serial = 100;
  bool smoke = false;
};

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--smoke") {
      a.smoke = true;
    } else if (i + 1 < argc && arg == "--connections") {
      a.connections = parse_count(argv[i], argv[i + 1], 100000), ++i;
    } else if (i + 1 < argc && arg == "--window") {
      a.window = parse_count(argv[i], argv[i + 1], 4096), ++i;
    } else if (i + 1 < argc && arg == "--serial") {
      a.serial = parse_count(argv[i], argv[i + 1], 100000), ++i;
    } else {
      die("unknown argument '" + arg + "' (--connections N, --window W, --serial S, --smoke)");
    }
  }
  if (a.smoke) a.serial = 10;  // the 1000 take about a second even in a debug build
  const uint32_t max_qp = a.connections + a.serial + 16;

  int ready[2], control[2];
  if (pipe(ready) != 0 || pipe(control) != 0) die("pipe failed");
  const pid_t child = fork();
  if (child < 0) die("fork failed");
  if (child == 0) {
    close(ready[0]);
    close(control[1]);
    _exit(serve(ready[1], control[0], max_qp));
  }
  close(ready[1]);
  close(control[0]);
  char buf[64] = {};
  size_t got = 0;
  while (got < sizeof buf - 1) {
    const ssize_t n = read(ready[0], buf + got, sizeof buf - 1 - got);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
    if (std::memchr(buf, '\n', got)) break;
  }
  close(ready[0]);
  if (!std::memchr(buf, '\n', got)) die("the server did not start");
  *std::strchr(buf, '\n') = 0;
  const std::string server = buf;

  const Timer timer;
  End end(max_qp);
  std::vector<QueuePair> qps;
  std::vector<std::optional<Connection>> conns;
  qps.reserve(a.serial + a.connections);
  conns.reserve(a.serial + a.connections);
  const auto wait_established = [&](Connection& c) {
    std::optional<ConnectionEvent> ev = c.wait_event(std::chrono::seconds(30));
    if (!ev) die("no answer within 30 s: " + c.name());
    if (ev->type != ConnectionEventType::established) die(ev->status.message());
  };

  // The baseline: one handshake at a time.
  std::vector<double> serial_us;
  for (uint32_t i = 0; i < a.serial; ++i) {
    qps.push_back(end.qp());
    const uint64_t t0 = timer.now();
    conns.push_back(must(Connection::connect(qps.back(), server, kPort), "connect"));
    wait_established(*conns.back());
    serial_us.push_back(timer.ns(t0, timer.now()) / 1000);
  }

  // Many at once: up to `window` handshakes in flight.
  std::vector<double> setup_us;
  std::map<size_t, uint64_t> in_flight;  // index in conns -> start
  size_t next = 0;
  const uint64_t t_start = timer.now();
  while (setup_us.size() < a.connections) {
    while (in_flight.size() < a.window && next < a.connections) {
      qps.push_back(end.qp());
      const uint64_t t0 = timer.now();
      conns.push_back(must(Connection::connect(qps.back(), server, kPort), "connect"));
      in_flight.emplace(conns.size() - 1, t0);
      ++next;
    }
    std::vector<pollfd> fds;
    for (const auto& [k, t] : in_flight) fds.push_back({conns[k]->event_fd(), POLLIN, 0});
    (void)poll(fds.data(), fds.size(), 100);
    for (auto it = in_flight.begin(); it != in_flight.end();) {
      std::optional<ConnectionEvent> ev = conns[it->first]->poll_event();
      if (!ev) {
        ++it;
        continue;
      }
      if (ev->type != ConnectionEventType::established) die(ev->status.message());
      setup_us.push_back(timer.ns(it->second, timer.now()) / 1000);
      it = in_flight.erase(it);
    }
  }
  const double wall_us = timer.ns(t_start, timer.now()) / 1000;
  close(control[1]);  // the server exits
  int status = 0;
  waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) die("the server failed");

  std::sort(serial_us.begin(), serial_us.end());
  std::sort(setup_us.begin(), setup_us.end());
  const auto pct = [](const std::vector<double>& v, double p) {
    return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
  };
  double serial_mean = 0;
  for (double v : serial_us) serial_mean += v;
  serial_mean /= static_cast<double>(serial_us.size());
  const std::string n = std::to_string(a.connections);
  std::vector<Record> out;
  out.push_back({"cm_setup_us_per_connection_" + n, wall_us / a.connections, "us/conn",
                 "cm_setup_us_serial", serial_mean});
  out.push_back({"cm_connections_per_sec_" + n, a.connections / (wall_us / 1e6), "conn/s",
                 "cm_connections_per_sec_serial", 1e6 / serial_mean});
  out.push_back({"cm_setup_p50_us_" + n, pct(setup_us, 0.5), "us", "cm_setup_p50_us_serial",
                 pct(serial_us, 0.5)});
  out.push_back({"cm_setup_p99_us_" + n, pct(setup_us, 0.99), "us", "cm_setup_p50_us_serial",
                 pct(serial_us, 0.5)});
  print_records(out, stdout);
  return 0;
}
