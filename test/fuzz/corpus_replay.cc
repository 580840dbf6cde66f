// SPDX-License-Identifier: BSD-3-Clause
// Every input of the committed fuzz corpora (test/fuzz/corpus/<target>/: the seeds and any
// input a fuzzer once crashed on) runs through its target in every build, not only the
// fuzzing one, and reaches the code it was written for.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "cm/mad.h"
#include "faults/spec.h"
#include "fuzz_entry.h"
#include "targets.h"

using namespace rnicdv;
namespace fs = std::filesystem;

namespace {

struct Input {
  std::string name;
  std::vector<uint8_t> bytes;
};

fs::path corpus_dir(const char* target) {
  const char* root = std::getenv("RNICDV_SOURCE_ROOT");
  REQUIRE(root != nullptr);
  return fs::path(root) / "test" / "fuzz" / "corpus" / target;
}

std::vector<Input> load(const char* target) {
  std::vector<Input> inputs;
  const fs::path dir = corpus_dir(target);
  INFO("corpus " << dir);
  REQUIRE(fs::is_directory(dir));
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    std::ifstream f(entry.path(), std::ios::binary);
    inputs.push_back({entry.path().filename().string(),
                      std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {})});
  }
  std::sort(inputs.begin(), inputs.end(),
            [](const Input& a, const Input& b) { return a.name < b.name; });
  return inputs;
}

int run(const char* target, const Input& in) {
  for (const fuzz::Target& t : fuzz::targets())
    if (std::string(t.name) == target) return t.run(in.bytes.data(), in.bytes.size());
  FAIL("no fuzz target named " << target);
  return -1;
}

}  // namespace

TEST_CASE("the sq_executor corpus runs and its WQEs are fetched and executed") {
  const auto inputs = load("sq_executor");
  REQUIRE(inputs.size() >= 5);
  const sim::DeviceCounters before = sim::fuzz_requester_counters();
  for (const Input& in : inputs) {
    INFO(in.name);
    CHECK(run("sq_executor", in) == 0);
  }
  const sim::DeviceCounters after = sim::fuzz_requester_counters();
  CHECK(after.wqes_fetched - before.wqes_fetched >= inputs.size());
  CHECK(after.packets_tx > before.packets_tx);    // some reached the wire
  CHECK(after.error_cqes > before.error_cqes);    // some were refused with an error CQE
  CHECK(after.cqes_written > before.cqes_written);
}

TEST_CASE("the receive_path corpus runs and reaches the responder") {
  const auto inputs = load("receive_path");
  REQUIRE(inputs.size() >= 5);
  const sim::DeviceCounters before = sim::fuzz_responder_counters();
  for (const Input& in : inputs) {
    INFO(in.name);
    CHECK(run("receive_path", in) == 0);
    // The UD seed lands in a receive of the harness's UD QP; the wrong Q_Key does not.
    if (in.name == "seed-ud-send-only-imm") CHECK(sim::fuzz_ud_receives_taken() == 1);
    if (in.name == "seed-ud-send-wrong-qkey") CHECK(sim::fuzz_ud_receives_taken() == 0);
    // The UC seeds reach the harness's UC QP: a SEND_ONLY lands in a receive, a MIDDLE with
    // no message in progress is dropped, and so is a WRITE to a key nobody has.
    if (in.name == "seed-uc-send-only-imm") CHECK(sim::fuzz_uc_receives_taken() == 1);
    if (in.name == "seed-uc-send-middle") CHECK(sim::fuzz_uc_receives_taken() == 0);
  }
  CHECK(sim::fuzz_uc_qpn() == sim::kFuzzUcQpn);
  const sim::DeviceCounters after = sim::fuzz_responder_counters();
  const uint64_t received = after.packets_rx - before.packets_rx;
  CHECK(received >= inputs.size());
  CHECK(after.rx_dropped - before.rx_dropped < received);  // not all stopped at the parser
  CHECK(after.cqes_written > before.cqes_written);         // a SEND landed in a receive WQE
  CHECK(after.naks_tx > before.naks_tx);                   // and bad requests were NAKed
  CHECK(after.ud_qkey_drops > before.ud_qkey_drops);       // datagrams reached the UD QP
  CHECK(after.uc_messages_dropped > before.uc_messages_dropped);  // and UC packets the UC QP
}

TEST_CASE("the cm_mad corpus runs and holds every CM message") {
  const auto inputs = load("cm_mad");
  REQUIRE(inputs.size() >= 7);
  std::vector<uint16_t> decoded;
  for (const Input& in : inputs) {
    INFO(in.name);
    CHECK(run("cm_mad", in) == 0);
    auto mad = sim::cm::decode_cm_mad(in.bytes);
    if (mad) decoded.push_back(mad.value().header.attr_id);
  }
  for (auto id : {sim::cm::AttrId::req, sim::cm::AttrId::mra, sim::cm::AttrId::rej,
                  sim::cm::AttrId::rep, sim::cm::AttrId::rtu, sim::cm::AttrId::dreq,
                  sim::cm::AttrId::drep}) {
    INFO(sim::cm::attr_name(static_cast<uint16_t>(id)));
    CHECK(std::count(decoded.begin(), decoded.end(), static_cast<uint16_t>(id)) >= 1);
  }
  CHECK(decoded.size() < inputs.size());  // and malformed MADs are refused
}

TEST_CASE("the cqe_decoder corpus runs") {
  const auto inputs = load("cqe_decoder");
  REQUIRE(inputs.size() >= 3);
  for (const Input& in : inputs) {
    INFO(in.name);
    CHECK(run("cqe_decoder", in) == 0);
  }
}

TEST_CASE("the fault_spec corpus runs, and holds accepted and refused specifications") {
  const auto inputs = load("fault_spec");
  REQUIRE(inputs.size() >= 8);
  size_t accepted = 0;
  for (const Input& in : inputs) {
    INFO(in.name);
    CHECK(run("fault_spec", in) == 0);
    const std::string_view text(reinterpret_cast<const char*>(in.bytes.data()), in.bytes.size());
    accepted += sim::faults::parse_fault_spec(text).is_ok() ? 1 : 0;
  }
  CHECK(accepted > 0);
  CHECK(accepted < inputs.size());
}
