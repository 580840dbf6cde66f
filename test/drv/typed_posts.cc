// SPDX-License-Identifier: BSD-3-Clause
// The typed post calls (post_write, post_read, post_fetch_add, ..., and their stage_ forms):
// the same WQE bytes as post_send(SendWr) builds for the same request, the same completions,
// the same early-post gate, error codes and doorbells, under every threading model and
// doorbell mode.
#include <catch2/catch.hpp>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "sim_env.h"

using namespace rnicdv;
using namespace rnicdv::test;

namespace {

// One request, posted either way: `typed` calls a typed post (or stage) on the QP; `wr` is
// the SendWr that post_send would be given for it. `sge` backs wr.sg_list.
struct Request {
  std::string name;
  Sge sge;
  SendWr wr;
  std::function<Errc(QueuePair&, bool stage)> typed;
};

// One of each typed call, with `flags`, against a's and b's buffers.
std::vector<Request> requests(Node& a, Node& b, SendFlags flags) {
  std::vector<Request> out;
  auto add = [&](std::string name, Sge sge, SendWr wr,
                 std::function<Errc(QueuePair&, bool)> typed) {
    out.push_back(Request{std::move(name), sge, wr, std::move(typed)});
  };
  const uint64_t dst = b.addr(kDst);
  const uint32_t rkey = b.rkey();
  {
    const Sge sge = a.sge(kSrc, 300);
    SendWr wr = write_wr(11, nullptr, 1, dst, rkey, flags);
    add("WRITE", sge, wr, [=](QueuePair& qp, bool stage) {
      return stage ? qp.stage_write(11, sge, dst, rkey, flags)
                   : qp.post_write(11, sge, dst, rkey, flags);
    });
    wr.wr_id = 12;
    wr.opcode = WrOpcode::rdma_write_imm;
    wr.imm_data = 0xa1b2c3d4;
    add("WRITE_IMM", sge, wr, [=](QueuePair& qp, bool stage) {
      return stage ? qp.stage_write_imm(12, sge, dst, rkey, 0xa1b2c3d4, flags)
                   : qp.post_write_imm(12, sge, dst, rkey, 0xa1b2c3d4, flags);
    });
  }
  {
    const Sge sge = a.sge(kLocal, 200);
    SendWr wr = write_wr(13, nullptr, 1, dst, rkey, flags);
    wr.opcode = WrOpcode::rdma_read;
    add("READ", sge, wr, [=](QueuePair& qp, bool stage) {
      return stage ? qp.stage_read(13, sge, dst, rkey, flags)
                   : qp.post_read(13, sge, dst, rkey, flags);
    });
  }
  {
    const Sge sge = a.sge(kSrc, 100);
    SendWr wr = send_wr(14, nullptr, 1, flags);
    add("SEND", sge, wr, [=](QueuePair& qp, bool stage) {
      return stage ? qp.stage_message(14, sge, flags) : qp.post_message(14, sge, flags);
    });
    wr.wr_id = 15;
    wr.opcode = WrOpcode::send_imm;
    wr.imm_data = 0x55667788;
    add("SEND_IMM", sge, wr, [=](QueuePair& qp, bool stage) {
      return stage ? qp.stage_message_imm(15, sge, 0x55667788, flags)
                   : qp.post_message_imm(15, sge, 0x55667788, flags);
    });
  }
  {
    const Sge sge = a.sge(kLocal + 0x100, 8);
    const uint64_t target = b.addr(kAtomic);
    SendWr wr = write_wr(16, nullptr, 1, target, rkey, flags);
    wr.opcode = WrOpcode::atomic_fetch_add;
    wr.compare_add = 3;
    add("FETCH_ADD", sge, wr, [=](QueuePair& qp, bool stage) {
      return stage ? qp.stage_fetch_add(16, sge, target, rkey, 3, flags)
                   : qp.post_fetch_add(16, sge, target, rkey, 3, flags);
    });
    wr.wr_id = 17;
    wr.opcode = WrOpcode::atomic_cmp_swap;
    wr.compare_add = 0x11;
    wr.swap = 0x22;
    add("COMPARE_SWAP", sge, wr, [=](QueuePair& qp, bool stage) {
      return stage ? qp.stage_compare_swap(17, sge, target, rkey, 0x11, 0x22, flags)
                   : qp.post_compare_swap(17, sge, target, rkey, 0x11, 0x22, flags);
    });
  }
  {
    const uint8_t* data = a.bytes(kSrc + 0x200);
    const Sge sge{reinterpret_cast<uintptr_t>(data), 50, 0};
    SendWr wr = write_wr(18, nullptr, 1, dst, rkey, flags | send_flags::inline_data);
    add("WRITE inline", sge, wr, [=](QueuePair& qp, bool stage) {
      return stage ? qp.stage_write_inline(18, data, 50, dst, rkey, flags)
                   : qp.post_write_inline(18, data, 50, dst, rkey, flags);
    });
    wr = send_wr(19, nullptr, 1, flags | send_flags::inline_data);
    add("SEND inline", sge, wr, [=](QueuePair& qp, bool stage) {
      return stage ? qp.stage_message_inline(19, data, 50, flags)
                   : qp.post_message_inline(19, data, 50, flags);
    });
  }
  for (Request& r : out) r.wr.sg_list = &r.sge;  // after the vector stopped moving
  return out;
}

// The WQE at `pi` in the QP's SQ: its DS from the ctrl segment, then DS * 16 bytes, following
// the wrap.
std::vector<uint8_t> wqe_bytes(wqe::SqRing ring, uint32_t pi) {
  const uint8_t ds = ring.bb(pi)[7] & 0x3f;
  std::vector<uint8_t> out(size_t{ds} * wqe::kDsBytes);
  for (size_t i = 0; i < out.size(); ++i) {
    const size_t offset = ((pi & (ring.bb_count - 1)) * wqe::kBbBytes + i) %
                          (size_t{ring.bb_count} * wqe::kBbBytes);
    out[i] = ring.buf[offset];
  }
  return out;
}

QpConfig typed_config() {
  QpConfig c = default_qp_config();
  c.caps.max_inline_data = 128;
  return c;
}

}  // namespace

// post_send of one WR takes the typed calls' builders too (QpCore::post_one_fixed,
// post_one_inline), so both are compared with the general encoder, which the wqe suite
// compares with rdma-core's own setters.
TEST_CASE("a typed call, and post_send of the same request, build the bytes of the general "
          "encoder",
          "[drv][typed]") {
  const bool through_post_send = GENERATE(false, true);
  // as<>: values, not references to the named constants (Catch2 v2 would keep references).
  const SendFlags flags = SendFlags::from_bits(
      GENERATE(as<uint32_t>{}, send_flags::signaled.bits(), 0u,
               (send_flags::solicited | send_flags::fence).bits(),
               (send_flags::signaled | send_flags::solicited).bits()));
  const bool sig_all = GENERATE(false, true);
  QpConfig config = typed_config();
  config.sq_sig_all = sig_all;
  Pair p = make_connected_pair(mlx5_profile(), config);
  detail::QpCore& core = *p.a.qp->core();
  // A scratch ring of the SQ's size for post_send's encoder, starting where the SQ is.
  std::vector<uint8_t> scratch_mem(size_t{core.sq.bb_count} * wqe::kBbBytes);
  const wqe::SqRing scratch{scratch_mem.data(), core.sq.bb_count};
  // Advance close to the ring's end first, so that the inline WQEs wrap.
  const Sge sge = p.a.sge(0, 8);
  uint32_t posted = 0;
  while (core.sq_pi < core.sq.bb_count - 1) {
    REQUIRE(p.a.qp->post_write(900 + posted, sge, p.b.addr(0), p.b.rkey(), send_flags::signaled) ==
            Errc::ok);
    ++posted;
  }
  REQUIRE(poll_n(*p.fabric, *p.a.cq, posted).size() == posted);

  // Inline WQEs (last in the list) first: they span two blocks, so the first wraps.
  std::vector<Request> reqs = requests(p.a, p.b, flags);
  for (auto it = reqs.rbegin(); it != reqs.rend(); ++it) {
    Request& r = *it;
    INFO(r.name << ", flags " << flags << (sig_all ? ", sq_sig_all" : "")
                << (through_post_send ? ", post_send" : ", typed"));
    const uint32_t pi = core.sq_pi;
    REQUIRE((through_post_send ? p.a.qp->stage_send(r.wr) : r.typed(*p.a.qp, /*stage=*/true)) ==
            Errc::ok);
    wqe::EncodedWqe enc;
    std::memset(scratch_mem.data(), 0, scratch_mem.size());
    REQUIRE(wqe::encode_send_wqe(scratch, pi, scratch.bb_count, core.qpn, r.wr, core.limits,
                                 core.sig_all_bits, &enc) == Errc::ok);
    CHECK(core.sq_pi == pi + enc.bbs);
    CHECK(wqe_bytes(core.sq, pi) == wqe_bytes(scratch, pi));
    // The bookkeeping poll() needs: the entry at the WQE's first block.
    CHECK(core.sq_entries[pi & core.sq_mask].wr_id == r.wr.wr_id);
    CHECK(core.sq_entries[pi & core.sq_mask].bbs == enc.bbs);
    CHECK(core.sq_entries[pi & core.sq_mask].opcode == static_cast<uint8_t>(r.wr.opcode));
  }
  // Nothing was rung; one doorbell now covers the batch, and every WR completes (the
  // unsignaled ones are retired by the last signaled CQE, or by sq_sig_all).
  p.a.qp->ring_send();
  const auto got = poll_for(*p.fabric, *p.a.cq);
  for (const Completion& c : got) CHECK(c.status == IBV_WC_SUCCESS);
}

TEST_CASE("the ctrl head of a typed WQE matches rdma-core's mlx5dv_set_ctrl_seg", "[drv][typed]") {
  Pair p = make_connected_pair(mlx5_profile(), typed_config());
  detail::QpCore& core = *p.a.qp->core();
  const Sge sge = p.a.sge(0, 8);
  for (uint32_t i = 0; i < 3; ++i) {
    const uint32_t pi = core.sq_pi;
    REQUIRE(p.a.qp->stage_write_imm(i, sge, p.b.addr(0), p.b.rkey(), 0x01020304,
                                    send_flags::signaled) == Errc::ok);
    mlx5_wqe_ctrl_seg expected;
    std::memset(&expected, 0, sizeof expected);
    mlx5dv_set_ctrl_seg(&expected, static_cast<uint16_t>(pi), MLX5_OPCODE_RDMA_WRITE_IMM, 0,
                        core.qpn, MLX5_WQE_CTRL_CQ_UPDATE, 3, 0, htobe32(0x01020304));
    CHECK(std::memcmp(core.sq.bb(pi), &expected, sizeof expected) == 0);
  }
}

TEST_CASE("every typed call completes end to end as post_send's request does", "[drv][typed]") {
  const hw::DeviceProfile profile = GENERATE(mlx5_profile(), scanning_profile());
  INFO("profile " << profile_label(profile));
  Pair p = make_connected_pair(profile, typed_config());
  fill(p.a.bytes(kSrc), 0x400, 1);
  fill(p.b.bytes(kDst), 0x400, 9);
  uint64_t operand = 0x11;
  std::memcpy(p.b.bytes(kAtomic), &operand, 8);
  for (Request& r : requests(p.a, p.b, send_flags::signaled)) {
    INFO(r.name);
    const bool receives = r.wr.opcode == WrOpcode::send || r.wr.opcode == WrOpcode::send_imm ||
                          r.wr.opcode == WrOpcode::rdma_write_imm;
    if (receives) {
      const Sge rsge = p.b.sge(0x2000, 512);
      RecvWr rwr;
      rwr.wr_id = 700;
      rwr.sg_list = &rsge;
      rwr.num_sge = 1;
      REQUIRE(p.b.qp->post_recv(rwr) == Errc::ok);
    }
    REQUIRE(r.typed(*p.a.qp, /*stage=*/false) == Errc::ok);
    const auto got = poll_n(*p.fabric, *p.a.cq, 1);
    REQUIRE(got.size() == 1);
    const Completion& c = got[0];
    CHECK(c.wr_id == r.wr.wr_id);
    CHECK(c.status == IBV_WC_SUCCESS);
    CHECK(c.qp_num == p.a.qp->qpn());
    switch (r.wr.opcode) {
      case WrOpcode::rdma_write:
      case WrOpcode::rdma_write_imm:
        CHECK(c.opcode == IBV_WC_RDMA_WRITE);
        break;
      case WrOpcode::rdma_read:
        CHECK(c.opcode == IBV_WC_RDMA_READ);
        CHECK(c.byte_len == 200);
        CHECK(std::memcmp(p.a.bytes(kLocal), p.b.bytes(kDst), 200) == 0);
        break;
      case WrOpcode::send:
      case WrOpcode::send_imm:
        CHECK(c.opcode == IBV_WC_SEND);
        break;
      case WrOpcode::atomic_fetch_add:
        CHECK(c.opcode == IBV_WC_FETCH_ADD);
        CHECK(c.byte_len == 8);
        break;
      case WrOpcode::atomic_cmp_swap:
        CHECK(c.opcode == IBV_WC_COMP_SWAP);
        CHECK(c.byte_len == 8);
        break;
      default:
        FAIL("unexpected opcode");
    }
    if (receives) {
      const auto rgot = poll_n(*p.fabric, *p.b.cq, 1);
      REQUIRE(rgot.size() == 1);
      CHECK(rgot[0].wr_id == 700);
      CHECK(rgot[0].status == IBV_WC_SUCCESS);
      CHECK(rgot[0].byte_len == r.sge.length);
      if (r.wr.opcode != WrOpcode::send) CHECK(rgot[0].imm_data == r.wr.imm_data);
      const uint8_t* sent = reinterpret_cast<const uint8_t*>(static_cast<uintptr_t>(r.sge.addr));
      const size_t at = r.wr.opcode == WrOpcode::rdma_write_imm ? kDst : 0x2000;
      CHECK(std::memcmp(p.b.bytes(at), sent, r.sge.length) == 0);
    } else if (r.wr.opcode == WrOpcode::rdma_write) {
      const uint8_t* sent = reinterpret_cast<const uint8_t*>(static_cast<uintptr_t>(r.sge.addr));
      CHECK(std::memcmp(p.b.bytes(kDst), sent, r.sge.length) == 0);
    }
  }
  // FETCH_ADD (+3) then COMPARE_SWAP (0x11 -> no swap: the value is 0x14 by then).
  std::memcpy(&operand, p.b.bytes(kAtomic), 8);
  CHECK(operand == 0x14);
  uint64_t original;
  std::memcpy(&original, p.a.bytes(kLocal + 0x100), 8);
  CHECK(original == 0x14);  // what COMPARE_SWAP found
}

TEST_CASE("typed calls follow the early-post gate: withheld in RTR, released in order at RTS",
          "[drv][typed][early_post]") {
  const hw::DeviceProfile profile = GENERATE(mlx5_profile(), scanning_profile());
  const Threading threading =
      GENERATE(Threading::single, Threading::single_poster, Threading::thread_safe);
  INFO("profile " << profile_label(profile) << ", " << threading_name(threading));
  QpConfig config = typed_config();
  config.threading = threading;
  Pair p = make_pair(profile, config);
  to_rtr(p);
  to_rts(p.b, kPsnB);
  const Sge sge = p.a.sge(0, 8);
  const sim::DeviceCounters before = p.a.counters();
  // Typed, staged, generic and inline, mixed, all in RTR.
  REQUIRE(p.a.qp->post_write(1, sge, p.b.addr(0), p.b.rkey(), send_flags::signaled) == Errc::ok);
  REQUIRE(p.a.qp->stage_write(2, sge, p.b.addr(8), p.b.rkey(), send_flags::signaled) == Errc::ok);
  REQUIRE(p.a.qp->post_send(write_wr(3, &sge, 1, p.b.addr(16), p.b.rkey())) == Errc::ok);
  REQUIRE(p.a.qp->post_write_inline(4, p.a.bytes(0), 8, p.b.addr(24), p.b.rkey(),
                                    send_flags::signaled) == Errc::ok);
  p.a.qp->ring_send();  // withheld: nothing to ring
  CHECK(p.a.qp->withheld() == 4);
  step(*p.fabric, 64);
  CHECK(p.a.counters().uar_doorbells == before.uar_doorbells);  // invariant 1
  CHECK(p.a.snapshot().wqes_executed == 0);                     // invariant 2
  to_rts(p.a, kPsnA);
  REQUIRE(p.a.qp->post_write(5, sge, p.b.addr(32), p.b.rkey(), send_flags::signaled) == Errc::ok);
  const auto got = poll_n(*p.fabric, *p.a.cq, 5);
  REQUIRE(got.size() == 5);
  for (uint32_t i = 0; i < 5; ++i) {
    CHECK(got[i].wr_id == i + 1);  // invariant 4: posting order
    CHECK(got[i].status == IBV_WC_SUCCESS);
  }
}

TEST_CASE("typed calls in ERR complete with flush errors, in strict RTR fail with bad_state",
          "[drv][typed][early_post]") {
  const Sge sge{0, 8, 0};
  SECTION("RTR then ERR: withheld typed WRs complete with WR_FLUSH_ERR, unsignaled too") {
    Pair p = make_pair(mlx5_profile(), typed_config());
    to_rtr(p);
    const Sge s = p.a.sge(0, 8);
    REQUIRE(p.a.qp->post_write(1, s, p.b.addr(0), p.b.rkey(), 0) == Errc::ok);
    REQUIRE(p.a.qp->post_fetch_add(2, s, p.b.addr(8), p.b.rkey(), 1, 0) == Errc::ok);
    check(p.a.qp->to_error());
    REQUIRE(p.a.qp->post_message_inline(3, p.a.bytes(0), 4, send_flags::signaled) == Errc::ok);
    const auto got = poll_n(*p.fabric, *p.a.cq, 3);
    REQUIRE(got.size() == 3);
    for (uint32_t i = 0; i < 3; ++i) {
      CHECK(got[i].wr_id == i + 1);
      CHECK(got[i].status == IBV_WC_WR_FLUSH_ERR);
    }
    CHECK(got[1].opcode == IBV_WC_FETCH_ADD);
  }
  SECTION("strict: bad_state below RTS, nothing built") {
    QpConfig config = typed_config();
    config.early_post = EarlyPost::strict;
    Pair p = make_pair(mlx5_profile(), config);
    CHECK(p.a.qp->post_write(1, sge, 0, 0, 0) == Errc::bad_state);  // RESET
    to_rtr(p);
    CHECK(p.a.qp->post_read(1, sge, 0, 0, 0) == Errc::bad_state);  // IBA C10-29
    CHECK(p.a.qp->stage_message(1, sge, 0) == Errc::bad_state);
    CHECK(p.a.qp->core()->sq_pi == 0);
  }
}

TEST_CASE("typed calls report post_send's error codes and write nothing for a bad call",
          "[drv][typed][args]") {
  QpConfig config = typed_config();
  config.caps.max_send_wr = 8;
  Pair p = make_connected_pair(mlx5_profile(), config);
  detail::QpCore& core = *p.a.qp->core();
  const Sge good = p.a.sge(0, 8);
  auto unchanged = [&](auto&& call, Errc want) {
    const uint32_t pi = core.sq_pi;
    std::vector<uint8_t> before(core.sq.buf, core.sq.buf + size_t{core.sq.bb_count} * 64);
    CHECK(call() == want);
    CHECK(core.sq_pi == pi);
    CHECK(std::memcmp(before.data(), core.sq.buf, before.size()) == 0);
  };
  // Atomics: a misaligned remote address, a result buffer that is not 8 bytes (IBA 9.4.5).
  unchanged([&] { return p.a.qp->post_fetch_add(1, good, p.b.addr(4), p.b.rkey(), 1, 0); },
            Errc::invalid_argument);
  unchanged([&] {
    return p.a.qp->post_compare_swap(1, p.a.sge(0, 16), p.b.addr(8), p.b.rkey(), 1, 2, 0);
  }, Errc::invalid_argument);
  // Inline beyond the QP's max_inline_data.
  std::vector<uint8_t> big(core.limits.max_inline + 1, 0x5a);
  unchanged([&] {
    return p.a.qp->post_message_inline(1, big.data(), static_cast<uint32_t>(big.size()), 0);
  }, Errc::inline_too_large);
  unchanged([&] {
    return p.a.qp->post_write_inline(1, big.data(), static_cast<uint32_t>(big.size()),
                                     p.b.addr(0), p.b.rkey(), 0);
  }, Errc::inline_too_large);
  // A full queue: queue_full, not bad_state (invariant 5), and nothing partly written.
  uint32_t n = 0;
  while (p.a.qp->stage_write(100 + n, good, p.b.addr(0), p.b.rkey(), 0) == Errc::ok) ++n;
  CHECK(n == core.sq.bb_count);
  unchanged([&] { return p.a.qp->post_read(1, good, p.b.addr(0), p.b.rkey(), 0); },
            Errc::queue_full);
  unchanged([&] { return p.a.qp->post_message_inline(1, big.data(), 8, 0); }, Errc::queue_full);
  p.a.qp->ring_send();
  CHECK(poll_for(*p.fabric, *p.a.cq).empty());  // all unsignaled
}

TEST_CASE("a typed call with an empty SGE posts what post_send posts for it", "[drv][typed]") {
  // A data segment of length 0 would mean 2 GiB to an mlx5 device: post_send leaves it out,
  // and so does the typed call.
  Pair p = make_connected_pair(mlx5_profile(), typed_config());
  detail::QpCore& core = *p.a.qp->core();
  const Sge empty = p.a.sge(0, 0);
  const uint32_t pi = core.sq_pi;
  REQUIRE(p.a.qp->post_write(1, empty, p.b.addr(0), p.b.rkey(), send_flags::signaled) == Errc::ok);
  CHECK((core.sq.bb(pi)[7] & 0x3f) == 2);  // ctrl + raddr
  REQUIRE(p.a.qp->post_message(2, empty, send_flags::signaled) == Errc::ok);
  CHECK((core.sq.bb(pi + 1)[7] & 0x3f) == 1);  // ctrl only
  const Sge rsge = p.b.sge(0x2000, 64);
  RecvWr rwr;
  rwr.wr_id = 9;
  rwr.sg_list = &rsge;
  rwr.num_sge = 1;
  REQUIRE(p.b.qp->post_recv(rwr) == Errc::ok);
  const auto got = poll_n(*p.fabric, *p.a.cq, 2);
  REQUIRE(got.size() == 2);
  CHECK(got[0].status == IBV_WC_SUCCESS);
  CHECK(got[1].status == IBV_WC_SUCCESS);
  const auto rgot = poll_n(*p.fabric, *p.b.cq, 1);
  REQUIRE(rgot.size() == 1);
  CHECK(rgot[0].byte_len == 0);
}

TEST_CASE("typed calls ring as post_send does in every doorbell mode and threading model",
          "[drv][typed][doorbell]") {
  const doorbell::DoorbellMode mode = GENERATE(
      doorbell::DoorbellMode::db, doorbell::DoorbellMode::bf, doorbell::DoorbellMode::db_lock);
  const Threading threading =
      GENERATE(Threading::single, Threading::single_poster, Threading::thread_safe);
  INFO(doorbell::doorbell_mode_name(mode) << ", " << threading_name(threading));
  QpConfig config = typed_config();
  config.doorbell = mode;
  config.threading = threading;
  Pair p = make_connected_pair(mlx5_profile(), config);
  REQUIRE(p.a.qp->doorbell_mode() == mode);
  const Sge sge = p.a.sge(0, 8);
  const sim::DeviceCounters before = p.a.counters();
  // One WQE alone (BlueFlame in bf mode), an inline one of two blocks (BlueFlame: 128 bytes
  // fit the register), then a staged pair rung once (never BlueFlame: two WQEs). The device
  // takes each doorbell before the next (the register's two halves hold two at most).
  REQUIRE(p.a.qp->post_write(1, sge, p.b.addr(0), p.b.rkey(), send_flags::signaled) == Errc::ok);
  step(*p.fabric, 1);
  REQUIRE(p.a.qp->post_write_inline(2, p.a.bytes(0), 64, p.b.addr(64), p.b.rkey(),
                                    send_flags::signaled) == Errc::ok);
  step(*p.fabric, 1);
  REQUIRE(p.a.qp->stage_read(3, p.a.sge(0x100, 8), p.b.addr(0), p.b.rkey(),
                             send_flags::signaled) == Errc::ok);
  REQUIRE(p.a.qp->post_write(4, sge, p.b.addr(8), p.b.rkey(), send_flags::signaled) == Errc::ok);
  const auto got = poll_n(*p.fabric, *p.a.cq, 4);
  REQUIRE(got.size() == 4);
  for (uint32_t i = 0; i < 4; ++i) {
    CHECK(got[i].wr_id == i + 1);
    CHECK(got[i].status == IBV_WC_SUCCESS);
  }
  const sim::DeviceCounters after = p.a.counters();
  CHECK(after.uar_doorbells - before.uar_doorbells == 3);
  CHECK(after.bf_writes - before.bf_writes ==
        (mode == doorbell::DoorbellMode::bf ? 2u : 0u));
  CHECK(std::memcmp(p.b.bytes(64), p.a.bytes(0), 64) == 0);
}
