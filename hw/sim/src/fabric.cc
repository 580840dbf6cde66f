// SPDX-License-Identifier: BSD-3-Clause
// sim::Fabric: devices sharing a wire and a clock; stepping in deterministic mode.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <thread>

#include "cm/sim_cm.h"
#include "device_impl.h"

namespace rnicdv::sim {

namespace {

bool same_profile(const hw::DeviceProfile& a, const hw::DeviceProfile& b) {
  return a.fetches_beyond_dbr == b.fetches_beyond_dbr &&
         a.keeps_rtr_doorbell == b.keeps_rtr_doorbell;
}

// Nested steps (a progress hook called from inside a step) do nothing.
thread_local int step_depth = 0;

}  // namespace

const char* exec_mode_name(ExecMode m) noexcept {
  switch (m) {
    case ExecMode::deterministic:
      return "deterministic";
    case ExecMode::threaded:
      return "threaded";
  }
  return "?";
}

const char* wire_kind_name(WireKind w) noexcept {
  switch (w) {
    case WireKind::inproc:
      return "inproc";
    case WireKind::udp:
      return "udp";
    case WireKind::dpdk:
      return "dpdk";
  }
  return "?";
}

namespace {

// $RNICDV_SIM_SEED, when set.
Result<std::optional<uint64_t>> seed_from_environment() {
  const char* env = std::getenv("RNICDV_SIM_SEED");
  if (env == nullptr || *env == '\0') return std::optional<uint64_t>();
  char* end = nullptr;
  errno = 0;
  const unsigned long long seed = std::strtoull(env, &end, 0);
  if (*end != '\0' || errno != 0 || env[0] == '-')
    return Status::error(Errc::invalid_argument,
                         "RNICDV_SIM_SEED: '%s' is not a whole number in [0, 2^64)", env);
  return std::optional<uint64_t>(seed);
}

// The fabric's fault schedule, or null when no specification is in force.
Result<std::unique_ptr<faults::FaultSchedule>> make_fault_schedule(const FabricConfig& config,
                                                                   const Clock& clock,
                                                                   const std::string& pcap) {
  std::string source;
  Result<faults::FaultSpec> parsed = faults::fault_spec_from(config.fault_spec, &source);
  if (!parsed) return parsed.status().prepend("fabric");
  faults::FaultSpec spec = std::move(parsed).value();
  if (spec.empty()) return std::unique_ptr<faults::FaultSchedule>();
  uint64_t seed = spec.seed;
  if (!spec.seed_given) {
    Result<std::optional<uint64_t>> env = seed_from_environment();
    if (!env) return env.status().prepend("fabric");
    if (env.value()) {
      seed = *env.value();
    } else if (config.mode == ExecMode::deterministic) {
      seed = config.seed;  // a deterministic run is replayable from its configuration
    } else {
      seed = faults::fresh_seed();
    }
  }
  RNICDV_ASSIGN_OR_RETURN(std::unique_ptr<faults::FaultSchedule> schedule,
                          faults::FaultSchedule::create(std::move(spec), seed, &clock, pcap));
  if (source != "configuration") {
    const std::string& log = schedule->log().path();
    std::fprintf(stderr, "rnicdv-sim: faults from %s, seed %llu%s%s (replay: RNICDV_SIM_SEED=%llu)\n",
                 source.c_str(), static_cast<unsigned long long>(schedule->seed()),
                 log.empty() ? "" : ", log ", log.c_str(),
                 static_cast<unsigned long long>(schedule->seed()));
  }
  return schedule;
}

}  // namespace

Status check_fault_spec(const std::string& text, std::string* summary) {
  std::string source;
  RNICDV_ASSIGN_OR_RETURN(faults::FaultSpec spec, faults::fault_spec_from(text, &source));
  RNICDV_ASSIGN_OR_RETURN(std::optional<uint64_t> env_seed, seed_from_environment());
  if (summary) {
    char line[192];
    std::snprintf(line, sizeof(line),
                  "%zu frame rules, %zu link events, %zu chosen completions, %zu CM faults", 
                  spec.frames.size(), spec.links.size(), spec.wrs.size(), spec.cms.size());
    *summary = line;
    if (spec.seed_given)
      *summary += ", seed " + std::to_string(spec.seed);
    else if (env_seed)
      *summary += ", seed " + std::to_string(*env_seed) + " (RNICDV_SIM_SEED)";
    else
      *summary += ", a fresh seed each run";
  }
  return Status::ok();
}

Fabric::Fabric(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Fabric::~Fabric() = default;

Result<std::shared_ptr<Fabric>> Fabric::create(const FabricConfig& config) {
  auto impl = std::make_unique<Impl>();
  FabricShared& s = impl->shared;
  s.config = config;
  s.owner_epoch = fork_epoch();
  if (config.mode == ExecMode::deterministic) {
    auto clock = std::make_unique<VirtualClock>();
    s.virtual_clock = clock.get();
    s.clock = std::move(clock);
  } else {
    s.clock = std::make_unique<MonotonicClock>();
  }
  WireConfig wc;
  wc.faults = config.faults;
  wc.seed = config.seed;
  wc.pcap_path = config.pcap_path;
  if (wc.pcap_path.empty()) {
    if (const char* env = std::getenv("RNICDV_PCAP"); env && *env) wc.pcap_path = env;
  }
  RNICDV_ASSIGN_OR_RETURN(s.faults, make_fault_schedule(config, *s.clock, wc.pcap_path));
  wc.schedule = s.faults.get();
  wc.udp_port = config.udp_port;
  wc.clock = s.clock.get();
  wc.dpdk_args = config.dpdk_args;
  Result<std::unique_ptr<Wire>> wire = Status();
  switch (config.wire) {
    case WireKind::inproc:
      wire = make_inproc_wire(wc);
      break;
    case WireKind::udp:
      wire = make_udp_wire(wc);
      break;
    case WireKind::dpdk:
      wire = make_dpdk_wire(wc);
      break;
  }
  if (!wire) return wire.status().prepend("fabric");
  s.wire = std::move(wire).value();
  return std::shared_ptr<Fabric>(new Fabric(std::move(impl)));
}

Result<std::shared_ptr<Device>> Fabric::add_device(const DeviceConfig& config) {
  FabricShared& s = impl_->shared;
  DeviceConfig cfg = config;
  uint32_t index;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    index = s.next_index++;
    if (s.profile_override && same_profile(cfg.profile, hw::DeviceProfile{}))
      cfg.profile = *s.profile_override;
    if (cfg.address.is_unspecified() && index < s.address_pool.size())
      cfg.address = s.address_pool[index];
    if (s.ports_override && cfg.ports == 1) cfg.ports = s.ports_override;
    if (cfg.port2_address.is_unspecified() && index < s.port2_pool.size())
      cfg.port2_address = s.port2_pool[index];
  }
  auto hca = std::make_shared<Hca>(shared_from_this(), s, cfg, index);
  RNICDV_TRY(hca->start());
  auto impl = std::make_unique<Device::Impl>();
  impl->hca = std::move(hca);
  impl->cm = cm::SimConnectionManager::create(*impl->hca, s.config.seed,  // IB CM on QP1
                                              !s.deterministic());
  std::shared_ptr<Device> dev(new Device(std::move(impl)));
  std::lock_guard<std::mutex> lock(s.mu);
  s.devices.push_back(dev);
  return dev;
}

std::vector<std::shared_ptr<Device>> Fabric::devices() const {
  const FabricShared& s = impl_->shared;
  std::vector<std::shared_ptr<Device>> out;
  std::lock_guard<std::mutex> lock(s.mu);
  for (const auto& w : s.devices)
    if (auto d = w.lock()) out.push_back(std::move(d));
  return out;
}

const FabricConfig& Fabric::config() const {
  return impl_->shared.config;
}

bool Fabric::faults_active() const {
  return impl_->shared.faults != nullptr;
}

uint64_t Fabric::fault_seed() const {
  return impl_->shared.faults ? impl_->shared.faults->seed() : 0;
}

std::string Fabric::fault_log_path() const {
  return impl_->shared.faults ? impl_->shared.faults->log().path() : std::string();
}

bool FabricShared::step() {
  // A child of fork() steps nothing of its parent's fabric: its devices and locks are the
  // parent's (Hca::forked_away).
  if (g_fork_epoch.load(std::memory_order_relaxed) != owner_epoch) return false;
  if (step_depth > 0) return false;
  ++step_depth;
  bool did = false;
  {
    // The references go before step_depth does: a device the last one destroys steps nothing.
    HcaRefs live;
    snapshot(&live);
    if (deterministic()) {
      live.for_each([&](Hca& h) { did |= h.run_engine_pass(); });
      if (!did) {
        // Nothing was ready: jump to the next timer or held-back frame. A deadline already
        // passed belongs to a device that could not act on it (a paused one): it must not hold
        // the clock back for everyone else, so only future deadlines count.
        const uint64_t now = clock->now_ns();
        uint64_t next = UINT64_MAX;
        live.for_each([&](Hca& h) {
          const uint64_t d = h.next_deadline_ns();
          if (d > now) next = std::min(next, d);
        });
        if (next != UINT64_MAX) {
          virtual_clock->advance_to(next);
          did = true;
        }
      }
    } else {
      live.for_each([&](Hca& h) { did |= h.try_run_engine_pass(); });
    }
  }
  --step_depth;
  return did;
}

bool Fabric::step() {
  return impl_->shared.step();
}

void Fabric::advance_time(uint64_t ns) {
  if (impl_->shared.virtual_clock) impl_->shared.virtual_clock->advance_by(ns);
}

uint64_t Fabric::now_ns() const {
  return impl_->shared.clock->now_ns();
}

bool Fabric::run_until(const std::function<bool()>& done, uint64_t max_virtual_ns) {
  FabricShared& s = impl_->shared;
  const uint64_t start = s.clock->now_ns();
  while (!done()) {
    if (s.clock->now_ns() - start >= max_virtual_ns) return done();
    if (!s.step() && s.deterministic()) return done();  // nothing can happen any more
    if (!s.deterministic()) std::this_thread::yield();
  }
  return true;
}

void Hca::progress() {
  shared_.step();
}

void Hca::inject_datagram(const IpAddress& src, const uint8_t* data, size_t len) {
  std::lock_guard<std::mutex> lock(mu_);
  deliver_locked(src, endpoint_.ip, data, len);
  handle_cq_overflows_locked();
}

}  // namespace rnicdv::sim
