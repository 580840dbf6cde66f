// SPDX-License-Identifier: BSD-3-Clause
// Two-port simulated HCAs (RNICDV_SIM_PORTS=2) through the unmodified libibverbs and libmlx5:
// two ports in the device's attributes, each ACTIVE with a GID table of its own address, an
// RC QP on port 2 sending through it (its port's counters in sysfs counting the frames), and
// the kernel's refusal of a port the device has not.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <infiniband/verbs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <string>

#include "verbs_fixtures.h"

using namespace verbs_test;

namespace {

ibv_gid gid_of(ibv_context* ctx, uint8_t port) {
  ibv_gid g{};
  REQUIRE(ibv_query_gid(ctx, port, kGidIndex, &g) == 0);
  return g;
}

// A port counter as perftest's -W reads it: open() of the device's sysfs file, which the shim
// answers with the port's figure.
uint64_t sysfs_counter(const char* dev, int port, const char* name) {
  const std::string path = std::string("/sys/class/infiniband/") + dev + "/ports/" +
                           std::to_string(port) + "/counters/" + name;
  const int fd = ::open(path.c_str(), O_RDONLY);
  INFO(path);
  REQUIRE(fd >= 0);
  char text[32] = {};
  const ssize_t n = ::read(fd, text, sizeof text - 1);
  ::close(fd);
  REQUIRE(n > 0);
  return std::strtoull(text, nullptr, 10);
}

}  // namespace

TEST_CASE("a two-port device shows both ports, each with its own address's GIDs") {
  Device d("rnicsim0");
  ibv_device_attr attr{};
  REQUIRE(ibv_query_device(d.ctx, &attr) == 0);
  CHECK(attr.phys_port_cnt == 2);
  for (uint8_t port : {1, 2}) {
    ibv_port_attr p{};
    REQUIRE(ibv_query_port(d.ctx, port, &p) == 0);
    CHECK(p.state == IBV_PORT_ACTIVE);
    CHECK(p.link_layer == IBV_LINK_LAYER_ETHERNET);
  }
  const ibv_gid g1 = gid_of(d.ctx, 1), g2 = gid_of(d.ctx, 2);
  CHECK(std::memcmp(g1.raw, g2.raw, 16) != 0);
  CHECK(g2.raw[10] == 0xff);  // ::ffff:a.b.c.d
  CHECK(g2.raw[11] == 0xff);
  ibv_port_attr none{};
  CHECK(ibv_query_port(d.ctx, 3, &none) != 0);
}

TEST_CASE("an RC QP on port 2 sends through port 2, whose sysfs counters count its frames") {
  Device da("rnicsim0"), db("rnicsim1");
  ibv_cq* acq = ibv_create_cq(da.ctx, 16, nullptr, nullptr, 0);
  ibv_cq* bcq = ibv_create_cq(db.ctx, 16, nullptr, nullptr, 0);
  REQUIRE((acq && bcq));
  ibv_qp_init_attr init = qp_init(acq, acq, IBV_QPT_RC, 8, 1);
  ibv_qp* qa = ibv_create_qp(da.pd, &init);
  init = qp_init(bcq, bcq, IBV_QPT_RC, 8, 1);
  ibv_qp* qb = ibv_create_qp(db.pd, &init);
  REQUIRE((qa && qb));
  rc_to_rtr(qa, qb->qp_num, gid_of(db.ctx, 2), 2);
  rc_to_rtr(qb, qa->qp_num, gid_of(da.ctx, 2), 2);
  rc_to_rts(qa);
  rc_to_rts(qb);
  ibv_qp_attr got{};
  ibv_qp_init_attr got_init{};
  REQUIRE(ibv_query_qp(qa, &got, IBV_QP_PORT, &got_init) == 0);
  CHECK(got.port_num == 2);

  const uint64_t p1_before = sysfs_counter("rnicsim0", 1, "port_xmit_packets");
  const uint64_t p2_before = sysfs_counter("rnicsim0", 2, "port_xmit_packets");
  Buffer src(da.pd, 4096, kAllAccess), dst(db.pd, 4096, kAllAccess);
  src.bytes.assign(4096, 0x66);
  ibv_sge sge{src.addr(), 3000, src.mr->lkey};
  ibv_send_wr wr = make_wr(IBV_WR_RDMA_WRITE, &sge, 1, 1);
  wr.wr.rdma.remote_addr = dst.addr();
  wr.wr.rdma.rkey = dst.mr->rkey;
  ibv_send_wr* bad = nullptr;
  REQUIRE(ibv_post_send(qa, &wr, &bad) == 0);
  CHECK(wait_one(acq).status == IBV_WC_SUCCESS);
  CHECK(dst.bytes[2999] == 0x66);
  CHECK(sysfs_counter("rnicsim0", 2, "port_xmit_packets") - p2_before == 3);
  CHECK(sysfs_counter("rnicsim0", 1, "port_xmit_packets") == p1_before);

  // An address handle on port 2 (libmlx5 checks the port against the context's port count,
  // which GET_CONTEXT reports), and one on a port the device has not.
  ibv_ah_attr ah{};
  ah.is_global = 1;
  ah.grh.dgid = gid_of(db.ctx, 2);
  ah.grh.sgid_index = kGidIndex;
  ah.port_num = 2;
  ibv_ah* on_port2 = ibv_create_ah(da.pd, &ah);
  CHECK(on_port2 != nullptr);
  if (on_port2) CHECK(ibv_destroy_ah(on_port2) == 0);
  ah.port_num = 3;
  errno = 0;
  CHECK(ibv_create_ah(da.pd, &ah) == nullptr);

  CHECK(ibv_destroy_qp(qa) == 0);
  CHECK(ibv_destroy_qp(qb) == 0);
  CHECK(ibv_destroy_cq(acq) == 0);
  CHECK(ibv_destroy_cq(bcq) == 0);
}
