// SPDX-License-Identifier: BSD-3-Clause
// PD, MR, CQ and QP creation on a real mlx5 device, and the views libmlx5 hands out.
// Skipped (exit 77) on machines without one.
#include <poll.h>

#include <cstdint>
#include <set>
#include <vector>

#include "mlx5_test_device.h"
#include "mlx5_verbs.h"
#include "mlx5_views.h"

using namespace rnicdv;
using namespace rnicdv::hw;

const char* mlx5_test_skip_reason() {
  return mlx5_test::no_device_reason();
}

namespace {

QpCaps small_caps() {
  QpCaps caps;
  caps.max_send_wr = 128;
  caps.max_recv_wr = 128;
  caps.max_send_sge = 1;
  caps.max_recv_sge = 1;
  caps.max_inline_data = 64;
  return caps;
}

class ForeignPd final : public Pd {
 public:
  uint32_t pdn() const override { return 0; }
};

}  // namespace

TEST_CASE("the device describes itself as mlx5 with mlx5's withholding profile", "[device]") {
  auto device = mlx5_test::open();
  const DeviceInfo& info = device->info();
  CHECK(info.name == mlx5_test::device_name());
  CHECK(info.kind == "mlx5");
  CHECK(info.transport.rfind("mlx5 ", 0) == 0);
  CHECK(info.node_guid != 0);
  CHECK(info.profile.keeps_rtr_doorbell);
  CHECK_FALSE(info.profile.fetches_beyond_dbr);
  CHECK(info.caps.max_qp > 0);
  CHECK(info.caps.max_qp_wr > 0);
  CHECK(info.caps.max_send_sge >= 1);
  CHECK(info.caps.max_cqe > 0);
  CHECK(info.caps.max_mr_size > 0);
  CHECK(info.caps.max_inline_data > 0);  // probed: every ConnectX supports inline sends
  REQUIRE_FALSE(device->ports().empty());
  const auto& port1 = device->ports().front();
  if (port1.source_gid) {
    CHECK(info.gid_index == port1.source_gid->index);
    CHECK(info.gid.to_string() == port1.source_gid->gid.to_string());
  }
}

TEST_CASE("a PD registers memory with the requested access", "[device]") {
  auto device = mlx5_test::open();
  auto pd = device->alloc_pd();
  REQUIRE(pd.is_ok());
  std::vector<uint8_t> buffer(8192);
  auto mr = device->reg_mr(**pd, buffer.data(), buffer.size(),
                           access::local_write | access::remote_write | access::remote_read);
  INFO(mr.status().message());
  REQUIRE(mr.is_ok());
  CHECK((*mr)->addr() == buffer.data());
  CHECK((*mr)->length() == buffer.size());
}

TEST_CASE("bad MR requests are refused before reaching the kernel", "[device]") {
  auto device = mlx5_test::open();
  auto pd = device->alloc_pd();
  REQUIRE(pd.is_ok());
  std::vector<uint8_t> buffer(4096);
  auto no_local_write = device->reg_mr(**pd, buffer.data(), buffer.size(), access::remote_write);
  REQUIRE_FALSE(no_local_write.is_ok());
  CHECK(no_local_write.status().code() == Errc::invalid_argument);
  CHECK(no_local_write.status().message().find("requires local write") != std::string::npos);
  auto empty = device->reg_mr(**pd, buffer.data(), 0, 0);
  CHECK(empty.status().code() == Errc::invalid_argument);
  ForeignPd foreign;
  auto wrong_pd = device->reg_mr(foreign, buffer.data(), buffer.size(), 0);
  CHECK(wrong_pd.status().code() == Errc::invalid_argument);
}

TEST_CASE("a CQ view is a power-of-two ring of invalid CQEs at least as large as asked",
          "[device]") {
  auto device = mlx5_test::open();
  for (uint32_t min_cqe : {1u, 100u, 256u, 1000u}) {
    auto cq = device->create_cq(min_cqe);
    INFO("min_cqe " << min_cqe << ": " << cq.status().message());
    REQUIRE(cq.is_ok());
    const mlx5dv_cq& v = (*cq)->view().dv;
    CHECK(mlx5::is_power_of_two(v.cqe_cnt));
    CHECK(v.cqe_cnt >= min_cqe);
    CHECK((v.cqe_size == 64 || v.cqe_size == 128));
    CHECK(v.buf != nullptr);
    CHECK(v.dbrec != nullptr);
    // libmlx5 initialises every CQE's opcode to INVALID (mlx5_alloc_cq_buf); the 64-byte CQE
    // is the second half of a 128-byte one.
    auto* ring = static_cast<const unsigned char*>(v.buf);
    int invalid = 0;
    for (uint32_t i = 0; i < v.cqe_cnt; ++i) {
      const unsigned char* cqe = ring + size_t{i} * v.cqe_size + (v.cqe_size == 128 ? 64 : 0);
      invalid += (cqe[63] >> 4) == MLX5_CQE_INVALID;
    }
    CHECK(invalid == static_cast<int>(v.cqe_cnt));
  }
}

TEST_CASE("CQ sizes outside the device's range are refused", "[device]") {
  auto device = mlx5_test::open();
  CHECK(device->create_cq(0).status().code() == Errc::invalid_argument);
  const uint32_t too_many = device->info().caps.max_cqe + 1;
  CHECK(device->create_cq(too_many).status().code() == Errc::invalid_argument);
}

TEST_CASE("an RC QP's view has 64-byte send blocks, power-of-two rings and a doorbell",
          "[device]") {
  auto device = mlx5_test::open();
  auto pd = device->alloc_pd();
  auto cq = device->create_cq(256);
  REQUIRE(pd.is_ok());
  REQUIRE(cq.is_ok());
  const QpCaps asked = small_caps();
  auto qp = device->create_qp(**pd, **cq, **cq, asked);
  INFO(qp.status().message());
  REQUIRE(qp.is_ok());
  const QpView& v = (*qp)->view();
  INFO("bf_shared " << v.bf_shared << " bf.size " << v.dv.bf.size);
  CHECK(v.qpn != 0);
  CHECK(v.qpn <= 0xffffff);
  CHECK(mlx5::is_power_of_two(v.dv.sq.wqe_cnt));
  CHECK(v.dv.sq.stride == 64);
  CHECK(mlx5::is_power_of_two(v.dv.rq.wqe_cnt));
  CHECK(mlx5::is_power_of_two(v.dv.rq.stride));
  CHECK(v.dv.dbrec != nullptr);
  CHECK(v.dv.bf.reg != nullptr);
  CHECK(v.dv.dbrec[MLX5_RCV_DBR] == 0);
  CHECK(v.dv.dbrec[MLX5_SND_DBR] == 0);
  CHECK(v.granted.max_send_wr >= asked.max_send_wr);
  CHECK(v.granted.max_recv_wr >= asked.max_recv_wr);
  CHECK(v.granted.max_send_sge >= asked.max_send_sge);
  CHECK(v.granted.max_recv_sge >= asked.max_recv_sge);
  CHECK(v.granted.max_inline_data >= asked.max_inline_data);
  CHECK(v.dv.rq.wqe_cnt >= v.granted.max_recv_wr);
  CHECK((*qp)->state() == QpState::reset);
}

TEST_CASE("QPs that own their BlueFlame register each get a different one", "[device]") {
  auto device = mlx5_test::open();
  auto pd = device->alloc_pd();
  auto cq = device->create_cq(64);
  REQUIRE(pd.is_ok());
  REQUIRE(cq.is_ok());
  std::vector<std::unique_ptr<Qp>> qps;
  std::set<void*> dedicated;
  size_t owning = 0;
  for (int i = 0; i < 8; ++i) {
    auto qp = device->create_qp(**pd, **cq, **cq, small_caps());
    INFO(qp.status().message());
    REQUIRE(qp.is_ok());
    if (!(*qp)->view().bf_shared) {
      ++owning;
      dedicated.insert((*qp)->view().dv.bf.reg);
    }
    qps.push_back(std::move(*qp));
  }
  INFO(owning << " of 8 QPs own their register");
  CHECK(dedicated.size() == owning);
}

TEST_CASE("a QP asked for with max_send_wr 0 has no send queue, as mlx5 gives it", "[device]") {
  auto device = mlx5_test::open();
  auto pd = device->alloc_pd();
  auto cq = device->create_cq(64);
  REQUIRE(pd.is_ok());
  REQUIRE(cq.is_ok());
  for (uint32_t recv : {128u, 0u}) {
    INFO("max_recv_wr " << recv);
    QpCaps caps = small_caps();
    caps.max_send_wr = 0;
    caps.max_inline_data = 0;
    caps.max_recv_wr = recv;
    auto qp = device->create_qp(**pd, **cq, **cq, caps);
    REQUIRE(qp.is_ok());
    const QpView& v = (*qp)->view();
    CHECK(v.dv.sq.wqe_cnt == 0);
    CHECK(v.granted.max_send_wr == 0);
    CHECK(v.granted.max_recv_wr >= recv);
    if (recv == 0) CHECK(v.dv.rq.wqe_cnt == 0);
  }
}

TEST_CASE("QP requests beyond the device's limits are refused with the limit", "[device]") {
  auto device = mlx5_test::open();
  auto pd = device->alloc_pd();
  auto cq = device->create_cq(64);
  REQUIRE(pd.is_ok());
  REQUIRE(cq.is_ok());
  QpCaps caps = small_caps();
  caps.max_send_wr = device->info().caps.max_qp_wr + 1;
  auto too_deep = device->create_qp(**pd, **cq, **cq, caps);
  REQUIRE_FALSE(too_deep.is_ok());
  CHECK(too_deep.status().code() == Errc::invalid_argument);
  CHECK(too_deep.status().message().find("max_send_wr") != std::string::npos);
  caps = small_caps();
  caps.max_inline_data = device->info().caps.max_inline_data + 1;
  CHECK(device->create_qp(**pd, **cq, **cq, caps).status().code() == Errc::invalid_argument);
}

TEST_CASE("objects may be released in any order without a failed destroy", "[device]") {
  const uint64_t failures_before = mlx5::teardown_failures();
  {
    auto device = mlx5_test::open();
    auto pd = device->alloc_pd();
    auto cq = device->create_cq(64);
    REQUIRE(pd.is_ok());
    REQUIRE(cq.is_ok());
    std::vector<uint8_t> buffer(4096);
    auto mr = device->reg_mr(**pd, buffer.data(), buffer.size(), access::local_write);
    auto qp = device->create_qp(**pd, **cq, **cq, small_caps());
    REQUIRE(mr.is_ok());
    REQUIRE(qp.is_ok());
    // Drop the device, the PD and the CQ while the MR and the QP still use them.
    device.reset();
    pd.value().reset();
    cq.value().reset();
    qp.value().reset();
    mr.value().reset();
  }
  CHECK(mlx5::teardown_failures() == failures_before);
}

TEST_CASE("the async fd is readable only while an event is pending, and reading never blocks",
          "[device]") {
  auto device = mlx5_test::open();
  const int fd = device->async_fd();
  REQUIRE(fd >= 0);
  AsyncEvent event{AsyncEventType::device_fatal};
  // Port events may be queued from the device's start; none of them is about a QP or CQ.
  while (device->next_async_event(&event)) {
    CHECK(event.qpn == 0);
    CHECK(event.cqn == 0);
  }
  CHECK_FALSE(device->next_async_event(&event));  // returns at once
  pollfd pfd{fd, POLLIN, 0};
  CHECK(poll(&pfd, 1, 0) == 0);
}

TEST_CASE("the device needs no progress hook and owns a connection manager", "[device]") {
  auto device = mlx5_test::open();
  CHECK(device->progress_hook().fn == nullptr);
  CHECK(device->connection_manager() != nullptr);
}

TEST_CASE("an address handle is made for a port: its AV carries that port's source GID index; "
          "a port the device has not is refused, naming it",
          "[device][ah]") {
  auto device = mlx5_test::open();
  auto pd = device->alloc_pd();
  REQUIRE(pd.is_ok());
  const auto& ports = device->ports();
  int made = 0;
  for (size_t i = 0; i < ports.size(); ++i) {
    if (!ports[i].source_gid) continue;  // a port with no address: nothing to send from
    AhAttr attr;
    attr.remote_gid = ports[i].source_gid->gid;  // itself: any reachable GID would do
    attr.port = static_cast<uint8_t>(i + 1);
    auto ah = device->create_ah(**pd, attr);
    INFO("port " << i + 1 << ": " << ah.status().message());
    REQUIRE(ah.is_ok());
    const uint32_t sgid_index = be32toh((*ah)->av().grh_gid_fl) >> 20 & 0xff;
    CHECK(sgid_index == ports[i].source_gid->index);
    ++made;
  }
  CHECK(made >= 1);
  AhAttr beyond;
  beyond.remote_gid = device->info().gid;
  beyond.port = static_cast<uint8_t>(ports.size() + 1);
  auto refused = device->create_ah(**pd, beyond);
  REQUIRE_FALSE(refused.is_ok());
  CHECK(refused.status().code() == Errc::invalid_argument);
  CHECK_THAT(refused.status().message(),
             Catch::Matchers::Contains("port " + std::to_string(ports.size() + 1)));
}
