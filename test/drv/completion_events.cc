// SPDX-License-Identifier: BSD-3-Clause
// Completion events: CompletionQueue::request_notify arms a CQ for one event on its
// CompletionChannel; the channel's fd is readable while an event is pending (poll, epoll),
// several CQs share one channel, events are acknowledged, and a destroyed CQ's pending events
// are dropped. The simulated HCA runs libmlx5's arm protocol (doorbell::arm_cq).
#include <poll.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <set>
#include <thread>

#include "sim_env.h"

using namespace rnicdv;
using namespace rnicdv::test;

namespace {

bool readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

// A node whose send and receive completions go to two CQs on one completion channel.
struct EventNode {
  std::vector<uint8_t> mem;
  std::shared_ptr<sim::Device> sim;
  std::optional<Device> dev;
  std::optional<CompletionChannel> channel;
  std::optional<ProtectionDomain> pd;
  std::optional<CompletionQueue> scq, rcq;
  std::optional<MemoryRegion> mr;
  std::optional<QueuePair> qp;
};

constexpr uint64_t kSendCtx = 0x5e4d, kRecvCtx = 0x4ecf;

EventNode make_event_node(const std::shared_ptr<sim::Fabric>& fabric) {
  EventNode n;
  n.sim = take(fabric->add_device({}));
  n.dev.emplace(take(Device::wrap(n.sim)));
  n.channel.emplace(take(n.dev->create_completion_channel()));
  n.pd.emplace(take(n.dev->alloc_pd()));
  n.scq.emplace(take(n.dev->create_cq(64, *n.channel, kSendCtx)));
  n.rcq.emplace(take(n.dev->create_cq(64, *n.channel, kRecvCtx)));
  n.mem.assign(1 << 16, 0);
  n.mr.emplace(take(n.pd->reg_mr(n.mem.data(), n.mem.size(),
                                 hw::access::local_write | hw::access::remote_write)));
  n.qp.emplace(take(n.dev->create_qp(*n.pd, *n.scq, *n.rcq, default_qp_config())));
  return n;
}

struct EventPair {
  std::shared_ptr<sim::Fabric> fabric;
  EventNode a, b;
};

EventPair connected(sim::ExecMode mode = sim::ExecMode::deterministic) {
  EventPair p;
  p.fabric = make_fabric(mode);
  p.a = make_event_node(p.fabric);
  p.b = make_event_node(p.fabric);
  check(p.a.qp->to_init());
  check(p.b.qp->to_init());
  check(p.a.qp->to_rtr(p.b.qp->local_endpoint(kPsnB), hw::Mtu::mtu1024));
  check(p.b.qp->to_rtr(p.a.qp->local_endpoint(kPsnA), hw::Mtu::mtu1024));
  check(p.b.qp->to_rts(kPsnB));
  check(p.a.qp->to_rts(kPsnA));
  return p;
}

void post_write(EventNode& from, EventNode& to, uint64_t wr_id) {
  Sge sge = from.mr->sge(0, 64);
  REQUIRE(from.qp->post_send(write_wr(wr_id, &sge, 1, to.mr->addr() + 0x1000, to.mr->rkey())) ==
          Errc::ok);
}

void post_message(EventNode& from, uint64_t wr_id, SendFlags flags) {
  Sge sge = from.mr->sge(0, 32);
  REQUIRE(from.qp->post_send(send_wr(wr_id, &sge, 1, flags)) == Errc::ok);
}

void post_recv(EventNode& n, uint64_t wr_id) {
  Sge sge = n.mr->sge(0x2000, 64);
  RecvWr wr;
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  REQUIRE(n.qp->post_recv(wr) == Errc::ok);
}

int drain(CompletionQueue& cq) {
  Completion c[16];
  int total = 0;
  for (int n; (n = cq.poll(c, 16)) > 0;) {
    for (int i = 0; i < n; ++i) CHECK(c[i].status == IBV_WC_SUCCESS);
    total += n;
  }
  return total;
}

}  // namespace

TEST_CASE("an armed CQ raises one event for its next completion; the fd is readable while it waits",
          "[events]") {
  EventPair p = connected();
  const int fd = p.a.channel->fd();
  REQUIRE(fd >= 0);
  CHECK_FALSE(readable(fd));

  REQUIRE(p.a.scq->request_notify() == Errc::ok);
  step(*p.fabric);
  CHECK_FALSE(readable(fd));  // armed, nothing completed: no event

  post_write(p.a, p.b, 1);
  step(*p.fabric);
  REQUIRE(readable(fd));
  CqEvent ev;
  REQUIRE(p.a.channel->get_event(&ev));
  CHECK(ev.context == kSendCtx);
  CHECK(ev.cqn == p.a.scq->cqn());
  CHECK(p.a.scq->unacked_events() == 1);
  CHECK_FALSE(p.a.channel->get_event(&ev));  // one arm, one event
  CHECK_FALSE(readable(fd));
  CHECK(drain(*p.a.scq) == 1);
  p.a.scq->ack_events(1);
  CHECK(p.a.scq->unacked_events() == 0);
  p.a.scq->ack_events(5);  // more than were taken: not counted
  CHECK(p.a.scq->unacked_events() == 0);

  // Not re-armed: the next completion raises nothing.
  post_write(p.a, p.b, 2);
  step(*p.fabric);
  CHECK_FALSE(readable(fd));
  CHECK(drain(*p.a.scq) == 1);

  // Re-armed (with the next sequence number): the next one does.
  REQUIRE(p.a.scq->request_notify() == Errc::ok);
  post_write(p.a, p.b, 3);
  step(*p.fabric);
  REQUIRE(p.a.channel->get_event(&ev));
  CHECK(ev.context == kSendCtx);
  p.a.scq->ack_events(1);
  CHECK(drain(*p.a.scq) == 1);
}

TEST_CASE("a completion that lands between the last poll and the arm still wakes the consumer",
          "[events]") {
  EventPair p = connected();
  // The consumer's loop: poll dry ...
  CHECK(drain(*p.a.scq) == 0);
  // ... a completion arrives before it arms ...
  post_write(p.a, p.b, 1);
  step(*p.fabric);
  // ... and it arms with the consumer index it polled up to. The device finds the CQE past
  // that index and raises the event at once, instead of waiting for a later completion.
  REQUIRE(p.a.scq->request_notify() == Errc::ok);
  step(*p.fabric, 4);
  CqEvent ev;
  REQUIRE(p.a.channel->get_event(&ev));
  CHECK(ev.context == kSendCtx);
  p.a.scq->ack_events(1);
  CHECK(drain(*p.a.scq) == 1);
}

TEST_CASE("one channel serves several CQs, and epoll wakes on it", "[events]") {
  EventPair p = connected();
  const int ep = ::epoll_create1(EPOLL_CLOEXEC);
  REQUIRE(ep >= 0);
  epoll_event reg{};
  reg.events = EPOLLIN;
  reg.data.u64 = 42;
  REQUIRE(::epoll_ctl(ep, EPOLL_CTL_ADD, p.a.channel->fd(), &reg) == 0);
  epoll_event out[4];
  CHECK(::epoll_wait(ep, out, 4, 0) == 0);

  post_recv(p.a, 7);
  REQUIRE(p.a.scq->request_notify() == Errc::ok);
  REQUIRE(p.a.rcq->request_notify() == Errc::ok);
  post_message(p.b, 1, send_flags::signaled);  // a receives: an event on its receive CQ
  post_write(p.a, p.b, 2);                  // a's own write: an event on its send CQ
  step(*p.fabric);

  REQUIRE(::epoll_wait(ep, out, 4, 0) == 1);
  const uint64_t tag = out[0].data.u64;  // a copy: epoll_event is packed on x86-64
  CHECK(tag == 42);
  std::set<uint64_t> contexts;
  CqEvent ev;
  while (p.a.channel->get_event(&ev)) contexts.insert(ev.context);
  CHECK(contexts == std::set<uint64_t>{kSendCtx, kRecvCtx});
  CHECK(::epoll_wait(ep, out, 4, 0) == 0);
  p.a.scq->ack_events(1);
  p.a.rcq->ack_events(1);
  CHECK(drain(*p.a.scq) == 1);
  CHECK(drain(*p.a.rcq) == 1);
  ::close(ep);
}

TEST_CASE("a solicited-only arm ignores an unsolicited receive and fires on a solicited one",
          "[events]") {
  EventPair p = connected();
  post_recv(p.a, 1);
  post_recv(p.a, 2);
  REQUIRE(p.a.rcq->request_notify(true) == Errc::ok);
  post_message(p.b, 10, send_flags::signaled);
  step(*p.fabric);
  CqEvent ev;
  CHECK_FALSE(p.a.channel->get_event(&ev));
  post_message(p.b, 11, send_flags::signaled | send_flags::solicited);
  step(*p.fabric);
  REQUIRE(p.a.channel->get_event(&ev));
  CHECK(ev.context == kRecvCtx);
  p.a.rcq->ack_events(1);
  CHECK(drain(*p.a.rcq) == 2);
}

TEST_CASE("flush errors the driver makes in ERR wake an armed CQ", "[events]") {
  EventPair p = connected();
  check(p.a.qp->to_error());
  // The first post in ERR hands the device a drain marker; everything after it completes in
  // software, which the device never sees.
  post_write(p.a, p.b, 1);
  step(*p.fabric);
  Completion c[8];
  int got = 0;
  for (int n; (n = p.a.scq->poll(c, 8)) > 0;) got += n;
  CHECK(got == 1);
  CqEvent ev;
  while (p.a.channel->get_event(&ev)) p.a.scq->ack_events(1);

  REQUIRE(p.a.scq->request_notify() == Errc::ok);
  step(*p.fabric);
  CHECK_FALSE(p.a.channel->get_event(&ev));
  post_write(p.a, p.b, 2);  // a software completion only
  REQUIRE(readable(p.a.channel->fd()));
  REQUIRE(p.a.channel->get_event(&ev));
  CHECK(ev.context == kSendCtx);
  p.a.scq->ack_events(1);
  REQUIRE(p.a.scq->poll(c, 8) == 1);
  CHECK(c[0].wr_id == 2);
  CHECK(c[0].status == IBV_WC_WR_FLUSH_ERR);
}

TEST_CASE("a destroyed CQ's pending events are dropped", "[events]") {
  EventPair p = connected();
  REQUIRE(p.a.rcq->request_notify() == Errc::ok);
  post_recv(p.a, 1);
  post_message(p.b, 1, send_flags::signaled);
  step(*p.fabric);
  REQUIRE(readable(p.a.channel->fd()));
  p.a.qp.reset();
  p.a.rcq.reset();  // with its event still pending
  CqEvent ev;
  CHECK_FALSE(p.a.channel->get_event(&ev));
  CHECK_FALSE(readable(p.a.channel->fd()));
}

TEST_CASE("request_notify on a CQ without a channel is refused", "[events][errors]") {
  Pair p = make_pair(mlx5_profile());
  CHECK(p.a.cq->request_notify() == Errc::invalid_argument);
  CHECK(p.a.cq->unacked_events() == 0);
}

TEST_CASE("a consumer asleep on the channel wakes for a completion on a threaded device",
          "[events][threaded]") {
  EventPair p = connected(sim::ExecMode::threaded);
  REQUIRE(p.a.scq->request_notify() == Errc::ok);
  Result<CqEvent> got = Status::error(Errc::internal, "not run");
  std::thread sleeper([&] { got = p.a.channel->wait_event(20'000); });
  post_write(p.a, p.b, 1);
  sleeper.join();
  INFO(got.status().message());
  REQUIRE(got.is_ok());
  CHECK(got->context == kSendCtx);
  p.a.scq->ack_events(1);
  Completion c;
  int n = 0;
  for (int tries = 0; n == 0 && tries < 1000000; ++tries) n = p.a.scq->poll(&c, 1);
  REQUIRE(n == 1);
  CHECK(c.status == IBV_WC_SUCCESS);

  // Nothing armed: the wait ends by its timeout, with the reason.
  Result<CqEvent> none = p.a.channel->wait_event(50);
  REQUIRE_FALSE(none.is_ok());
  CHECK(none.status().code() == Errc::timeout);
}

// The driver's doorbell path wakes a device thread that went to its deep sleep (no timer, and
// no userfaultfd watch on the device's own register pages): the general post (ring) and the
// typed post (commit_one) each kick it after their register write. Nothing on this thread
// polls or waits on the device, so only the kick can get the WRITE carried out.
TEST_CASE("a post to a threaded device that went idle is carried out without polling: the "
          "driver's kick wakes it", "[events][threaded]") {
  EventPair p = connected(sim::ExecMode::threaded);
  volatile const uint8_t* landing = p.b.mem.data() + 0x1000;
  auto lands = [&](uint8_t fill) {
    for (int i = 0; i < 5000; ++i) {
      if (landing[0] == fill && landing[63] == fill) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return false;
  };
  // Past the timed sleeps (20 + 40 + 80 us), each device sleeps deeply.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::memset(p.a.mem.data(), 0x5a, 64);
  post_write(p.a, p.b, 1);
  CHECK(lands(0x5a));

  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::memset(p.a.mem.data(), 0xa5, 64);
  Sge sge = p.a.mr->sge(0, 64);
  REQUIRE(p.a.qp->post_write(2, sge, p.b.mr->addr() + 0x1000, p.b.mr->rkey(),
                             send_flags::signaled) == Errc::ok);
  CHECK(lands(0xa5));
  // The CQEs follow the ACKs; polling now may run the engine, the kicks have been tested.
  int completed = 0;
  for (int i = 0; completed < 2 && i < 5000; ++i) {
    completed += drain(*p.a.scq);
    if (completed < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  CHECK(completed == 2);
}
