// SPDX-License-Identifier: BSD-3-Clause
// `tools/dev hardware` and its program, tools/hw-qualify (docs/hardware.md), on the simulated
// device rnicsim0 through the uverbs shim: the doorbell experiment must find what the
// simulated device's profile (RNICDV_SIM_PROFILE) makes it do, and with no RDMA device visible
// to rdma-core the command must say so in one line and exit 77.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>
#include <vector>

#include "../rnicperf/subprocess.h"
#include "rnicdv/sim/sim.h"

using rnicperf_test::Child;
using rnicperf_test::ProcessResult;
using rnicperf_test::slurp;

namespace {

std::string env_or_skip(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) {
    std::printf("SKIP: %s is not set (meson sets it)\n", name);
    std::exit(77);
  }
  return v;
}

ProcessResult run(const std::vector<std::string>& args, int timeout_s) {
  std::vector<std::string> argv;
  argv.reserve(args.size() + 1);
  argv.emplace_back("/usr/bin/env");
  for (const std::string& a : args) argv.push_back(a);
  Child c(std::move(argv));
  return c.wait(timeout_s);
}

// The value of a JSON boolean field in `text`.
bool json_bool(const std::string& text, const std::string& field) {
  const std::string key = "\"" + field + "\": ";
  const size_t at = text.find(key);
  INFO(field << " in " << text);
  REQUIRE(at != std::string::npos);
  return text.compare(at + key.size(), 4, "true") == 0;
}

std::string json_text(const std::string& text, const std::string& field) {
  const std::string key = "\"" + field + "\": \"";
  const size_t at = text.find(key);
  INFO(field << " in " << text);
  REQUIRE(at != std::string::npos);
  const size_t end = text.find('"', at + key.size());
  return text.substr(at + key.size(), end - at - key.size());
}

int count_lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

}  // namespace

TEST_CASE("the doorbell experiment finds on the simulated device what its profile makes it do") {
  const std::string hwq = env_or_skip("RNICDV_HW_QUALIFY");
  const std::string shim = env_or_skip("RNICDV_UVERBS_SHIM");
  for (const char* name : {"mlx5", "scanning", "forgetful", "scanning-forgetful"}) {
    DYNAMIC_SECTION("profile " << name) {
      const rnicdv::hw::DeviceProfile expected = rnicdv::sim::parse_profile(name).value();
      const std::string json = "/tmp/hw-qualify-test-" + std::to_string(getpid()) + ".json";
      // A second per stage: "did not run" must not be a loaded machine's slowness (a kept
      // RTR doorbell runs within milliseconds of the move to RTS on an idle one).
      ProcessResult r = run({"LD_PRELOAD=" + shim, std::string("RNICDV_SIM_PROFILE=") + name,
                             "RNICDV_UVERBS_DEVICES=1", hwq, "experiment", "rnicsim0",
                             "--window-ms", "1000", "--json", json},
                            120);
      INFO(r.out << r.err);
      // The backend tells the driver "mlx5" whatever the simulator does underneath: the
      // experiment fails where its evidence says that is wrong for withholding.
      CHECK(r.exit_code == (expected.fetches_beyond_dbr ? 1 : 0));
      const std::string text = slurp(json);
      std::remove(json.c_str());
      CHECK(json_bool(text, "conclusive"));
      CHECK(json_bool(text, "fetches_beyond_dbr") == expected.fetches_beyond_dbr);
      if (expected.fetches_beyond_dbr) {
        // A device that runs unannounced WQEs after RTS runs (c)'s either way: no answer.
        CHECK(text.find("\"keeps_rtr_doorbell\": null") != std::string::npos);
        CHECK(json_text(text, "profile") == std::string("scanning"));
      } else {
        CHECK(json_bool(text, "keeps_rtr_doorbell") == expected.keeps_rtr_doorbell);
        CHECK(json_text(text, "profile") == name);
      }
      CHECK(json_text(text, "withholding") ==
            (expected.fetches_beyond_dbr ? "shadow" : "in_place"));
      CHECK(json_text(text, "backend_profile") == std::string("mlx5"));
      CHECK(json_bool(text, "agrees_with_backend") == !expected.fetches_beyond_dbr);
    }
  }
}

TEST_CASE("tools/dev hardware prints one line and exits 77 when rdma-core sees no device") {
  const std::string root = env_or_skip("RNICDV_SOURCE_ROOT");
  const std::string build = env_or_skip("RNICDV_BUILD_ROOT");
  char dir[] = "/tmp/hw-qualify-empty-sysfs.XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  // libibverbs looks for devices under $SYSFS_PATH/class/infiniband_verbs: none there.
  ProcessResult r = run({"-u", "LD_PRELOAD", std::string("SYSFS_PATH=") + dir, "bash",
                         root + "/tools/dev", "--builddir=" + build, "hardware", "--no-build"},
                        60);
  rmdir(dir);
  INFO(r.out << r.err);
  CHECK(r.exit_code == 77);
  CHECK(r.err.empty());
  CHECK(count_lines(r.out) == 1);
  CHECK(r.out.rfind("no mlx5 device: ibv_get_device_list found no RDMA device", 0) == 0);
}

TEST_CASE("tools/dev hardware --device names a device that does not exist: one line, exit 77") {
  const std::string root = env_or_skip("RNICDV_SOURCE_ROOT");
  const std::string build = env_or_skip("RNICDV_BUILD_ROOT");
  ProcessResult r = run({"-u", "LD_PRELOAD", "RNICDV_UVERBS_DEVICES=1", "bash",
                         root + "/tools/dev", "--builddir=" + build, "hardware", "--no-build",
                         "--sim", "--device", "mlx5_9"},
                        60);
  INFO(r.out << r.err);
  CHECK(r.exit_code == 77);
  CHECK(r.err.empty());
  CHECK(count_lines(r.out) == 1);
  CHECK(r.out == "no mlx5 device: no RDMA device named mlx5_9 (found: rnicsim0)\n");
}
