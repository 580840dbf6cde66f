// SPDX-License-Identifier: BSD-3-Clause
// Every send opcode end to end between two simulated HCAs, on both device profiles, with
// completions checked field by field on both sides.
#include <catch2/catch.hpp>

#include <cstring>

#include "sim_env.h"

using namespace rnicdv;
using namespace rnicdv::test;

namespace {

Completion one_completion(Pair& p, Node& n) {
  auto got = poll_n(*p.fabric, *n.cq, 1);
  REQUIRE(got.size() == 1);
  return got[0];
}

void check_send_completion(const Completion& c, uint64_t wr_id, ibv_wc_opcode opcode, uint32_t qpn,
                           uint32_t byte_len = 0) {
  CHECK(c.wr_id == wr_id);
  CHECK(c.status == IBV_WC_SUCCESS);
  CHECK(c.opcode == opcode);
  CHECK(c.qp_num == qpn);
  CHECK(c.byte_len == byte_len);
  CHECK((c.flags & wc_flags::with_imm) == 0);
}

}  // namespace

TEST_CASE("every opcode completes end to end with exact completion fields", "[drv][opcodes]") {
  const hw::DeviceProfile profile = GENERATE(mlx5_profile(), scanning_profile());
  INFO("profile " << profile_label(profile));
  Pair p = make_connected_pair(profile);
  Node& a = p.a;
  Node& b = p.b;

  SECTION("SEND into a posted receive") {
    fill(a.bytes(kSrc), 100, 1);
    post_receive(b, 500, kDst, 256);
    const Sge sge = a.sge(kSrc, 100);
    REQUIRE(a.qp->post_send(send_wr(1, &sge, 1)) == Errc::ok);
    check_send_completion(one_completion(p, a), 1, IBV_WC_SEND, a.qp->qpn());
    const Completion r = one_completion(p, b);
    CHECK(r.wr_id == 500);
    CHECK(r.status == IBV_WC_SUCCESS);
    CHECK(r.opcode == IBV_WC_RECV);
    CHECK(r.byte_len == 100);
    CHECK(r.qp_num == b.qp->qpn());
    CHECK(r.src_qp == a.qp->qpn());
    CHECK((r.flags & wc_flags::with_imm) == 0);
    CHECK(std::memcmp(b.bytes(kDst), a.bytes(kSrc), 100) == 0);
  }

  SECTION("SEND_IMM carries the immediate to the receiver") {
    fill(a.bytes(kSrc), 64, 2);
    post_receive(b, 501, kDst, 256);
    const Sge sge = a.sge(kSrc, 64);
    SendWr wr = send_wr(2, &sge, 1);
    wr.opcode = WrOpcode::send_imm;
    wr.imm_data = 0xdeadbeef;
    REQUIRE(a.qp->post_send(wr) == Errc::ok);
    check_send_completion(one_completion(p, a), 2, IBV_WC_SEND, a.qp->qpn());
    const Completion r = one_completion(p, b);
    CHECK(r.wr_id == 501);
    CHECK(r.status == IBV_WC_SUCCESS);
    CHECK(r.opcode == IBV_WC_RECV);
    CHECK(r.byte_len == 64);
    CHECK((r.flags & wc_flags::with_imm) != 0);
    CHECK(r.imm_data == 0xdeadbeef);
    CHECK(r.src_qp == a.qp->qpn());
  }

  SECTION("RDMA WRITE places the data without a receive") {
    fill(a.bytes(kSrc), 3000, 3);
    const Sge sge = a.sge(kSrc, 3000);  // three packets at MTU 1024
    REQUIRE(a.qp->post_send(write_wr(3, &sge, 1, b.addr(kDst), b.rkey())) == Errc::ok);
    check_send_completion(one_completion(p, a), 3, IBV_WC_RDMA_WRITE, a.qp->qpn());
    CHECK(std::memcmp(b.bytes(kDst), a.bytes(kSrc), 3000) == 0);
    CHECK(poll_for(*p.fabric, *b.cq).empty());
  }

  SECTION("RDMA WRITE_IMM places the data and consumes a receive") {
    fill(a.bytes(kSrc), 200, 4);
    post_receive(b, 502, kDst + 0x800, 16);
    const Sge sge = a.sge(kSrc, 200);
    SendWr wr = write_wr(4, &sge, 1, b.addr(kDst), b.rkey());
    wr.opcode = WrOpcode::rdma_write_imm;
    wr.imm_data = 0x01020304;
    REQUIRE(a.qp->post_send(wr) == Errc::ok);
    check_send_completion(one_completion(p, a), 4, IBV_WC_RDMA_WRITE, a.qp->qpn());
    const Completion r = one_completion(p, b);
    CHECK(r.wr_id == 502);
    CHECK(r.status == IBV_WC_SUCCESS);
    CHECK(r.opcode == IBV_WC_RECV_RDMA_WITH_IMM);
    CHECK((r.flags & wc_flags::with_imm) != 0);
    CHECK(r.imm_data == 0x01020304);
    CHECK(r.byte_len == 200);
    CHECK(std::memcmp(b.bytes(kDst), a.bytes(kSrc), 200) == 0);
  }

  SECTION("RDMA READ fetches remote data and reports its length") {
    fill(b.bytes(kDst), 2500, 5);
    const Sge sge = a.sge(kLocal, 2500);
    SendWr wr = write_wr(5, &sge, 1, b.addr(kDst), b.rkey());
    wr.opcode = WrOpcode::rdma_read;
    REQUIRE(a.qp->post_send(wr) == Errc::ok);
    check_send_completion(one_completion(p, a), 5, IBV_WC_RDMA_READ, a.qp->qpn(), 2500);
    CHECK(std::memcmp(a.bytes(kLocal), b.bytes(kDst), 2500) == 0);
  }

  SECTION("atomic compare-and-swap then fetch-and-add") {
    uint64_t v = 5;
    std::memcpy(b.bytes(kAtomic), &v, 8);
    const Sge sge = a.sge(kLocal, 8);
    SendWr cs = write_wr(6, &sge, 1, b.addr(kAtomic), b.rkey());
    cs.opcode = WrOpcode::atomic_cmp_swap;
    cs.compare_add = 5;
    cs.swap = 9;
    REQUIRE(a.qp->post_send(cs) == Errc::ok);
    check_send_completion(one_completion(p, a), 6, IBV_WC_COMP_SWAP, a.qp->qpn(), 8);
    uint64_t original = 0;
    std::memcpy(&original, a.bytes(kLocal), 8);
    CHECK(original == 5);
    std::memcpy(&v, b.bytes(kAtomic), 8);
    CHECK(v == 9);

    SendWr fa = write_wr(7, &sge, 1, b.addr(kAtomic), b.rkey());
    fa.opcode = WrOpcode::atomic_fetch_add;
    fa.compare_add = 3;
    REQUIRE(a.qp->post_send(fa) == Errc::ok);
    check_send_completion(one_completion(p, a), 7, IBV_WC_FETCH_ADD, a.qp->qpn(), 8);
    std::memcpy(&original, a.bytes(kLocal), 8);
    CHECK(original == 9);
    std::memcpy(&v, b.bytes(kAtomic), 8);
    CHECK(v == 12);
  }

  SECTION("inline SEND copies the payload into the WQE") {
    post_receive(b, 503, kDst, 64);
    uint8_t payload[48];
    fill(payload, sizeof payload, 6);
    Sge sge{reinterpret_cast<uint64_t>(payload), sizeof payload, 0};
    REQUIRE(a.qp->post_send(send_wr(8, &sge, 1, send_flags::signaled | send_flags::inline_data)) ==
            Errc::ok);
    std::memset(payload, 0, sizeof payload);  // the WQE owns its copy now
    check_send_completion(one_completion(p, a), 8, IBV_WC_SEND, a.qp->qpn());
    const Completion r = one_completion(p, b);
    CHECK(r.wr_id == 503);
    CHECK(r.byte_len == 48);
    uint8_t expect[48];
    fill(expect, sizeof expect, 6);
    CHECK(std::memcmp(b.bytes(kDst), expect, 48) == 0);
  }

  SECTION("multi-SGE SEND and WRITE gather in order") {
    fill(a.bytes(kSrc), 0x300, 7);
    const Sge sges[3] = {a.sge(kSrc + 0x200, 50), a.sge(kSrc, 70), a.sge(kSrc + 0x100, 30)};
    std::vector<uint8_t> expect;
    for (const Sge& s : sges) {
      const uint8_t* from = reinterpret_cast<const uint8_t*>(s.addr);
      expect.insert(expect.end(), from, from + s.length);
    }
    post_receive(b, 504, kDst, 256);
    REQUIRE(a.qp->post_send(send_wr(9, sges, 3)) == Errc::ok);
    check_send_completion(one_completion(p, a), 9, IBV_WC_SEND, a.qp->qpn());
    const Completion r = one_completion(p, b);
    CHECK(r.byte_len == 150);
    CHECK(std::memcmp(b.bytes(kDst), expect.data(), 150) == 0);

    REQUIRE(a.qp->post_send(write_wr(10, sges, 3, b.addr(kDst + 0x400), b.rkey())) == Errc::ok);
    check_send_completion(one_completion(p, a), 10, IBV_WC_RDMA_WRITE, a.qp->qpn());
    CHECK(std::memcmp(b.bytes(kDst + 0x400), expect.data(), 150) == 0);
  }

  SECTION("unsignaled WQEs are retired by the next signaled one") {
    const Sge sge = a.sge(kSrc, 8);
    for (uint64_t i = 0; i < 5; ++i)
      REQUIRE(a.qp->post_send(write_wr(100 + i, &sge, 1, b.addr(kDst + 8 * i), b.rkey(), 0)) ==
              Errc::ok);
    REQUIRE(a.qp->post_send(write_wr(105, &sge, 1, b.addr(kDst + 40), b.rkey())) == Errc::ok);
    const auto got = poll_n(*p.fabric, *a.cq, 1);
    REQUIRE(got.size() == 1);
    CHECK(got[0].wr_id == 105);
    CHECK(poll_for(*p.fabric, *a.cq).empty());
    // The whole SQ is free again: a full ring of WQEs fits.
    const uint32_t depth = a.qp->caps().max_send_wr;
    for (uint32_t i = 0; i < depth; ++i)
      REQUIRE(a.qp->post_send(write_wr(200 + i, &sge, 1, b.addr(kDst), b.rkey(),
                                       i + 1 == depth ? send_flags::signaled : send_flags::none)) == Errc::ok);
    const auto last = poll_n(*p.fabric, *a.cq, 1);
    REQUIRE(last.size() == 1);
    CHECK(last[0].wr_id == 200 + depth - 1);
  }
}
