// SPDX-License-Identifier: BSD-3-Clause
// The lean completion path (CompletionQueue::poll_lean and poll_each): the same completions as
// poll(), in the same order, with the same effects on the queues (the SQ retired, the RQ
// retired, the QP's state following an error, the driver's own flush errors delivered last),
// reporting wr_id, status, opcode and byte count.
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "sim_env.h"

using namespace rnicdv;
using namespace rnicdv::test;

namespace {

enum class How { full, lean, each };

const char* how_name(How h) {
  return h == How::full ? "poll" : h == How::lean ? "poll_lean" : "poll_each";
}

// Polls `cq` until `want` completions have come (or the fabric is idle), `batch` at a time.
std::vector<LeanCompletion> poll_how(sim::Fabric& fabric, CompletionQueue& cq, How how, size_t want,
                                     int batch = 16) {
  std::vector<LeanCompletion> got;
  fabric.run_until(
      [&] {
        for (;;) {
          int n = 0;
          if (how == How::full) {
            Completion c[16];
            n = cq.poll(c, batch);
            for (int i = 0; i < n; ++i)
              got.push_back(LeanCompletion{c[i].wr_id, c[i].byte_len, c[i].status, c[i].opcode, {}});
          } else if (how == How::lean) {
            LeanCompletion c[16];
            n = cq.poll_lean(c, batch);
            got.insert(got.end(), c, c + n);
          } else {
            n = cq.poll_each(batch, [&](const LeanCompletion& c) { got.push_back(c); });
          }
          REQUIRE(n <= batch);
          if (n == 0) break;
        }
        return got.size() >= want;
      },
      2'000'000'000ull);
  return got;
}

// A scenario with every kind of completion: good SENDs, WRITEs, READs, atomics (unsignaled
// ones retired by later CQEs), a receive with and without data, a remote access error that
// moves the QP to ERR, hardware flush errors of the WQEs behind it, and the driver's own
// flush errors for WRs posted in ERR. Returns what the requester's and the responder's CQs
// reported, polled `how`.
struct Outcome {
  std::vector<LeanCompletion> requester, responder;
  hw::QpState state_after;
  uint32_t sq_tail, sq_pi;
  uint32_t cq_dbr_ci;
};

Outcome run(How how, int batch) {
  Pair p = make_connected_pair(mlx5_profile());
  Node& a = p.a;
  Node& b = p.b;
  for (size_t i = 0; i < 0x400; ++i) b.bytes(0x1000)[i] = static_cast<uint8_t>(i);
  for (uint32_t i = 0; i < 2; ++i) {
    const Sge rs = b.sge(0x3000 + 0x100 * i, 0x100);
    RecvWr rwr;
    rwr.wr_id = 500 + i;
    rwr.sg_list = &rs;
    rwr.num_sge = 1;
    REQUIRE(b.qp->post_recv(rwr) == Errc::ok);
  }
  const Sge s8 = a.sge(0x100, 8);
  const Sge s64 = a.sge(0x200, 64);
  REQUIRE(a.qp->post_message(1, s64, send_flags::signaled) == Errc::ok);
  REQUIRE(a.qp->post_write(2, s8, b.addr(0), b.rkey(), 0) == Errc::ok);  // unsignaled
  REQUIRE(a.qp->post_read(3, a.sge(0x400, 300), b.addr(0x1000), b.rkey(), send_flags::signaled) ==
          Errc::ok);
  REQUIRE(a.qp->post_fetch_add(4, s8, b.addr(0x2000), b.rkey(), 5, send_flags::signaled) ==
          Errc::ok);
  REQUIRE(a.qp->post_message_imm(5, a.sge(0, 0), 0x77, send_flags::signaled) == Errc::ok);
  Outcome o;
  o.requester = poll_how(*p.fabric, *a.cq, how, 4, batch);
  o.responder = poll_how(*p.fabric, *b.cq, how, 2, batch);
  // A bad rkey: REM_ACCESS_ERR, then the device flushes what follows it, then ERR.
  REQUIRE(a.qp->post_write(6, s8, b.addr(0), b.rkey() ^ 0x100, send_flags::signaled) == Errc::ok);
  REQUIRE(a.qp->post_write(7, s8, b.addr(0), b.rkey(), send_flags::signaled) == Errc::ok);
  auto more = poll_how(*p.fabric, *a.cq, how, 2, batch);
  o.requester.insert(o.requester.end(), more.begin(), more.end());
  // Posted in ERR: the driver's own flush errors (signaled or not).
  REQUIRE(a.qp->post_write(8, s8, b.addr(0), b.rkey(), 0) == Errc::ok);
  REQUIRE(a.qp->post_read(9, s8, b.addr(0), b.rkey(), send_flags::signaled) == Errc::ok);
  more = poll_how(*p.fabric, *a.cq, how, 2, batch);
  o.requester.insert(o.requester.end(), more.begin(), more.end());
  CHECK(poll_how(*p.fabric, *a.cq, how, 1, batch).empty());
  o.state_after = a.qp->state();
  o.sq_tail = a.qp->core()->sq_tail.load();
  o.sq_pi = a.qp->core()->sq_pi;
  o.cq_dbr_ci = be32toh(a.cq->core()->dbrec[0]) & 0xffffff;
  return o;
}

void require_same(const std::vector<LeanCompletion>& got, const std::vector<LeanCompletion>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("completion " << i << " wr_id " << want[i].wr_id);
    CHECK(got[i].wr_id == want[i].wr_id);
    CHECK(int{got[i].status} == int{want[i].status});
    CHECK(int{got[i].opcode} == int{want[i].opcode});
    CHECK(got[i].byte_len == want[i].byte_len);
  }
}

}  // namespace

TEST_CASE("poll_lean and poll_each report what poll reports, with the same effects",
          "[drv][cq][lean]") {
  const How how = GENERATE(How::lean, How::each);
  const int batch = GENERATE(1, 3, 16);
  INFO(how_name(how) << ", batches of " << batch);
  const Outcome full = run(How::full, batch);
  const Outcome lean = run(how, batch);
  // The scenario itself, as poll() saw it.
  REQUIRE(full.requester.size() == 8);
  CHECK(full.requester[1].opcode == IBV_WC_RDMA_READ);
  CHECK(full.requester[1].byte_len == 300);
  CHECK(full.requester[2].byte_len == 8);
  CHECK(full.requester[4].status == IBV_WC_REM_ACCESS_ERR);
  CHECK(full.requester[5].status == IBV_WC_WR_FLUSH_ERR);
  CHECK(full.requester[7].wr_id == 9);
  CHECK(full.responder[0].byte_len == 64);
  CHECK(full.responder[1].opcode == IBV_WC_RECV);
  CHECK(full.state_after == hw::QpState::err);

  require_same(lean.requester, full.requester);
  require_same(lean.responder, full.responder);
  CHECK(lean.state_after == full.state_after);
  CHECK(lean.sq_tail == lean.sq_pi);  // everything retired
  CHECK(lean.cq_dbr_ci == full.cq_dbr_ci);
}

TEST_CASE("poll_each stops at max and leaves the rest for the next call", "[drv][cq][lean]") {
  Pair p = make_connected_pair(mlx5_profile());
  const Sge sge = p.a.sge(0, 8);
  for (uint32_t i = 0; i < 10; ++i)
    REQUIRE(p.a.qp->post_write(i, sge, p.b.addr(0), p.b.rkey(), send_flags::signaled) == Errc::ok);
  step(*p.fabric, 400);
  std::vector<uint64_t> ids;
  auto take_some = [&](int max) {
    return p.a.cq->poll_each(max, [&](const LeanCompletion& c) { ids.push_back(c.wr_id); });
  };
  CHECK(take_some(4) == 4);
  CHECK(take_some(4) == 4);
  CHECK(take_some(4) == 2);
  CHECK(take_some(4) == 0);
  REQUIRE(ids.size() == 10);
  for (uint64_t i = 0; i < 10; ++i) CHECK(ids[i] == i);
}

TEST_CASE("a moved-from CompletionQueue's lean polls return nothing", "[drv][cq][lean]") {
  Pair p = make_connected_pair(mlx5_profile());
  CompletionQueue moved = std::move(*p.a.cq);
  LeanCompletion c[4];
  CHECK(p.a.cq->poll_lean(c, 4) == 0);
  CHECK(p.a.cq->poll_each(4, [](const LeanCompletion&) { FAIL("no completion expected"); }) == 0);
}
