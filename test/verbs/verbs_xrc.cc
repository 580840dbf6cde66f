// SPDX-License-Identifier: BSD-3-Clause
// XRC through the unmodified libibverbs and libmlx5 (the uverbs shim preloaded): XRC domains,
// on a file or of their own; XRC SRQs completing on CQs of their own; XRC_SEND and XRC_RECV
// QPs; each SEND, posted by ibv_post_send or the ibv_wr_* API, naming its SRQ by number; and
// the kernel's answers to OPEN_XRCD and CLOSE_XRCD that programs rely on.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <infiniband/verbs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "verbs_fixtures.h"

using namespace verbs_test;

namespace {

// A temporary file for ibv_open_xrcd, removed with the object.
struct TempFile {
  std::string path;
  int fd = -1;
  TempFile() {
    char name[] = "/tmp/rnicdv-xrcd-XXXXXX";
    fd = ::mkstemp(name);
    REQUIRE(fd >= 0);
    path = name;
  }
  ~TempFile() {
    ::close(fd);
    ::unlink(path.c_str());
  }
};

ibv_xrcd* open_xrcd(ibv_context* ctx, int fd, int oflags) {
  ibv_xrcd_init_attr a{};
  a.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
  a.fd = fd;
  a.oflags = oflags;
  return ibv_open_xrcd(ctx, &a);
}

ibv_srq* xrc_srq(Device& d, ibv_xrcd* xrcd, ibv_cq* cq, uint32_t max_wr) {
  ibv_srq_init_attr_ex a{};
  a.attr.max_wr = max_wr;
  a.attr.max_sge = 1;
  a.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ |
                IBV_SRQ_INIT_ATTR_PD;
  a.srq_type = IBV_SRQT_XRC;
  a.xrcd = xrcd;
  a.cq = cq;
  a.pd = d.pd;
  return ibv_create_srq_ex(d.ctx, &a);
}

ibv_qp* xrc_qp(Device& d, ibv_qp_type type, ibv_xrcd* xrcd, ibv_cq* send_cq) {
  ibv_qp_init_attr_ex a{};
  a.qp_type = type;
  if (type == IBV_QPT_XRC_RECV) {
    a.comp_mask = IBV_QP_INIT_ATTR_XRCD;
    a.xrcd = xrcd;
  } else {
    a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    a.pd = d.pd;
    a.send_cq = send_cq;
    a.cap.max_send_wr = 16;
    a.cap.max_send_sge = 1;
    a.send_ops_flags = IBV_QP_EX_WITH_SEND;
  }
  return ibv_create_qp_ex(d.ctx, &a);
}

// Both XRC QPs through INIT and RTR, the initiator to RTS, with RC's whole attribute set on
// each (as perftest gives them): the shim drops what each type has not, as the kernel does.
void connect(ibv_qp* ini, ibv_context* ini_ctx, ibv_qp* tgt, ibv_context* tgt_ctx) {
  rc_to_rtr(tgt, ini->qp_num, port_gid(ini_ctx));
  rc_to_rtr(ini, tgt->qp_num, port_gid(tgt_ctx));
  rc_to_rts(ini);
  rc_to_rts(tgt);  // a target may go to RTS too (ibv_xsrq_pingpong does)
}

// One signaled SEND of `len` bytes at the start of `src` to XRC SRQ `srqn`, by ibv_post_send.
void send_to_srq(ibv_qp* ini, const Buffer& src, uint32_t len, uint64_t wr_id, uint32_t srqn) {
  ibv_sge sge{src.addr(), len, src.mr->lkey};
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.qp_type.xrc.remote_srqn = srqn;
  ibv_send_wr* bad = nullptr;
  REQUIRE(ibv_post_send(ini, &wr, &bad) == 0);
}

void post_srq(ibv_srq* srq, const Buffer& b, size_t off, uint32_t len, uint64_t wr_id) {
  ibv_sge sge;
  ibv_recv_wr wr;
  ibv_recv_wr* bad = nullptr;
  REQUIRE(ibv_post_srq_recv(srq, one_recv(sge, wr, b, off, len, wr_id), &bad) == 0);
}

}  // namespace

TEST_CASE("an XRC initiator reaches two XRC SRQs through one target; each receive completes on "
          "its SRQ's CQ, naming the target") {
  Device da("rnicsim0"), db("rnicsim1");
  ibv_cq* acq = ibv_create_cq(da.ctx, 16, nullptr, nullptr, 0);
  ibv_cq* bcq0 = ibv_create_cq(db.ctx, 16, nullptr, nullptr, 0);
  ibv_cq* bcq1 = ibv_create_cq(db.ctx, 16, nullptr, nullptr, 0);
  REQUIRE((acq && bcq0 && bcq1));
  ibv_xrcd* xrcd = open_xrcd(db.ctx, -1, O_CREAT);
  REQUIRE(xrcd);
  ibv_srq* s0 = xrc_srq(db, xrcd, bcq0, 8);
  ibv_srq* s1 = xrc_srq(db, xrcd, bcq1, 8);
  REQUIRE((s0 && s1));
  uint32_t n0 = 0, n1 = 0;
  REQUIRE(ibv_get_srq_num(s0, &n0) == 0);
  REQUIRE(ibv_get_srq_num(s1, &n1) == 0);
  CHECK(n0 != n1);
  ibv_qp* ini = xrc_qp(da, IBV_QPT_XRC_SEND, nullptr, acq);
  ibv_qp* tgt = xrc_qp(db, IBV_QPT_XRC_RECV, xrcd, nullptr);
  REQUIRE((ini && tgt));
  connect(ini, da.ctx, tgt, db.ctx);
  Buffer src(da.pd, 4096, kAllAccess), dst(db.pd, 8192, kAllAccess);
  for (size_t i = 0; i < src.bytes.size(); ++i) src.bytes[i] = static_cast<uint8_t>(i * 7);
  post_srq(s0, dst, 0, 4096, 10);
  post_srq(s1, dst, 4096, 4096, 11);

  // To SRQ 1 with ibv_post_send, 3000 bytes (three packets at MTU 1024).
  send_to_srq(ini, src, 3000, 1, n1);
  CHECK(wait_one(acq).status == IBV_WC_SUCCESS);
  // To SRQ 0 with the ibv_wr_* API.
  ibv_qp_ex* x = ibv_qp_to_qp_ex(ini);
  ibv_wr_start(x);
  x->wr_id = 2;
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send(x);
  ibv_wr_set_xrc_srqn(x, n0);
  ibv_wr_set_sge(x, src.mr->lkey, src.addr(100), 64);
  REQUIRE(ibv_wr_complete(x) == 0);
  CHECK(wait_one(acq).status == IBV_WC_SUCCESS);

  const ibv_wc r1 = wait_one(bcq1);
  CHECK(r1.status == IBV_WC_SUCCESS);
  CHECK(r1.wr_id == 11);
  CHECK(r1.byte_len == 3000);
  CHECK(r1.qp_num == tgt->qp_num);
  CHECK(r1.src_qp == ini->qp_num);
  CHECK(std::memcmp(dst.bytes.data() + 4096, src.bytes.data(), 3000) == 0);
  const ibv_wc r0 = wait_one(bcq0);
  CHECK(r0.status == IBV_WC_SUCCESS);
  CHECK(r0.wr_id == 10);
  CHECK(r0.byte_len == 64);
  CHECK(r0.qp_num == tgt->qp_num);
  CHECK(std::memcmp(dst.bytes.data(), src.bytes.data() + 100, 64) == 0);

  // An XRC SRQ is no RC QP's: EINVAL, as the kernel's create_qp answers.
  ibv_qp_init_attr rc{};
  rc.qp_type = IBV_QPT_RC;
  rc.send_cq = bcq0;
  rc.recv_cq = bcq0;
  rc.srq = s0;
  rc.cap.max_send_wr = 4;
  rc.cap.max_send_sge = 1;
  errno = 0;
  CHECK(ibv_create_qp(db.pd, &rc) == nullptr);
  CHECK(errno == EINVAL);

  // The domain is busy while its SRQs and targets live.
  CHECK(ibv_close_xrcd(xrcd) == EBUSY);
  CHECK(ibv_destroy_qp(ini) == 0);
  CHECK(ibv_destroy_qp(tgt) == 0);
  CHECK(ibv_destroy_srq(s0) == 0);
  CHECK(ibv_destroy_srq(s1) == 0);
  CHECK(ibv_close_xrcd(xrcd) == 0);
  for (ibv_cq* cq : {acq, bcq0, bcq1}) CHECK(ibv_destroy_cq(cq) == 0);
}

TEST_CASE("a domain opened on a file is that file's: a second open shares it; O_EXCL and a "
          "missing O_CREAT are refused as the kernel refuses them (EINVAL, EAGAIN)") {
  Device da("rnicsim0"), db("rnicsim1");
  TempFile file, other;
  // No domain on `other` yet, and no O_CREAT.
  errno = 0;
  CHECK(open_xrcd(db.ctx, other.fd, 0) == nullptr);
  CHECK(errno == EAGAIN);
  ibv_xrcd* first = open_xrcd(db.ctx, file.fd, O_CREAT);
  REQUIRE(first);
  errno = 0;
  CHECK(open_xrcd(db.ctx, file.fd, O_CREAT | O_EXCL) == nullptr);
  CHECK(errno == EINVAL);
  ibv_xrcd* second = open_xrcd(db.ctx, file.fd, 0);  // the file's domain: no O_CREAT needed
  REQUIRE(second);
  // A domain of its own: with fd -1 the kernel reads no flags, O_CREAT or not.
  ibv_xrcd* own = open_xrcd(db.ctx, -1, 0);
  REQUIRE(own);

  ibv_cq* acq = ibv_create_cq(da.ctx, 16, nullptr, nullptr, 0);
  ibv_cq* bcq = ibv_create_cq(db.ctx, 16, nullptr, nullptr, 0);
  REQUIRE((acq && bcq));
  // An SRQ of the first handle, a target of the second: one domain, so the SEND is received.
  ibv_srq* shared_srq = xrc_srq(db, first, bcq, 4);
  ibv_srq* own_srq = xrc_srq(db, own, bcq, 4);
  REQUIRE((shared_srq && own_srq));
  ibv_qp* ini = xrc_qp(da, IBV_QPT_XRC_SEND, nullptr, acq);
  ibv_qp* tgt = xrc_qp(db, IBV_QPT_XRC_RECV, second, nullptr);
  REQUIRE((ini && tgt));
  connect(ini, da.ctx, tgt, db.ctx);
  Buffer src(da.pd, 256, kAllAccess), dst(db.pd, 256, kAllAccess);
  src.bytes.assign(256, 0x5c);
  post_srq(shared_srq, dst, 0, 128, 7);
  post_srq(own_srq, dst, 128, 128, 8);
  uint32_t shared_n = 0, own_n = 0;
  REQUIRE(ibv_get_srq_num(shared_srq, &shared_n) == 0);
  REQUIRE(ibv_get_srq_num(own_srq, &own_n) == 0);

  send_to_srq(ini, src, 32, 1, shared_n);
  CHECK(wait_one(acq).status == IBV_WC_SUCCESS);
  const ibv_wc got = wait_one(bcq);
  CHECK(got.status == IBV_WC_SUCCESS);
  CHECK(got.wr_id == 7);
  // An SRQ of another domain: the target refuses the request (NAK invalid request).
  send_to_srq(ini, src, 32, 2, own_n);
  const ibv_wc refused = wait_one(acq);
  CHECK(refused.wr_id == 2);
  CHECK(refused.status == IBV_WC_REM_INV_REQ_ERR);
  CHECK(dst.bytes[128] == 0);

  CHECK(ibv_destroy_qp(ini) == 0);
  CHECK(ibv_destroy_qp(tgt) == 0);
  CHECK(ibv_destroy_srq(shared_srq) == 0);
  CHECK(ibv_destroy_srq(own_srq) == 0);
  CHECK(ibv_close_xrcd(second) == 0);
  CHECK(ibv_close_xrcd(first) == 0);
  CHECK(ibv_close_xrcd(own) == 0);
  // The file's domain went with its last handle: without O_CREAT, none is found again.
  errno = 0;
  CHECK(open_xrcd(db.ctx, file.fd, 0) == nullptr);
  CHECK(errno == EAGAIN);
  CHECK(ibv_destroy_cq(acq) == 0);
  CHECK(ibv_destroy_cq(bcq) == 0);
}

TEST_CASE("the device reports XRC among its capabilities") {
  Device d("rnicsim0");
  ibv_device_attr attr{};
  REQUIRE(ibv_query_device(d.ctx, &attr) == 0);
  CHECK((attr.device_cap_flags & IBV_DEVICE_XRC) != 0);
}
