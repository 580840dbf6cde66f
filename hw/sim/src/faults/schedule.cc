// SPDX-License-Identifier: BSD-3-Clause
#include "faults/schedule.h"

#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstring>

#include "packet/opcode.h"
#include "wire/fault_injector.h"
#include "wire/prng.h"
#include "wire/wire.h"

namespace rnicdv::sim::faults {
namespace {

// Draw streams, so that rules of different kinds never share random numbers.
constexpr uint64_t kFrameStream = 0x6672616d65ull;  // "frame"
constexpr uint64_t kWrStream = 0x77720000ull;
constexpr uint64_t kCmStream = 0x636d0000ull;

// The CM attribute ID of a MAD carried in a UD SEND to QP1: BTH, DETH, then the MAD's common
// header, whose AttributeID is at bytes 16..17 (IBA 13.4.2).
constexpr size_t kMadAttrOffset = pkt::kBthBytes + pkt::kDethBytes + 16;

uint32_t frame_class(const uint8_t* d, size_t len, uint32_t* qpn, uint32_t* psn,
                     uint16_t* mad_attr) {
  *qpn = (uint32_t{d[5]} << 16) | (uint32_t{d[6]} << 8) | d[7];
  *psn = (uint32_t{d[9]} << 16) | (uint32_t{d[10]} << 8) | d[11];
  *mad_attr = 0;
  const pkt::OpcodeInfo& info = pkt::opcode_info(d[0]);
  if (!info.known) return 0;
  switch (info.kind) {
    case pkt::OpKind::send:
      if (d[0] == pkt::opcode::ud_send_only || d[0] == pkt::opcode::ud_send_only_imm) {
        if (*qpn != 1) return op::ud;
        if (len >= kMadAttrOffset + 2)
          *mad_attr = static_cast<uint16_t>((d[kMadAttrOffset] << 8) | d[kMadAttrOffset + 1]);
        return op::mad;
      }
      return op::send;
    case pkt::OpKind::write:
      return op::write;
    case pkt::OpKind::read_request:
      return op::read;
    case pkt::OpKind::atomic:
      return op::atomic;
    case pkt::OpKind::ack:
      return op::ack;
    case pkt::OpKind::read_response:
      return op::read_response;
    case pkt::OpKind::atomic_ack:
      return op::atomic_ack;
    case pkt::OpKind::none:
      break;
  }
  return 0;
}

bool selector_matches(const FrameSelector& s, uint32_t device, const Endpoint& src,
                      const Endpoint& dst, uint32_t cls, uint32_t qpn, uint16_t attr) {
  if ((s.opcodes & cls) == 0) return false;
  if (s.qpn != kAnyQpn && s.qpn != qpn) return false;
  if (!s.mads.empty()) {
    if (cls != op::mad) return false;
    bool any = false;
    for (uint16_t m : s.mads) any |= m == attr;
    if (!any) return false;
  }
  if (!s.from.is_unspecified() && s.from != src.ip) return false;
  if (!s.to.is_unspecified() && s.to != dst.ip) return false;
  if (s.device != kAnyDevice && s.device != device) return false;
  return true;
}

}  // namespace

// ---- the log ----

Result<std::unique_ptr<FaultLog>> FaultLog::open(const std::string& path) {
  std::unique_ptr<FaultLog> log(new FaultLog(path));
  if (path.empty()) return log;
  log->file_ = std::fopen(path.c_str(), "we");
  if (log->file_ == nullptr)
    return Status::error(Errc::invalid_argument, "fault log '%s': cannot open: %s", path.c_str(),
                         std::strerror(errno));
  return log;
}

FaultLog::~FaultLog() {
  if (file_) std::fclose(file_);
}

void FaultLog::write(const std::string& line) {
  if (!file_) return;
  std::lock_guard lock(mu_);
  std::fwrite(line.data(), 1, line.size(), file_);
  std::fflush(file_);  // a run that dies still leaves what it injected
}

FaultLog::Line::Line(FaultLog& log, uint64_t t_ns, std::string_view kind) : log_(log) {
  if (!log_.enabled()) return;
  text_.reserve(160);
  text_ += "{\"t_ns\":";
  text_ += std::to_string(t_ns > log_.origin_ns_ ? t_ns - log_.origin_ns_ : 0);
  str("kind", kind);
}

FaultLog::Line::~Line() {
  if (!log_.enabled()) return;
  text_ += "}\n";
  log_.write(text_);
}

void FaultLog::Line::key(std::string_view k) {
  text_ += ",\"";
  text_ += k;
  text_ += "\":";
}

FaultLog::Line& FaultLog::Line::str(std::string_view k, std::string_view value) {
  if (!log_.enabled()) return *this;
  key(k);
  text_ += '"';
  for (char c : value) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      text_ += '\\';
      text_ += c;
    } else if (u < 0x20) {
      char esc[8];
      std::snprintf(esc, sizeof(esc), "\\u%04x", u);
      text_ += esc;
    } else {
      text_ += c;
    }
  }
  text_ += '"';
  return *this;
}

FaultLog::Line& FaultLog::Line::num(std::string_view k, uint64_t value) {
  if (!log_.enabled()) return *this;
  key(k);
  text_ += std::to_string(value);
  return *this;
}

FaultLog::Line& FaultLog::Line::hex(std::string_view k, uint64_t value) {
  if (!log_.enabled()) return *this;
  char text[24];
  std::snprintf(text, sizeof(text), "0x%" PRIx64, value);
  return str(k, text);
}

// ---- the schedule ----

uint64_t fresh_seed() noexcept {
  uint64_t seed = 0;
  if (::getrandom(&seed, sizeof(seed), GRND_NONBLOCK) != static_cast<ssize_t>(sizeof(seed)))
    seed = SplitMix64::mix(static_cast<uint64_t>(reinterpret_cast<uintptr_t>(&seed)) ^
                           static_cast<uint64_t>(::getpid()));
  return seed;
}

Result<std::unique_ptr<FaultSchedule>> FaultSchedule::create(FaultSpec spec, uint64_t seed,
                                                             const Clock* clock,
                                                             const std::string& pcap_path) {
  std::string path = spec.log_path;
  // "%p" stands for the process ID: processes that share one specification (a server and a
  // client started with the same environment) then write logs of their own.
  for (size_t at = path.find("%p"); at != std::string::npos; at = path.find("%p", at))
    path.replace(at, 2, std::to_string(::getpid()));
  if (path.empty() && !pcap_path.empty()) {
    const size_t slash = pcap_path.rfind('/');
    const size_t dot = pcap_path.rfind('.');
    path = (dot != std::string::npos && (slash == std::string::npos || dot > slash))
               ? pcap_path.substr(0, dot)
               : pcap_path;
    path += ".faults.jsonl";
  }
  RNICDV_ASSIGN_OR_RETURN(std::unique_ptr<FaultLog> log, FaultLog::open(path));
  std::unique_ptr<FaultSchedule> s(new FaultSchedule(std::move(spec), seed, clock, std::move(log)));
  s->log_->set_origin(s->start_ns_);
  FaultLog::Line(s->log(), s->start_ns_, "start").num("seed", seed).str("spec", s->spec_.text);
  return s;
}

FaultSchedule::FaultSchedule(FaultSpec spec, uint64_t seed, const Clock* clock,
                             std::unique_ptr<FaultLog> log)
    : spec_(std::move(spec)),
      seed_(seed),
      clock_(clock),
      start_ns_(clock->now_ns()),
      log_(std::move(log)),
      frame_counters_(new Counters[spec_.frames.size() + 1]),
      wr_counters_(new Counters[spec_.wrs.size() + 1]),
      cm_counters_(new Counters[spec_.cms.size() + 1]) {}

FaultSchedule::~FaultSchedule() {
  // The end of the run: what the devices counted, summed (add_device_totals).
  std::lock_guard lock(totals_mu_);
  const DeviceCounters& c = totals_;
  FaultLog::Line(*log_, now_ns(), "end")
      .num("devices", devices_ended_)
      .num("packets_tx", c.packets_tx)
      .num("packets_rx", c.packets_rx)
      .num("retransmits", c.retransmits)
      .num("timeouts", c.timeouts)
      .num("naks_tx", c.naks_tx)
      .num("naks_rx", c.naks_rx)
      .num("rnr_naks_tx", c.rnr_naks_tx)
      .num("rnr_naks_rx", c.rnr_naks_rx)
      .num("duplicates_rx", c.duplicates_rx)
      .num("rx_dropped", c.rx_dropped)
      .num("comm_est_raised", c.comm_est_raised)
      .num("error_cqes", c.error_cqes);
}

void FaultSchedule::add_device_totals(const DeviceCounters& c) {
  std::lock_guard lock(totals_mu_);
  ++devices_ended_;
  DeviceCounters& t = totals_;
  t.packets_tx += c.packets_tx;
  t.packets_rx += c.packets_rx;
  t.retransmits += c.retransmits;
  t.timeouts += c.timeouts;
  t.naks_tx += c.naks_tx;
  t.naks_rx += c.naks_rx;
  t.rnr_naks_tx += c.rnr_naks_tx;
  t.rnr_naks_rx += c.rnr_naks_rx;
  t.duplicates_rx += c.duplicates_rx;
  t.rx_dropped += c.rx_dropped;
  t.comm_est_raised += c.comm_est_raised;
  t.error_cqes += c.error_cqes;
}

uint64_t FaultSchedule::now_ns() const noexcept {
  return clock_->now_ns();
}

bool FaultSchedule::fire(std::atomic<uint64_t>* matches, std::atomic<uint64_t>* fired,
                         const Trigger& t, uint64_t stream) {
  const uint64_t n = matches->fetch_add(1, std::memory_order_relaxed) + 1;  // 1-based
  if (n <= t.after) return false;
  bool hit;
  if (t.nth != 0) {
    hit = n == t.nth;
  } else if (t.every != 0) {
    hit = (n - t.after) % t.every == 0;
  } else {
    Xoshiro256StarStar rng(seed_ ^ SplitMix64::mix(stream ^ SplitMix64::mix(n)));
    hit = rng.chance(t.probability);
  }
  if (!hit) return false;
  if (t.count == kUnlimited) {
    fired->fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  uint64_t f = fired->load(std::memory_order_relaxed);
  while (f < t.count)
    if (fired->compare_exchange_weak(f, f + 1, std::memory_order_relaxed)) return true;
  return false;
}

void FaultSchedule::note_device(uint32_t device, const IpAddress& ip,
                                const IpAddress& port2) noexcept {
  if (device > kMaxDevice) return;
  device_addr_[device].store(hash_of(ip), std::memory_order_relaxed);
  device_addr2_[device].store(port2.is_unspecified() ? 0 : hash_of(port2),
                              std::memory_order_relaxed);
}

uint32_t FaultSchedule::device_at(const IpAddress& ip) const noexcept {
  const uint64_t h = hash_of(ip);
  for (uint32_t i = 0; i <= kMaxDevice; ++i)
    if (device_addr_[i].load(std::memory_order_relaxed) == h ||
        device_addr2_[i].load(std::memory_order_relaxed) == h)
      return i;
  return kAnyDevice;
}

bool FaultSchedule::on_device(uint32_t rule_device, const IpAddress& rule_addr,
                              uint32_t device) const noexcept {
  if (rule_device != kAnyDevice && rule_device != device) return false;
  if (rule_addr.is_unspecified()) return true;
  if (device > kMaxDevice) return false;
  const uint64_t h = hash_of(rule_addr);
  return device_addr_[device].load(std::memory_order_relaxed) == h ||
         device_addr2_[device].load(std::memory_order_relaxed) == h;
}

void FaultSchedule::plan_frame(uint64_t frame_index, uint32_t device, const Endpoint& src,
                               const Endpoint& dst, const uint8_t* d, size_t len,
                               size_t wire_len, FaultPlan* plan) {
  if (spec_.frames.empty() || plan->drop || len < pkt::kBthBytes) return;
  uint32_t qpn, psn;
  uint16_t attr;
  const uint32_t cls = frame_class(d, len, &qpn, &psn, &attr);
  for (size_t i = 0; i < spec_.frames.size(); ++i) {
    const FrameRule& r = spec_.frames[i];
    if (!selector_matches(r.match, device, src, dst, cls, qpn, attr)) continue;
    Counters& c = frame_counters_[i];
    const uint64_t stream = kFrameStream + (i << 32);
    if (!fire(&c.matches, &c.fired, r.when, stream)) continue;
    // The fault's own parameters come from a stream of the frame's match number, apart from
    // the trigger's draw.
    Xoshiro256StarStar rng(seed_ ^ SplitMix64::mix(stream ^ 0xA5A5 ^
                                                   SplitMix64::mix(c.matches.load(std::memory_order_relaxed))));
    uint64_t detail = 0;
    switch (r.action) {
      case FrameAction::drop:
        *plan = FaultPlan{};
        plan->drop = true;
        break;
      case FrameAction::duplicate:
        plan->copies = 2;
        break;
      case FrameAction::reorder:
        detail = r.hold_ns / 2 + rng.below(r.hold_ns - r.hold_ns / 2 + 1);
        plan->reordered = true;
        plan->hold_ns += detail;
        break;
      case FrameAction::delay:
        detail = 1 + rng.below(r.max_delay_ns);
        plan->delayed = true;
        plan->hold_ns += detail;
        break;
      case FrameAction::corrupt:
        if (!plan->corrupt) {
          FaultInjector::pick_corruption(rng, wire_len, plan);
          detail = plan->corrupt_offset;
        }
        break;
    }
    FaultLog::Line line(*log_, now_ns(), "frame");
    line.str("fault", frame_action_name(r.action)).num("rule", i + 1).num("frame", frame_index);
    line.str("src", src.ip.to_string()).str("dst", dst.ip.to_string()).str("op", opcode_name(cls));
    if (cls == op::mad) line.str("mad", mad_name(attr));
    line.hex("qpn", qpn).num("psn", psn);
    if (r.action == FrameAction::reorder || r.action == FrameAction::delay)
      line.num("hold_ns", detail);
    if (r.action == FrameAction::corrupt) line.num("offset", detail);
    if (plan->drop) return;
  }
}

std::optional<ChosenStatus> FaultSchedule::take_wr_fault(WrSite site, uint32_t device,
                                                         uint32_t qpn, uint32_t opcode,
                                                         uint32_t psn) {
  for (size_t i = 0; i < spec_.wrs.size(); ++i) {
    const WrRule& r = spec_.wrs[i];
    if (chosen_status_is_remote(r.status) != (site == WrSite::responder)) continue;
    if (!on_device(r.device, r.addr, device)) continue;
    if (r.qpn != kAnyQpn && r.qpn != qpn) continue;
    if ((r.opcodes & opcode) == 0) continue;
    Counters& c = wr_counters_[i];
    if (!fire(&c.matches, &c.fired, r.when, kWrStream + (i << 32))) continue;
    FaultLog::Line(*log_, now_ns(), "wr")
        .str("status", chosen_status_name(r.status))
        .num("rule", i + 1)
        .str("site", site == WrSite::requester ? "requester" : "responder")
        .num("device", device)
        .hex("qpn", qpn)
        .str("op", opcode_name(opcode))
        .num("psn", psn)
        .num("match", c.matches.load(std::memory_order_relaxed));
    return r.status;
  }
  return std::nullopt;
}

std::optional<uint16_t> FaultSchedule::take_cm_reject(uint32_t device, const hw::IpAddress& remote) {
  for (size_t i = 0; i < spec_.cms.size(); ++i) {
    const CmRule& r = spec_.cms[i];
    if (r.action != CmAction::reject) continue;
    if (!on_device(r.device, r.addr, device)) continue;
    Counters& c = cm_counters_[i];
    if (!fire(&c.matches, &c.fired, r.when, kCmStream + (i << 32))) continue;
    FaultLog::Line(*log_, now_ns(), "cm")
        .str("fault", "reject")
        .num("rule", i + 1)
        .num("device", device)
        .str("peer", remote.to_string())
        .num("reason", r.reason);
    return r.reason;
  }
  return std::nullopt;
}

}  // namespace rnicdv::sim::faults
