// SPDX-License-Identifier: BSD-3-Clause
// The CM faults of a fault specification (faults/spec.h):
//
// cm-reject: a REQ that would be offered to a listener, chosen by the rule's trigger (counted
// over such REQs, each once), is answered with a REJ carrying the rule's reason, sent as the
// CM rejects a REQ it has no connection for (Local Comm ID 0, Message REJected = REQ). The
// requester sees exactly a genuine REJ. A retransmission of a REQ so rejected is not counted
// again and gets the same REJ.
//
// cm-dreq: at the rule's time the device sends a DREQ on the connection its trigger chooses,
// counted over the connections this device established, in the order they were established,
// as if the application there had called disconnect: the peer gets a DREQ it did not ask for
// and the connection here goes to DREQ_SENT, its application seeing DISCONNECTED when the DREP
// (or the last DREQ retry) comes, as after its own disconnect. Connections established before
// the time are counted when it comes; those established later as they are established, so a
// rule whose connection does not exist yet waits for it (the log says so at the time). A
// chosen connection that has already ended is logged and left alone.

#include "cm/cm_agent.h"
#include "cm/cm_record.h"
#include "faults/schedule.h"

namespace rnicdv::sim::cm {
namespace {

// The draw stream of the cm-dreq rules' p= triggers, apart from the schedule's own.
constexpr uint64_t kDreqStream = 0x636d647265710000ull;  // "cmdreq"

std::string address(const hw::CmAddress& a) {
  return hw::cm_address_string(a);
}

}  // namespace

bool CmAgent::fault_reject_again(Outbox& out, const hw::IpAddress& src, const MadHeader& hdr, const ReqMsg& m) {
  auto it = rejected_.find({m.local_ca_guid, m.local_comm_id});
  if (it == rejected_.end()) return false;
  ++counters_.fault_rejects_resent;
  reject_req(out, src, hdr, m, it->second);
  return true;
}

bool CmAgent::fault_reject(Outbox& out, const hw::IpAddress& src, const MadHeader& hdr, const ReqMsg& m) {
  faults::FaultSchedule* fs = config_.faults;
  if (!fs || fs->spec().cms.empty()) return false;
  const std::optional<uint16_t> reason = fs->take_cm_reject(config_.device_index, src);
  if (!reason) return false;
  ++counters_.fault_rejects;
  const std::pair<uint64_t, uint32_t> key{m.local_ca_guid, m.local_comm_id};
  if (rejected_.emplace(key, *reason).second) {
    rejected_order_.push_back(key);
    if (rejected_order_.size() > kRejectedKept) {
      rejected_.erase(rejected_order_.front());
      rejected_order_.pop_front();
    }
  }
  reject_req(out, src, hdr, m, *reason);
  return true;
}

void CmAgent::start_fault_timers() {
  faults::FaultSchedule* fs = config_.faults;
  if (!fs) return;
  Outbox out;
  {
    std::lock_guard lock(mu_);
    const auto& cms = fs->spec().cms;
    for (size_t i = 0; i < cms.size(); ++i) {
      const faults::CmRule& r = cms[i];
      if (r.action != faults::CmAction::dreq) continue;
      if (!fs->on_device(r.device, r.addr, config_.device_index)) continue;
      auto st = std::make_unique<DreqRuleState>();
      st->rule = i;
      st->at = fs->start_ns() + r.at_ns;
      timers_.push(Timer{st->at, kFaultTimerId});
      if (st->at < scheduled_at_) {
        scheduled_at_ = st->at;
        wake_request_ = st->at;
      }
      dreq_rules_.push_back(std::move(st));
    }
    out.schedule = std::exchange(wake_request_, UINT64_MAX);
  }
  flush(out);
}

void CmAgent::note_established(Outbox& out, Record& r, uint64_t now) {
  r.established_seq = ++counters_.established;
  for (size_t k = 0; k < dreq_rules_.size(); ++k) {
    DreqRuleState& st = *dreq_rules_[k];
    if (!st.due) continue;
    if (config_.faults->fire(&st.matches, &st.fired, config_.faults->spec().cms[st.rule].when,
                             kDreqStream + (st.rule << 32) + config_.device_index))
      fault_dreq_fire(out, k, r.established_seq, now);
  }
}

void CmAgent::fault_dreq_due(Outbox& out, uint64_t now) {
  for (size_t k = 0; k < dreq_rules_.size(); ++k) {
    DreqRuleState& st = *dreq_rules_[k];
    if (st.due || st.at > now) continue;
    st.due = true;
    const faults::CmRule& rule = config_.faults->spec().cms[st.rule];
    bool any = false;
    for (uint64_t seq = 1; seq <= counters_.established; ++seq) {
      if (!config_.faults->fire(&st.matches, &st.fired, rule.when,
                                kDreqStream + (st.rule << 32) + config_.device_index))
        continue;
      fault_dreq_fire(out, k, seq, now);
      any = true;
    }
    if (!any) {
      // Nothing chosen yet: the rule waits for the connections established from now on.
      uint64_t live = 0;
      for (const auto& [id, rec] : records_) live += rec->state == State::established;
      faults::FaultLog::Line(config_.faults->log(), now, "cm")
          .str("fault", "dreq")
          .num("rule", st.rule + 1)
          .num("device", config_.device_index)
          .str("outcome", "waiting")
          .num("established", counters_.established)
          .num("live", live);
    }
  }
}

void CmAgent::fault_dreq_fire(Outbox& out, size_t k, uint64_t seq, uint64_t now) {
  const DreqRuleState& st = *dreq_rules_[k];
  Record* r = nullptr;
  for (auto& [id, rec] : records_)
    if (rec->established_seq == seq) r = rec.get();
  faults::FaultLog::Line line(config_.faults->log(), now, "cm");
  line.str("fault", "dreq").num("rule", st.rule + 1).num("device", config_.device_index);
  line.num("connection", seq);
  if (!r || r->state != State::established) {
    // Chosen, but it already ended (its application disconnected, or the peer did).
    line.str("outcome", "already closed");
    return;
  }
  ++counters_.fault_dreqs;
  r->fault_dreq = true;
  send_dreq(out, *r, now);
  line.str("outcome", "sent")
      .str("local", address(r->local))
      .str("peer", address(r->remote))
      .hex("qpn", r->local_qpn)
      .hex("remote_qpn", r->remote_qpn);
}

}  // namespace rnicdv::sim::cm
