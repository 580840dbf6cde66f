// SPDX-License-Identifier: BSD-3-Clause
// CQE contents -> Completion, as rdma-core's cq.c reports them: opcodes, byte counts,
// immediates, QPNs, WQE counters, and every error syndrome (mlx5_handle_error_cqe).
#include <catch2/catch.hpp>
#include <endian.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>

#include "rnicdv/wqe/cqe.h"
#include "wqe_test_util.h"

using namespace rnicdv;

namespace {

struct Cq {
  Cq() : mem(8 * 64), ring{mem.data(), 8, 64} { wqe::init_cq_ring(ring); }
  Completion complete(const wqe::CqeInit& init) {
    wqe::write_cqe(ring, pi, init);
    const mlx5_cqe64* cqe = wqe::cqe_for_sw(ring, pi);
    REQUIRE(cqe != nullptr);
    ++pi;
    Completion wc;
    std::memset(&wc, 0xee, sizeof wc);
    wqe::cqe_to_completion(cqe, &wc);
    REQUIRE(wc.reserved[0] == 0);
    REQUIRE(wc.reserved[1] == 0);
    return wc;
  }
  test::AlignedBuffer mem;
  wqe::CqRing ring;
  uint32_t pi = 0;
};

wqe::CqeInit req(uint8_t send_opcode, uint32_t byte_cnt = 0) {
  wqe::CqeInit init;
  init.cqe_opcode = MLX5_CQE_REQ;
  init.send_opcode = send_opcode;
  init.qpn = 0x1c;
  init.wqe_counter = 0xbeef;
  init.byte_cnt = byte_cnt;
  return init;
}

wqe::CqeInit resp(uint8_t cqe_opcode) {
  wqe::CqeInit init;
  init.cqe_opcode = cqe_opcode;
  init.qpn = 0x00abcd;
  init.src_qpn = 0x123456;
  init.byte_cnt = 4096;
  init.imm = 0xcafef00d;
  init.wqe_counter = 7;
  return init;
}

}  // namespace

TEST_CASE("requester completions map the send WQE opcode to the verbs opcode", "[wqe]") {
  Cq cq;
  const std::pair<uint8_t, ibv_wc_opcode> cases[] = {
      {MLX5_OPCODE_SEND, IBV_WC_SEND},
      {MLX5_OPCODE_SEND_IMM, IBV_WC_SEND},
      {MLX5_OPCODE_RDMA_WRITE, IBV_WC_RDMA_WRITE},
      {MLX5_OPCODE_RDMA_WRITE_IMM, IBV_WC_RDMA_WRITE},
      {MLX5_OPCODE_RDMA_READ, IBV_WC_RDMA_READ},
      {MLX5_OPCODE_ATOMIC_CS, IBV_WC_COMP_SWAP},
      {MLX5_OPCODE_ATOMIC_FA, IBV_WC_FETCH_ADD},
      {MLX5_OPCODE_NOP, IBV_WC_DRIVER1}};
  for (const auto& [mlx5_opcode, wc_opcode] : cases) {
    INFO("send opcode " << int(mlx5_opcode));
    const Completion wc = cq.complete(req(mlx5_opcode, 1234));
    REQUIRE(wc.status == IBV_WC_SUCCESS);
    REQUIRE(wc.opcode == wc_opcode);
    REQUIRE(wqe::send_opcode_to_wc_opcode(mlx5_opcode) == wc_opcode);
    REQUIRE(wc.qp_num == 0x1c);
    REQUIRE(wc.wqe_counter == 0xbeef);
    REQUIRE(wc.flags == 0);
    REQUIRE(wc.vendor_err == 0);
    // libmlx5 handle_good_req: READ reports the CQE's byte count, atomics 8, others nothing.
    const uint32_t expected_len =
        mlx5_opcode == MLX5_OPCODE_RDMA_READ                                             ? 1234
        : (mlx5_opcode == MLX5_OPCODE_ATOMIC_CS || mlx5_opcode == MLX5_OPCODE_ATOMIC_FA) ? 8
                                                                                         : 0;
    REQUIRE(wc.byte_len == expected_len);
  }
}

TEST_CASE("responder completions report opcode, length, source QPN and immediate", "[wqe]") {
  Cq cq;
  SECTION("RESP_SEND is a RECV without immediate") {
    const Completion wc = cq.complete(resp(MLX5_CQE_RESP_SEND));
    REQUIRE(wc.status == IBV_WC_SUCCESS);
    REQUIRE(wc.opcode == IBV_WC_RECV);
    REQUIRE(wc.flags == 0);
    REQUIRE(wc.imm_data == 0);
    REQUIRE(wc.byte_len == 4096);
    REQUIRE(wc.src_qp == 0x123456);
    REQUIRE(wc.qp_num == 0x00abcd);
    REQUIRE(wc.wqe_counter == 7);
  }
  SECTION("RESP_SEND_IMM is a RECV with the immediate in host order") {
    const Completion wc = cq.complete(resp(MLX5_CQE_RESP_SEND_IMM));
    REQUIRE(wc.opcode == IBV_WC_RECV);
    REQUIRE(wc.flags == wc_flags::with_imm);
    REQUIRE(wc.imm_data == 0xcafef00d);
    REQUIRE(wc.byte_len == 4096);
  }
  SECTION("RESP_WR_IMM is RECV_RDMA_WITH_IMM") {
    const Completion wc = cq.complete(resp(MLX5_CQE_RESP_WR_IMM));
    REQUIRE(wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM);
    REQUIRE(wc.flags == wc_flags::with_imm);
    REQUIRE(wc.imm_data == 0xcafef00d);
  }
  SECTION("RESP_SEND_INV is a RECV carrying the invalidated rkey") {
    const Completion wc = cq.complete(resp(MLX5_CQE_RESP_SEND_INV));
    REQUIRE(wc.opcode == IBV_WC_RECV);
    REQUIRE(wc.flags == wc_flags::with_inv);
    REQUIRE(wc.imm_data == 0xcafef00d);
  }
  SECTION("the solicited-event bit is reported") {
    wqe::CqeInit init = resp(MLX5_CQE_RESP_SEND_IMM);
    init.solicited = true;
    const Completion wc = cq.complete(init);
    REQUIRE(wc.flags == (wc_flags::with_imm | wc_flags::solicited));
  }
}

TEST_CASE("QPNs keep 24 bits; the send opcode byte does not leak into the QPN", "[wqe]") {
  Cq cq;
  wqe::CqeInit init = req(MLX5_OPCODE_RDMA_WRITE);
  init.qpn = 0xffffffff;
  REQUIRE(cq.complete(init).qp_num == 0xffffff);
  init = resp(MLX5_CQE_RESP_SEND);
  init.src_qpn = 0xff000001;
  REQUIRE(cq.complete(init).src_qp == 0x000001);
}

TEST_CASE("every mlx5 error syndrome maps to rdma-core's ibv_wc_status", "[wqe]") {
  // rdma-core providers/mlx5/cq.c mlx5_handle_error_cqe.
  const std::map<uint8_t, ibv_wc_status> table = {
      {MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR, IBV_WC_LOC_LEN_ERR},
      {MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, IBV_WC_LOC_QP_OP_ERR},
      {MLX5_CQE_SYNDROME_LOCAL_PROT_ERR, IBV_WC_LOC_PROT_ERR},
      {MLX5_CQE_SYNDROME_WR_FLUSH_ERR, IBV_WC_WR_FLUSH_ERR},
      {MLX5_CQE_SYNDROME_MW_BIND_ERR, IBV_WC_MW_BIND_ERR},
      {MLX5_CQE_SYNDROME_BAD_RESP_ERR, IBV_WC_BAD_RESP_ERR},
      {MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR, IBV_WC_LOC_ACCESS_ERR},
      {MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR, IBV_WC_REM_INV_REQ_ERR},
      {MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR, IBV_WC_REM_ACCESS_ERR},
      {MLX5_CQE_SYNDROME_REMOTE_OP_ERR, IBV_WC_REM_OP_ERR},
      {MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR, IBV_WC_RETRY_EXC_ERR},
      {MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR, IBV_WC_RNR_RETRY_EXC_ERR},
      {MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR, IBV_WC_REM_ABORT_ERR},
  };
  REQUIRE(table.size() == 13);
  Cq cq;
  for (unsigned s = 0; s < 256; ++s) {
    const auto syndrome = static_cast<uint8_t>(s);
    const auto known = table.find(syndrome);
    const ibv_wc_status expected = known != table.end() ? known->second : IBV_WC_GENERAL_ERR;
    INFO("syndrome " << s);
    REQUIRE(wqe::syndrome_to_wc_status(syndrome) == expected);
    REQUIRE((std::strcmp(wqe::cqe_syndrome_name(syndrome), "unknown") != 0) ==
            (known != table.end()));

    // Through a written error CQE as well, for both directions.
    for (uint8_t opcode : {uint8_t{MLX5_CQE_REQ_ERR}, uint8_t{MLX5_CQE_RESP_ERR}}) {
      wqe::CqeInit init;
      init.cqe_opcode = opcode;
      init.send_opcode = MLX5_OPCODE_RDMA_READ;
      init.syndrome = syndrome;
      init.vendor_syndrome = 0x93;
      init.qpn = 0x654321;
      init.wqe_counter = 0x1234;
      const Completion wc = cq.complete(init);
      REQUIRE(wc.status == expected);
      REQUIRE(wc.vendor_err == 0x93);
      REQUIRE(wc.qp_num == 0x654321);
      REQUIRE(wc.wqe_counter == 0x1234);
      REQUIRE(wc.opcode == (opcode == MLX5_CQE_REQ_ERR ? IBV_WC_RDMA_READ : IBV_WC_RECV));
    }
  }
}

TEST_CASE("error CQEs use the mlx5_err_cqe layout", "[wqe]") {
  test::AlignedBuffer mem(4 * 64, 0x77);
  const wqe::CqRing ring{mem.data(), 4, 64};
  wqe::CqeInit init;
  init.cqe_opcode = MLX5_CQE_REQ_ERR;
  init.send_opcode = MLX5_OPCODE_SEND;
  init.syndrome = MLX5_CQE_SYNDROME_WR_FLUSH_ERR;
  init.vendor_syndrome = 0x79;
  init.qpn = 0x000102;
  init.wqe_counter = 0x0304;
  init.srqn_uidx = 0x000005;
  wqe::write_cqe(ring, 4, init);  // lap 1: owner bit 1
  std::vector<uint8_t> expected(64, 0);
  expected[35] = 0x05;  // srqn
  expected[54] = 0x79;  // vendor_err_synd
  expected[55] = 0x05;  // syndrome
  expected[56] = 0x0a, expected[57] = 0x00, expected[58] = 0x01, expected[59] = 0x02;  // op|qpn
  expected[60] = 0x03, expected[61] = 0x04;    // wqe_counter
  expected[63] = (MLX5_CQE_REQ_ERR << 4) | 1;  // op_own
  REQUIRE(std::vector<uint8_t>(mem.data(), mem.data() + 64) == expected);
  REQUIRE(test::all_bytes_are(mem.data() + 64, 192, 0x77));  // other entries untouched

  wqe::CqeFields fields;
  wqe::decode_cqe(ring.cqe(0), &fields);
  REQUIRE(fields.cqe_opcode == MLX5_CQE_REQ_ERR);
  REQUIRE(fields.send_opcode == MLX5_OPCODE_SEND);
  REQUIRE(fields.syndrome == MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
  REQUIRE(fields.vendor_syndrome == 0x79);
  REQUIRE(fields.qpn == 0x000102);
  REQUIRE(fields.wqe_counter == 0x0304);
}

TEST_CASE("good CQEs put every field at its mlx5_cqe64 offset", "[wqe]") {
  test::AlignedBuffer mem(2 * 64, 0x77);
  const wqe::CqRing ring{mem.data(), 2, 64};
  wqe::CqeInit init;
  init.cqe_opcode = MLX5_CQE_RESP_WR_IMM;
  init.qpn = 0x0a0b0c;
  init.src_qpn = 0x010203;
  init.byte_cnt = 0x11223344;
  init.imm = 0x55667788;
  init.srqn_uidx = 0x0d0e0f;
  init.wqe_counter = 0x99aa;
  init.solicited = true;
  wqe::write_cqe(ring, 0, init);
  std::vector<uint8_t> expected(64, 0);
  expected[25] = 0x01, expected[26] = 0x02, expected[27] = 0x03;                       // flags_rqpn
  expected[33] = 0x0d, expected[34] = 0x0e, expected[35] = 0x0f;                       // srqn_uidx
  expected[36] = 0x55, expected[37] = 0x66, expected[38] = 0x77, expected[39] = 0x88;  // imm
  expected[44] = 0x11, expected[45] = 0x22, expected[46] = 0x33, expected[47] = 0x44;  // bytes
  expected[57] = 0x0a, expected[58] = 0x0b, expected[59] = 0x0c;  // sop_drop_qpn
  expected[60] = 0x99, expected[61] = 0xaa;                       // wqe_counter
  expected[63] = (MLX5_CQE_RESP_WR_IMM << 4) | 0x2 | 0;           // opcode, SE, owner 0
  REQUIRE(std::vector<uint8_t>(mem.data(), mem.data() + 64) == expected);

  wqe::CqeFields fields;
  wqe::decode_cqe(ring.cqe(0), &fields);
  REQUIRE(fields.cqe_opcode == MLX5_CQE_RESP_WR_IMM);
  REQUIRE(fields.qpn == 0x0a0b0c);
  REQUIRE(fields.src_qpn == 0x010203);
  REQUIRE(fields.byte_cnt == 0x11223344);
  REQUIRE(fields.imm == 0x55667788);
  REQUIRE(fields.wqe_counter == 0x99aa);
  REQUIRE(fields.solicited);
  REQUIRE(fields.syndrome == 0);
  REQUIRE_FALSE(fields.grh);
  REQUIRE(fields.roce_pkt_type == 0);
}

TEST_CASE("a UD receive's CQE carries the GRH flag and the RoCE packet type in flags_rqpn, "
          "decoded as libmlx5 reads them",
          "[wqe]") {
  Cq cq;
  wqe::CqeInit init = resp(MLX5_CQE_RESP_SEND);
  init.grh = true;
  init.roce_pkt_type = 0xa;  // a UDP header, then IPv4: RoCE v2 over IPv4
  const uint32_t pi = cq.pi;
  const Completion wc = cq.complete(init);
  // flags_rqpn: bit 28 the GRH, bits 27:24 the packet type, then the source QPN.
  const auto* bytes = reinterpret_cast<const uint8_t*>(cq.ring.cqe(pi));
  REQUIRE(bytes[offsetof(mlx5_cqe64, flags_rqpn)] == 0x1a);
  REQUIRE((wc.flags & wc_flags::grh) != 0);
  REQUIRE(wc.src_qp == 0x123456);
  wqe::CqeFields f;
  wqe::decode_cqe(cq.ring.cqe(pi), &f);
  REQUIRE(f.grh);
  REQUIRE(f.roce_pkt_type == 0xa);
  REQUIRE(f.src_qpn == 0x123456);

  // Either L3 bit says a header leads the data (libmlx5: (flags_rqpn >> 28) & 3).
  init.grh = false;
  const Completion plain = cq.complete(init);
  REQUIRE((plain.flags & wc_flags::grh) == 0);
  mlx5_cqe64* cqe = cq.ring.cqe(pi + 1);
  cqe->flags_rqpn = htobe32(be32toh(cqe->flags_rqpn) | (2u << 28));
  Completion ipv4;
  wqe::cqe_to_completion(cqe, &ipv4);
  REQUIRE((ipv4.flags & wc_flags::grh) != 0);
  wqe::decode_cqe(cqe, &f);
  REQUIRE(f.grh);
}

TEST_CASE("CQE opcodes a QP never completes with become GENERAL_ERR", "[wqe]") {
  Cq cq;
  for (uint8_t opcode : {uint8_t{MLX5_CQE_RESIZE_CQ}, uint8_t{MLX5_CQE_NO_PACKET},
                         uint8_t{MLX5_CQE_SIG_ERR}, uint8_t{7}}) {
    wqe::CqeInit init;
    init.cqe_opcode = opcode;
    REQUIRE(cq.complete(init).status == IBV_WC_GENERAL_ERR);
  }
}

TEST_CASE("CQE opcode and syndrome names", "[wqe]") {
  REQUIRE(std::string(wqe::cqe_opcode_name(MLX5_CQE_RESP_SEND_IMM)) == "RESP_SEND_IMM");
  REQUIRE(std::string(wqe::cqe_opcode_name(MLX5_CQE_REQ_ERR)) == "REQ_ERR");
  REQUIRE(std::string(wqe::cqe_opcode_name(9)) == "unknown");
  REQUIRE(std::string(wqe::cqe_syndrome_name(MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR)) ==
          "REMOTE_ABORTED_ERR");
  REQUIRE(std::string(wqe::send_opcode_name(MLX5_OPCODE_ATOMIC_FA)) == "ATOMIC_FA");
  REQUIRE(std::string(wqe::send_opcode_name(0x7e)) == "unknown");
}

// The poll loop decodes a good requester CQE from the words it has already read
// (wqe::good_send_to_completion, wqe::decode_good_send): the same fields as
// cqe_to_completion, for every send opcode the top byte of sop_drop_qpn can hold.
TEST_CASE("a good requester CQE decoded on the poll's short path reads as cqe_to_completion reads it",
          "[wqe][cqe]") {
  Cq cq;
  for (uint32_t op = 0; op < 256; ++op) {
    wqe::CqeInit init = req(static_cast<uint8_t>(op), 0x1234);
    wqe::write_cqe(cq.ring, cq.pi, init);
    const mlx5_cqe64* cqe = wqe::cqe_for_sw(cq.ring, cq.pi);
    REQUIRE(cqe != nullptr);
    ++cq.pi;
    Completion full, fast;
    std::memset(&full, 0xee, sizeof full);
    std::memset(&fast, 0x55, sizeof fast);
    wqe::cqe_to_completion(cqe, &full);
    const uint32_t sop_drop_qpn = be32toh(cqe->sop_drop_qpn);
    wqe::good_send_to_completion(cqe, sop_drop_qpn, &fast);
    full.wr_id = fast.wr_id = 0;  // neither decodes it
    INFO("send opcode " << op);
    CHECK(std::memcmp(&full, &fast, sizeof full) == 0);
    uint8_t wc_opcode = 0xff;
    uint32_t byte_len = 0xffffffff;
    wqe::decode_good_send(cqe, sop_drop_qpn, &wc_opcode, &byte_len);
    CHECK(wc_opcode == full.opcode);
    CHECK(byte_len == full.byte_len);
  }
}
