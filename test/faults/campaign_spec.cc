// SPDX-License-Identifier: BSD-3-Clause
// The fault campaign's names and the run each seed stands for: see campaign.h.
#include "campaign.h"

#include <infiniband/verbs.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>

#include "campaign_util.h"

namespace rnicdv::faults {

using namespace detail;

const WrOpcode kAllOpcodes[kOpcodes] = {
    WrOpcode::send,      WrOpcode::send_imm,        WrOpcode::rdma_write,
    WrOpcode::rdma_write_imm, WrOpcode::rdma_read, WrOpcode::atomic_cmp_swap,
    WrOpcode::atomic_fetch_add,
};

const char* opcode_name(WrOpcode op) noexcept {
  switch (op) {
    case WrOpcode::send:
      return "SEND";
    case WrOpcode::send_imm:
      return "SEND_IMM";
    case WrOpcode::rdma_write:
      return "RDMA_WRITE";
    case WrOpcode::rdma_write_imm:
      return "RDMA_WRITE_IMM";
    case WrOpcode::rdma_read:
      return "RDMA_READ";
    case WrOpcode::atomic_cmp_swap:
      return "ATOMIC_CS";
    case WrOpcode::atomic_fetch_add:
      return "ATOMIC_FA";
    case WrOpcode::nop:
      return "NOP";
  }
  return "?";
}

const char* size_class_name(SizeClass s) noexcept {
  switch (s) {
    case SizeClass::small:
      return "small";
    case SizeClass::mtu_crossing:
      return "mtu-crossing";
    case SizeClass::multi_mib:
      return "multi-MiB";
  }
  return "?";
}

const char* fault_kind_name(FaultKind k) noexcept {
  switch (k) {
    case FaultKind::drop:
      return "drop";
    case FaultKind::duplicate:
      return "duplicate";
    case FaultKind::reorder:
      return "reorder";
    case FaultKind::corrupt:
      return "corrupt";
    case FaultKind::delay:
      return "delay";
    case FaultKind::mixed:
      return "mixed";
  }
  return "?";
}

namespace {

uint32_t pick_len(Rng& r, SizeClass c, uint32_t mtu) {
  switch (c) {
    case SizeClass::small: {
      static constexpr uint32_t kEdges[] = {0, 1, 7, 8, 63, 64, 65};
      if (r.below(3) == 0) return kEdges[r.below(std::size(kEdges))];
      return static_cast<uint32_t>(1 + r.below(std::min<uint32_t>(mtu, 512) - 1));
    }
    case SizeClass::mtu_crossing: {
      const uint32_t k = static_cast<uint32_t>(1 + r.below(8));
      switch (r.below(4)) {
        case 0:
          return k * mtu - 1;
        case 1:
          return k * mtu;
        case 2:
          return k * mtu + 1;
        default:
          return k * mtu + static_cast<uint32_t>(r.below(mtu));
      }
    }
    case SizeClass::multi_mib:
      return 2 * kMiB + static_cast<uint32_t>(r.below(2 * kMiB));
  }
  return 0;
}

std::vector<Op> pick_ops(Rng& r, const SpecOptions& o, uint32_t mtu, bool with_mib) {
  const bool forced_opcode = with_mib && o.mib_opcode >= 0 && o.mib_opcode < kOpcodes &&
                             !is_atomic(kAllOpcodes[o.mib_opcode]);
  std::vector<WrOpcode> ops(std::begin(kAllOpcodes), std::end(kAllOpcodes));
  const uint32_t extra = o.max_ops > kOpcodes ? static_cast<uint32_t>(r.below(o.max_ops - kOpcodes + 1)) : 0;
  for (uint32_t i = 0; i < extra; ++i) ops.push_back(kAllOpcodes[r.below(kOpcodes)]);
  for (size_t i = ops.size(); i > 1; --i) std::swap(ops[i - 1], ops[r.below(i)]);
  // At most one multi-MiB message per direction: it is the expensive part of a run.
  size_t mib_at = ops.size();
  if (with_mib) {
    std::vector<size_t> data;
    for (size_t i = 0; i < ops.size(); ++i)
      if (forced_opcode ? ops[i] == kAllOpcodes[o.mib_opcode] : !is_atomic(ops[i]))
        data.push_back(i);
    mib_at = data[r.below(data.size())];
  }
  std::vector<Op> out;
  for (size_t i = 0; i < ops.size(); ++i) {
    Op op;
    op.opcode = ops[i];
    if (is_atomic(op.opcode)) {
      op.len = 8;
      op.size = SizeClass::small;
    } else {
      op.size = i == mib_at ? SizeClass::multi_mib
                            : (r.below(2) ? SizeClass::mtu_crossing : SizeClass::small);
      op.len = pick_len(r, op.size, mtu);
    }
    out.push_back(op);
  }
  return out;
}

}  // namespace

std::string RunSpec::describe() const {
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "seed %" PRIu64 " %s %s (drop %.1f%% dup %.1f%% reorder %.1f%% corrupt %.1f%% "
                "delay %.1f%%) mtu %u %s %zu+%zu ops (%u early)",
                seed, sim::wire_kind_name(wire), fault_kind_name(kind), faults.drop * 100,
                faults.duplicate * 100, faults.reorder * 100, faults.corrupt * 100,
                faults.delay * 100, hw::mtu_bytes(mtu), scanning ? "shadow" : "in_place",
                a_ops.size(), b_ops.size(), early);
  return buf;
}

RunSpec spec_for_seed(uint64_t seed, const SpecOptions& o) {
  Rng r(seed * 0x2545f4914f6cdd1dull + 0x5eed);
  RunSpec s;
  s.seed = seed;
  switch (o.wires) {
    case SpecOptions::Wires::inproc:
      s.wire = sim::WireKind::inproc;
      break;
    case SpecOptions::Wires::udp:
      s.wire = sim::WireKind::udp;
      break;
    case SpecOptions::Wires::both:
      s.wire = o.udp_every && seed % o.udp_every == o.udp_every - 1 ? sim::WireKind::udp
                                                                     : sim::WireKind::inproc;
      break;
  }
  s.mode = s.wire == sim::WireKind::udp ? sim::ExecMode::threaded : sim::ExecMode::deterministic;
  s.kind = static_cast<FaultKind>(r.below(kFaultKinds));
  static constexpr double kLevels[] = {1.0 / 30, 1.0 / 6, 1.0 / 3, 2.0 / 3, 1.0};
  s.rate = o.max_rate * kLevels[r.below(std::size(kLevels))];
  if (o.force_kind >= 0 && o.force_kind < kFaultKinds) s.kind = static_cast<FaultKind>(o.force_kind);
  if (o.force_rate >= 0) s.rate = o.force_rate;
  bool with_mib = o.multi_mib && r.below(3) == 0;
  if (o.force_mib >= 0) with_mib = o.force_mib == 1;
  // Go-back-N over a link that loses a frame in three gives up on a multi-MiB message now
  // and then by design: retry_cnt (at most 7) counts retransmission rounds in a row that
  // bring no acknowledgement, and with every frame and every ACK lost at 30% a round is
  // fruitless about half the time. Runs with such messages keep the faults that cost
  // rounds (drop, corrupt, reorder, delay) at 10% at most; duplicates stay up to the rate.
  const double lossy = with_mib ? std::min(s.rate, 0.10) : s.rate;
  sim::FaultConfig& f = s.faults;
  switch (s.kind) {
    case FaultKind::drop:
      f.drop = lossy;
      break;
    case FaultKind::duplicate:
      f.duplicate = s.rate;
      break;
    case FaultKind::reorder:
      f.reorder = lossy;
      break;
    case FaultKind::corrupt:
      f.corrupt = lossy;
      break;
    case FaultKind::delay:
      f.delay = lossy;
      break;
    case FaultKind::mixed:
      // Frames lost outright (dropped or corrupted) stay within the rate together.
      f.drop = lossy / 2;
      f.corrupt = lossy / 2 * (0.25 + 0.75 * r.unit());
      f.duplicate = s.rate * (0.25 + 0.75 * r.unit());
      f.reorder = lossy * (0.25 + 0.75 * r.unit());
      f.delay = lossy * (0.25 + 0.75 * r.unit());
      break;
  }
  f.max_delay_ns = 200'000;
  if (with_mib && s.kind != FaultKind::duplicate) s.rate = lossy;
  static constexpr hw::Mtu kMtus[] = {hw::Mtu::mtu256, hw::Mtu::mtu512, hw::Mtu::mtu1024,
                                      hw::Mtu::mtu2048, hw::Mtu::mtu4096};
  // Multi-MiB messages at an MTU of 256 or 512 are thousands of packets each: keep them to
  // the larger MTUs so that a run stays a fraction of a second.
  s.mtu = with_mib ? kMtus[2 + r.below(3)] : kMtus[r.below(std::size(kMtus))];
  s.scanning = r.below(2) == 1;
  const uint32_t mtu = hw::mtu_bytes(s.mtu);
  const bool a_mib = with_mib && (o.force_mib == 1 || r.below(2) == 0);
  s.a_ops = pick_ops(r, o, mtu, a_mib);
  s.b_ops = pick_ops(r, o, mtu, with_mib);
  s.early = static_cast<uint32_t>(1 + r.below(s.b_ops.size()));
  if (s.mode == sim::ExecMode::threaded) s.real_budget_ms = 120'000;
  return s;
}

}  // namespace rnicdv::faults
