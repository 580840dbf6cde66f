// SPDX-License-Identifier: BSD-3-Clause
// Queues in memory the device did not allocate, as the unmodified libmlx5 places them when it
// runs on the model: the QP buffer, doorbell records and a 128-byte-CQE ring in the heap, and
// a UAR page mapped by someone else whose register the device watches.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>

#include "handles.h"
#include "sim_harness.h"

using namespace simtest;

namespace {

struct Aligned {
  void* p = nullptr;
  Aligned(size_t align, size_t n) {
    // aligned_alloc wants a size that is a multiple of the alignment.
    p = std::aligned_alloc(align, (n + align - 1) / align * align);
    std::memset(p, 0, n);
  }
  ~Aligned() { std::free(p); }
  uint8_t* bytes() const { return static_cast<uint8_t*>(p); }
};

// A host whose CQ and QP live in `Aligned` buffers owned by the test.
struct ExternalHost {
  Aligned qp_buf{4096, 64 * 64 + 16 * 64};  // RQ: 16 x 64 B, SQ: 64 BBs
  Aligned qp_dbr{64, 64};
  Aligned cq_buf{4096, 256 * 128};
  Aligned cq_dbr{64, 64};
  Aligned uar{4096, 4096};
  uint32_t sq_blocks = 64;  // 0: a QP without a send queue (max_send_wr 0 in libmlx5)
  Host host;

  void create(const std::shared_ptr<sim::Device>& dev) {
    host.dev = dev;
    host.pd = must(dev->alloc_pd());
    for (uint32_t i = 0; i < 64; ++i) cq_buf.bytes()[i * 128 + 127] = 0xF0;  // libmlx5 init
    sim::ExternalCqMemory cm;
    cm.buf = cq_buf.bytes();
    cm.cqe_cnt = 64;
    cm.cqe_size = 128;
    cm.dbrec = static_cast<uint32_t*>(cq_dbr.p);
    cm.cq_uar = uar.bytes();
    host.scq->cq = must(sim::create_cq_external(*dev, cm));
    host.rcq = host.scq;
    must_ok(sim::attach_uar_page(*dev, uar.p, uar.p));
    sim::ExternalQpMemory qm;
    qm.rq_buf = qp_buf.bytes();
    qm.rq_wqe_cnt = 16;
    qm.rq_stride = 64;
    qm.sq_buf = sq_blocks ? qp_buf.bytes() + 16 * 64 : nullptr;
    qm.sq_wqe_cnt = sq_blocks;
    qm.dbrec = static_cast<uint32_t*>(qp_dbr.p);
    qm.bf_reg = uar.bytes() + 0x800 + 512;  // bfreg 1 of the page, as libmlx5 picks
    qm.bf_size = 256;
    qm.user_index = 77;
    qm.granted.max_send_wr = sq_blocks ? 32 : 0;
    qm.granted.max_recv_wr = 16;
    qm.granted.max_send_sge = 4;
    qm.granted.max_recv_sge = 4;
    qm.granted.max_inline_data = 64;
    host.qp = must(sim::create_qp_external(*dev, *host.pd, *host.scq->cq, *host.scq->cq, qm));
  }
};

}  // namespace

TEST_CASE("a QP and CQ in memory placed by someone else run like the device's own") {
  auto fabric = make_fabric();
  auto dev_a = must(fabric->add_device());
  auto dev_b = must(fabric->add_device());
  ExternalHost ext;
  ext.create(dev_a);
  const hw::QpView& v = ext.host.view();
  CHECK(v.dv.sq.buf == ext.qp_buf.bytes() + 16 * 64);
  CHECK(v.dv.rq.buf == ext.qp_buf.bytes());
  CHECK(v.dv.bf.reg == ext.uar.bytes() + 0x800 + 512);
  CHECK(ext.host.scq->cq->view().dv.cqe_size == 128);

  Host b;
  b.init_on(dev_b, Pair::default_host());
  connect(ext.host, b);
  Buffer abuf = ext.host.reg(8192, all_remote(), 0);
  fill_pattern(abuf.data(), 8192, 5);
  Buffer bbuf = b.reg(8192);

  auto wait = [&](TestCq& cq, wqe::CqeFields* f = nullptr) {
    Completion c{};
    REQUIRE(fabric->run_until([&] { return cq.poll(&c, f); }));
    return c;
  };
  for (int round = 0; round < 80; ++round) {  // wraps the 64-BB ring and the 64-entry CQ
    Sge sge{abuf.addr(), 5000, abuf.lkey()};
    SendWr w = make_wr(WrOpcode::rdma_write, &sge, 1);
    w.remote_addr = bbuf.addr();
    w.rkey = bbuf.rkey();
    REQUIRE(ext.host.post_and_ring(w) == Errc::ok);
    wqe::CqeFields f;
    Completion c = wait(*ext.host.scq, &f);
    REQUIRE(c.status == IBV_WC_SUCCESS);
    ext.host.retire_through(f.wqe_counter);

    REQUIRE(ext.host.post_recv(abuf, 0, 100) == Errc::ok);
    Sge bs{bbuf.addr(100), 100, bbuf.lkey()};
    REQUIRE(b.post_and_ring(make_wr(WrOpcode::send, &bs, 1)) == Errc::ok);
    c = wait(*ext.host.rcq, &f);
    CHECK(c.status == IBV_WC_SUCCESS);
    CHECK(c.byte_len == 100);
    CHECK(f.qpn == ext.host.qpn());
    REQUIRE(fabric->run_until([&] { return b.poll_send(&c); }));
  }
  CHECK(std::memcmp(abuf.data(), bbuf.data(), 100) == 0);
  CHECK(ext.host.sq_pi > 64);  // wrapped the SQ
  CHECK(ext.host.scq->ci > 64);
  // The user index reaches the CQEs.
  const auto* raw = reinterpret_cast<const mlx5_cqe64*>(ext.cq_buf.bytes() + 64);
  CHECK((be32toh(raw->srqn_uidx) & 0xffffff) == 77);
  CHECK(dev_a->counters().uar_doorbells == 80);
}

TEST_CASE("an external register must be a BlueFlame register of an attached page") {
  auto fabric = make_fabric();
  auto dev = must(fabric->add_device());
  ExternalHost ext;
  ext.host.dev = dev;
  ext.host.pd = must(dev->alloc_pd());
  auto cq = must(dev->create_cq(16));
  sim::ExternalQpMemory qm;
  qm.rq_buf = ext.qp_buf.bytes();
  qm.rq_wqe_cnt = 16;
  qm.rq_stride = 64;
  qm.sq_buf = ext.qp_buf.bytes() + 1024;
  qm.sq_wqe_cnt = 64;
  qm.dbrec = static_cast<uint32_t*>(ext.qp_dbr.p);
  qm.bf_reg = ext.uar.bytes() + 0x800;
  auto r = sim::create_qp_external(*dev, *ext.host.pd, *cq, *cq, qm);
  CHECK_FALSE(r);  // page not attached
  must_ok(sim::attach_uar_page(*dev, ext.uar.p, ext.uar.p));
  qm.bf_reg = ext.uar.bytes() + 0x900;  // not a register boundary
  CHECK_FALSE(sim::create_qp_external(*dev, *ext.host.pd, *cq, *cq, qm));
  qm.bf_reg = ext.uar.bytes() + 0x800;
  qm.sq_wqe_cnt = 48;  // not a power of two
  CHECK_FALSE(sim::create_qp_external(*dev, *ext.host.pd, *cq, *cq, qm));
  CHECK_FALSE(sim::attach_uar_page(*dev, ext.uar.bytes() + 8, ext.uar.bytes() + 8));
}

TEST_CASE(
    "an external QP without a send queue receives, and a doorbell for it fetches and "
    "flushes nothing, on a device that scans or not") {
  const bool scanning = GENERATE(false, true);
  INFO("fetches_beyond_dbr " << scanning);
  auto fabric = make_fabric();
  sim::DeviceConfig cfg;
  cfg.profile.fetches_beyond_dbr = scanning;
  auto dev_a = must(fabric->add_device(cfg));
  auto dev_b = must(fabric->add_device());
  ExternalHost ext;
  ext.sq_blocks = 0;
  ext.create(dev_a);
  CHECK(ext.host.view().dv.sq.wqe_cnt == 0);
  CHECK(ext.host.view().dv.sq.buf == nullptr);
  CHECK(ext.host.view().granted.max_send_wr == 0);
  Host b;
  b.init_on(dev_b, Pair::default_host());
  connect(ext.host, b);
  Buffer abuf = ext.host.reg(8192, all_remote(), 0);
  Buffer bbuf = b.reg(8192);
  fill_pattern(bbuf.data(), 8192, 3);

  // Where a send queue would follow the receive queue, a valid SEND WQE for this QP, announced
  // by the record and the register as a driver that ignored the missing queue would.
  const wqe::SqRing fake{ext.qp_buf.bytes() + 16 * 64, 64};
  Sge fs{abuf.addr(), 64, abuf.lkey()};
  SendWr fw = make_wr(WrOpcode::send, &fs, 1);
  wqe::EncodedWqe enc;
  REQUIRE(wqe::encode_send_wqe(fake, 0, 64, ext.host.qpn(), fw, wqe::SqLimits{4, 64}, 0, &enc) ==
          Errc::ok);
  ext.host.sq_pi = enc.bbs;
  ext.host.last_ctrl = enc.ctrl;
  ext.host.last_bbs = enc.bbs;
  ext.host.ring();

  REQUIRE(ext.host.post_recv(abuf, 0, 100) == Errc::ok);
  Sge bs{bbuf.addr(100), 100, bbuf.lkey()};
  REQUIRE(b.post_and_ring(make_wr(WrOpcode::send, &bs, 1)) == Errc::ok);
  Completion c{};
  REQUIRE(fabric->run_until([&] { return ext.host.rcq->poll(&c); }));
  CHECK(c.status == IBV_WC_SUCCESS);
  CHECK(c.byte_len == 100);
  CHECK(std::memcmp(abuf.data(), bbuf.data() + 100, 100) == 0);
  REQUIRE(fabric->run_until([&] { return b.poll_send(&c); }));
  CHECK(c.status == IBV_WC_SUCCESS);
  // Nothing reached b's receive queue (it has none posted: a SEND would end in RNR retries).
  CHECK_FALSE(fabric->run_until([&] { return b.rcq->poll(&c); }, 100'000'000));

  // In ERR the flush finds nothing to complete on either queue.
  to_state(ext.host, hw::QpState::err);
  ext.host.ring();
  CHECK_FALSE(fabric->run_until([&] { return ext.host.scq->poll(&c); }, 100'000'000));
  CHECK(dev_a->counters().wqes_fetched == 0);
  CHECK(dev_a->counters().wqes_beyond_dbr == 0);
  CHECK(dev_a->dump().find("sq: none") != std::string::npos);
}

TEST_CASE("an external QP's rings are checked one by one, and a ring of 0 means no such queue") {
  auto fabric = make_fabric();
  auto dev = must(fabric->add_device());
  ExternalHost ext;
  ext.host.dev = dev;
  ext.host.pd = must(dev->alloc_pd());
  auto cq = must(dev->create_cq(16));
  must_ok(sim::attach_uar_page(*dev, ext.uar.p, ext.uar.p));
  sim::ExternalQpMemory qm;
  qm.dbrec = static_cast<uint32_t*>(ext.qp_dbr.p);
  qm.bf_reg = ext.uar.bytes() + 0x800;
  // Neither queue: created (a QP that only answers RDMA READ and WRITE).
  auto none = sim::create_qp_external(*dev, *ext.host.pd, *cq, *cq, qm);
  REQUIRE(none);
  CHECK(none.value()->view().dv.sq.wqe_cnt == 0);
  CHECK(none.value()->view().dv.rq.wqe_cnt == 0);
  qm.sq_wqe_cnt = 48;
  qm.sq_buf = ext.qp_buf.bytes();
  auto bad_sq = sim::create_qp_external(*dev, *ext.host.pd, *cq, *cq, qm);
  REQUIRE_FALSE(bad_sq);
  CHECK_THAT(bad_sq.status().message(), Catch::Contains("send queue of 48 basic blocks"));
  qm.sq_wqe_cnt = 0;
  qm.rq_wqe_cnt = 16;
  qm.rq_stride = 8;
  qm.rq_buf = ext.qp_buf.bytes();
  auto bad_rq = sim::create_qp_external(*dev, *ext.host.pd, *cq, *cq, qm);
  REQUIRE_FALSE(bad_rq);
  CHECK_THAT(bad_rq.status().message(), Catch::Contains("receive queue of 16 WQEs of 8 bytes"));
  qm.rq_stride = 16;
  qm.dbrec = nullptr;
  auto no_dbr = sim::create_qp_external(*dev, *ext.host.pd, *cq, *cq, qm);
  REQUIRE_FALSE(no_dbr);
  CHECK_THAT(no_dbr.status().message(), Catch::Contains("no doorbell record"));
}
