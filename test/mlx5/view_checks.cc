// SPDX-License-Identifier: BSD-3-Clause
// The checks on libmlx5's QP and CQ views that protect the fast path's assumptions.
#include <catch2/catch.hpp>

#include <string>

#include "mlx5_views.h"

using namespace rnicdv;
using namespace rnicdv::hw::mlx5;

namespace {

alignas(64) unsigned char g_ring[4096];
alignas(64) unsigned char g_uar[4096];
__be32 g_dbrec[2];

mlx5dv_qp good_qp() {
  mlx5dv_qp v{};
  v.dbrec = g_dbrec;
  v.sq.buf = g_ring + 1024;
  v.sq.wqe_cnt = 16;
  v.sq.stride = 64;
  v.rq.buf = g_ring;
  v.rq.wqe_cnt = 64;
  v.rq.stride = 16;
  v.bf.reg = g_uar + 0x800;
  v.bf.size = 256;
  return v;
}

mlx5dv_cq good_cq() {
  mlx5dv_cq v{};
  v.buf = g_ring;
  v.dbrec = g_dbrec;
  v.cqe_cnt = 64;
  v.cqe_size = 64;
  v.cq_uar = g_uar;
  v.cqn = 7;
  return v;
}

bool mentions(const Status& s, const std::string& text) {
  return s.message().find(text) != std::string::npos;
}

}  // namespace

TEST_CASE("a well-formed QP view passes, with or without BlueFlame or a receive queue", "[views]") {
  mlx5dv_qp v = good_qp();
  CHECK(check_qp_view(v, true, "qp 0x1c").is_ok());
  v.bf.size = 0;  // no BlueFlame: plain doorbells only
  CHECK(check_qp_view(v, true, "qp 0x1c").is_ok());
  v.rq = {};
  CHECK(check_qp_view(v, false, "qp 0x1c").is_ok());
}

TEST_CASE("a QP view without a send queue passes only when the QP was created without one",
          "[views]") {
  mlx5dv_qp v = good_qp();
  v.sq.wqe_cnt = 0;
  v.sq.stride = 1;  // libmlx5: 1 << wqe_shift, and the shift is 0 without a send queue
  CHECK(check_qp_view(v, true, "qp 0x1c", false).is_ok());
  v.sq.buf = nullptr;
  CHECK(check_qp_view(v, true, "qp 0x1c", false).is_ok());
  CHECK(mentions(check_qp_view(v, true, "qp"), "no send queue buffer"));
  v = good_qp();
  CHECK(
      mentions(check_qp_view(v, true, "qp 0x1c", false), "for a QP created without a send queue"));
}

TEST_CASE("QP views that break the fast path's assumptions are refused, naming the field",
          "[views]") {
  mlx5dv_qp v = good_qp();
  SECTION("SQ stride other than 64") {
    v.sq.stride = 128;
    Status s = check_qp_view(v, true, "qp 0x1c");
    CHECK(s.code() == Errc::unsupported);
    CHECK(s.message() == "qp 0x1c: libmlx5 view unusable: SQ stride 128 (expected 64)");
  }
  SECTION("SQ WQE count not a power of two") {
    v.sq.wqe_cnt = 96;
    CHECK(mentions(check_qp_view(v, true, "qp"), "SQ WQE count 96"));
  }
  SECTION("RQ WQE count not a power of two") {
    v.rq.wqe_cnt = 0;
    CHECK(mentions(check_qp_view(v, true, "qp"), "RQ WQE count 0"));
  }
  SECTION("RQ stride below one data segment") {
    v.rq.stride = 8;
    CHECK(mentions(check_qp_view(v, true, "qp"), "RQ stride 8"));
  }
  SECTION("no doorbell record") {
    v.dbrec = nullptr;
    CHECK(mentions(check_qp_view(v, true, "qp"), "no doorbell record"));
  }
  SECTION("no doorbell register") {
    v.bf.reg = nullptr;
    CHECK(mentions(check_qp_view(v, true, "qp"), "no doorbell register"));
  }
  SECTION("BlueFlame size not a multiple of 64") {
    v.bf.size = 100;
    CHECK(mentions(check_qp_view(v, true, "qp"), "BlueFlame size 100"));
  }
  SECTION("no send queue buffer") {
    v.sq.buf = nullptr;
    CHECK(mentions(check_qp_view(v, true, "qp"), "no send queue buffer"));
  }
}

TEST_CASE("a well-formed CQ view passes, for 64- and 128-byte CQEs", "[views]") {
  mlx5dv_cq v = good_cq();
  CHECK(check_cq_view(v, "cq 0x7").is_ok());
  v.cqe_size = 128;
  CHECK(check_cq_view(v, "cq 0x7").is_ok());
}

TEST_CASE("CQ views that break the poll loop's assumptions are refused", "[views]") {
  mlx5dv_cq v = good_cq();
  SECTION("CQE count not a power of two") {
    v.cqe_cnt = 100;
    Status s = check_cq_view(v, "cq 0x7");
    CHECK(s.code() == Errc::unsupported);
    CHECK(s.message() == "cq 0x7: libmlx5 view unusable: CQE count 100 is not a power of two");
  }
  SECTION("unknown CQE size") {
    v.cqe_size = 32;
    CHECK(mentions(check_cq_view(v, "cq"), "CQE size 32"));
  }
  SECTION("no buffer") {
    v.buf = nullptr;
    CHECK(mentions(check_cq_view(v, "cq"), "no CQE buffer"));
  }
  SECTION("no doorbell record") {
    v.dbrec = nullptr;
    CHECK(mentions(check_cq_view(v, "cq"), "no doorbell record"));
  }
}
