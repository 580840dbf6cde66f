// SPDX-License-Identifier: BSD-3-Clause
// errno -> Status conversion and device-attribute -> DeviceCaps conversion.
#include <catch2/catch.hpp>

#include <cerrno>
#include <cstring>

#include "mlx5_caps.h"
#include "mlx5_verbs.h"

using namespace rnicdv;
using namespace rnicdv::hw;
using namespace rnicdv::hw::mlx5;

TEST_CASE("a verbs failure names the context, the call and the errno text", "[errors]") {
  Status s = verbs_failure(EINVAL, "qp 0x1c: modify RTR->RTS", "ibv_modify_qp");
  CHECK(s.code() == Errc::invalid_argument);
  CHECK(s.message() == "qp 0x1c: modify RTR->RTS: ibv_modify_qp: Invalid argument");
}

TEST_CASE("errno values map to the closest Errc", "[errors]") {
  CHECK(errc_from_errno(ENOMEM) == Errc::no_resources);
  CHECK(errc_from_errno(EAGAIN) == Errc::no_resources);
  CHECK(errc_from_errno(EINVAL) == Errc::invalid_argument);
  CHECK(errc_from_errno(EOPNOTSUPP) == Errc::unsupported);
  CHECK(errc_from_errno(ENOSYS) == Errc::unsupported);
  CHECK(errc_from_errno(EPERM) == Errc::access_denied);
  CHECK(errc_from_errno(EACCES) == Errc::access_denied);
  CHECK(errc_from_errno(EBUSY) == Errc::busy);
  CHECK(errc_from_errno(ENODEV) == Errc::not_found);
  CHECK(errc_from_errno(ETIMEDOUT) == Errc::timeout);
  CHECK(errc_from_errno(EIO) == Errc::io_error);
}

TEST_CASE("an errno the library forgot to set still reads clearly", "[errors]") {
  CHECK(errno_text(0) == "errno 0 (not set by the library)");
  CHECK(errno_text(ENOMEM) == "Cannot allocate memory");
}

TEST_CASE("device attributes become caps, clamped to the interface's types", "[caps]") {
  ibv_device_attr attr;
  std::memset(&attr, 0, sizeof attr);
  attr.max_qp = 131072;
  attr.max_qp_wr = 32768;
  attr.max_sge = 30;
  attr.max_cq = 16777216;
  attr.max_cqe = 4194303;
  attr.max_mr = 16777216;
  attr.max_mr_size = ~uint64_t{0};
  attr.max_pd = 16777216;
  attr.max_srq = 8388608;
  attr.max_srq_wr = 32767;
  attr.max_qp_rd_atom = 16;
  attr.max_qp_init_rd_atom = 1000;  // wider than uint8_t
  PortAddressing port;
  port.max_mtu = Mtu::mtu4096;
  port.active_mtu = Mtu::mtu1024;
  port.max_msg_size = 1u << 30;

  DeviceCaps caps = caps_from_attrs(attr, &port);
  CHECK(caps.max_qp == 131072);
  CHECK(caps.max_qp_wr == 32768);
  CHECK(caps.max_send_sge == 30);
  CHECK(caps.max_recv_sge == 30);
  CHECK(caps.max_cq == 16777216);
  CHECK(caps.max_cqe == 4194303);
  CHECK(caps.max_mr == 16777216);
  CHECK(caps.max_mr_size == ~uint64_t{0});
  CHECK(caps.max_pd == 16777216);
  CHECK(caps.max_srq == 8388608);
  CHECK(caps.max_srq_wr == 32767);
  CHECK(caps.max_qp_rd_atom == 16);
  CHECK(caps.max_qp_init_rd_atom == 255);
  CHECK(caps.max_msg_size == (1u << 30));
  CHECK(caps.max_mtu == Mtu::mtu4096);
  CHECK(caps.active_mtu == Mtu::mtu1024);
  CHECK(caps.max_inline_data == 0);  // probed separately

  attr.max_qp = -1;  // a provider reporting nonsense
  CHECK(caps_from_attrs(attr, nullptr).max_qp == 0);
}
