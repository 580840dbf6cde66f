// SPDX-License-Identifier: BSD-3-Clause
#include "gsi.h"

#include <vector>

#include "device_impl.h"
#include "hca.h"
#include "packet/psn.h"

namespace rnicdv::sim {

uint64_t Gsi::now_ns() const {
  return hca_.now();
}

Status Gsi::send_mad(const IpAddress& dst, const uint8_t* mad, size_t len) {
  if (dst.is_v4() != hca_.address().is_v4())
    return Status::error(Errc::invalid_argument,
                         "%s: gsi: send_mad to %s: the device's address %s is of the other IP "
                         "version",
                         hca_.info().name.c_str(), dst.to_string().c_str(),
                         hca_.address().to_string().c_str());
  if (!mad || len == 0 || len > pkt::kMaxPayload)
    return Status::error(Errc::invalid_argument, "%s: gsi: send_mad: %zu bytes (1..%u)",
                         hca_.info().name.c_str(), len, pkt::kMaxPayload);
  pkt::Packet p;
  p.bth.opcode = pkt::opcode::ud_send_only;
  p.bth.dest_qp = kGsiQpn;
  p.deth = pkt::Deth{kGsiQkey, kGsiQpn};
  p.payload = mad;
  p.payload_len = static_cast<uint32_t>(len);
  {
    std::lock_guard<std::mutex> lock(mu_);
    p.bth.psn = psn_;
    psn_ = psn_add(psn_, 1);
    ++mads_tx_;
  }
  std::vector<uint8_t> frame(pkt::kMaxPacketBytes + 64);
  const size_t n = pkt::build_packet(p, frame.data(), frame.size());
  hca_.transmit_raw(dst, frame.data(), n);
  return Status::ok();
}

void Gsi::set_mad_handler(MadHandler handler) {
  std::lock_guard<std::mutex> lock(mu_);
  handler_ = std::move(handler);
}

void Gsi::set_unreachable_handler(UnreachableHandler handler) {
  std::lock_guard<std::mutex> lock(mu_);
  unreachable_handler_ = std::move(handler);
}

void Gsi::peer_unreachable(const IpAddress& peer) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!unreachable_handler_) return;
  // One notice per address in the queue is enough: a burst of refused frames is one event.
  for (const Inbound& in : inbox_)
    if (in.unreachable && in.src == peer) return;
  inbox_.push_back(Inbound{peer, {}, true});
}

TimerId Gsi::schedule_at(uint64_t when_ns, std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(mu_);
  const TimerId id = next_id_++;
  timers_.emplace(when_ns, Timer{id, std::move(fn)});
  return id;
}

bool Gsi::cancel(TimerId id) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = timers_.begin(); it != timers_.end(); ++it) {
    if (it->second.id == id) {
      timers_.erase(it);
      return true;
    }
  }
  return false;
}

bool Gsi::accept(const IpAddress& src, const pkt::Packet& p) {
  // Only UD SENDs to QP1 with the GSI Q_Key (IBA 13.5.3, C13-13) are MADs.
  if (p.bth.opcode != pkt::opcode::ud_send_only || p.deth.qkey != kGsiQkey) return false;
  std::lock_guard<std::mutex> lock(mu_);
  if (!handler_) return false;
  inbox_.push_back(Inbound{src, std::vector<uint8_t>(p.payload, p.payload + p.payload_len)});
  ++mads_rx_;
  return true;
}

bool Gsi::dispatch() {
  std::unique_lock<std::mutex> running(dispatch_mu_, std::try_to_lock);
  if (!running.owns_lock()) return false;
  bool did = false;
  for (;;) {
    Inbound in{};
    MadHandler handler;
    UnreachableHandler gone;
    std::function<void()> timer_fn;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!inbox_.empty()) {
        in = std::move(inbox_.front());
        inbox_.pop_front();
        if (in.unreachable)
          gone = unreachable_handler_;
        else
          handler = handler_;
      } else if (!timers_.empty() && timers_.begin()->first <= hca_.now()) {
        timer_fn = std::move(timers_.begin()->second.fn);
        timers_.erase(timers_.begin());
      } else {
        break;
      }
    }
    did = true;
    if (handler) handler(in.src, in.mad.data(), in.mad.size());
    if (gone) gone(in.src);
    if (timer_fn) timer_fn();
  }
  return did;
}

uint64_t Gsi::next_timer_ns() const {
  std::lock_guard<std::mutex> lock(mu_);
  return timers_.empty() ? UINT64_MAX : timers_.begin()->first;
}

uint64_t Gsi::mads_rx() const {
  std::lock_guard<std::mutex> lock(mu_);
  return mads_rx_;
}

uint64_t Gsi::mads_tx() const {
  std::lock_guard<std::mutex> lock(mu_);
  return mads_tx_;
}

Gsi& gsi_of(Device& device) {
  return device.impl().hca->gsi();
}

}  // namespace rnicdv::sim
