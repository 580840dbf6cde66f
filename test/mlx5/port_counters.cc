// SPDX-License-Identifier: BSD-3-Clause
// The mlx5 backend's port counters, read from the kernel's sysfs files
// (<class>/<device>/ports/<port>/<name>): here a directory laid out as the kernel lays it out.
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <string>

#include "mlx5_port.h"

using namespace rnicdv;
using rnicdv::hw::mlx5::read_port_counter_file;

namespace {

struct SysfsDir {
  SysfsDir() {
    char tmpl[] = "/tmp/rnicdv-counters-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    root = tmpl;
    for (const char* d : {"/mlx5_0", "/mlx5_0/ports", "/mlx5_0/ports/1",
                          "/mlx5_0/ports/1/counters", "/mlx5_0/ports/1/hw_counters"})
      REQUIRE(::mkdir((root + d).c_str(), 0755) == 0);
  }
  ~SysfsDir() {
    const std::string rm = "rm -rf '" + root + "'";
    [[maybe_unused]] const int r = std::system(rm.c_str());
  }
  void put(const std::string& rel, const std::string& text) {
    FILE* f = std::fopen((root + "/mlx5_0/ports/1/" + rel).c_str(), "w");
    REQUIRE(f != nullptr);
    std::fputs(text.c_str(), f);
    std::fclose(f);
  }
  std::string root;
};

}  // namespace

TEST_CASE("a port counter is the number in its sysfs file, read afresh each time", "[counters]") {
  SysfsDir s;
  s.put("counters/port_xmit_data", "18446744073709551615\n");  // a 64-bit counter at its top
  s.put("hw_counters/out_of_buffer", "7\n");
  Result<uint64_t> v = read_port_counter_file(s.root, "mlx5_0", 1, "counters/port_xmit_data");
  REQUIRE(v);
  CHECK(v.value() == UINT64_MAX);
  v = read_port_counter_file(s.root, "mlx5_0", 1, "hw_counters/out_of_buffer");
  REQUIRE(v);
  CHECK(v.value() == 7);
  s.put("hw_counters/out_of_buffer", "12\n");
  CHECK(read_port_counter_file(s.root, "mlx5_0", 1, "hw_counters/out_of_buffer").value() == 12);
}

TEST_CASE("counter names that leave the port's directory, missing counters and files without a "
          "number are refused, naming the device, port and counter",
          "[counters]") {
  SysfsDir s;
  s.put("counters/port_rcv_data", "not a number\n");
  for (const char* bad : {"", "/etc/passwd", "../../../etc/passwd", "counters/../../state",
                          "counters//port_rcv_data", "counters/", "./counters/port_rcv_data"}) {
    INFO("name '" << bad << "'");
    Result<uint64_t> v = read_port_counter_file(s.root, "mlx5_0", 1, bad);
    REQUIRE_FALSE(v);
    CHECK(v.status().code() == Errc::invalid_argument);
    CHECK_THAT(v.status().message(), Catch::StartsWith("mlx5_0: read_port_counter: port 1") &&
                                         Catch::Contains("not a counter's name"));
  }
  Result<uint64_t> v = read_port_counter_file(s.root, "mlx5_0", 1, "hw_counters/no_such");
  REQUIRE_FALSE(v);
  CHECK(v.status().code() == Errc::invalid_argument);
  CHECK_THAT(v.status().message(),
             Catch::Contains("counter 'hw_counters/no_such'") &&
                 Catch::Contains("/mlx5_0/ports/1/hw_counters/no_such: No such file"));
  v = read_port_counter_file(s.root, "mlx5_0", 2, "counters/port_rcv_data");
  REQUIRE_FALSE(v);
  CHECK_THAT(v.status().message(), Catch::Contains("port 2"));
  v = read_port_counter_file(s.root, "mlx5_0", 1, "counters/port_rcv_data");
  REQUIRE_FALSE(v);
  CHECK(v.status().code() == Errc::io_error);
  CHECK_THAT(v.status().message(), Catch::Contains("does not hold a number"));
}
