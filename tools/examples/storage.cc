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
//                              [--wait-ms N] [--test-bad-rkey K]
//   examples-storage target --peer IP [--addr IP] [--port N] [--connections N] [--block BYTES]
//
// Early posting: the initiator is the CM's passive side. It accepts each connection (its QP
// then waits in RTR for the RTU) and posts its first commands at once; the driver builds them
// and withholds the doorbell, and the RTU's ESTABLISHED event releases the batch (read on the
// initiator's thread: ConnectionOptions::release_at_establishment is off, so that the batch
// is withheld even when the RTU is back before that thread has posted). The target dials the
// initiator (the active side of a CM handshake passes through RTR only inside its REP
// handler, so the window in which work can be posted early exists on the passive side). The
// target's REQ carries a hello in its private data: which of the initiator's connections
// (0..N-1) it is, the how-manieth connection of that index, and what broke the previous one.
//
// Each connection writes --commands blocks (WRITE commands), then reads them back (READ
// commands) and compares. Between the two phases the initiator sits idle for --idle-ms and
// measures the CPU time the whole process (device thread included) used meanwhile. When every
// command is answered, the initiator sends a goodbye capsule on each connection and, once it
// is acknowledged, disconnects; a connection that ends without its goodbye has failed.
//
// Faults (RNICDV_SIM_FAULTS, docs/faults.md). Lost, duplicated or reordered frames are the
// transport's business: RC retransmits data, the CM retransmits its MADs, and the run is the
// same as without them. A connection that breaks (an error completion on either side, the
// peer disconnecting without a goodbye, a failed handshake) is torn down and replaced:
//   - The side that dialled dials again: the target, whose dial names the connection index,
//     so the initiator gives the new connection the old one's commands. The initiator keeps
//     its listener for the whole run; the target keeps serving its other connections and
//     gives up (exit 1) only after 8 connections of one index have failed. The initiator
//     gives up (exit 1, naming the connection and how many of its commands are unanswered)
//     when a connection index has had no connection for --wait-ms (default 20000): before
//     the first, or since the last was lost.
//   - The responder of a failed RDMA READ (the initiator, for the READ that fetches a WRITE
//     command's data) only sees its QP go to error; the requester (the target) learns which
//     WR failed from its completion. So the target names the failed command and its
//     completion status in the next REQ's hello, and the initiator reports it on one line:
//       initiator: connection 2: command 37 failed: the target's RDMA READ of its data
//       completed with IBV_WC_REM_ACCESS_ERR (remote access error)
//   - The initiator then re-sends, on the new connection and before its RTU (early posting
//     again), every command that has no response yet, from the same buffer; the others are
//     not sent again.
//
// Exactly once: each command id gets exactly one response delivered to the initiator. A
// command re-sent after a lost connection is executed again by the target, not deduplicated
// (the target's state of a connection dies with it): both kinds are idempotent here, because
// each block is written by one WRITE command, always with the same data, and the READs of the
// blocks start only once every WRITE is answered. The target counts the commands it executed
// more than once. The initiator counts responses per command id: it exits non-zero if any
// command got none or more than one, or if a READ brought back other data than its WRITE put
// there (or, as without faults, if no command was posted early or the idle process was busy).
//
// --test-bad-rkey K (for tests): the K-th WRITE command, on its first sending, advertises a
// wrong rkey, so that the target's RDMA READ of its data fails with a genuine remote access
// error at the initiator's HCA, as a `wr status=remote_access opcode=read` fault does.
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
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "rnicdv/rnicdv.h"
#include "rnicdv/sim/sim.h"

using namespace rnicdv;

namespace {

constexpr uint32_t kMagic = 0x53544f52;  // "STOR"
// goodbye: the initiator is done with the connection; no response.
enum class Op : uint16_t { write = 1, read = 2, goodbye = 3 };

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

// The target's REQ private data.
constexpr uint64_t kNoCommand = ~uint64_t{0};
struct Hello {
  uint32_t magic;
  uint16_t connection;     // the initiator's connection index
  uint16_t attempt;        // 1 for the first connection of this index
  uint64_t failed_cmd;     // the command whose data movement broke the previous connection
  uint32_t failed_status;  // its completion status (IBV_WC_*); 0 with kNoCommand
  uint32_t reserved;
};
static_assert(sizeof(Hello) <= 56);  // a REQ's private data after rdma_cm's header
constexpr uint32_t kMaxAttempts = 8;  // connections per index before the target gives up

struct Args {
  std::string role, addr, peer;
  uint16_t port = 4420;
  uint32_t connections = 4, commands = 64, depth = 8, block = 4096, idle_ms = 500;
  uint32_t wait_ms = 20000;
  uint32_t test_bad_rkey = 0;  // 0: none
  double max_idle_cpu = 0.25;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "examples-storage: %s\n"
               "usage: examples-storage initiator [--addr IP] [--port N] [--connections N] "
               "[--commands N] [--depth N] [--block BYTES] [--idle-ms N] [--max-idle-cpu F] "
               "[--wait-ms N] [--test-bad-rkey K]\n"
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
    else if (opt == "--wait-ms") a.wait_ms = num(1, 3600000);
    else if (opt == "--max-idle-cpu") a.max_idle_cpu = std::atof(v);
    else if (opt == "--test-bad-rkey") a.test_bad_rkey = num(1, 0xffffffffu);
    else usage(("unknown option " + opt).c_str());
  }
  if (a.role == "target" && a.peer.empty()) usage("the target needs --peer (the initiator's IP)");
  if (a.role == "initiator" && a.test_bad_rkey > uint64_t{a.connections} * a.commands)
    usage("--test-bad-rkey: beyond the last WRITE command");
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

// The completion statuses an RC exchange can end with, by their verbs names.
const char* wc_status_name(uint32_t s) {
  switch (s) {
    case IBV_WC_SUCCESS: return "IBV_WC_SUCCESS (success)";
    case IBV_WC_LOC_LEN_ERR: return "IBV_WC_LOC_LEN_ERR (local length error)";
    case IBV_WC_LOC_QP_OP_ERR: return "IBV_WC_LOC_QP_OP_ERR (local QP operation error)";
    case IBV_WC_LOC_PROT_ERR: return "IBV_WC_LOC_PROT_ERR (local protection error)";
    case IBV_WC_WR_FLUSH_ERR: return "IBV_WC_WR_FLUSH_ERR (flushed: the QP is in error)";
    case IBV_WC_MW_BIND_ERR: return "IBV_WC_MW_BIND_ERR (memory window bind error)";
    case IBV_WC_REM_INV_REQ_ERR: return "IBV_WC_REM_INV_REQ_ERR (remote invalid request)";
    case IBV_WC_REM_ACCESS_ERR: return "IBV_WC_REM_ACCESS_ERR (remote access error)";
    case IBV_WC_REM_OP_ERR: return "IBV_WC_REM_OP_ERR (remote operational error)";
    case IBV_WC_RETRY_EXC_ERR: return "IBV_WC_RETRY_EXC_ERR (transport retries exceeded)";
    case IBV_WC_RNR_RETRY_EXC_ERR: return "IBV_WC_RNR_RETRY_EXC_ERR (RNR retries exceeded)";
    case IBV_WC_FATAL_ERR: return "IBV_WC_FATAL_ERR (fatal error)";
    case IBV_WC_GENERAL_ERR: return "IBV_WC_GENERAL_ERR (general error)";
    default: return "an unknown completion status";
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
// The fabric obeys RNICDV_SIM_FAULTS.
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
    dc.address = hw::IpAddress::v4(ntohl(a.s_addr));
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

// Tags of what the loops wait on: the current connection of index c is kConnTag + c, a
// replaced one kRetiredTag + its place among the replaced.
constexpr uint64_t kChannelTag = 1, kListenerTag = 2, kAsyncTag = 3, kConnTag = 1000,
                   kRetiredTag = 1ull << 32;

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

// One connection: its QP and the CM connection that drives it (declared after the QP, so
// destroyed before it). Replaced connections are kept, closed, until the end of the run: the
// QP numbers of a run stay unique, so every completion names the connection it belongs to.
struct Link {
  std::optional<QueuePair> qp;
  std::optional<Connection> conn;
};

// Where a QP belongs: the connection index and which of its connections.
struct Owner {
  uint32_t index, generation;
};

// The replaced connections of one side, with their event descriptors still watched until
// they are closed.
class Graveyard {
 public:
  explicit Graveyard(Poller& poller) : poller_(poller) {}
  // Disconnects `link` (a no-op when it is closed already) and keeps it.
  void bury(std::unique_ptr<Link> link) {
    (void)link->conn->disconnect();
    const int fd = link->conn->event_fd();
    poller_.remove(fd);
    poller_.add(fd, kRetiredTag + links_.size());
    links_.push_back(std::move(link));
  }
  bool owns(uint64_t tag) const { return tag >= kRetiredTag; }
  // Reads (and drops) a replaced connection's events; stops watching it once closed.
  void on_event(uint64_t tag) {
    Link& l = *links_.at(tag - kRetiredTag);
    while (l.conn->poll_event()) {
    }
    if (l.conn->state() == ConnectionState::closed) poller_.remove(l.conn->event_fd());
  }

 private:
  Poller& poller_;
  std::vector<std::unique_ptr<Link>> links_;
};

// ---------------------------------------------------------------------------------------------
// The initiator: the passive side of each connection; issues the commands and checks them.

enum class InitiatorState : uint8_t {
  waiting,  // no connection yet, or the last one was lost: waiting for the target's REQ
  live,     // accepted (maybe not yet established): commands flow
  closing,  // everything answered: goodbye sent, then disconnecting
  closed,   // disconnected after the goodbye
};

struct InitiatorConn {
  std::unique_ptr<Link> link;  // the current connection
  uint32_t generation = 0;     // how many connections this index has had
  InitiatorState state = InitiatorState::waiting;
  std::chrono::steady_clock::time_point waiting_since;  // in `waiting`: since when
  uint32_t next_write = 0, next_read = 0, writes_done = 0, reads_done = 0;
  uint32_t outstanding = 0;
  uint32_t posted_in_rtr = 0;     // commands the driver withheld for the RTU
  std::vector<int64_t> slot_cmd;  // per depth slot: the command using it (-1: free)
};

// wr_ids of the initiator's work: response receives carry index, generation and slot;
// commands their id (below 2^62); the goodbye its index.
constexpr uint64_t kGoodbyeWr = 1ull << 62;

int run_initiator(const Args& a) {
  std::shared_ptr<sim::Fabric> fabric;
  Device dev = must(Device::wrap(open_hca(a.addr, &fabric)), "device");
  ProtectionDomain pd = must(dev.alloc_pd(), "pd");
  CompletionChannel channel = must(dev.create_completion_channel(), "channel");
  const uint32_t n = a.connections, d = a.depth;
  // Room for the flushes of a lost connection beside the work of the live ones.
  CompletionQueue cq = must(dev.create_cq(n * d * 6, channel, 0), "cq");
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
  Graveyard graveyard(poller);
  std::vector<InitiatorConn> conns(n);
  for (InitiatorConn& ic : conns) {
    ic.slot_cmd.assign(d, -1);
    ic.waiting_since = std::chrono::steady_clock::now();
  }
  std::map<uint32_t, Owner> by_qpn;
  // Every command, by id: how many responses it got.
  const uint64_t total = uint64_t{n} * a.commands * 2;
  std::vector<uint8_t> responded(total, 0);
  uint64_t done = 0, early = 0, mismatches = 0, stray = 0;
  uint32_t closed = 0, reconnections = 0, write_commands_sent = 0;
  std::set<uint64_t> failures_reported;
  const auto cmd_id = [&](uint32_t c, Op op, uint32_t i) {
    return (uint64_t{c} * a.commands + i) * 2 + (op == Op::read ? 1 : 0);
  };
  const auto slot_ptr = [&](uint32_t c, uint32_t s) {
    return data.data() + (size_t{c} * d + s) * a.block;
  };
  const auto flush_stdout = [] { std::fflush(stdout); };

  // Sends command `id` of connection `c` from depth slot `s`: its first sending, or again on
  // a new connection after the one that carried it was lost.
  const auto send_command = [&](uint32_t c, uint32_t s, uint64_t id, bool first) {
    InitiatorConn& ic = conns[c];
    const Op op = (id & 1) ? Op::read : Op::write;
    const uint32_t i = static_cast<uint32_t>((id / 2) % a.commands);
    uint8_t* buf = slot_ptr(c, s);
    for (size_t b = 0; b < a.block; ++b) buf[b] = op == Op::write ? pattern(c, i, b) : 0;
    Command cmd{};
    cmd.magic = kMagic;
    cmd.op = op;
    cmd.connection = static_cast<uint16_t>(c);
    cmd.cmd_id = id;
    cmd.lba = id / 2;
    cmd.addr = reinterpret_cast<uint64_t>(buf);
    cmd.rkey = data_mr.rkey();
    cmd.length = a.block;
    if (first && op == Op::write && ++write_commands_sent == a.test_bad_rkey) {
      cmd.rkey ^= 0x00ffff00u;  // another MR index: no such region at the initiator's HCA
      std::printf("initiator: test fault: command %llu on connection %u advertises a wrong "
                  "rkey\n",
                  static_cast<unsigned long long>(id), c);
    }
    must(ic.link->qp->post_message_inline(id, &cmd, sizeof cmd, send_flags::signaled),
         "post a command");
    // Withheld work piles up until the RTU releases it all at once.
    ic.posted_in_rtr = std::max(ic.posted_in_rtr, ic.link->qp->withheld());
  };

  // Issues the next commands of connection `c` while the queue has room and the phase allows
  // it: all WRITEs, then (once every WRITE is answered and the run is past its idle pause)
  // READs.
  bool reads_allowed = false;
  const auto issue = [&](uint32_t c) {
    InitiatorConn& ic = conns[c];
    if (ic.state != InitiatorState::live) return;
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
      const uint64_t id = cmd_id(c, op, i);
      send_command(c, s, id, true);
      ic.slot_cmd[s] = static_cast<int64_t>(id);
      ++ic.outstanding;
      (op == Op::write ? ic.next_write : ic.next_read)++;
    }
  };
  const auto post_response_recv = [&](uint32_t c, uint32_t s) {
    const Sge sge = resp_mr.sge((size_t{c} * d + s) * kCapsuleSlot, kCapsuleSlot);
    RecvWr r;
    r.wr_id = (uint64_t{c} << 32) | (uint64_t{conns[c].generation & 0xffff} << 16) | s;
    r.sg_list = &sge;
    r.num_sge = 1;
    must(conns[c].link->qp->post_recv(r), "post a response receive");
  };

  // The current connection of `c` broke: stop using it and wait for the target to dial again
  // (it learns of the failure from its own completions or from our disconnection).
  const auto lose = [&](uint32_t c, const std::string& why) {
    InitiatorConn& ic = conns[c];
    if (ic.state != InitiatorState::live) return;
    std::printf("initiator: connection %u: lost (%s); waiting for the target to dial again\n", c,
                why.c_str());
    flush_stdout();
    ic.state = InitiatorState::waiting;
    ic.waiting_since = std::chrono::steady_clock::now();
    (void)ic.link->conn->disconnect();
  };

  const auto on_completion = [&](const Completion& cp) {
    const auto owner = by_qpn.find(cp.qp_num);
    if (owner == by_qpn.end()) return;
    const uint32_t c = owner->second.index;
    InitiatorConn& ic = conns[c];
    const bool current = owner->second.generation == ic.generation;
    if (cp.status != IBV_WC_SUCCESS) {
      // The first error of a live connection names the failure; flushes follow it, and come
      // after a disconnection too.
      if (current && ic.state == InitiatorState::live) {
        char why[160];
        std::snprintf(why, sizeof why, "qp %#x: a completion with %s", cp.qp_num,
                      wc_status_name(cp.status));
        lose(c, why);
      }
      return;
    }
    if (cp.opcode != IBV_WC_RECV) {  // a command's SEND, or the goodbye's
      if (cp.wr_id == (kGoodbyeWr | c) && current && ic.state == InitiatorState::closing)
        must(ic.link->conn->disconnect(), "disconnect");
      return;
    }
    const uint32_t rs = cp.wr_id & 0xffff;
    Response r;
    std::memcpy(&r, responses.data() + (size_t{c} * d + rs) * kCapsuleSlot, sizeof r);
    if (current && ic.state == InitiatorState::live) post_response_recv(c, rs);
    if (r.magic != kMagic || r.cmd_id >= total || r.status != 0) {
      std::fprintf(stderr, "examples-storage: connection %u: bad response (id %llu, status %u)\n",
                   c, static_cast<unsigned long long>(r.cmd_id), r.status);
      std::exit(1);
    }
    if (responded[r.cmd_id] != 0) {
      std::fprintf(stderr, "examples-storage: connection %u: command %llu answered again\n", c,
                   static_cast<unsigned long long>(r.cmd_id));
      if (responded[r.cmd_id] < 255) ++responded[r.cmd_id];  // counted
      return;
    }
    responded[r.cmd_id] = 1;
    uint32_t s = 0;
    while (s < d && ic.slot_cmd[s] != static_cast<int64_t>(r.cmd_id)) ++s;
    if (s == d) {
      std::fprintf(stderr, "examples-storage: connection %u: response for command %llu, which "
                   "was not outstanding there\n",
                   c, static_cast<unsigned long long>(r.cmd_id));
      ++stray;
      return;
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

  // The QP leaves RTR when this thread reads the connection's ESTABLISHED event (which the
  // RTU, or a COMM_EST standing in for a lost one, raises), not the moment the device learns
  // of it: the commands posted right after accept() are then withheld however quickly the
  // RTU comes back, and however late this thread gets the CPU.
  ConnectionOptions accept_options;
  accept_options.release_at_establishment = false;

  // A REQ from the target: the first connection of its index, or the replacement of a lost
  // one.
  const auto on_request = [&](ConnectionRequest& request) {
    Hello h{};
    const std::vector<uint8_t>& pd_bytes = request.private_data();
    if (pd_bytes.size() >= sizeof h) std::memcpy(&h, pd_bytes.data(), sizeof h);
    if (h.magic != kMagic || h.connection >= n) {
      std::fprintf(stderr, "examples-storage: a connection request from %s without a valid "
                   "hello (connection index %u of %u): rejected\n",
                   hw::cm_address_string(request.remote_address()).c_str(), h.connection, n);
      (void)request.reject();
      return;
    }
    const uint32_t c = h.connection;
    InitiatorConn& ic = conns[c];
    // Responses that reached the old connection before it broke are in the CQ already (they
    // completed before the failure the target is reconnecting for): count them first, so
    // that only commands without one are sent again.
    drain_cq(channel, cq, on_completion);
    if (ic.link) {
      if (ic.state == InitiatorState::live) lose(c, "the target dialled again");
      if (ic.state == InitiatorState::closed) --closed;
      graveyard.bury(std::move(ic.link));
    }
    if (h.failed_cmd != kNoCommand && failures_reported.insert(h.failed_cmd).second) {
      std::printf("initiator: connection %u: command %llu failed: the target's RDMA %s of its "
                  "data completed with %s\n",
                  c, static_cast<unsigned long long>(h.failed_cmd),
                  (h.failed_cmd & 1) ? "WRITE" : "READ", wc_status_name(h.failed_status));
    }
    ++ic.generation;
    ic.link = std::make_unique<Link>();
    QpConfig qc;
    qc.caps.max_send_wr = d + 1;  // the commands, and the goodbye
    qc.caps.max_recv_wr = d;
    qc.caps.max_send_sge = 1;
    qc.caps.max_recv_sge = 1;
    qc.caps.max_inline_data = sizeof(Command);
    ic.link->qp.emplace(must(dev.create_qp(pd, cq, cq, qc), "create qp"));
    ic.link->conn.emplace(must(request.accept(*ic.link->qp, {}, accept_options), "accept"));
    by_qpn[ic.link->qp->qpn()] = Owner{c, ic.generation};
    ic.state = InitiatorState::live;
    ic.posted_in_rtr = 0;
    // In RTR until the RTU: these commands are built now and sent when it arrives. They go
    // first, while the RTU is still in flight; the receives for their responses follow at
    // once (no response can come before the target has moved the data). The unanswered
    // commands of a lost connection go again first, from the slots they hold.
    uint32_t resent = 0;
    for (uint32_t s = 0; s < d; ++s)
      if (ic.slot_cmd[s] >= 0) {
        send_command(c, s, static_cast<uint64_t>(ic.slot_cmd[s]), false);
        ++resent;
      }
    issue(c);
    early += ic.posted_in_rtr;
    for (uint32_t s = 0; s < d; ++s) post_response_recv(c, s);
    poller.add(ic.link->conn->event_fd(), kConnTag + c);
    if (ic.generation > 1) {
      ++reconnections;
      std::printf("initiator: connection %u: reconnected (connection %u of this index), %u "
                  "unanswered commands sent again\n",
                  c, ic.generation, resent);
    }
    flush_stdout();
  };

  const auto on_connection_event = [&](uint32_t c, const ConnectionEvent& ev) {
    InitiatorConn& ic = conns[c];
    if (ev.type == ConnectionEventType::established) return;
    // Closing, the connection's end is all that can come (DISCONNECTED, or a failure of the
    // disconnection itself); should the goodbye not have arrived, the target dials again.
    if (ic.state == InitiatorState::closing) {
      ic.state = InitiatorState::closed;
      ++closed;
      return;
    }
    lose(c, ev.type == ConnectionEventType::disconnected
                ? std::string("the target disconnected")
                : std::string(connection_event_name(ev.type)) + ": " + ev.status.message());
  };

  bool paused = false;
  const auto writes_finished = [&] {
    for (const InitiatorConn& ic : conns)
      if (ic.writes_done < a.commands) return false;
    return true;
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
    if (done == total) {
      // Everything answered: say goodbye on each connection (the target then knows that the
      // disconnection which follows is not a failure), and disconnect once it has arrived.
      for (uint32_t c = 0; c < n; ++c) {
        InitiatorConn& ic = conns[c];
        if (ic.state != InitiatorState::live) continue;
        Command bye{};
        bye.magic = kMagic;
        bye.op = Op::goodbye;
        bye.connection = static_cast<uint16_t>(c);
        must(ic.link->qp->post_message_inline(kGoodbyeWr | c, &bye, sizeof bye,
                                              send_flags::signaled),
             "post the goodbye");
        ic.state = InitiatorState::closing;
      }
    }
    // A connection index the target has not dialled (again) for --wait-ms: give up.
    // Sleep until the next such deadline at the latest.
    const auto now = std::chrono::steady_clock::now();
    int64_t sleep_ms = 10'000;
    for (uint32_t c = 0; c < n; ++c) {
      const InitiatorConn& ic = conns[c];
      if (ic.state != InitiatorState::waiting) continue;
      const int64_t left =
          a.wait_ms - std::chrono::duration_cast<std::chrono::milliseconds>(now - ic.waiting_since)
                          .count();
      if (left > 0) {
        sleep_ms = std::min(sleep_ms, left);
        continue;
      }
      std::fprintf(stderr, "examples-storage: connection %u: no connection from the target "
                   "for %u ms (%s), %llu of its commands unanswered: giving up\n",
                   c, a.wait_ms, ic.generation ? "since the last one was lost" : "from the start",
                   static_cast<unsigned long long>(uint64_t{a.commands} * 2 - ic.writes_done -
                                                   ic.reads_done));
      return 1;
    }
    for (uint64_t tag : poller.wait(static_cast<int>(sleep_ms))) {
      if (tag == kChannelTag) {
        drain_cq(channel, cq, on_completion);
      } else if (tag == kAsyncTag) {
        dev.process_events();
      } else if (tag == kListenerTag) {
        while (std::optional<ConnectionEvent> ev = listener.poll_event())
          if (ev->type == ConnectionEventType::connect_request) on_request(*ev->request);
      } else if (graveyard.owns(tag)) {
        graveyard.on_event(tag);
      } else if (tag >= kConnTag) {
        const uint32_t c = static_cast<uint32_t>(tag - kConnTag);
        Link* link = conns[c].link.get();
        while (std::optional<ConnectionEvent> ev = link->conn->poll_event())
          if (link == conns[c].link.get()) on_connection_event(c, *ev);
        if (link->conn->state() == ConnectionState::closed && link == conns[c].link.get())
          poller.remove(link->conn->event_fd());
      }
    }
  }
  uint64_t once = 0, again = 0, never = 0;
  for (uint8_t r : responded) {
    once += r == 1;
    again += r > 1;
    never += r == 0;
  }
  std::printf("initiator: %u connections, %llu commands (%llu posted before establishment), "
              "%llu answered exactly once, %llu more than once, %llu never, %llu data "
              "mismatches, %llu stray responses, %u reconnections\n",
              n, static_cast<unsigned long long>(total), static_cast<unsigned long long>(early),
              static_cast<unsigned long long>(once), static_cast<unsigned long long>(again),
              static_cast<unsigned long long>(never), static_cast<unsigned long long>(mismatches),
              static_cast<unsigned long long>(stray), reconnections);
  return once == total && mismatches == 0 && stray == 0 && early > 0 ? 0 : 1;
}

// ---------------------------------------------------------------------------------------------
// The target: the active side; one SRQ for every connection's commands.

enum class TargetState : uint8_t {
  connecting,  // REQ sent
  live,        // established: commands are served
  done,        // the goodbye arrived: the disconnection that follows ends the connection
  closed,
};

struct TargetConn {
  std::unique_ptr<Link> link;
  uint32_t generation = 0;
  TargetState state = TargetState::connecting;
  uint64_t failed_cmd = kNoCommand;  // told to the initiator in the next hello
  uint32_t failed_status = 0;
};

// wr_ids of the target's work: kind in the top byte.
constexpr uint64_t kCapsuleWr = 1ull << 56, kReadWr = 2ull << 56, kResponseWr = 3ull << 56,
                   kDataWriteWr = 4ull << 56, kKindMask = 0xffull << 56;

int run_target(const Args& a) {
  std::shared_ptr<sim::Fabric> fabric;
  Device dev = must(Device::wrap(open_hca(a.addr, &fabric)), "device");
  ProtectionDomain pd = must(dev.alloc_pd(), "pd");
  CompletionChannel channel = must(dev.create_completion_channel(), "channel");
  const uint32_t n = a.connections;
  constexpr uint32_t kDepthPerConn = 128;  // the initiator's --depth is at most this
  CompletionQueue cq = must(dev.create_cq(n * kDepthPerConn * 4, channel, 0), "cq");
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
    r.wr_id = kCapsuleWr | s;
    r.sg_list = &sge;
    r.num_sge = 1;
    must(srq.post_recv(r), "post to the SRQ");
  };
  for (uint32_t s = 0; s < srq.max_wr(); ++s) post_capsule_recv(s);
  // The "disk": blocks addressed by LBA, allocated as they are first written.
  std::map<uint64_t, std::vector<uint8_t>> disk;
  std::map<uint64_t, MemoryRegion> disk_mrs;
  // A WRITE command whose data is being fetched, by its READ's token: answered when the data
  // is here.
  struct Fetch {
    Command cmd;
    Owner owner;
  };
  std::map<uint64_t, Fetch> in_flight;
  uint64_t next_token = 0;

  Poller poller;
  poller.add(channel.fd(), kChannelTag);
  poller.add(dev.async_fd(), kAsyncTag);
  Graveyard graveyard(poller);
  std::vector<TargetConn> conns(n);
  std::map<uint32_t, Owner> by_qpn;
  std::set<uint64_t> executed;  // command ids answered at least once
  uint64_t served = 0, writes = 0, reads = 0, again = 0;
  uint32_t n_closed = 0, failures = 0;

  // Dials connection `c` (again): a new QP, a REQ with the hello.
  const auto dial = [&](uint32_t c) {
    TargetConn& tc = conns[c];
    if (tc.generation == kMaxAttempts) {
      std::fprintf(stderr, "examples-storage: target: connection %u: %u connections failed, "
                   "giving up\n",
                   c, kMaxAttempts);
      std::exit(1);
    }
    ++tc.generation;
    Hello h{kMagic, static_cast<uint16_t>(c), static_cast<uint16_t>(tc.generation),
            tc.failed_cmd, tc.failed_status, 0};
    QpConfig qc;
    qc.srq = &srq;
    qc.caps.max_send_wr = kDepthPerConn * 2;
    qc.caps.max_send_sge = 1;
    qc.caps.max_inline_data = sizeof(Response);
    tc.link = std::make_unique<Link>();
    tc.link->qp.emplace(must(dev.create_qp(pd, cq, cq, qc), "create qp"));
    by_qpn[tc.link->qp->qpn()] = Owner{c, tc.generation};
    tc.link->conn.emplace(must(
        Connection::connect(*tc.link->qp, a.peer, a.port,
                            std::span(reinterpret_cast<const uint8_t*>(&h), sizeof h)),
        "connect"));
    tc.state = TargetState::connecting;
    poller.add(tc.link->conn->event_fd(), kConnTag + c);
    if (tc.generation > 1)
      std::printf("target: connection %u: dialling the initiator again (connection %u of this "
                  "index)\n",
                  c, tc.generation);
    std::fflush(stdout);
  };

  // Connection `c` broke: drop what was in flight on it, replace it. `cmd` names the command
  // whose data movement failed, if that is what broke it.
  const auto fail = [&](uint32_t c, const std::string& why, uint64_t cmd, uint32_t status) {
    TargetConn& tc = conns[c];
    ++failures;
    std::printf("target: connection %u: %s; dropping the connection and dialling again\n", c,
                why.c_str());
    if (cmd != kNoCommand) tc.failed_cmd = cmd, tc.failed_status = status;
    for (auto it = in_flight.begin(); it != in_flight.end();)
      it = it->second.owner.index == c ? in_flight.erase(it) : std::next(it);
    graveyard.bury(std::move(tc.link));
    dial(c);
  };

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
    must(qp.post_message_inline(kResponseWr, &r, sizeof r, send_flags::signaled),
         "post a response");
    ++served;
    if (!executed.insert(id).second) ++again;
  };
  const auto on_completion = [&](const Completion& cp) {
    const uint64_t kind = cp.wr_id & kKindMask;
    // A capsule's receive buffer is free again once it is copied out, whatever happened.
    Command cmd{};
    if (kind == kCapsuleWr) {
      const uint32_t s = static_cast<uint32_t>(cp.wr_id & ~kKindMask);
      std::memcpy(&cmd, capsules.data() + size_t{s} * kCapsuleSlot, sizeof cmd);
      post_capsule_recv(s);
    }
    const auto owner = by_qpn.find(cp.qp_num);
    if (owner == by_qpn.end()) return;
    const uint32_t c = owner->second.index;
    TargetConn& tc = conns[c];
    const bool current = owner->second.generation == tc.generation &&
                         (tc.state == TargetState::live || tc.state == TargetState::connecting);
    if (cp.status != IBV_WC_SUCCESS) {
      if (!current) return;  // the flushes of a replaced connection
      char why[200];
      const auto fetch = kind == kReadWr ? in_flight.find(cp.wr_id) : in_flight.end();
      if (fetch != in_flight.end()) {
        std::snprintf(why, sizeof why, "command %llu: the RDMA READ of the initiator's buffer "
                      "completed with %s",
                      static_cast<unsigned long long>(fetch->second.cmd.cmd_id),
                      wc_status_name(cp.status));
        fail(c, why, fetch->second.cmd.cmd_id, cp.status);
      } else {
        std::snprintf(why, sizeof why, "qp %#x: a completion with %s", cp.qp_num,
                      wc_status_name(cp.status));
        fail(c, why, kNoCommand, 0);
      }
      return;
    }
    // A command that arrives on a replaced connection is not executed: the initiator sends
    // it again on the new one.
    if (!current) {
      if (kind == kReadWr) in_flight.erase(cp.wr_id);
      return;
    }
    QueuePair& qp = *tc.link->qp;
    if (kind == kCapsuleWr) {
      const bool data_op = cmd.op == Op::write || cmd.op == Op::read;
      if (cmd.magic != kMagic || (!data_op && cmd.op != Op::goodbye) ||
          (data_op && (cmd.length != a.block || cmd.connection != c))) {
        std::fprintf(stderr, "examples-storage: qp %#x: malformed command\n", cp.qp_num);
        std::exit(1);
      }
      if (cmd.op == Op::goodbye) {
        tc.state = TargetState::done;
        return;
      }
      MemoryRegion& mr = block_mr(cmd.lba, cmd.length);
      const Sge sge = mr.sge(0, cmd.length);
      if (cmd.op == Op::write) {
        // Pull the data from the initiator's buffer; answer when it is here.
        const uint64_t token = kReadWr | ++next_token;
        in_flight[token] = Fetch{cmd, owner->second};
        must(qp.post_read(token, sge, cmd.addr, cmd.rkey, send_flags::signaled),
             "post an RDMA READ");
        ++writes;
      } else {
        // Push the block; RC keeps the WRITE ahead of the response that follows it.
        must(qp.post_write(kDataWriteWr, sge, cmd.addr, cmd.rkey, 0), "post an RDMA WRITE");
        respond(qp, cmd.cmd_id);
        ++reads;
      }
    } else if (kind == kReadWr) {
      auto it = in_flight.find(cp.wr_id);
      if (it == in_flight.end()) return;
      respond(qp, it->second.cmd.cmd_id);
      in_flight.erase(it);
    }
  };

  for (uint32_t c = 0; c < n; ++c) dial(c);
  while (n_closed < n) {
    for (uint64_t tag : poller.wait(10'000)) {
      if (tag == kChannelTag) {
        drain_cq(channel, cq, on_completion);
      } else if (tag == kAsyncTag) {
        dev.process_events();
      } else if (graveyard.owns(tag)) {
        graveyard.on_event(tag);
      } else if (tag >= kConnTag) {
        const uint32_t c = static_cast<uint32_t>(tag - kConnTag);
        Link* link = conns[c].link.get();
        while (std::optional<ConnectionEvent> ev = link->conn->poll_event()) {
          TargetConn& tc = conns[c];
          if (link != tc.link.get()) break;  // replaced meanwhile
          if (ev->type == ConnectionEventType::established) {
            tc.state = TargetState::live;
            tc.failed_cmd = kNoCommand, tc.failed_status = 0;  // told
            continue;
          }
          // Whatever reached the CQ before this event (a goodbye, the failed READ that
          // explains a disconnection) counts first.
          drain_cq(channel, cq, on_completion);
          if (link != tc.link.get()) break;
          if (ev->type == ConnectionEventType::disconnected && tc.state == TargetState::done) {
            tc.state = TargetState::closed;
            ++n_closed;
            poller.remove(link->conn->event_fd());
            break;
          }
          fail(c,
               ev->type == ConnectionEventType::disconnected
                   ? std::string("the initiator disconnected without its goodbye")
                   : std::string(connection_event_name(ev->type)) + ": " + ev->status.message(),
               kNoCommand, 0);
          break;
        }
      }
    }
  }
  std::printf("target: %u connections, %llu commands served (%llu writes by RDMA READ, %llu "
              "reads by RDMA WRITE) from one SRQ of %u receives; %u connection failures, %llu "
              "commands executed again after a reconnection\n",
              n, static_cast<unsigned long long>(served), static_cast<unsigned long long>(writes),
              static_cast<unsigned long long>(reads), srq.max_wr(), failures,
              static_cast<unsigned long long>(again));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  return a.role == "initiator" ? run_initiator(a) : run_target(a);
}
