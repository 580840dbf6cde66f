// SPDX-License-Identifier: BSD-3-Clause
// pcap capture: file format, one record per frame on the link (after faults), timestamps
// from the wire's clock, crash safety, %p paths, concurrent writers.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "wire/frame.h"
#include "wire/pcap_writer.h"
#include "wire/wire.h"
#include "wire_test_util.h"

using namespace rnicdv;
using namespace rnicdv::sim;
using namespace rnicdv::sim::test;

namespace {

const Endpoint kA{v4(127, 0, 0, 2), 4791};
const Endpoint kB{v4(127, 0, 0, 3), 4791};

struct Fixture {
  explicit Fixture(const std::string& name, FaultConfig faults = {}) {
    path = dir.file(name);
    WireConfig config;
    config.pcap_path = path;
    config.clock = &clock;
    config.faults = faults;
    auto made = make_inproc_wire(config);
    REQUIRE(made.is_ok());
    wire = std::move(made.value());
    REQUIRE(wire->attach(kA, &a).is_ok());
    REQUIRE(wire->attach(kB, &b).is_ok());
  }
  void send(const std::vector<uint8_t>& d) { wire->transmit(kA, kB, d.data(), d.size()); }

  TempDir dir;
  std::string path;
  VirtualClock clock;
  RecordingSink a, b;
  std::unique_ptr<Wire> wire;
};

ParsedRoceFrame parse_ok(const PcapRecord& r) {
  ParsedRoceFrame p;
  REQUIRE(parse_roce_frame(r.bytes.data(), r.bytes.size(), &p) == FrameError::ok);
  return p;
}

}  // namespace

TEST_CASE("The capture is a nanosecond Ethernet pcap with one record per frame sent", "[pcap]") {
  Fixture f("capture.pcap");
  const auto d1 = datagram(0x04, 0x11, 1, {}, {1, 2, 3, 4, 5, 6, 7, 8});
  const auto d2 = datagram(0x0A, 0x11, 2, reth(0x7000, 0x1234, 4), {9, 9, 9, 9});
  const auto d3 = datagram(0x11, 0x22, 2, aeth(0x1F, 5), {});
  const uint64_t t1 = f.clock.now_ns();
  f.send(d1);
  f.clock.advance(1500);
  f.send(d2);
  f.clock.advance(1500);
  f.wire->transmit(kB, kA, d3.data(), d3.size());

  // Read while the wire is alive: every record must already be on disk.
  const PcapFile file = read_pcap(f.path);
  CHECK(file.magic == PcapWriter::kMagicNanoseconds);
  CHECK(file.version_major == 2);
  CHECK(file.version_minor == 4);
  CHECK(file.linktype == 1);
  CHECK(file.snaplen >= kMaxRoceFrameLen);
  CHECK_FALSE(file.truncated);
  REQUIRE(file.records.size() == 3);

  const std::vector<uint8_t>* sent[] = {&d1, &d2, &d3};
  for (size_t i = 0; i < 3; ++i) {
    const ParsedRoceFrame p = parse_ok(file.records[i]);
    CHECK(std::vector<uint8_t>(p.datagram, p.datagram + p.datagram_len) == *sent[i]);
    CHECK(roce_frame_icrc_ok(p));
    CHECK(file.records[i].ts_ns == t1 + 1500 * i);
  }
  CHECK(parse_ok(file.records[0]).src == kA);
  CHECK(parse_ok(file.records[0]).dst == kB);
  CHECK(parse_ok(file.records[2]).src == kB);
  // Capture does not depend on delivery.
  CHECK(f.wire->poll(kB, 8) == 2);
  CHECK(read_pcap(f.path).records.size() == 3);
}

TEST_CASE("Frames dropped by a fault are not captured, duplicates are captured twice", "[pcap]") {
  FaultConfig drop;
  drop.drop = 1.0;
  Fixture dropped("drop.pcap", drop);
  for (uint32_t i = 0; i < 5; ++i) dropped.send(tagged_datagram(0, i));
  CHECK(read_pcap(dropped.path).records.empty());

  FaultConfig dup;
  dup.duplicate = 1.0;
  Fixture duplicated("dup.pcap", dup);
  duplicated.send(tagged_datagram(0, 1));
  const PcapFile file = read_pcap(duplicated.path);
  REQUIRE(file.records.size() == 2);
  CHECK(file.records[0].bytes == file.records[1].bytes);
}

TEST_CASE("Corrupted frames are captured as corrupted", "[pcap]") {
  FaultConfig corrupt;
  corrupt.corrupt = 1.0;
  Fixture f("corrupt.pcap", corrupt);
  const auto d = tagged_datagram(0, 1, 200);
  for (int i = 0; i < 20; ++i) f.send(d);
  const PcapFile file = read_pcap(f.path);
  REQUIRE(file.records.size() == 20);
  for (const PcapRecord& r : file.records) {
    const ParsedRoceFrame p = parse_ok(r);  // the headers are intact
    CHECK_FALSE(roce_frame_icrc_ok(p));
    // Exactly one byte of datagram + ICRC differs from the clean frame.
    std::vector<uint8_t> clean(kMaxRoceFrameLen);
    clean.resize(build_roce_frame(kA, kB, d.data(), d.size(), clean.data(), clean.size()));
    REQUIRE(clean.size() == r.bytes.size());
    size_t differing = 0;
    for (size_t i = 0; i < clean.size(); ++i) differing += clean[i] != r.bytes[i];
    CHECK(differing == 1);
  }
  CHECK(f.wire->poll(kB, 64) == 0);
  CHECK(f.wire->counters().dropped_icrc == 20);
}

TEST_CASE("A held-back frame is captured when it leaves, stamped with that time", "[pcap]") {
  FaultConfig delay;
  delay.delay = 1.0;
  delay.max_delay_ns = 10'000;
  Fixture f("delay.pcap", delay);
  f.send(tagged_datagram(0, 1));
  CHECK(f.wire->poll(kB, 8) == 0);
  CHECK(read_pcap(f.path).records.empty());
  const uint64_t due = f.wire->next_delivery_ns(kB);
  REQUIRE(due != UINT64_MAX);
  f.clock.set(due + 123);
  CHECK(f.wire->poll(kB, 8) == 1);
  const PcapFile file = read_pcap(f.path);
  REQUIRE(file.records.size() == 1);
  CHECK(file.records[0].ts_ns == due + 123);
  CHECK(roce_frame_icrc_ok(parse_ok(file.records[0])));
}

TEST_CASE("Frames to an address with no sink are still captured", "[pcap]") {
  Fixture f("nosink.pcap");
  const auto d = tagged_datagram(0, 1);
  f.wire->transmit(kA, Endpoint{v4(127, 0, 0, 99), 4791}, d.data(), d.size());
  CHECK(f.wire->counters().dropped_no_sink == 1);
  const PcapFile file = read_pcap(f.path);
  REQUIRE(file.records.size() == 1);
  CHECK(parse_ok(file.records[0]).dst.ip.ipv4() == ipv4(127, 0, 0, 99));
}

TEST_CASE("%p in the pcap path becomes the process id", "[pcap]") {
  TempDir dir;
  const std::string pid = std::to_string(::getpid());
  CHECK(PcapWriter::expand_path("/x/run-%p.pcap") == "/x/run-" + pid + ".pcap");
  CHECK(PcapWriter::expand_path("%p-%p") == pid + "-" + pid);
  CHECK(PcapWriter::expand_path("plain%") == "plain%");

  WireConfig config;
  config.pcap_path = dir.file("wire-%p.pcap");
  auto made = make_inproc_wire(config);
  REQUIRE(made.is_ok());
  struct stat st;
  CHECK(::stat(dir.file("wire-" + pid + ".pcap").c_str(), &st) == 0);
  CHECK(::stat(dir.file("wire-%p.pcap").c_str(), &st) != 0);
}

TEST_CASE("Two processes given one pcap path write two whole captures, not one corrupt file",
          "[pcap]") {
  CHECK(PcapWriter::per_process_path("/tmp/x.pcap").find("/tmp/x.") == 0);
  CHECK(PcapWriter::per_process_path("/tmp/x.pcap").rfind(".pcap") ==
        PcapWriter::per_process_path("/tmp/x.pcap").size() - 5);
  CHECK(PcapWriter::per_process_path("/d.x/cap") ==
        "/d.x/cap." + std::to_string(::getpid()));
  CHECK(PcapWriter::per_process_path(".pcap") == ".pcap." + std::to_string(::getpid()));

  Fixture f("shared.pcap");
  const auto d = datagram(0x04, 0x11, 1, {}, {1, 2, 3, 4});
  f.send(d);
  f.send(d);
  f.send(d);
  // A second process configured with the same path, while this one captures.
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    WireConfig config;
    config.pcap_path = f.path;
    auto made = make_inproc_wire(config);
    if (!made.is_ok()) ::_exit(2);
    RecordingSink sink;
    if (!(*made)->attach(kB, &sink).is_ok()) ::_exit(3);
    const auto e = datagram(0x04, 0x11, 7, {}, {9, 9});
    for (int i = 0; i < 5; ++i) (*made)->transmit(kA, kB, e.data(), e.size());
    made.value().reset();
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  f.send(d);
  // This process's capture was neither truncated nor written into by the other.
  const PcapFile mine = read_pcap(f.path);
  CHECK_FALSE(mine.truncated);
  CHECK(mine.records.size() == 4);
  // The other process wrote its own file beside it.
  const std::string theirs_path = f.dir.file("shared." + std::to_string(child) + ".pcap");
  const PcapFile theirs = read_pcap(theirs_path);
  CHECK_FALSE(theirs.truncated);
  REQUIRE(theirs.records.size() == 5);
  for (const PcapRecord& r : theirs.records) CHECK(roce_frame_icrc_ok(parse_ok(r)));
}

TEST_CASE("A pcap path that cannot be opened fails the wire factory clearly", "[pcap]") {
  TempDir dir;
  WireConfig config;
  config.pcap_path = dir.file("no/such/dir/x.pcap");
  auto inproc = make_inproc_wire(config);
  REQUIRE_FALSE(inproc.is_ok());
  CHECK(inproc.status().code() == Errc::io_error);
  CHECK_THAT(inproc.status().message(), Catch::Contains("no/such/dir/x.pcap"));
  CHECK_THAT(inproc.status().message(), Catch::Contains("No such file or directory"));
  auto udp = make_udp_wire(config);
  REQUIRE_FALSE(udp.is_ok());
  CHECK(udp.status().code() == Errc::io_error);
  CHECK_THAT(udp.status().message(), Catch::StartsWith("udp wire: pcap"));
}

TEST_CASE("Concurrent transmitters append whole, well-formed records", "[pcap]") {
  Fixture f("threads.pcap");
  constexpr uint32_t kThreads = 4, kFrames = 1500;
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&f, t] {
      for (uint32_t i = 0; i < kFrames; ++i) {
        const auto d = tagged_datagram(t, i, 16 + (i * 37) % 1000);
        f.wire->transmit(Endpoint{v4(127, 0, 1, uint8_t(t)), 4791}, kB, d.data(), d.size());
      }
    });
  }
  for (auto& t : threads) t.join();
  const PcapFile file = read_pcap(f.path);
  CHECK_FALSE(file.truncated);
  REQUIRE(file.records.size() == kThreads * kFrames);
  std::vector<uint32_t> next(kThreads, 0);
  for (const PcapRecord& r : file.records) {
    const ParsedRoceFrame p = parse_ok(r);
    REQUIRE(roce_frame_icrc_ok(p));
    const std::vector<uint8_t> d(p.datagram, p.datagram + p.datagram_len);
    const uint32_t t = tag_stream(d);
    REQUIRE(t < kThreads);
    CHECK(tag_index(d) == next[t]++);  // each thread's records in its own order
  }
}
