// SPDX-License-Identifier: BSD-3-Clause
// Invariant 2 (design.md): no withheld WQE executes before RTS — no remote memory changes, no
// CQE, nothing executed — and in shadow mode the SQ itself is not even written.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>

#include "sim_env.h"

using namespace rnicdv;
using namespace rnicdv::test;

namespace {

bool all_zero(const uint8_t* p, size_t n) {
  return std::all_of(p, p + n, [](uint8_t v) { return v == 0; });
}

}  // namespace

TEST_CASE("invariant 2: withheld WQEs do not execute before RTS", "[drv][invariant]") {
  const hw::DeviceProfile profile = GENERATE(mlx5_profile(), scanning_profile());
  INFO("profile " << profile_label(profile));
  Pair p = make_pair(profile);  // EarlyPost::automatic
  Node& a = p.a;
  Node& b = p.b;
  const EarlyPost mode = a.qp->early_post();
  to_rtr(p);
  to_rts(b, kPsnB);

  for (size_t i = 0; i < 256; ++i) a.bytes(0)[i] = static_cast<uint8_t>(i + 1);
  uint64_t remote_counter = 40;
  std::memcpy(b.bytes(0x3000), &remote_counter, 8);
  std::memset(b.bytes(0x2000), 0x5a, 128);

  // A receive for the SEND, posted at b.
  const Sge rsge = b.sge(0x4000, 256);
  RecvWr rwr;
  rwr.wr_id = 900;
  rwr.sg_list = &rsge;
  rwr.num_sge = 1;
  REQUIRE(b.qp->post_recv(rwr) == Errc::ok);

  const Sge payload = a.sge(0, 128);
  const Sge local8 = a.sge(0x1000, 8);
  const Sge read_into = a.sge(0x1100, 128);
  SendWr wrs[4] = {write_wr(1, &payload, 1, b.addr(0x1000), b.rkey()), send_wr(2, &payload, 1),
                   write_wr(3, &read_into, 1, b.addr(0x2000), b.rkey()),
                   write_wr(4, &local8, 1, b.addr(0x3000), b.rkey())};
  wrs[2].opcode = WrOpcode::rdma_read;
  wrs[3].opcode = WrOpcode::atomic_fetch_add;
  wrs[3].compare_add = 2;
  REQUIRE(a.qp->post_send(wrs) == Errc::ok);

  if (mode == EarlyPost::shadow) {
    // The shadow ring holds the batch; the SQ the device reads is untouched.
    const auto* core = a.qp->core();
    CHECK(all_zero(core->sq.buf, size_t{core->sq.bb_count} * 64));
  } else {
    CHECK_FALSE(all_zero(a.qp->core()->sq.buf, 64));
  }

  // Run the fabric well past any retransmit or scan interval.
  const auto during_a = poll_for(*p.fabric, *a.cq, 200'000'000);
  const auto during_b = poll_for(*p.fabric, *b.cq, 10'000'000);
  CHECK(during_a.empty());
  CHECK(during_b.empty());
  CHECK(a.snapshot().wqes_executed == 0);
  CHECK(all_zero(b.bytes(0x1000), 128));
  CHECK(all_zero(b.bytes(0x4000), 256));
  CHECK(all_zero(a.bytes(0x1100), 128));
  std::memcpy(&remote_counter, b.bytes(0x3000), 8);
  CHECK(remote_counter == 40);
  CHECK(a.counters().packets_tx == 0);

  to_rts(a, kPsnA);
  const auto done = poll_n(*p.fabric, *a.cq, 4);
  REQUIRE(done.size() == 4);
  for (size_t i = 0; i < 4; ++i) {
    CHECK(done[i].wr_id == i + 1);
    CHECK(done[i].status == IBV_WC_SUCCESS);
  }
  CHECK(a.snapshot().wqes_executed == 4);
  CHECK(std::memcmp(b.bytes(0x1000), a.bytes(0), 128) == 0);
  CHECK(std::memcmp(a.bytes(0x1100), b.bytes(0x2000), 128) == 0);
  std::memcpy(&remote_counter, b.bytes(0x3000), 8);
  CHECK(remote_counter == 42);
  const auto recv = poll_n(*p.fabric, *b.cq, 1);
  REQUIRE(recv.size() == 1);
  CHECK(recv[0].wr_id == 900);
  CHECK(recv[0].byte_len == 128);
}
