// SPDX-License-Identifier: BSD-3-Clause
// Bad arguments on the control path get a clear error naming the object, the operation and
// the reason, and create nothing.
#include <catch2/catch.hpp>

#include <string>

#include "sim_env.h"

using namespace rnicdv;
using namespace rnicdv::test;
using Catch::Matchers::Contains;

namespace {

struct Env {
  std::shared_ptr<sim::Fabric> fabric = make_fabric();
  Node n = make_node(fabric, mlx5_profile(), default_qp_config());
};

}  // namespace

TEST_CASE("reg_mr rejects null, empty and inconsistent registrations", "[drv][args]") {
  Env e;
  ProtectionDomain& pd = *e.n.pd;
  uint8_t buf[64];

  auto null_mr = pd.reg_mr(nullptr, 64, hw::access::local_write);
  REQUIRE_FALSE(null_mr.is_ok());
  CHECK(null_mr.status().code() == Errc::invalid_argument);
  CHECK_THAT(null_mr.status().message(),
             Contains("pd ") && Contains("reg_mr") && Contains("null address"));

  auto empty = pd.reg_mr(buf, 0, hw::access::local_write);
  REQUIRE_FALSE(empty.is_ok());
  CHECK(empty.status().code() == Errc::invalid_argument);
  CHECK_THAT(empty.status().message(), Contains("reg_mr") && Contains("zero length"));

  // IBA C10-66: remote write / remote atomic need local write.
  for (uint32_t access : {hw::access::remote_write, hw::access::remote_atomic,
                          hw::access::remote_write | hw::access::remote_read}) {
    auto r = pd.reg_mr(buf, sizeof buf, access);
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().code() == Errc::invalid_argument);
    CHECK_THAT(r.status().message(), Contains("requires local_write"));
  }
  auto unknown = pd.reg_mr(buf, sizeof buf, 1u << 20);
  REQUIRE_FALSE(unknown.is_ok());
  CHECK_THAT(unknown.status().message(), Contains("unknown access bits"));

  // Remote read alone is fine, and so is everything with local write.
  CHECK(pd.reg_mr(buf, sizeof buf, hw::access::remote_read).is_ok());
  CHECK(pd.reg_mr(buf, sizeof buf,
                  hw::access::local_write | hw::access::remote_write | hw::access::remote_atomic)
            .is_ok());
}

TEST_CASE("create_qp rejects capacities above the device's limits", "[drv][args]") {
  Env e;
  const hw::DeviceCaps& caps = e.n.dev->info().caps;
  struct Case {
    const char* field;
    void (*set)(QpConfig&, const hw::DeviceCaps&);
  };
  const Case cases[] = {
      {"max_send_wr",
       [](QpConfig& c, const hw::DeviceCaps& d) { c.caps.max_send_wr = d.max_qp_wr + 1; }},
      {"max_recv_wr",
       [](QpConfig& c, const hw::DeviceCaps& d) { c.caps.max_recv_wr = d.max_qp_wr + 1; }},
      {"max_send_sge",
       [](QpConfig& c, const hw::DeviceCaps& d) { c.caps.max_send_sge = d.max_send_sge + 1; }},
      {"max_recv_sge",
       [](QpConfig& c, const hw::DeviceCaps& d) { c.caps.max_recv_sge = d.max_recv_sge + 1; }},
      {"max_inline_data",
       [](QpConfig& c, const hw::DeviceCaps& d) {
         c.caps.max_inline_data = d.max_inline_data + 1;
       }},
  };
  for (const Case& c : cases) {
    INFO(c.field);
    QpConfig config = default_qp_config();
    c.set(config, caps);
    auto qp = e.n.dev->create_qp(*e.n.pd, *e.n.cq, *e.n.cq, config);
    REQUIRE_FALSE(qp.is_ok());
    CHECK(qp.status().code() == Errc::invalid_argument);
    CHECK_THAT(qp.status().message(),
               Contains("create_qp") && Contains(c.field) && Contains("exceeds the device limit"));
  }
  QpConfig zero = default_qp_config();
  zero.caps.max_send_wr = 0;
  auto qp = e.n.dev->create_qp(*e.n.pd, *e.n.cq, *e.n.cq, zero);
  REQUIRE_FALSE(qp.is_ok());
  CHECK_THAT(qp.status().message(), Contains("create_qp") && Contains("max_send_wr is 0") &&
                                        Contains("without a send queue"));
}

TEST_CASE("create_cq rejects zero and oversized CQs", "[drv][args]") {
  Env e;
  auto zero = e.n.dev->create_cq(0);
  REQUIRE_FALSE(zero.is_ok());
  CHECK(zero.status().code() == Errc::invalid_argument);
  CHECK_THAT(zero.status().message(), Contains("create_cq"));
  auto huge = e.n.dev->create_cq(e.n.dev->info().caps.max_cqe + 1);
  REQUIRE_FALSE(huge.is_ok());
  CHECK(huge.status().code() == Errc::invalid_argument);
  CHECK_THAT(huge.status().message(), Contains("exceeds the device limit"));
}

TEST_CASE("a BlueFlame doorbell on a shared register is refused at creation", "[drv][args]") {
  auto fabric = make_fabric();
  sim::DeviceConfig dc;
  dc.dedicated_bf_regs = 0;
  auto sim_dev = take(fabric->add_device(dc));
  Device dev = take(Device::wrap(sim_dev));
  ProtectionDomain pd = take(dev.alloc_pd());
  CompletionQueue cq = take(dev.create_cq(16));
  QpConfig config = default_qp_config();
  config.doorbell = doorbell::DoorbellMode::bf;
  auto qp = dev.create_qp(pd, cq, cq, config);
  REQUIRE_FALSE(qp.is_ok());
  CHECK(qp.status().code() == Errc::invalid_argument);
  CHECK_THAT(qp.status().message(),
             Contains("qp 0x") && Contains("create") && Contains("bf") && Contains("shared"));
}

TEST_CASE("opening an unknown device lists what exists", "[drv][args]") {
  auto r = Device::open("mlx5_99");
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().code() == Errc::not_found);
  CHECK_THAT(r.status().message(), Contains("open mlx5_99") && Contains("no such device") &&
                                       Contains("found:") && Contains("sim0"));
  auto w = Device::wrap(nullptr);
  REQUIRE_FALSE(w.is_ok());
  CHECK(w.status().code() == Errc::invalid_argument);
}
