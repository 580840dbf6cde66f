// SPDX-License-Identifier: BSD-3-Clause
// Post lists stop at the first bad WR and report its index, as ibv_post_send's bad_wr does:
// the WRs before it are posted and rung (one doorbell), nothing of the bad WR is written.
// Each fast-path error code is distinct. stage_send + ring_send ring once per batch.
#include <catch2/catch.hpp>

#include <algorithm>
#include <vector>

#include "sim_env.h"

using namespace rnicdv;
using namespace rnicdv::test;

namespace {

struct BadWr {
  const char* what;
  Errc expected;
};

}  // namespace

TEST_CASE("a post list stops at the first bad WR and reports it", "[drv][post]") {
  Pair p = make_connected_pair(mlx5_profile());
  Node& a = p.a;
  Node& b = p.b;
  const Sge good_sge = a.sge(0, 16);
  // One SGE more than granted, and one inline byte more than granted (the device may round
  // the requested capacities up).
  std::vector<Sge> too_many;
  for (uint32_t i = 0; i <= a.qp->caps().max_send_sge; ++i) too_many.push_back(a.sge(i, 1));
  const Sge big_inline = a.sge(0, a.qp->caps().max_inline_data + 1);
  const Sge misaligned = a.sge(0, 8);

  const BadWr cases[] = {{"too many SGEs", Errc::too_many_sge},
                         {"inline too large", Errc::inline_too_large},
                         {"unknown opcode", Errc::invalid_argument},
                         {"misaligned atomic", Errc::invalid_argument},
                         {"inline READ", Errc::invalid_argument}};
  uint64_t next_id = 0;
  uint32_t expect_dbr = 0;
  for (const BadWr& c : cases) {
    INFO(c.what);
    SendWr bad = write_wr(9999, &good_sge, 1, b.addr(0), b.rkey());
    if (c.expected == Errc::too_many_sge) {
      bad.sg_list = too_many.data();
      bad.num_sge = static_cast<uint32_t>(too_many.size());
    } else if (std::string(c.what) == "inline too large") {
      bad.sg_list = &big_inline;
      bad.flags |= send_flags::inline_data;
    } else if (std::string(c.what) == "unknown opcode") {
      bad.opcode = static_cast<WrOpcode>(0x7e);
    } else if (std::string(c.what) == "misaligned atomic") {
      bad.sg_list = &misaligned;
      bad.opcode = WrOpcode::atomic_fetch_add;
      bad.remote_addr = b.addr(3);
    } else {
      bad.opcode = WrOpcode::rdma_read;
      bad.flags |= send_flags::inline_data;
    }
    std::vector<SendWr> list;
    for (int i = 0; i < 3; ++i)
      list.push_back(write_wr(next_id + i, &good_sge, 1, b.addr(64 * i), b.rkey()));
    list.push_back(bad);
    list.push_back(write_wr(next_id + 10, &good_sge, 1, b.addr(0), b.rkey()));

    const auto* core = a.qp->core();
    const uint32_t pi_before = core->sq_pi;
    const uint64_t doorbells_before = a.snapshot().uar_doorbells;
    size_t bad_index = 99;
    CHECK(a.qp->post_send(list, &bad_index) == c.expected);
    CHECK(bad_index == 3);
    expect_dbr += 3;
    // Three WQEs of one block each were written and rung once; the bad one was not written.
    CHECK(core->sq_pi == pi_before + 3);
    const uint8_t* after_last = core->sq.bb(pi_before + 3);
    CHECK(std::all_of(after_last, after_last + 64, [](uint8_t v) { return v == 0; }));
    CHECK(a.snapshot().sq_dbr == expect_dbr);
    step(*p.fabric, 1);
    CHECK(a.snapshot().uar_doorbells == doorbells_before + 1);
    const auto got = poll_n(*p.fabric, *a.cq, 3);
    REQUIRE(got.size() == 3);
    for (int i = 0; i < 3; ++i) CHECK(got[i].wr_id == next_id + i);
    next_id += 100;
  }
}

TEST_CASE(
    "a post list that overflows the SQ stops with queue_full at the first WR that does "
    "not fit",
    "[drv][post]") {
  Pair p = make_connected_pair(mlx5_profile());
  p.a.sim->pause();
  const uint32_t blocks = p.a.qp->core()->sq.bb_count;
  const Sge sge = p.a.sge(0, 8);
  std::vector<SendWr> list;
  for (uint32_t i = 0; i < blocks + 5; ++i)
    list.push_back(write_wr(i, &sge, 1, p.b.addr(0), p.b.rkey(), 0));
  size_t bad_index = 0;
  CHECK(p.a.qp->post_send(list, &bad_index) == Errc::queue_full);
  CHECK(bad_index == blocks);
  CHECK(p.a.snapshot().sq_dbr == blocks);
  step(*p.fabric, 1);  // a paused device still records register writes
  CHECK(p.a.snapshot().uar_doorbells == 1);
  p.a.sim->resume();
}

TEST_CASE("posting to a QP in RESET or INIT reports bad_state at index 0", "[drv][post]") {
  Pair p = make_pair(mlx5_profile());
  const Sge sge = p.a.sge(0, 8);
  const SendWr list[2] = {write_wr(1, &sge, 1, p.b.addr(0), p.b.rkey()),
                          write_wr(2, &sge, 1, p.b.addr(0), p.b.rkey())};
  size_t bad_index = 99;
  CHECK(p.a.qp->post_send(list, &bad_index) == Errc::bad_state);
  CHECK(bad_index == 0);
  check(p.a.qp->to_init());
  bad_index = 99;
  CHECK(p.a.qp->post_send(list, &bad_index) == Errc::bad_state);
  CHECK(bad_index == 0);
}

TEST_CASE("posting after a device-fatal event reports qp_in_error", "[drv][post]") {
  Pair p = make_connected_pair(mlx5_profile());
  // What Device::process_events does for DEVICE_FATAL (the simulator has no way to die).
  p.a.qp->core()->on_async_error(hw::AsyncEventType::device_fatal);
  CHECK(p.a.qp->state() == hw::QpState::err);
  const Sge sge = p.a.sge(0, 8);
  size_t bad_index = 99;
  const SendWr wr = write_wr(1, &sge, 1, p.b.addr(0), p.b.rkey());
  CHECK(p.a.qp->post_send(std::span(&wr, 1), &bad_index) == Errc::qp_in_error);
  CHECK(bad_index == 0);
}

TEST_CASE("stage_send builds without a doorbell and ring_send rings once", "[drv][post]") {
  const hw::DeviceProfile profile = GENERATE(mlx5_profile(), scanning_profile());
  Pair p = make_connected_pair(profile);
  Node& a = p.a;
  const Sge sge = a.sge(0, 8);
  const uint64_t doorbells = a.snapshot().uar_doorbells;
  for (uint32_t i = 0; i < 6; ++i)
    REQUIRE(a.qp->stage_send(write_wr(i, &sge, 1, p.b.addr(8 * i), p.b.rkey())) == Errc::ok);
  CHECK(a.snapshot().uar_doorbells == doorbells);
  CHECK(a.snapshot().sq_dbr == 0);
  step(*p.fabric, 1);
  CHECK(a.snapshot().uar_doorbells == doorbells);
  a.qp->ring_send();
  CHECK(a.snapshot().sq_dbr == 6);
  step(*p.fabric, 1);
  CHECK(a.snapshot().uar_doorbells == doorbells + 1);
  a.qp->ring_send();  // nothing new: no doorbell
  step(*p.fabric, 1);
  CHECK(a.snapshot().uar_doorbells == doorbells + 1);
  const auto got = poll_n(*p.fabric, *a.cq, 6);
  REQUIRE(got.size() == 6);
  for (uint32_t i = 0; i < 6; ++i) CHECK(got[i].wr_id == i);
}
