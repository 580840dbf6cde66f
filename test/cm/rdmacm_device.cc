// SPDX-License-Identifier: BSD-3-Clause
// The connection API on a real RDMA device through librdmacm: a loopback connection on the
// first device, with the passive side posting in RTR before the RTU. Skipped (77, with the
// reason printed) where no device exists, which is every machine without RDMA hardware.
#include <catch2/catch.hpp>

#include <infiniband/verbs.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "rnicdv/connection.h"
#include "rnicdv/rnicdv.h"

using namespace rnicdv;
using namespace std::chrono_literals;

namespace {

std::string first_rdma_device() {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  std::string name;
  if (list && n > 0) name = ibv_get_device_name(list[0]);
  if (list) ibv_free_device_list(list);
  return name;
}

template <class T>
T take(Result<T> r) {
  INFO(r.status().message());
  REQUIRE(r.is_ok());
  return std::move(r).value();
}

}  // namespace

TEST_CASE("a loopback connection on a real device withholds the passive side's early sends") {
  const std::string name = first_rdma_device();
  if (name.empty()) {
    std::printf("skipped: no RDMA device (ibv_get_device_list found none)\n");
    std::fflush(stdout);
    std::exit(77);
  }
  Device dev = take(Device::open(name));
  REQUIRE(dev.info().kind == "mlx5");
  INFO("the mlx5 backend must provide the librdmacm connection manager");
  REQUIRE(dev.hw().connection_manager() != nullptr);
  const hw::Gid gid = dev.info().gid;
  if (!gid.is_ipv4_mapped()) {
    std::printf("skipped: %s has no IPv4 RoCE GID\n", name.c_str());
    std::exit(77);
  }
  char ip[32];
  std::snprintf(ip, sizeof ip, "%u.%u.%u.%u", gid.raw[12], gid.raw[13], gid.raw[14], gid.raw[15]);

  ProtectionDomain pd = take(dev.alloc_pd());
  CompletionQueue cq = take(dev.create_cq(64));
  std::vector<uint8_t> mem(8192);
  MemoryRegion mr = take(pd.reg_mr(mem.data(), mem.size(), hw::access::local_write));
  QpConfig qc;
  QueuePair qa = take(dev.create_qp(pd, cq, cq, qc));
  QueuePair qb = take(dev.create_qp(pd, cq, cq, qc));

  Listener l = take(Listener::listen(dev, ip, 17471));
  Connection ca = take(Connection::connect(qa, ip, 17471));
  Sge rsge = mr.sge(0, 64);
  REQUIRE(qa.post_recv(RecvWr{1, &rsge, 1}) == Errc::ok);
  auto req = l.wait_event(10s);
  REQUIRE(req);
  REQUIRE(req->request);
  Connection cb = take(req->request->accept(qb));
  CHECK(qb.state() == hw::QpState::rtr);
  Sge ssge = mr.sge(4096, 64);
  SendWr wr;
  wr.wr_id = 2;
  wr.flags = send_flags::signaled;
  wr.sg_list = &ssge;
  wr.num_sge = 1;
  REQUIRE(qb.post_send(wr) == Errc::ok);
  CHECK(qb.withheld() == 1);

  auto ea = ca.wait_event(10s);
  REQUIRE(ea);
  CHECK(ea->type == ConnectionEventType::established);
  auto eb = cb.wait_event(10s);
  REQUIRE(eb);
  CHECK(eb->type == ConnectionEventType::established);
  CHECK(qb.state() == hw::QpState::rts);

  int seen = 0;
  Completion wc[4];
  const auto end = std::chrono::steady_clock::now() + 10s;
  while (seen < 2 && std::chrono::steady_clock::now() < end) {
    const int n = cq.poll(wc, 4);
    for (int i = 0; i < n; ++i) CHECK(wc[i].status == IBV_WC_SUCCESS);
    seen += n;
  }
  CHECK(seen == 2);
  REQUIRE(ca.disconnect().is_ok());
  auto da = ca.wait_event(10s);
  REQUIRE(da);
  CHECK(da->type == ConnectionEventType::disconnected);
}
