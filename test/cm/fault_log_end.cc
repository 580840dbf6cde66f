// SPDX-License-Identifier: BSD-3-Clause
// The fault log's last line: when the fabric goes, the schedule writes one line of kind
// "end" with the counters of every device that was on it, summed, so that a run under faults
// shows what they cost (here: the retransmissions that repaired the dropped SENDs). And "%p"
// in log= names a log of the process's own.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "cm_env.h"

using namespace rnicdv;
using namespace rnicdv::test;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

uint64_t field_num(const std::string& line, const std::string& key) {
  const std::string k = "\"" + key + "\":";
  const size_t at = line.find(k);
  REQUIRE(at != std::string::npos);
  return std::stoull(line.substr(at + k.size()));
}

std::string last_line(const std::string& text) {
  REQUIRE(!text.empty());
  REQUIRE(text.back() == '\n');
  const size_t start = text.rfind('\n', text.size() - 2);
  return text.substr(start == std::string::npos ? 0 : start + 1);
}

}  // namespace

TEST_CASE("the fault log ends with the devices' counters summed, retransmissions included") {
  const std::string dir = std::filesystem::temp_directory_path().string();
  const std::string pattern = dir + "/rnicdv-fault-log-end-%p.jsonl";
  const std::string path = dir + "/rnicdv-fault-log-end-" + std::to_string(::getpid()) + ".jsonl";
  uint64_t retransmits = 0, timeouts = 0, packets_tx = 0;
  {
    sim::FabricConfig fc;
    fc.mode = sim::ExecMode::deterministic;
    fc.wire = sim::WireKind::inproc;
    fc.fault_spec = "seed=5; log=" + pattern + "; drop p=0.1 opcode=send";
    auto fabric = take(sim::Fabric::create(fc));
    CHECK(fabric->fault_log_path() == path);  // %p: this process's ID
    Side a = make_side(fabric);
    Side b = make_side(fabric);
    Listener l = take(Listener::listen(*b.dev, "", kCmPort));
    Connection ca = take(Connection::connect(*a.qp, b.ip(), kCmPort, {}, quick_options()));
    ConnectionEvent req = wait_event(l);
    Connection cb = take(req.request->accept(*b.qp));
    REQUIRE(wait_event(ca).type == ConnectionEventType::established);
    REQUIRE(wait_event(cb).type == ConnectionEventType::established);
    for (uint32_t i = 0; i < 40; ++i) REQUIRE(b.post_recv(100 + i, i) == Errc::ok);
    for (uint32_t i = 0; i < 40; ++i) REQUIRE(a.post_send(i, i) == Errc::ok);
    REQUIRE(a.wait_completions(40));
    REQUIRE(b.wait_completions(40));
    a.check_each_once(0, 40, IBV_WC_SUCCESS);
    const sim::DeviceCounters ka = a.sim->counters(), kb = b.sim->counters();
    retransmits = ka.retransmits + kb.retransmits;
    timeouts = ka.timeouts + kb.timeouts;
    packets_tx = ka.packets_tx + kb.packets_tx;
    const std::string text = read_file(path);
    CHECK(text.find("\"fault\":\"drop\"") != std::string::npos);
    CHECK(text.find("\"kind\":\"end\"") == std::string::npos);  // not before the end
  }
  const std::string text = read_file(path);
  std::filesystem::remove(path);
  REQUIRE(retransmits > 0);
  const std::string end = last_line(text);
  INFO(end);
  REQUIRE(end.find("\"kind\":\"end\"") != std::string::npos);
  CHECK(field_num(end, "devices") == 2);
  CHECK(field_num(end, "retransmits") == retransmits);
  CHECK(field_num(end, "timeouts") == timeouts);
  // The connection's teardown (DREQ, DREP) still sends after the counters above were read.
  CHECK(field_num(end, "packets_tx") >= packets_tx);
}
