// SPDX-License-Identifier: BSD-3-Clause
// A storage-shaped exchange on rnicdv's public API, as an NVMe-oF or iSER initiator and target
// use RDMA: the initiator sends command capsules (SEND, inline), the target moves the data
// with RDMA READ (for a write command) and RDMA WRITE (for a read command) against the
// initiator's registered buffers, and answers with a response capsule (SEND). Two processes
// on the simulated fabric's UDP wire, several connections, one CQ and one completion channel
// per side, every loop asleep in epoll when there is nothing to do; the target takes every
// command from one shared receive queue.
//
//   examples-storage initiator [--addr IP] [--port N] [--connections N] [--commands N]
//                              [--depth N] [--block BYTES] [--idle-ms N] [--max-idle-cpu F]
//   examples-storage target --peer IP [--addr IP] [--port N] [--connections N] [--block BYTES]
//
// Early posting: the initiator is the CM's passive side. It accepts each connection (its QP
// then waits in RTR for the RTU) and posts its first commands at once; the driver builds them
// and withholds the doorbell, and the RTU releases the batch. The target dials the initiator
// (the active side of a CM handshake passes through RTR only inside its REP handler, so the
// window in which work can be posted early exists on the passive side).
//
// Each connection writes --commands blocks (WRITE commands), then reads them back (READ
// commands) and compares. Between the two phases the initiator sits idle for --idle-ms and
// measures the CPU time the whole process (device thread included) used meanwhile. It exits 0
// when every command completed exactly once, with the right data, and the idle CPU share
// stayed under --max-idle-cpu.
#include <arpa/inet.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "rnicdv/rnicdv.h"
#include "rnicdv/sim/sim.h"

using namespace rnicdv;

namespace {

constexpr uint32_t kMagic = 0x53544f52;  // "STOR"
enum class Op : uint16_t { write = 1, read = 2 };

// A command capsule: which blocks, and where the initiator's buffer is.
struct Command {
  uint32_t magic;
  Op op;
  uint16_t connection;
  uint64_t cmd_id;
  uint64_t lba;
  uint64_t addr;  // the initiator's buffer for the block
  uint32_t rkey;
  uint32_t length;
};
// A response capsule.
struct Response {
  uint32_t magic;
  uint32_t status;  // 0: done; else what went wrong
  uint64_t cmd_id;
};
constexpr uint32_t kCapsuleSlot = 64;  // receive buffer per capsule
static_assert(sizeof(Command) <= kCapsuleSlot && sizeof(Response) <= kCapsuleSlot);

struct Args {
  std::string role, addr, peer;
  uint16_t port = 4420;
  uint32_t connections = 4, commands = 64, depth = 8, block = 4096, idle_ms = 500;
  double max_idle_cpu = 0.25;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "examples-storage: %s\n"
               "usage: examples-storage initiator [--addr IP] [--port N] [--connections N] "
               "[--commands N] [--depth N] [--block BYTES] [--idle-ms N] [--max-idle-cpu F]\n"
               "       examples-storage target --peer IP [--addr IP] [--port N] "
               "[--connections N] [--block BYTES]\n",
               why);
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  if (argc < 2) usage("a role is needed");
  a.role = argv[1];
  if (a.role != "initiator" && a.role != "target") usage("the role is initiator or target");
  for (int i = 2; i < argc; ++i) {
    const std::string opt = argv[i];
    if (i + 1 >= argc) usage(("option " + opt + " needs a value").c_str());
    const char* v = argv[++i];
    const auto num = [&](uint32_t lo, uint32_t hi) {
      char* end = nullptr;
      const unsigned long n = std::strtoul(v, &end, 10);
      if (*end || n < lo || n > hi) usage((opt + " " + v + ": out of range").c_str());
      return static_cast<uint32_t>(n);
    };
    if (opt == "--addr") a.addr = v;
    else if (opt == "--peer") a.peer = v;
    else if (opt == "--port") a.port = static_cast<uint16_t>(num(1, 65535));
    else if (opt == "--connections") a.connections = num(1, 256);
    else if (opt == "--commands") a.commands = num(1, 1u << 20);
    else if (opt == "--depth") a.depth = num(1, 128);
    else if (opt == "--block") a.block = num(8, 1u << 20);
    else if (opt == "--idle-ms") a.idle_ms = num(0, 60000);
    else if (opt == "--max-idle-cpu") a.max_idle_cpu = std::atof(v);
    else usage(("unknown option " + opt).c_str());
  }
  if (a.role == "target" && a.peer.empty()) usage("the target needs --peer (the initiator's IP)");
  return a;
}

template <class T>
T must(Result<T> r, const char* what) {
  if (!r) {
    std::fprintf(stderr, "examples-storage: %s: %s\n", what, r.status().message().c_str());
    std::exit(1);
  }
  return std::move(r).value();
}

void must(const Status& s, const char* what) {
  if (!s) {
    std::fprintf(stderr, "examples-storage: %s: %s\n", what, s.message().c_str());
    std::exit(1);
  }
}

void must(Errc e, const char* what) {
  if (e != Errc::ok) {
    std::fprintf(stderr, "examples-storage: %s: %s\n", what, errc_name(e));
    std::exit(1);
  }
}

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// The byte `i` of block `lba` as written by connection `conn`.
uint8_t pattern(uint32_t conn, uint64_t lba, size_t i) {
  return static_cast<uint8_t>((conn * 131u) ^ (lba * 7u) ^ (i * 13u) ^ (i >> 8));
}

// The simulated HCA on a UDP fabric of this process, at `addr` (empty: the first free one).
std::shared_ptr<hw::Device> open_hca(const std::string& addr,
                                     std::shared_ptr<sim::Fabric>* fabric) {
  sim::FabricConfig fc;
  fc.mode = sim::ExecMode::threaded;
  fc.wire = sim::WireKind::udp;
  *fabric = must(sim::Fabric::create(fc), "fabric");
  sim::DeviceConfig dc;
  if (!addr.empty()) {
    in_addr a{};
    if (inet_pton(AF_INET, addr.c_str(), &a) != 1) usage(("--addr " + addr + ": not IPv4").c_str());
    dc.ipv4 = ntohl(a.s_addr);
  }
  return must((*fabric)->add_device(dc), "add device");
}

// An epoll set; wait() returns the tags of the descriptors that are ready.
class Poller {
 public:
  Poller() : fd_(epoll_create1(EPOLL_CLOEXEC)) {
    if (fd_ < 0) must(Status::error(Errc::internal, "epoll_create1 failed"), "epoll");
  }
  ~Poller() { close(fd_); }
  void add(int fd, uint64_t tag) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = tag;
    if (epoll_ctl(fd_, EPOLL_CTL_ADD, fd, &ev) != 0)
      must(Status::error(Errc::internal, "epoll_ctl(%d) failed", fd), "epoll");
  }
  void remove(int fd) { (void)epoll_ctl(fd_, EPOLL_CTL_DEL, fd, nullptr); }
  std::vector<uint64_t> wait(int timeout_ms) {
    epoll_event evs[16];
    const int n = epoll_wait(fd_, evs, 16, timeout_ms);
    std::vector<uint64_t> tags;
    for (int i = 0; i < n; ++i) {
      uint64_t tag;  // copied out: epoll_event is packed
      std::memcpy(&tag, &evs[i].data, sizeof tag);
      tags.push_back(tag);
    }
    return tags;
  }

 private:
  int fd_;
};

// Tags of what the loops wait on; connections are kConnTag + index.
constexpr uint64_t kChannelTag = 1, kListenerTag = 2, kAsyncTag = 3, kConnTag = 1000;

// The CQ part of an event loop: take the channel's events, poll the CQ dry, re-arm it, poll
// again (a completion that landed before the arm still raises an event, but polling once
// more now saves the wake-up).
template <class Handle>
void drain_cq(CompletionChannel& channel, CompletionQueue& cq, Handle&& handle) {
  CqEvent ev;
  uint32_t events = 0;
  while (channel.get_event(&ev)) ++events;
  if (events) cq.ack_events(events);
  Completion c[32];
  for (int round = 0; round < 2; ++round) {
    for (int n; (n = cq.poll(c, 32)) > 0;)
      for (int i = 0; i < n; ++i) handle(c[i]);
    if (round == 0) must(cq.request_notify(), "arm the CQ");
  }
}

// False for a completion to skip: work flushed (IBV_WC_WR_FLUSH_ERR) once the connections are
// closing. Any other error ends the run.
bool check_completion(const Completion& c, const char* what, bool closing) {
  if (c.status == IBV_WC_WR_FLUSH_ERR && closing) return false;
  if (c.status != IBV_WC_SUCCESS) {
    std::fprintf(stderr, "examples-storage: %s: completion status %u (wr_id %#llx, qp %#x)\n",
                 what, c.status, static_cast<unsigned long long>(c.wr_id), c.qp_num);
    std::exit(1);
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// The initiator: the passive side of each connection; issues the commands and checks them.

struct InitiatorConn {
  std::optional<QueuePair> qp;
  std::optional<Connection> conn;
  bool established = false, closed = false;
  uint32_t next_write = 0, next_read = 0, writes_done = 0, reads_done = 0;
  uint32_t outstanding = 0;
  uint32_t posted_in_rtr = 0;     // commands the driver withheld for the RTU
  std::vector<int64_t> slot_cmd;  // per depth slot: the command using it (-1: free)
};

int run_initiator(const Args& a) {
  std::shared_ptr<sim::Fabric> fabric;
  Device dev = must(Device::wrap(open_hca(a.addr, &fabric)), "device");
  ProtectionDomain pd = must(dev.alloc_pd(), "pd");
  CompletionChannel channel = must(dev.create_completion_channel(), "channel");
  const uint32_t n = a.connections, d = a.depth;
  CompletionQueue cq = must(dev.create_cq(n * d * 4, channel, 0), "cq");
  must(cq.request_notify(), "arm the CQ");
  // Data: one block per depth slot per connection. Responses: d receive slots per connection.
  std::vector<uint8_t> data(size_t{n} * d * a.block);
  std::vector<uint8_t> responses(size_t{n} * d * kCapsuleSlot);
  MemoryRegion data_mr = must(pd.reg_mr(data.data(), data.size(),
                                        hw::access::local_write | hw::access::remote_read |
                                            hw::access::remote_write),
                              "data mr");
  MemoryRegion resp_mr =
      must(pd.reg_mr(responses.data(), responses.size(), hw::access::local_write), "resp mr");
  Listener listener = must(Listener::listen(dev, "", a.port), "listen");
  std::printf("initiator: listening on %s, %u connections expected\n",
              hw::cm_address_string(listener.address()).c_str(), n);
  std::fflush(stdout);

  Poller poller;
  poller.add(channel.fd(), kChannelTag);
  poller.add(listener.event_fd(), kListenerTag);
  poller.add(dev.async_fd(), kAsyncTag);
  std::vector<InitiatorConn> conns(n);
  std::map<uint32_t, uint32_t> by_qpn;
  // Every command, by id: how many responses it got.
  const uint64_t total = uint64_t{n} * a.commands * 2;
  std::vector<uint8_t> responded(total, 0);
  uint64_t done = 0, early = 0, mismatches = 0;
  uint32_t accepted = 0, closed = 0;
  const auto cmd_id = [&](uint32_t c, Op op, uint32_t i) {
    return (uint64_t{c} * a.commands + i) * 2 + (op == Op::read ? 1 : 0);
  };
  const auto slot_ptr = [&](uint32_t c, uint32_t s) {
    return data.data() + (size_t{c} * d + s) * a.block;
  };

  // Issues the next command of connection `c` if the queue has room and the phase allows it:
  // all WRITEs, then (once every WRITE is answered and the run is past its idle pause) READs.
  bool reads_allowed = false;
  const auto issue = [&](uint32_t c) {
    InitiatorConn& ic = conns[c];
    while (ic.outstanding < d) {
      Op op;
      uint32_t i;
      if (ic.next_write < a.commands) {
        op = Op::write, i = ic.next_write;
      } else if (reads_allowed && ic.writes_done == a.commands && ic.next_read < a.commands) {
        op = Op::read, i = ic.next_read;
      } else {
        return;
      }
      uint32_t s = 0;
      while (ic.slot_cmd[s] >= 0) ++s;
      uint8_t* buf = slot_ptr(c, s);
      for (size_t b = 0; b < a.block; ++b) buf[b] = op == Op::write ? pattern(c, i, b) : 0;
      Command cmd{};
      cmd.magic = kMagic;
      cmd.op = op;
      cmd.connection = static_cast<uint16_t>(c);
      cmd.cmd_id = cmd_id(c, op, i);
      cmd.lba = uint64_t{c} * a.commands + i;
      cmd.addr = reinterpret_cast<uint64_t>(buf);
      cmd.rkey = data_mr.rkey();
      cmd.length = a.block;
      must(ic.qp->post_message_inline(cmd.cmd_id, &cmd, sizeof cmd, send_flags::signaled),
           "post a command");
      // Withheld work piles up until the RTU releases it all at once.
      ic.posted_in_rtr = std::max(ic.posted_in_rtr, ic.qp->withheld());
      ic.slot_cmd[s] = static_cast<int64_t>(cmd.cmd_id);
      ++ic.outstanding;
      (op == Op::write ? ic.next_write : ic.next_read)++;
    }
  };
  const auto post_response_recv = [&](uint32_t c, uint32_t s) {
    const Sge sge = resp_mr.sge((size_t{c} * d + s) * kCapsuleSlot, kCapsuleSlot);
    RecvWr r;
    r.wr_id = (uint64_t{c} << 32) | s;
    r.sg_list = &sge;
    r.num_sge = 1;
    must(conns[c].qp->post_recv(r), "post a response receive");
  };

  bool closing = false;
  const auto on_completion = [&](const Completion& cp) {
    if (!check_completion(cp, "initiator", closing)) return;
    if (cp.opcode != IBV_WC_RECV) return;  // a command's SEND
    const uint32_t c = static_cast<uint32_t>(cp.wr_id >> 32), rs = cp.wr_id & 0xffffffff;
    Response r;
    std::memcpy(&r, responses.data() + (size_t{c} * d + rs) * kCapsuleSlot, sizeof r);
    post_response_recv(c, rs);
    InitiatorConn& ic = conns[c];
    if (r.magic != kMagic || r.cmd_id >= total || r.status != 0) {
      std::fprintf(stderr, "examples-storage: connection %u: bad response (id %llu, status %u)\n",
                   c, static_cast<unsigned long long>(r.cmd_id), r.status);
      std::exit(1);
    }
    if (responded[r.cmd_id]++ != 0) {
      std::fprintf(stderr, "examples-storage: command %llu answered twice\n",
                   static_cast<unsigned long long>(r.cmd_id));
      std::exit(1);
    }
    uint32_t s = 0;
    while (s < d && ic.slot_cmd[s] != static_cast<int64_t>(r.cmd_id)) ++s;
    if (s == d) {
      std::fprintf(stderr, "examples-storage: response for command %llu, not outstanding\n",
                   static_cast<unsigned long long>(r.cmd_id));
      std::exit(1);
    }
    if (r.cmd_id & 1) {  // a READ: the block must be what the WRITE put there
      const uint32_t i = static_cast<uint32_t>((r.cmd_id / 2) % a.commands);
      const uint8_t* buf = slot_ptr(c, s);
      for (size_t b = 0; b < a.block; ++b)
        if (buf[b] != pattern(c, i, b)) {
          ++mismatches;
          break;
        }
      ++ic.reads_done;
    } else {
      ++ic.writes_done;
    }
    ic.slot_cmd[s] = -1;
    --ic.outstanding;
    ++done;
    issue(c);
  };

  const auto on_connection_event = [&](uint32_t c, const ConnectionEvent& ev) {
    InitiatorConn& ic = conns[c];
    if (ev.type == ConnectionEventType::established) {
      ic.established = true;
    } else if (ev.type == ConnectionEventType::disconnected) {
      if (!ic.closed) ++closed;
      ic.closed = true;
    } else {
      must(ev.status.is_ok() ? Status::error(Errc::internal, "connection %u: %s", c,
                                             connection_event_name(ev.type))
                             : ev.status,
           "connection");
    }
  };

  bool paused = false;
  const auto writes_finished = [&] {
    for (const InitiatorConn& ic : conns)
      if (!ic.established || ic.writes_done < a.commands) return false;
    return accepted == n;
  };
  while (done < total || closed < n) {
    if (!paused && writes_finished()) {
      // Nothing outstanding anywhere: stay idle, asleep, and see what the process costs.
      paused = true;
      const double cpu0 = cpu_seconds();
      const auto t0 = std::chrono::steady_clock::now();
      while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(a.idle_ms)) {
        const auto left = std::chrono::milliseconds(a.idle_ms) -
                          std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::chrono::steady_clock::now() - t0);
        for (uint64_t tag : poller.wait(static_cast<int>(std::max<int64_t>(left.count(), 0)))) {
          if (tag == kChannelTag) drain_cq(channel, cq, on_completion);
          if (tag == kAsyncTag) dev.process_events();
        }
      }
      const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double cpu = cpu_seconds() - cpu0;
      std::printf("initiator: idle %.0f ms with nothing outstanding: %.1f ms of CPU (%.1f%%)\n",
                  wall * 1e3, cpu * 1e3, wall > 0 ? 100 * cpu / wall : 0.0);
      if (wall > 0 && cpu / wall > a.max_idle_cpu) {
        std::fprintf(stderr, "examples-storage: the idle process used %.0f%% of a core (> %.0f%%)\n",
                     100 * cpu / wall, 100 * a.max_idle_cpu);
        return 1;
      }
      reads_allowed = true;
      for (uint32_t c = 0; c < n; ++c) issue(c);
    }
    if (done == total && !closing) {
      closing = true;  // the response receives still posted are flushed now
      for (InitiatorConn& ic : conns) must(ic.conn->disconnect(), "disconnect");
    }
    for (uint64_t tag : poller.wait(10'000)) {
      if (tag == kChannelTag) {
        drain_cq(channel, cq, on_completion);
      } else if (tag == kAsyncTag) {
        dev.process_events();
      } else if (tag == kListenerTag) {
        while (std::optional<ConnectionEvent> ev = listener.poll_event()) {
          if (ev->type != ConnectionEventType::connect_request || accepted == n) continue;
          const uint32_t c = accepted++;
          InitiatorConn& ic = conns[c];
          ic.slot_cmd.assign(d, -1);
          QpConfig qc;
          qc.caps.max_send_wr = d;
          qc.caps.max_recv_wr = d;
          qc.caps.max_send_sge = 1;
          qc.caps.max_recv_sge = 1;
          qc.caps.max_inline_data = sizeof(Command);
          ic.qp.emplace(must(dev.create_qp(pd, cq, cq, qc), "create qp"));
          ic.conn.emplace(must(ev->request->accept(*ic.qp), "accept"));
          // In RTR until the RTU: these commands are built now and sent when it arrives. They
          // go first, while the RTU is still in flight; the receives for their responses
          // follow at once (no response can come before the target has moved the data).
          issue(c);
          early += ic.posted_in_rtr;
          for (uint32_t s = 0; s < d; ++s) post_response_recv(c, s);
          by_qpn[ic.qp->qpn()] = c;
          poller.add(ic.conn->event_fd(), kConnTag + c);
        }
      } else if (tag >= kConnTag) {
        const uint32_t c = static_cast<uint32_t>(tag - kConnTag);
        while (std::optional<ConnectionEvent> ev = conns[c].conn->poll_event())
          on_connection_event(c, *ev);
        if (conns[c].closed) poller.remove(conns[c].conn->event_fd());
      }
    }
  }
  uint64_t once = 0;
  for (uint8_t r : responded) once += r == 1;
  std::printf("initiator: %u connections, %llu commands (%llu posted before establishment), "
              "%llu answered exactly once, %llu data mismatches\n",
              n, static_cast<unsigned long long>(total), static_cast<unsigned long long>(early),
              static_cast<unsigned long long>(once), static_cast<unsigned long long>(mismatches));
  return once == total && mismatches == 0 && early > 0 ? 0 : 1;
}

// ---------------------------------------------------------------------------------------------
// The target: the active side; one SRQ for every connection's commands.

int run_target(const Args& a) {
  std::shared_ptr<sim::Fabric> fabric;
  Device dev = must(Device::wrap(open_hca(a.addr, &fabric)), "device");
  ProtectionDomain pd = must(dev.alloc_pd(), "pd");
  CompletionChannel channel = must(dev.create_completion_channel(), "channel");
  const uint32_t n = a.connections;
  constexpr uint32_t kDepthPerConn = 128;  // the initiator's --depth is at most this
  CompletionQueue cq = must(dev.create_cq(n * kDepthPerConn * 3, channel, 0), "cq");
  must(cq.request_notify(), "arm the CQ");
  // Fewer receives than the initiators could have in flight together: a command that finds
  // the SRQ empty is answered with an RNR NAK and retried by the sender's HCA.
  const uint32_t srq_depth = std::min<uint32_t>(n * 32, 8192);
  SharedReceiveQueue srq = must(dev.create_srq(pd, srq_depth, 1), "srq");
  std::vector<uint8_t> capsules(size_t{srq.max_wr()} * kCapsuleSlot);
  MemoryRegion cap_mr =
      must(pd.reg_mr(capsules.data(), capsules.size(), hw::access::local_write), "capsule mr");
  const auto post_capsule_recv = [&](uint32_t s) {
    const Sge sge = cap_mr.sge(size_t{s} * kCapsuleSlot, kCapsuleSlot);
    RecvWr r;
    r.wr_id = s;
    r.sg_list = &sge;
    r.num_sge = 1;
    must(srq.post_recv(r), "post to the SRQ");
  };
  for (uint32_t s = 0; s < srq.max_wr(); ++s) post_capsule_recv(s);
  // The "disk": blocks addressed by LBA, allocated as they are first written.
  std::map<uint64_t, std::vector<uint8_t>> disk;
  std::map<uint64_t, MemoryRegion> disk_mrs;
  // A READ or WRITE in flight: the command, to answer when its data has moved.
  std::map<uint64_t, Command> in_flight;

  Poller poller;
  poller.add(channel.fd(), kChannelTag);
  poller.add(dev.async_fd(), kAsyncTag);
  std::vector<std::optional<QueuePair>> qps(n);
  std::vector<std::optional<Connection>> conns(n);
  std::vector<bool> closed(n, false);
  std::map<uint32_t, uint32_t> by_qpn;
  for (uint32_t c = 0; c < n; ++c) {
    QpConfig qc;
    qc.srq = &srq;
    qc.caps.max_send_wr = kDepthPerConn * 2;
    qc.caps.max_send_sge = 1;
    qc.caps.max_inline_data = sizeof(Response);
    qps[c].emplace(must(dev.create_qp(pd, cq, cq, qc), "create qp"));
    by_qpn[qps[c]->qpn()] = c;
    conns[c].emplace(must(Connection::connect(*qps[c], a.peer, a.port), "connect"));
    poller.add(conns[c]->event_fd(), kConnTag + c);
  }
  uint64_t served = 0, writes = 0, reads = 0;
  uint32_t n_closed = 0;
  const auto block_mr = [&](uint64_t lba, uint32_t length) -> MemoryRegion& {
    auto it = disk_mrs.find(lba);
    if (it != disk_mrs.end()) return it->second;
    std::vector<uint8_t>& b = disk[lba];
    b.assign(length, 0);
    return disk_mrs.emplace(lba, must(pd.reg_mr(b.data(), b.size(), hw::access::local_write),
                                      "block mr"))
        .first->second;
  };
  const auto respond = [&](QueuePair& qp, uint64_t id) {
    Response r{kMagic, 0, id};
    must(qp.post_message_inline(0, &r, sizeof r, send_flags::signaled), "post a response");
    ++served;
  };
  const auto on_completion = [&](const Completion& cp) {
    if (!check_completion(cp, "target", n_closed > 0)) return;
    QueuePair& qp = *qps[by_qpn.at(cp.qp_num)];
    if (cp.opcode == IBV_WC_RECV) {
      Command cmd;
      std::memcpy(&cmd, capsules.data() + cp.wr_id * kCapsuleSlot, sizeof cmd);
      post_capsule_recv(static_cast<uint32_t>(cp.wr_id));  // the capsule is copied out
      if (cmd.magic != kMagic || cmd.length != a.block) {
        std::fprintf(stderr, "examples-storage: qp %#x: malformed command\n", cp.qp_num);
        std::exit(1);
      }
      MemoryRegion& mr = block_mr(cmd.lba, cmd.length);
      const Sge sge = mr.sge(0, cmd.length);
      if (cmd.op == Op::write) {
        // Pull the data from the initiator's buffer; answer when it is here.
        in_flight[cmd.cmd_id] = cmd;
        must(qp.post_read(cmd.cmd_id, sge, cmd.addr, cmd.rkey, send_flags::signaled),
             "post an RDMA READ");
        ++writes;
      } else {
        // Push the block; RC keeps the WRITE ahead of the response that follows it.
        must(qp.post_write(0, sge, cmd.addr, cmd.rkey, 0), "post an RDMA WRITE");
        respond(qp, cmd.cmd_id);
        ++reads;
      }
    } else if (cp.opcode == IBV_WC_RDMA_READ) {
      auto it = in_flight.find(cp.wr_id);
      if (it == in_flight.end()) return;
      respond(qp, it->second.cmd_id);
      in_flight.erase(it);
    }
  };

  while (n_closed < n) {
    for (uint64_t tag : poller.wait(10'000)) {
      if (tag == kChannelTag) {
        drain_cq(channel, cq, on_completion);
      } else if (tag == kAsyncTag) {
        dev.process_events();
      } else if (tag >= kConnTag) {
        const uint32_t c = static_cast<uint32_t>(tag - kConnTag);
        while (std::optional<ConnectionEvent> ev = conns[c]->poll_event()) {
          if (ev->type == ConnectionEventType::established) continue;
          if (ev->type != ConnectionEventType::disconnected) must(ev->status, "connection");
          if (!closed[c]) ++n_closed;
          closed[c] = true;
        }
        if (closed[c]) poller.remove(conns[c]->event_fd());
      }
    }
  }
  std::printf("target: %u connections, %llu commands served (%llu writes by RDMA READ, %llu "
              "reads by RDMA WRITE) from one SRQ of %u receives\n",
              n, static_cast<unsigned long long>(served), static_cast<unsigned long long>(writes),
              static_cast<unsigned long long>(reads), srq.max_wr());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  return a.role == "initiator" ? run_initiator(a) : run_target(a);
}
