// SPDX-License-Identifier: BSD-3-Clause
// A fabric's fault schedule at run time: the parsed specification, the seed, a counter per
// rule, and the JSON-lines log of every fault injected.
//
// The wire asks it about each frame it transmits (plan_frame); the devices ask it about each
// WR they fetch or request they receive (take_wr_fault), about link events (links()) and about
// CM faults (take_cm_reject, cm_dreq rules). Every decision that fires writes one log line.
//
// Determinism: every random draw is a function of (seed, rule, match number), and every count
// is per rule. A deterministic fabric calls in one order, so the same seed and the same
// program produce the same decisions and the same log, byte for byte (times are the fabric's
// virtual clock). In threaded mode the counts stay exact, but which frame is the Nth depends
// on thread timing.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "faults/spec.h"
#include "rnicdv/hw/ip_address.h"
#include "rnicdv/sim/sim.h"
#include "rnicdv/status.h"

namespace rnicdv::sim {

class Clock;
struct Endpoint;
using hw::IpAddress;
struct FaultPlan;

namespace faults {

// One JSON object per line, written whole under a lock.
class FaultLog {
 public:
  // Opens (truncates) `path`; empty: a log that writes nothing.
  static Result<std::unique_ptr<FaultLog>> open(const std::string& path);
  ~FaultLog();
  FaultLog(const FaultLog&) = delete;
  FaultLog& operator=(const FaultLog&) = delete;

  bool enabled() const noexcept { return file_ != nullptr; }
  // Times given to Line are on the fabric's clock; the log writes them from this origin (the
  // schedule's start), so that a threaded run's log reads from 0 as a deterministic one does.
  void set_origin(uint64_t origin_ns) noexcept { origin_ns_ = origin_ns; }
  const std::string& path() const noexcept { return path_; }

  // Builds one line: Line(log, t_ns, "frame").str("fault", "drop").num("qpn", 5); written
  // when the Line goes out of scope. Keys and string values are written escaped.
  class Line {
   public:
    Line(FaultLog& log, uint64_t t_ns, std::string_view kind);
    ~Line();
    Line(const Line&) = delete;
    Line& operator=(const Line&) = delete;
    Line& str(std::string_view key, std::string_view value);
    Line& num(std::string_view key, uint64_t value);
    Line& hex(std::string_view key, uint64_t value);  // "0x1a"

   private:
    void key(std::string_view k);
    FaultLog& log_;
    std::string text_;
  };

 private:
  explicit FaultLog(std::string path) : path_(std::move(path)) {}
  void write(const std::string& line);
  std::string path_;
  std::FILE* file_ = nullptr;
  uint64_t origin_ns_ = 0;
  std::mutex mu_;
};

// Which side of an RC exchange asks take_wr_fault.
enum class WrSite : uint8_t { requester, responder };

class FaultSchedule {
 public:
  // `clock` (the fabric's) outlives the schedule. The log goes to spec.log_path (each "%p" in
  // it replaced by the process ID), else to
  // `pcap_path` with its extension replaced by ".faults.jsonl", else nowhere.
  static Result<std::unique_ptr<FaultSchedule>> create(FaultSpec spec, uint64_t seed,
                                                       const Clock* clock,
                                                       const std::string& pcap_path);
  ~FaultSchedule();

  const FaultSpec& spec() const noexcept { return spec_; }
  uint64_t seed() const noexcept { return seed_; }
  FaultLog& log() noexcept { return *log_; }
  uint64_t now_ns() const noexcept;
  // Time the schedule started (the fabric's creation), the origin of every at= time.
  uint64_t start_ns() const noexcept { return start_ns_; }

  bool has_frame_rules() const noexcept { return !spec_.frames.empty(); }

  // Which device of the fabric sends from `ip` (the fabric tells the schedule as devices
  // attach; a two-port device's second port, `port2`, is the same device), for the device=
  // selector of frame rules and addr=; kAnyDevice when unknown.
  void note_device(uint32_t device, const IpAddress& ip,
                   const IpAddress& port2 = IpAddress()) noexcept;
  uint32_t device_at(const IpAddress& ip) const noexcept;
  // Whether a rule's device= and addr= (kAnyDevice and the unspecified address: any) name the
  // device `device`.
  bool on_device(uint32_t rule_device, const IpAddress& rule_addr, uint32_t device) const noexcept;

  // Adds this frame's faults to `plan` (which may hold the fabric's FaultConfig draws) and
  // logs each. `datagram` is BTH..pad (no ICRC); `device` is the transmitting device's index,
  // or kAnyDevice when the wire does not know it. A drop clears every other fault.
  void plan_frame(uint64_t frame_index, uint32_t device, const Endpoint& src, const Endpoint& dst,
                  const uint8_t* datagram, size_t len, size_t wire_len, FaultPlan* plan);

  // WR rules (wr status=...): counts the WR (requester) or request message (responder) and
  // returns the status chosen for it, if any. `opcode` is one op:: bit. Logs when it fires.
  // Remote statuses are only returned at the responder, local ones only at the requester.
  std::optional<ChosenStatus> take_wr_fault(WrSite site, uint32_t device, uint32_t qpn,
                                            uint32_t opcode, uint32_t psn);

  // CM rejects: counts the REQ and returns the REJ reason chosen for it, if any. Logs.
  std::optional<uint16_t> take_cm_reject(uint32_t device, const hw::IpAddress& remote);

  // A device leaves the fabric (Hca::stop): its counters join the totals that the schedule
  // writes, as one line of kind "end", when it is destroyed with its fabric: so that a run
  // shows what the faults cost (retransmissions, timeouts, NAKs), whoever ran it.
  void add_device_totals(const DeviceCounters& c);

  // The trigger on its own: counts one match of rule `counter` (an index into the rule's
  // counters) and says whether it fires. Exposed for the link and CM-DREQ rules, whose
  // matches the devices count.
  bool fire(std::atomic<uint64_t>* matches, std::atomic<uint64_t>* fired, const Trigger& t,
            uint64_t stream);

 private:
  FaultSchedule(FaultSpec spec, uint64_t seed, const Clock* clock,
                std::unique_ptr<FaultLog> log);
  struct Counters {
    std::atomic<uint64_t> matches{0};
    std::atomic<uint64_t> fired{0};
  };

  FaultSpec spec_;
  uint64_t seed_;
  const Clock* clock_;
  uint64_t start_ns_;
  std::unique_ptr<FaultLog> log_;
  std::unique_ptr<Counters[]> frame_counters_;
  std::unique_ptr<Counters[]> wr_counters_;
  std::unique_ptr<Counters[]> cm_counters_;
  std::atomic<uint64_t> device_addr_[kMaxDevice + 1] = {};  // hash_of() the device's address
  std::atomic<uint64_t> device_addr2_[kMaxDevice + 1] = {};  // its port 2's; 0: none
  std::mutex totals_mu_;
  DeviceCounters totals_;
  uint64_t devices_ended_ = 0;
};

// A seed for a run that did not give one: from the kernel's random source.
uint64_t fresh_seed() noexcept;

}  // namespace faults
}  // namespace rnicdv::sim
