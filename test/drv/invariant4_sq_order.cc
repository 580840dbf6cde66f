// SPDX-License-Identifier: BSD-3-Clause
// Invariant 4 (design.md): the send queue's order is kept across the RTR/RTS boundary: WRs
// withheld in RTR execute before anything posted after RTS. Order is read from the responder:
// receive completions carry each SEND's sequence number, and fetch-and-add returns the value
// it found, i.e. its rank in execution order.
#include <catch2/catch.hpp>

#include <cstring>

#include "sim_env.h"

using namespace rnicdv;
using namespace rnicdv::test;

TEST_CASE("invariant 4: withheld WRs execute before WRs posted after RTS", "[drv][invariant]") {
  const hw::DeviceProfile profile = GENERATE(mlx5_profile(), scanning_profile());
  const Threading threading = GENERATE(Threading::single, Threading::thread_safe);
  INFO("profile " << profile_label(profile) << ", threading " << threading_name(threading));
  QpConfig config = default_qp_config();
  config.threading = threading;
  Pair p = make_pair(profile, config);
  Node& a = p.a;
  Node& b = p.b;
  to_rtr(p);
  to_rts(b, kPsnB);

  constexpr uint32_t kWithheld = 12, kAfter = 12, kTotal = kWithheld + kAfter;
  for (uint32_t i = 0; i < kTotal; ++i) {
    const Sge rsge = b.sge(0x4000 + 16 * i, 16);
    RecvWr rwr;
    rwr.wr_id = 1000 + i;
    rwr.sg_list = &rsge;
    rwr.num_sge = 1;
    REQUIRE(b.qp->post_recv(rwr) == Errc::ok);
  }
  // Interleave SENDs (whose arrival order b's receive completions reveal) with
  // fetch-and-adds of 1 (whose returned value is their execution rank among them).
  uint32_t seq[kTotal];
  auto post = [&](uint32_t i) {
    seq[i] = i;
    Sge sge{reinterpret_cast<uint64_t>(&seq[i]), 4, 0};
    SendWr send = send_wr(i, &sge, 1, send_flags::signaled | send_flags::inline_data);
    const Sge local = a.sge(0x100 + 8 * i, 8);
    SendWr fa = write_wr(100 + i, &local, 1, b.addr(0x3000), b.rkey());
    fa.opcode = WrOpcode::atomic_fetch_add;
    fa.compare_add = 1;
    const SendWr both[2] = {send, fa};
    REQUIRE(a.qp->post_send(both) == Errc::ok);
  };
  for (uint32_t i = 0; i < kWithheld; ++i) post(i);
  to_rts(a, kPsnA);
  for (uint32_t i = kWithheld; i < kTotal; ++i) post(i);

  const auto sent = poll_n(*p.fabric, *a.cq, 2 * kTotal);
  REQUIRE(sent.size() == 2 * kTotal);
  for (uint32_t i = 0; i < 2 * kTotal; ++i) {
    INFO("send completion " << i);
    CHECK(sent[i].status == IBV_WC_SUCCESS);
    CHECK(sent[i].wr_id == (i % 2 == 0 ? i / 2 : 100 + i / 2));
  }
  const auto received = poll_n(*p.fabric, *b.cq, kTotal);
  REQUIRE(received.size() == kTotal);
  for (uint32_t i = 0; i < kTotal; ++i) {
    INFO("receive " << i);
    CHECK(received[i].wr_id == 1000 + i);
    uint32_t got;
    std::memcpy(&got, b.bytes(0x4000 + 16 * i), 4);
    CHECK(got == i);
    uint64_t rank;
    std::memcpy(&rank, a.bytes(0x100 + 8 * i), 8);
    CHECK(rank == i);
  }
}
