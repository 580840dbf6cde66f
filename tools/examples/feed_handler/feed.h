// SPDX-License-Identifier: BSD-3-Clause
// A market-data feed on rnicdv's UD multicast: the pieces of the feed-handler example
// (main.cc), which its test (test/drv/feed_handler.cc) and the fan-out benchmark share.
//
// A feed is a stream of sequenced messages sent to an IPv4 multicast group, one UD datagram
// each: a 24-byte header (sequence number from 1, the publisher's send time, payload length,
// stream id) and the payload. UD neither acknowledges nor retransmits, so a receiver tracks
// the sequence numbers it sees: a jump forward is a gap (messages lost), a number at or below
// the last one seen is stale (a late or repeated datagram), and is dropped.
//
//   Publisher   a UD QP and an address handle to the group: publish() posts one datagram
//               (inline when it fits) with the typed call, signalling every kSignalEvery-th
//               and keeping the send queue from filling.
//   Subscriber  a UD QP attached to a group with a ring of receive buffers, reposted as they
//               are consumed; poll() hands each message, in arrival order, to a callback.
//   GapTracker  the sequence accounting: in order, gaps (as ranges), stale.
//   FeedHandler receives a feed on one group and republishes every message it accepts, in
//               order and with its sequence number, on another (an exchange feed normalised
//               for the trading engines behind it); it reports the gaps it saw.
//
// Everything works on any rnicdv::Device: the simulated HCA, or a ConnectX through hw/mlx5.
// Errors on the set-up path are returned as Status; the fast path returns Errc.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "rnicdv/rnicdv.h"

namespace feed {

// The Q_Key every member of a feed uses (rdma_cm's for its UDP port space, so a librdmacm
// program joined with rdma_join_multicast hears the feed too).
inline constexpr uint32_t kFeedQkey = 0x01234567;
inline constexpr uint32_t kGrhBytes = 40;  // a UD receive's first 40 bytes
inline constexpr uint32_t kSignalEvery = 16;

struct MessageHeader {
  uint64_t seq;      // 1, 2, 3, ...
  uint64_t sent_ns;  // the publisher's clock when it posted the message
  uint32_t length;   // payload bytes after the header
  uint32_t stream;   // which feed
};
static_assert(sizeof(MessageHeader) == 24);

// One received message: its header and payload, valid during the callback only.
struct Message {
  MessageHeader header;
  const uint8_t* payload;
};

// A run of missing sequence numbers, first..last inclusive.
struct Gap {
  uint64_t first, last;
  uint64_t count() const { return last - first + 1; }
  bool operator==(const Gap&) const = default;
};

class GapTracker {
 public:
  enum class Verdict { in_order, after_gap, stale };
  // Accounts for `seq`; after_gap when messages were skipped (gaps() holds them).
  Verdict see(uint64_t seq) {
    if (seq <= last_) {
      ++stale_;
      return Verdict::stale;
    }
    Verdict v = Verdict::in_order;
    if (seq != last_ + 1) {
      gaps_.push_back(Gap{last_ + 1, seq - 1});
      missing_ += seq - 1 - last_;
      v = Verdict::after_gap;
    }
    last_ = seq;
    ++accepted_;
    return v;
  }
  // The messages after the last one seen, up to `final_seq`, which never came (a gap at the
  // end of the stream, which only the publisher's count reveals).
  void finish(uint64_t final_seq) {
    if (final_seq > last_) {
      gaps_.push_back(Gap{last_ + 1, final_seq});
      missing_ += final_seq - last_;
      last_ = final_seq;
    }
  }
  uint64_t last() const { return last_; }
  uint64_t accepted() const { return accepted_; }
  uint64_t missing() const { return missing_; }
  uint64_t stale() const { return stale_; }
  const std::vector<Gap>& gaps() const { return gaps_; }

 private:
  uint64_t last_ = 0;
  uint64_t accepted_ = 0, missing_ = 0, stale_ = 0;
  std::vector<Gap> gaps_;
};

// The resources a member of a feed holds: PD, CQ, a UD QP in RTS with the feed's Q_Key, and
// registered memory.
class Member {
 public:
  static rnicdv::Result<Member> create(rnicdv::Device& device, uint32_t queue_depth,
                                       size_t buffer_bytes, bool block_own_loopback = false) {
    Member m;
    m.device_ = &device;
    RNICDV_ASSIGN_OR_RETURN(rnicdv::ProtectionDomain pd, device.alloc_pd());
    m.pd_.emplace(std::move(pd));
    RNICDV_ASSIGN_OR_RETURN(rnicdv::CompletionQueue cq, device.create_cq(queue_depth * 2));
    m.cq_.emplace(std::move(cq));
    rnicdv::QpConfig config;
    config.type = rnicdv::hw::QpType::ud;
    config.caps.max_send_wr = queue_depth;
    config.caps.max_recv_wr = queue_depth;
    config.caps.max_send_sge = 1;
    config.caps.max_recv_sge = 1;
    config.caps.max_inline_data = 128;
    config.caps.block_self_multicast_loopback = block_own_loopback;
    config.threading = rnicdv::Threading::single;
    RNICDV_ASSIGN_OR_RETURN(rnicdv::QueuePair qp,
                            device.create_qp(*m.pd_, *m.cq_, *m.cq_, config));
    m.qp_.emplace(std::move(qp));
    m.memory_.assign(buffer_bytes, 0);
    RNICDV_ASSIGN_OR_RETURN(rnicdv::MemoryRegion mr,
                            m.pd_->reg_mr(m.memory_.data(), m.memory_.size(),
                                          rnicdv::hw::access::local_write));
    m.mr_.emplace(std::move(mr));
    // RESET -> INIT (port, Q_Key) -> RTR -> RTS, as IBA 10.3.1 moves a UD QP.
    rnicdv::hw::QpAttr a;
    a.state = rnicdv::hw::QpState::init;
    a.qkey = kFeedQkey;
    RNICDV_TRY(m.qp_->modify(a, rnicdv::hw::qp_attr::state | rnicdv::hw::qp_attr::port |
                                    rnicdv::hw::qp_attr::qkey));
    a.state = rnicdv::hw::QpState::rtr;
    RNICDV_TRY(m.qp_->modify(a, rnicdv::hw::qp_attr::state));
    a.state = rnicdv::hw::QpState::rts;
    a.sq_psn = 0;
    RNICDV_TRY(m.qp_->modify(a, rnicdv::hw::qp_attr::state | rnicdv::hw::qp_attr::sq_psn));
    return m;
  }

  rnicdv::Device& device() { return *device_; }
  rnicdv::ProtectionDomain& pd() { return *pd_; }
  rnicdv::CompletionQueue& cq() { return *cq_; }
  rnicdv::QueuePair& qp() { return *qp_; }
  rnicdv::MemoryRegion& mr() { return *mr_; }
  uint8_t* memory() { return memory_.data(); }

 private:
  Member() = default;
  rnicdv::Device* device_ = nullptr;
  // Declaration order is destruction order reversed: the QP before the CQ and the MR, the PD
  // last; the memory outlives them all.
  std::vector<uint8_t> memory_;
  std::optional<rnicdv::ProtectionDomain> pd_;
  std::optional<rnicdv::CompletionQueue> cq_;
  std::optional<rnicdv::MemoryRegion> mr_;
  std::optional<rnicdv::QueuePair> qp_;
};

// Sends a feed to a group.
class Publisher {
 public:
  // `group`: a dotted IPv4 multicast address. Send queue of `queue_depth` datagrams.
  static rnicdv::Result<Publisher> create(rnicdv::Device& device, const std::string& group,
                                          uint32_t stream, uint32_t queue_depth = 256,
                                          uint32_t max_payload = 1024) {
    RNICDV_ASSIGN_OR_RETURN(rnicdv::hw::Gid gid, rnicdv::multicast_gid(group));
    const size_t slot = sizeof(MessageHeader) + max_payload;
    RNICDV_ASSIGN_OR_RETURN(Member m, Member::create(device, queue_depth, slot * queue_depth));
    Publisher p(std::move(m));
    rnicdv::hw::AhAttr attr;
    attr.remote_gid = gid;
    RNICDV_ASSIGN_OR_RETURN(rnicdv::AddressHandle ah, p.member_.pd().create_ah(attr));
    p.ah_.emplace(std::move(ah));
    p.stream_ = stream;
    p.depth_ = queue_depth;
    p.slot_bytes_ = slot;
    p.max_payload_ = max_payload;
    return p;
  }

  // Sends message `seq` with `payload` (at most max_payload bytes), stamped `now_ns`. Waits
  // for send completions (polling, with the device's progress) while the queue is full.
  rnicdv::Errc publish(uint64_t seq, const void* payload, uint32_t length, uint64_t now_ns) {
    if (length > max_payload_) return rnicdv::Errc::invalid_argument;
    while (in_flight_ + 1 > depth_ - kSignalEvery) {
      if (rnicdv::Errc e = reap(); e != rnicdv::Errc::ok) return e;
    }
    const uint64_t index = posted_++;
    const rnicdv::SendFlags flags =
        (index % kSignalEvery == kSignalEvery - 1) ? rnicdv::send_flags::signaled
                                                   : rnicdv::SendFlags{};
    uint8_t* at = member_.memory() + (index % depth_) * slot_bytes_;
    const MessageHeader h{seq, now_ns, length, stream_};
    std::memcpy(at, &h, sizeof h);
    if (length) std::memcpy(at + sizeof h, payload, length);
    const uint32_t total = static_cast<uint32_t>(sizeof h) + length;
    rnicdv::QueuePair& qp = member_.qp();
    const rnicdv::Errc e =
        total <= qp.caps().max_inline_data
            ? qp.post_datagram_inline(index, at, total, *ah_, rnicdv::kMulticastQpn, kFeedQkey,
                                      flags)
            : qp.post_datagram(index, member_.mr().sge(at - member_.memory(), total), *ah_,
                               rnicdv::kMulticastQpn, kFeedQkey, flags);
    if (e == rnicdv::Errc::ok) ++in_flight_;
    return e;
  }

  // Waits until every datagram posted so far has completed.
  rnicdv::Errc drain() {
    // An unsignaled tail: a signaled zero-work datagram would need a payload; instead poll
    // until the last signaled one retires everything before it, then the tail's count.
    while (in_flight_ >= kSignalEvery)
      if (rnicdv::Errc e = reap(); e != rnicdv::Errc::ok) return e;
    return rnicdv::Errc::ok;
  }

  uint64_t posted() const { return posted_; }
  Member& member() { return member_; }

 private:
  explicit Publisher(Member m) : member_(std::move(m)) {}

  // Polls the send CQ once: each signaled completion retires kSignalEvery datagrams.
  rnicdv::Errc reap() {
    rnicdv::Completion wc[16];
    const int n = member_.cq().poll(wc, 16);
    for (int i = 0; i < n; ++i) {
      if (wc[i].status != IBV_WC_SUCCESS) return rnicdv::Errc::qp_in_error;
      in_flight_ -= std::min<uint64_t>(in_flight_, kSignalEvery);
    }
    return rnicdv::Errc::ok;
  }

  Member member_;
  std::optional<rnicdv::AddressHandle> ah_;
  uint32_t stream_ = 0, depth_ = 0, max_payload_ = 0;
  size_t slot_bytes_ = 0;
  uint64_t posted_ = 0, in_flight_ = 0;
};

// Receives a feed from a group.
class Subscriber {
 public:
  static rnicdv::Result<Subscriber> create(rnicdv::Device& device, const std::string& group,
                                           uint32_t queue_depth = 512,
                                           uint32_t max_payload = 1024) {
    RNICDV_ASSIGN_OR_RETURN(rnicdv::hw::Gid gid, rnicdv::multicast_gid(group));
    const size_t slot = kGrhBytes + sizeof(MessageHeader) + max_payload;
    RNICDV_ASSIGN_OR_RETURN(Member m, Member::create(device, queue_depth, slot * queue_depth));
    Subscriber s(std::move(m));
    s.slot_bytes_ = slot;
    s.depth_ = queue_depth;
    for (uint32_t i = 0; i < queue_depth; ++i) RNICDV_TRY(s.repost(i));
    RNICDV_TRY(s.member_.qp().attach_multicast(gid));
    s.group_ = gid;
    return s;
  }

  // Hands each message received so far to `on_message`, in arrival order, and gives its buffer
  // back to the receive queue. Returns how many it handed over (a receive that completed in
  // error, or a datagram too short for a header, is counted in errors() and skipped).
  template <class F>
  int poll(F&& on_message, int max = 32) {
    rnicdv::Completion wc[32];
    const int n = member_.cq().poll(wc, std::min(max, 32));
    int delivered = 0;
    for (int i = 0; i < n; ++i) {
      const uint32_t slot = static_cast<uint32_t>(wc[i].wr_id);
      if (wc[i].opcode == IBV_WC_RECV && wc[i].status == IBV_WC_SUCCESS &&
          wc[i].byte_len >= kGrhBytes + sizeof(MessageHeader)) {
        const uint8_t* at = member_.memory() + size_t{slot} * slot_bytes_ + kGrhBytes;
        Message m;
        std::memcpy(&m.header, at, sizeof m.header);
        m.payload = at + sizeof m.header;
        if (m.header.length <= wc[i].byte_len - kGrhBytes - sizeof(MessageHeader)) {
          on_message(m);
          ++delivered;
        } else {
          ++errors_;
        }
      } else if (wc[i].opcode == IBV_WC_RECV) {
        ++errors_;
      }
      if (wc[i].opcode == IBV_WC_RECV && wc[i].status != IBV_WC_WR_FLUSH_ERR) (void)repost(slot);
    }
    return delivered;
  }

  uint64_t errors() const { return errors_; }
  Member& member() { return member_; }

 private:
  explicit Subscriber(Member m) : member_(std::move(m)) {}

  rnicdv::Status repost(uint32_t slot) {
    const rnicdv::Sge sge = member_.mr().sge(size_t{slot} * slot_bytes_,
                                             static_cast<uint32_t>(slot_bytes_));
    const rnicdv::Errc e = member_.qp().post_recv(slot, sge);
    if (e != rnicdv::Errc::ok)
      return rnicdv::Status::error(e, "feed subscriber: post_recv of slot %u: %s", slot,
                                   rnicdv::errc_name(e));
    return rnicdv::Status::ok();
  }

  Member member_;
  rnicdv::hw::Gid group_;
  size_t slot_bytes_ = 0;
  uint32_t depth_ = 0;
  uint64_t errors_ = 0;
};

// Receives on one group, republishes on another: every message accepted in sequence order
// goes out with its sequence number and payload; stale ones are dropped; gaps are recorded
// (and stay gaps downstream: the handler does not invent what it did not get).
class FeedHandler {
 public:
  static rnicdv::Result<FeedHandler> create(rnicdv::Device& device, const std::string& in_group,
                                            const std::string& out_group, uint32_t stream) {
    RNICDV_ASSIGN_OR_RETURN(Subscriber in, Subscriber::create(device, in_group));
    RNICDV_ASSIGN_OR_RETURN(Publisher out, Publisher::create(device, out_group, stream));
    return FeedHandler(std::move(in), std::move(out));
  }

  // Takes what arrived and republishes it; `now_ns` stamps the republished messages. Returns
  // the messages taken, or -1 if a republish failed (last_error() says how).
  int run_once(uint64_t now_ns) {
    int failed = 0;
    const int n = in_.poll([&](const Message& m) {
      if (tracker_.see(m.header.seq) == GapTracker::Verdict::stale) return;
      const rnicdv::Errc e = out_.publish(m.header.seq, m.payload, m.header.length, now_ns);
      if (e != rnicdv::Errc::ok) {
        last_error_ = e;
        ++failed;
      }
    });
    return failed ? -1 : n;
  }

  const GapTracker& tracker() const { return tracker_; }
  GapTracker& tracker() { return tracker_; }
  Publisher& out() { return out_; }
  Subscriber& in() { return in_; }
  rnicdv::Errc last_error() const { return last_error_; }

 private:
  FeedHandler(Subscriber in, Publisher out) : in_(std::move(in)), out_(std::move(out)) {}
  Subscriber in_;
  Publisher out_;
  GapTracker tracker_;
  rnicdv::Errc last_error_ = rnicdv::Errc::ok;
};

}  // namespace feed
