// SPDX-License-Identifier: BSD-3-Clause
// The fault specification's parser: every kind and field it takes, and the one-line refusal
// of each bad clause, naming the clause, the field and what the field accepts.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "faults/spec.h"

using namespace rnicdv;
using namespace rnicdv::sim::faults;

namespace {

hw::IpAddress ip(const char* text) {
  Result<hw::IpAddress> a = hw::IpAddress::parse(text);
  REQUIRE(a.is_ok());
  return *a;
}

FaultSpec ok(const std::string& text) {
  Result<FaultSpec> r = parse_fault_spec(text);
  INFO(text);
  if (!r) FAIL(r.status().message());
  return std::move(r).value();
}

std::string refused(const std::string& text) {
  Result<FaultSpec> r = parse_fault_spec(text);
  INFO(text);
  REQUIRE_FALSE(r);
  CHECK(r.status().code() == Errc::invalid_argument);
  const std::string m = r.status().message();
  CHECK(m.find('\n') == std::string::npos);  // one line
  return m;
}

}  // namespace

TEST_CASE("an empty specification, or only comments and blanks, asks for nothing") {
  CHECK(ok("").empty());
  CHECK(ok("  ;; \n # nothing here\n").empty());
  CHECK_FALSE(ok("# a comment\ndrop p=0.5  # and another\n").empty());
}

TEST_CASE("frame clauses take their trigger, selectors and parameters") {
  const FaultSpec s = ok(
      "seed=42; log=/tmp/x.jsonl\n"
      "drop p=0.02 dir=request\n"
      "duplicate nth=3 qp=0x12 opcode=write,read\n"
      "reorder every=5 after=10 count=4 hold=40us from=127.0.0.2 to=127.0.0.3\n"
      "corrupt p=1 device=1\n"
      "delay p=0.5 max=2ms dir=response\n"
      "drop mad=rep,rtu count=2");
  CHECK(s.seed_given);
  CHECK(s.seed == 42);
  CHECK(s.log_path == "/tmp/x.jsonl");
  REQUIRE(s.frames.size() == 6);
  CHECK(s.frames[0].action == FrameAction::drop);
  CHECK(s.frames[0].when.probability == 0.02);
  CHECK(s.frames[0].match.opcodes == op::requests);
  CHECK(s.frames[1].action == FrameAction::duplicate);
  CHECK(s.frames[1].when.nth == 3);
  CHECK(s.frames[1].match.qpn == 0x12);
  CHECK(s.frames[1].match.opcodes == (op::write | op::read));
  CHECK(s.frames[2].when.every == 5);
  CHECK(s.frames[2].when.after == 10);
  CHECK(s.frames[2].when.count == 4);
  CHECK(s.frames[2].hold_ns == 40'000);
  CHECK(s.frames[2].match.from == hw::IpAddress::v4(0x7F000002u));
  CHECK(s.frames[2].match.to == hw::IpAddress::v4(0x7F000003u));
  CHECK(s.frames[0].match.from.is_unspecified());  // not given: any
  CHECK(s.frames[0].match.to.is_unspecified());
  CHECK(s.frames[3].match.device == 1);
  CHECK(s.frames[4].max_delay_ns == 2'000'000);
  CHECK(s.frames[4].match.opcodes == op::responses);
  CHECK(s.frames[5].match.opcodes == op::mad);
  REQUIRE(s.frames[5].match.mads.size() == 2);
  CHECK(s.frames[5].match.mads[0] == 0x0013);  // REP (IBA 12.6, Table 103)
  CHECK(s.frames[5].match.mads[1] == 0x0014);  // RTU
  CHECK(s.frames[5].when.every == 1);  // count= alone: the first N matches
  CHECK(s.frames[5].when.count == 2);
}

TEST_CASE("link, wr and cm clauses take their fields, with their defaults") {
  const FaultSpec s = ok(
      "port-down at=5ms for=20ms device=0; port-up after=1000; fatal at=1s device=1\n"
      "wr status=remote_access opcode=send\n"
      "wr status=rnr_retry nth=3 qp=7; wr status=loc_len p=0.1\n"
      "cm-reject reason=7 nth=2; cm-dreq at=30ms addr=127.0.0.9");
  REQUIRE(s.links.size() == 3);
  CHECK(s.links[0].action == LinkAction::port_down);
  CHECK(s.links[0].at_ns == 5'000'000);
  CHECK(s.links[0].for_ns == 20'000'000);
  CHECK(s.links[0].device == 0);
  CHECK(s.links[1].action == LinkAction::port_up);
  CHECK(s.links[1].after_frames == 1000);
  CHECK(s.links[1].device == kAnyDevice);
  CHECK(s.links[2].action == LinkAction::fatal);
  CHECK(s.links[2].at_ns == 1'000'000'000);
  REQUIRE(s.wrs.size() == 3);
  CHECK(s.wrs[0].status == ChosenStatus::remote_access);
  CHECK(s.wrs[0].when.nth == 1);  // the first, once, unless told otherwise
  CHECK(s.wrs[0].when.count == 1);
  CHECK(s.wrs[0].opcodes == op::send);
  CHECK(s.wrs[1].status == ChosenStatus::rnr_retry);
  CHECK(s.wrs[1].when.nth == 3);
  CHECK(s.wrs[1].qpn == 7);
  CHECK(s.wrs[2].status == ChosenStatus::local_length);  // the short spelling
  CHECK(s.wrs[2].when.count == kUnlimited);
  REQUIRE(s.cms.size() == 2);
  CHECK(s.cms[0].action == CmAction::reject);
  CHECK(s.cms[0].reason == 7);
  CHECK(s.cms[0].when.nth == 2);
  CHECK(s.cms[1].action == CmAction::dreq);
  CHECK(s.cms[1].at_ns == 30'000'000);
  CHECK(s.cms[1].when.nth == 1);
  CHECK(s.cms[1].addr == hw::IpAddress::v4(0x7F000009u));
  CHECK(s.cms[0].addr.is_unspecified());
}

TEST_CASE("from=, to= and addr= take IPv6 addresses as well as IPv4 ones") {
  const FaultSpec s = ok(
      "drop nth=2 from=fd00::1 to=fd00:0:0:1::2; delay p=1 to=::ffff:127.0.0.3\n"
      "port-down at=1ms addr=fe80::2; wr status=retry addr=2001:db8::7\n"
      "cm-reject addr=fd00::9");
  REQUIRE(s.frames.size() == 2);
  CHECK(s.frames[0].match.from == ip("fd00::1"));
  CHECK(s.frames[0].match.from.is_v6());
  CHECK(s.frames[0].match.to == ip("fd00:0:0:1::2"));
  // The IPv4-mapped spelling is the IPv4 address: a frame between IPv4 devices matches it.
  CHECK(s.frames[1].match.to == hw::IpAddress::v4(0x7F000003u));
  REQUIRE(s.links.size() == 1);
  CHECK(s.links[0].addr == ip("fe80::2"));
  REQUIRE(s.wrs.size() == 1);
  CHECK(s.wrs[0].addr == ip("2001:db8::7"));
  REQUIRE(s.cms.size() == 1);
  CHECK(s.cms[0].addr == ip("fd00::9"));
}

TEST_CASE("a bad clause is refused in one line that names the clause, the field and the range") {
  struct Case {
    const char* spec;
    const char* says;
  };
  const Case cases[] = {
      {"drop p=2", "clause 1 'drop p=2': p: '2' is not a probability in [0, 1]"},
      {"drop p=nan", "p: 'nan' is not a probability in [0, 1]"},
      {"drop p=0.1; dup p=0.1", "clause 2 'dup p=0.1': 'dup' is not a kind of fault"},
      {"drop", "say when: p=P (a probability), nth=N, every=N, or count=N (the first N)"},
      {"drop p=0.1 nth=2", "give one of p=, nth= and every=, not several"},
      {"drop nth=0", "nth: 0 is not in [1, "},
      {"drop every=-3", "every: '-3' is not a whole number in [1, "},
      {"drop p=0.1 qp=0x1000000", "qp: 16777216 is not in [1, 16777215]"},
      {"drop p=0.1 opcode=writ", "opcode: 'writ' is not one of send, write, read"},
      {"drop p=0.1 mad=rtuu", "mad: 'rtuu' is not one of req, mra, rej, rep, rtu"},
      {"drop p=0.1 dir=sideways", "dir: 'sideways' is not one of request, response, any"},
      {"drop p=0.1 dir=response mad=rtu", "mad: CM MADs are not among the opcodes"},
      {"drop p=0.1 from=127.0.0.300", "from: '127.0.0.300' is not an IPv4 or IPv6 address"},
      {"drop p=0.1 to=fd00::1::2", "to: 'fd00::1::2' is not an IPv4 or IPv6 address"},
      {"drop p=0.1 to=fe80::1%eth0", "to: 'fe80::1%eth0' is not an IPv4 or IPv6 address"},
      {"drop p=0.1 from=0.0.0.0", "from: '0.0.0.0' names no device (leave from= out to match any)"},
      {"drop p=0.1 device=64", "device: 64 is not in [0, 63]"},
      {"drop p=0.1 max=1ms", "max: not a field of 'drop' (it takes p, nth, every"},
      {"drop p=0.1 p=0.2", "p: given twice"},
      {"drop p=0.1 oops", "oops: expected key=value"},
      {"delay p=0.1 max=5", "max: '5' is not a time (a number and ns, us, ms or s, up to 86400s)"},
      {"delay p=0.1 max=0ns", "max: must be more than 0ns"},
      {"port-down", "say when: at=TIME (from the start) or after=N (frames the device sent)"},
      {"port-down at=1ms after=5", "say when: at=TIME"},
      {"port-up at=1ms for=2ms", "for: not a field of 'port-up' (it takes at, after, device, addr)"},
      {"wr nth=2", "status: missing (remote_access, remote_operation, rnr_retry, retry"},
      {"wr status=bogus", "status: 'bogus' is not one of remote_access"},
      {"wr status=retry opcode=ack", "opcode: 'ack' names opcodes this kind does not count"},
      {"cm-reject reason=0", "reason: 0 is not in [1, 33]"},
      {"wr status=retry addr=10.0.0", "addr: '10.0.0' is not an IPv4 or IPv6 address"},
      {"port-up at=1ms addr=::", "addr: '::' names no device (leave addr= out to match any)"},
      {"cm-dreq nth=1", "at: missing (a time from the start, e.g. at=20ms)"},
      {"seed=x", "seed: 'x' is not a whole number"},
      {"seed=1; seed=2", "clause 2 'seed=2': seed: given twice"},
      {"seed=1 log=/tmp/x", "a setting stands alone in its clause"},
      {"colour=red", "colour: not a setting (seed, log) nor a kind of fault"},
  };
  for (const Case& c : cases) {
    const std::string m = refused(c.spec);
    INFO("spec: " << c.spec << "\nmessage: " << m);
    CHECK(m.rfind("fault spec: clause ", 0) == 0);
    CHECK(m.find(c.says) != std::string::npos);
  }
}

TEST_CASE("the specification comes from the configuration, the environment, or a file it names") {
  std::string source;
  ::unsetenv("RNICDV_SIM_FAULTS");
  Result<FaultSpec> none = fault_spec_from("", &source);
  REQUIRE(none);
  CHECK(none.value().empty());

  ::setenv("RNICDV_SIM_FAULTS", "drop p=0.25", 1);
  Result<FaultSpec> env = fault_spec_from("", &source);
  REQUIRE(env);
  CHECK(source == "RNICDV_SIM_FAULTS");
  REQUIRE(env.value().frames.size() == 1);
  CHECK(env.value().frames[0].when.probability == 0.25);

  Result<FaultSpec> given = fault_spec_from("duplicate nth=1", &source);  // beats the env
  REQUIRE(given);
  CHECK(source == "configuration");
  CHECK(given.value().frames[0].action == FrameAction::duplicate);

  char path[] = "/tmp/rnicdv-fault-spec-XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  ::close(fd);
  std::ofstream(path) << "# a schedule\nseed=9\nwr status=retry nth=2\n";
  ::setenv("RNICDV_SIM_FAULTS", (std::string("@") + path).c_str(), 1);
  Result<FaultSpec> file = fault_spec_from("", &source);
  REQUIRE(file);
  CHECK(source == path);
  CHECK(file.value().seed == 9);
  CHECK(file.value().wrs.size() == 1);

  ::setenv("RNICDV_SIM_FAULTS", "drop p=3", 1);
  Result<FaultSpec> bad = fault_spec_from("", &source);
  REQUIRE_FALSE(bad);
  CHECK(bad.status().message().rfind("RNICDV_SIM_FAULTS: fault spec: clause 1", 0) == 0);

  ::setenv("RNICDV_SIM_FAULTS", "@/nonexistent/spec", 1);
  Result<FaultSpec> missing = fault_spec_from("", &source);
  REQUIRE_FALSE(missing);
  CHECK(missing.status().message().find("cannot read the fault spec file '/nonexistent/spec'") !=
        std::string::npos);
  ::unsetenv("RNICDV_SIM_FAULTS");
  std::remove(path);
}
