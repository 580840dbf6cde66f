// SPDX-License-Identifier: BSD-3-Clause
// One end of a test: the device, PD, CQs, QPs and registered buffers, and the QP bring-up
// from the peer's records (INIT -> RTR -> RTS, as perftest's ctx_connect does).
//
// Each QP owns one registered region of two halves: [0, half) is what this side sends from
// (and where READ and atomic results land); [half, 2 * half) is what the peer writes into,
// reads from and sends into. The second half's address and rkey are advertised.
//
// The measurement loops work on lanes: lane q is the q-th QP this side posts on, with the
// peer's record it sends to (remote(q)), and the region the peer's lane q writes into
// (recv_buf(q)). Lane q is QP q, except with -c XRC (perftest's ctx_xrc_qp_create and
// ctx_connect): this side's QPs are its initiators, then its targets; in a latency test or
// with -b initiator q sends to the peer's target n + q and target n + q answers the peer's
// initiator q (n initiators on each side), and in a one-way bandwidth test the posting side's
// initiator q meets the other side's target q. Receives are then posted to the side's one XRC
// SRQ, whose completions name it as receive queue 0.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "oob_protocol.h"
#include "options.h"
#include "report.h"
#include "rnicdv/rnicdv.h"

namespace rnicdv::sim {
class Fabric;
}

namespace rnicperf {

struct EndpointConfig {
  std::string device_name;  // resolved: never empty
  // A simulated HCA on this fabric (--wire, --loopback) instead of the default one.
  std::shared_ptr<rnicdv::sim::Fabric> fabric;
  // With `fabric`: the simulated HCA is made with this many ports (2 when the run uses port 2:
  // -O, -i 2); 0: the fabric's default, one.
  uint8_t sim_ports = 0;
  bool dpdk_memory = false;  // registered buffers from DPDK's heap (--dpdk-mem)
};

class TestEndpoint {
 public:
  static rnicdv::Result<std::unique_ptr<TestEndpoint>> open(const EndpointConfig& config);

  // PD, CQs, QPs (to INIT), buffers sized for `max_size`, receives pre-posted for SEND tests
  // on a receiving side (`extra_recvs` more for early-posted sends). `posts_operations`: this
  // side posts the test's operations (Options::posts_operations), which with -c XRC in a one-way
  // bandwidth test makes its QPs initiators rather than targets.
  rnicdv::Status create(const Options& o, uint64_t max_size, bool receives, uint32_t extra_recvs,
                        bool posts_operations);

  std::vector<PeerRecord> local_records() const;
  // RTR with the peer's QPN, PSN and GID; RTS too unless `stay_in_rtr` (an XRC target stays in
  // RTR: it only answers). `remote` is the peer's records in its order, one per QP.
  rnicdv::Status connect(const std::vector<PeerRecord>& remote, uint32_t mtu_bytes,
                         bool stay_in_rtr);
  rnicdv::Status to_rts(size_t lane);
  // -R: the connection manager moves the QPs; only the peer's buffers are taken from its
  // records.
  rnicdv::Status set_remote(const std::vector<PeerRecord>& remote);

  // The MTU this device would use: -m if given (capped by the port), else the active MTU.
  uint32_t mtu_bytes(const Options& o) const;
  uint32_t inline_size() const { return inline_size_; }
  uint32_t out_reads() const { return out_reads_; }
  bool is_sim() const;
  // Header lines that describe the device (sim wire, profile).
  void describe(HeaderInfo* h) const;
  // QP i's record, and the peer's i-th record (in the order the peer sent them).
  AddressInfo local_address(size_t qp) const;
  AddressInfo remote_address(size_t qp) const;

  rnicdv::Device& device() { return *dev_; }
  rnicdv::CompletionQueue& send_cq() { return *send_cq_; }
  rnicdv::CompletionQueue& recv_cq() { return *recv_cq_; }
  // Polls the send or receive CQ. With -e, each poll first sleeps on the completion channel
  // (at most kEventSliceMs, so the caller's stall guard still runs), acknowledges the event
  // and arms its CQ again: perftest's ibv_get_cq_event / ibv_ack_cq_events /
  // ibv_req_notify_cq before each ibv_poll_cq.
  int poll_send(rnicdv::Completion* wc, int max) { return poll_cq(*send_cq_, wc, max); }
  int poll_recv(rnicdv::Completion* wc, int max) { return poll_cq(*recv_cq_, wc, max); }
  static constexpr int kEventSliceMs = 50;
  uint64_t events_taken() const { return events_taken_; }
  // Every QP (with -c XRC, the initiators and then the targets), as the records go.
  rnicdv::QueuePair& qp(size_t i) { return qps_[i]; }
  // The port QP i is on: -i's, or with -O port 2 for the second half of the QPs (perftest's
  // ctx_modify_qp_to_init; with -c XRC's initiators and targets, the second half of each).
  uint8_t port_of(size_t i) const { return qp_ports_[i]; }
  // -O: QP i is in the second half, on port 2 (perftest's port_by_qp 1).
  bool on_second_port(size_t i) const { return dual_port_ && qp_ports_[i] == kSecondPort; }
  // -O: the receive completion `wc` came in through port 2: its receive queue's QP, or with
  // -c XRC the target that took the message, is in the second half.
  bool recv_on_second_port(const rnicdv::Completion& wc) const;
  uint32_t qp_number(size_t i) const { return qps_[i].qpn(); }
  size_t num_qps() const { return qps_.size(); }
  // Lanes (above): the QPs this side posts on, QPs [0, num_lanes()).
  size_t num_lanes() const { return lanes_; }
  uint8_t* send_buf(size_t lane) const { return regions_[lane].base; }
  uint8_t* recv_buf(size_t lane) const { return regions_[peer_index(lane)].base + half_; }
  uint32_t lkey(size_t lane) const { return regions_[lane].mr->lkey(); }
  const PeerRecord& remote(size_t lane) const { return remote_[peer_index(lane)]; }
  // Sets where `wr` goes beyond its remote address: with -c UD its datagram (the lane's
  // address handle towards its peer, the peer's QPN and perftest's Q_Key), with -c XRC the
  // peer's XRC SRQ; nothing for RC and UC. After connect().
  void address(size_t lane, rnicdv::SendWr* wr) const {
    if (xrc_) wr->remote_srqn = remote(lane).srqn;
    if (!ud_) return;
    wr->av = ahs_[lane].av();
    wr->remote_qpn = remote_[lane].qpn;
    wr->remote_qkey = remote_qkeys_.empty() ? kUdQkey : remote_qkeys_[lane];
  }
  // -c UD -R: QP i sends to the QPN and Q_Key its peer's datagram service answered (SIDR),
  // not to those of the control channel's record.
  void set_datagram_peer(size_t i, uint32_t qpn, uint32_t qkey) {
    remote_qkeys_.resize(qps_.size(), kUdQkey);
    remote_[i].qpn = qpn;
    remote_qkeys_[i] = qkey;
  }
  bool ud() const { return ud_; }
  bool xrc() const { return xrc_; }
  uint32_t rx_depth() const { return rx_depth_; }

  // Receive queues: QP r's own, or with -c XRC the one XRC SRQ (queue 0), which every target
  // takes its receives from. A receive completion's wr_id is its queue's number.
  size_t num_recv_queues() const { return recv_queues_; }
  // The peer's lanes that send into each receive queue: its one peer QP, or with -c XRC every
  // initiator the targets answer.
  uint64_t senders_per_recv_queue() const { return xrc_ ? qps_.size() - initiators_ : 1; }
  // The peer's lanes in all: what a SEND receiver expects messages from.
  uint64_t peer_lanes() const { return recv_queues_ * senders_per_recv_queue(); }
  // Posts one receive into receive queue r (its QP's receive half; with -c XRC the first
  // target's), as large as the largest message of the run, so a receive left over from one
  // size of a sweep (-a) takes any later size.
  rnicdv::Errc post_recv(size_t r) noexcept;
  // --recv_post_list: recv_list() such receives in one post call (a chained list, as
  // perftest's ibv_post_recv of its rwr array). The WRs are built once, in create().
  rnicdv::Errc post_recv_list(size_t r) noexcept;
  // -c XRC: this side's XRC SRQ, which its records name.
  uint32_t xrc_srqn() const { return xrc_srq_ ? xrc_srq_->srqn() : 0; }
  uint32_t recv_list() const { return recv_list_; }
  // Receives outstanding on each receive queue when a run (one size) starts: the RX depth in
  // whole lists, as perftest's ctx_set_recv_wqes posts rx_depth / recv_post_list lists.
  uint32_t receives_at_start() const { return rx_depth_ / recv_list_ * recv_list_; }
  // Receive post calls made on all receive queues (each list is one).
  uint64_t recv_post_calls() const { return recv_post_calls_; }
  // --mmap: perftest's line for each buffer mapped from the file, printed before the header.
  const std::string& mmap_notes() const { return mmap_notes_; }
  // A receive of queue r completed (the loops call this for every receive completion).
  void recv_completed(size_t r) noexcept { ++recvs_done_[r]; }
  // Brings every receive queue back to receives_at_start() outstanding receives, in lists of
  // recv_list(): before each size of a sweep, as perftest re-posts its receive queue per
  // size. The loops assume that many are posted.
  rnicdv::Status refill_receives();
  // -R: a REQ that met no listener yet (REJ) left QP i in ERR, its receives flushed. Takes
  // the flushed completions off the receive CQ (waiting up to `timeout` for them), brings the
  // QP back to INIT through RESET and posts its receives again, for the next REQ.
  rnicdv::Status restart_after_reject(size_t i, std::chrono::milliseconds timeout);

  ~TestEndpoint();

 private:
  TestEndpoint() = default;
  rnicdv::Status connect_datagrams(bool stay_in_rtr);
  // -c XRC: the domain, the SRQ on `srq_cq` and QP i, an initiator or a target.
  rnicdv::Status open_xrc(uint32_t srq_depth, rnicdv::CompletionQueue& srq_cq);
  rnicdv::Result<rnicdv::QueuePair> create_xrc_qp(size_t i, const rnicdv::QpConfig& config);
  // The peer's record that QP i connects to (its index in the peer's order).
  size_t peer_index(size_t i) const {
    if (!xrc_pairs_) return i;
    return i < initiators_ ? i + initiators_ : i - initiators_;
  }
  // A failed receive post on queue r, naming its QP or the XRC SRQ.
  rnicdv::Status recv_queue_error(size_t r, rnicdv::Errc e) const;
  // The region receive queue r's receives land in.
  size_t recv_region(size_t r) const { return xrc_ ? initiators_ : r; }
  // The GID and GID index of port `port` (1-based).
  rnicdv::hw::PortInfo port_info(uint32_t port) const;
  // -x and --ipv6 against the GID of each port the QPs are on.
  rnicdv::Status check_gids(const Options& o) const;
  struct Region {
    uint8_t* base = nullptr;
    size_t bytes = 0;
    std::optional<rnicdv::MemoryRegion> mr;
    uint32_t psn = 0;
    bool dpdk_heap = false;  // from rnicdv::sim::dpdk_alloc, else mmap
  };
  std::optional<rnicdv::Device> dev_;
  std::optional<rnicdv::ProtectionDomain> pd_;
  int poll_cq(rnicdv::CompletionQueue& cq, rnicdv::Completion* wc, int max);
  std::optional<rnicdv::CompletionChannel> channel_;  // -e
  uint64_t events_taken_ = 0;
  std::optional<rnicdv::CompletionQueue> send_cq_, recv_cq_;
  // -c XRC: the domain and the SRQ, which go after the QPs and before the CQs.
  std::optional<rnicdv::XrcDomain> xrcd_;
  std::optional<rnicdv::SharedReceiveQueue> xrc_srq_;
  std::vector<rnicdv::QueuePair> qps_;
  std::vector<uint8_t> qp_ports_;  // QP i's port (port_of)
  bool dual_port_ = false;         // -O
  uint32_t first_port_ = 1;        // -i
  // -O with -c XRC: the QPNs of the targets on port 2, which receive completions name.
  std::vector<uint32_t> second_port_targets_;
  std::vector<Region> regions_;
  std::vector<PeerRecord> remote_;  // the peer's, in its order
  size_t lanes_ = 0;                // QPs [0, lanes_) post
  size_t recv_queues_ = 0;          // receive queues: one per QP, or the XRC SRQ
  // -c XRC: QPs [0, initiators_) are initiators, the rest targets; with xrc_pairs_ (latency
  // tests, -b) each side has both, the initiator q meeting the peer's target initiators_ + q.
  bool xrc_ = false;
  bool xrc_pairs_ = false;
  size_t initiators_ = 0;
  size_t half_ = 0;
  uint32_t inline_size_ = 0;
  uint32_t out_reads_ = 16;
  uint32_t rx_depth_ = 0;
  uint64_t recv_size_ = 0;
  std::vector<uint64_t> recvs_posted_, recvs_done_;  // per receive queue, over the whole run
  uint32_t recv_list_ = 1;
  std::vector<rnicdv::Sge> recv_sges_;     // queue r's: [r * recv_list_, (r + 1) * recv_list_)
  std::vector<rnicdv::RecvWr> recv_wrs_;  // likewise
  uint64_t recv_post_calls_ = 0;
  uint8_t qp_timeout_ = 14;
  rnicdv::hw::QpAttr init_attr_;  // what create() moved the QPs to INIT with
  uint32_t init_mask_ = 0;
  bool ud_ = false;                          // -c UD
  bool uc_ = false;                          // -c UC
  std::vector<rnicdv::AddressHandle> ahs_;  // UD: QP i's handle towards its peer
  std::vector<uint32_t> remote_qkeys_;      // UD with -R: QP i's peer's Q_Key (SIDR's)
  // What the QPs carry (-S, --tclass, -L, --flow_label, --retry_count): applied at RTR and RTS.
  uint8_t sl_ = 0, traffic_class_ = 0, hop_limit_ = 255, retry_count_ = 7;
  std::vector<uint32_t> flow_labels_;
  bool dpdk_memory_ = false;
  bool hugepages_ = false;
  std::string mmap_file_;  // --mmap
  uint64_t mmap_offset_ = 0;
  std::string mmap_notes_;  // perftest's "allocated mmap buffer ..." line for each region
};

}  // namespace rnicperf
