// SPDX-License-Identifier: BSD-3-Clause
// The IB CM of one simulated HCA: the communication-management state machine of IBA 12.9
// (Linux drivers/infiniband/core/cm.c behaviour), independent of
// how MADs travel. A MadPort carries MADs and timers; on the simulated fabric it is the
// engine's GSI (QP1) and clock, in unit tests a fake.
//
// Threads. MADs and timers arrive on the engine thread (on_mad, on_timer); the API (listen,
// connect, accept, ...) is called from application threads. One mutex guards all state. MADs
// are collected while it is held and sent after it is released, and the port is never called
// with it held, so the engine may hold its own locks while it calls in.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <queue>
#include <random>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cm/event_queue.h"
#include "cm/mad.h"
#include "rnicdv/hw/cm.h"

namespace rnicdv::sim::faults {
class FaultSchedule;
}

namespace rnicdv::sim::cm {

// How CM MADs leave and how the agent is woken. The calls never re-enter the agent.
class MadPort {
 public:
  virtual ~MadPort() = default;
  // Sends one MAD as UD from QP1 to QP1 at `dst` (Q_Key 0x80010000). Any thread.
  virtual void send(const hw::IpAddress& dst, const MadBytes& mad) = 0;
  // Makes CmAgent::on_timer() run on the engine thread at or after `at_ns` (fabric clock).
  virtual void schedule(uint64_t at_ns) = 0;
  virtual uint64_t now_ns() const = 0;
};

struct CmAgentConfig {
  hw::IpAddress address;  // the HCA's address (its GID), IPv4 or IPv6
  uint64_t ca_guid = 0;  // node GUID, sent as Local CA GUID
  hw::Mtu max_mtu = hw::Mtu::mtu4096;
  hw::Mtu active_mtu = hw::Mtu::mtu4096;
  uint64_t seed = 1;        // communication IDs, TIDs, PSNs, ports: reproducible per seed
  // Real-time fabrics: mix the OS's entropy into the seed and draw every communication ID at
  // random, so that identifiers and PSNs differ between processes and runs and cannot be
  // guessed from earlier ones. Off (deterministic fabrics): reproducible per seed.
  bool fresh_entropy = false;
  std::string device_name;  // for messages
  // The fabric's fault schedule (null: none) and this device's index in the fabric, for the
  // cm-reject and cm-dreq rules (cm_faults.cc).
  faults::FaultSchedule* faults = nullptr;
  uint32_t device_index = 0;
};

// Counts of what the agent saw and did, for tests and dumps.
struct CmCounters {
  std::array<uint64_t, 0x1b> tx_by_attr{};  // indexed by attribute ID (0x10 REQ ... 0x16 DREP)
  std::array<uint64_t, 0x1b> rx_by_attr{};
  uint64_t rx_malformed = 0;  // not a CM MAD we can parse
  uint64_t rx_unmatched = 0;  // matched no connection and was dropped
  uint64_t dropped_by_test_hook = 0;
  uint64_t duplicate_req_dropped = 0;
  uint64_t rtu_resent = 0;   // duplicate REP answered with a new RTU
  uint64_t retransmits = 0;  // REQ, REP, DREQ sent again by their timers
  uint64_t unmatched_dreq_answered = 0;
  uint64_t comm_est_established = 0;  // connections established by COMM_EST rather than RTU
  uint64_t peers_gone = 0;  // connections ended because their peer's port was found gone
  // REQs dropped because the listener's backlog was full, or because their source address
  // already had its share of it waiting (no REJ is sent: see CmAgent::on_req).
  uint64_t req_dropped_backlog = 0;
  uint64_t req_dropped_source_share = 0;
  uint64_t requests_expired = 0;   // not accepted within kRequestWaitMaxNs
  uint64_t rep_waits_expired = 0;  // accepted, no RTU within kRepWaitMaxNs
  uint64_t established = 0;        // connections established, in all (the cm-dreq order)
  uint64_t fault_rejects = 0;      // REQs answered with a REJ chosen by a cm-reject rule
  uint64_t fault_rejects_resent = 0;  // retransmitted REQs of those, answered the same way
  uint64_t fault_dreqs = 0;           // DREQs sent by a cm-dreq rule
  uint64_t tx(AttrId a) const { return tx_by_attr[static_cast<size_t>(a)]; }
  uint64_t rx(AttrId a) const { return rx_by_attr[static_cast<size_t>(a)]; }
};

class CmAgent : public hw::ConnectionManager, public std::enable_shared_from_this<CmAgent> {
 public:
  // The CM states of IBA 12.9.6 that this agent uses (ib_cm.h enum ib_cm_state).
  enum class State : uint8_t {
    idle,
    req_sent,
    mra_req_rcvd,
    req_rcvd,
    rep_sent,
    mra_rep_rcvd,
    rep_rcvd,
    established,
    dreq_sent,
    timewait,
    sidr_req_sent,  // SIDR (IBA 12.11): waiting for the SIDR_REP
    sidr_req_rcvd,  // waiting for the application to accept or reject
  };
  static const char* state_name(State s) noexcept;

  static std::shared_ptr<CmAgent> create(const CmAgentConfig& config, MadPort* port);
  ~CmAgent() override;

  // The port goes away (device destruction): waits for calls in flight, then every later
  // operation fails with "device closed" and nothing more is sent.
  void detach_port();

  // ---- Engine thread ----------------------------------------------------------------------
  void on_mad(const hw::IpAddress& src, std::span<const uint8_t> mad);
  void on_timer();
  // The fabric found nothing at `peer` any more: a frame sent there was refused because no
  // port receives at that address (the process that had it ended; udp_wire.cc). The peer's
  // CM is gone and will answer nothing, so every connection to it ends now, as it would once
  // its retries ran out: an established one, or one waiting for a DREP, is disconnected; one
  // waiting for a REP or RTU times out (REQ_ERROR or REP_ERROR). A request waiting to be
  // accepted is left to its own deadline.
  void on_peer_unreachable(const hw::IpAddress& peer);

  // The process ends and its connection handles will never be destroyed (the uverbs shim's
  // exit teardown could not reach them): every connection a handle still holds tells its peer
  // as destroy() would, an established one with a DREQ, one being set up with a REJ. Waits at
  // most `wait_ns` for the agent's lock (false if it stayed held: nothing was sent).
  bool farewell(uint64_t wait_ns);

  // Arms the wake-ups of the fault schedule's cm-dreq rules for this device (cm_faults.cc).
  // Called once the port delivers on_timer to this agent.
  void start_fault_timers();

  // ---- hw::ConnectionManager -----------------------------------------------------------------
  using hw::ConnectionManager::listen;
  Result<std::unique_ptr<hw::CmListener>> listen(const hw::CmAddress& local, int backlog) override;
  Result<std::unique_ptr<hw::CmListener>> listen_ud(const hw::CmAddress& local,
                                                    int backlog) override;
  Result<std::unique_ptr<hw::CmConnection>> connect(const hw::CmConnectParams& params) override;
  hw::IpAddress local_address() const override { return config_.address; }

  // ---- Test hooks ---------------------------------------------------------------------------
  // Drops the next `count` outgoing MADs of attribute `attr` (retransmissions included), as a
  // lossy fabric would drop exactly those.
  void drop_outgoing(AttrId attr, uint32_t count);
  CmCounters counters() const;
  size_t connection_count() const;  // records still held (including TIMEWAIT)
  // Requests waiting on the (TCP port space) listener of `port` (REQ received, neither
  // accepted nor rejected), in all or from one source address.
  size_t pending_requests(uint16_t port) const;
  size_t pending_requests_from(uint16_t port, const hw::IpAddress& src) const;
  std::string dump() const;

  // ---- Used by the connection and listener handles -----------------------------------------
  Status accept(uint32_t id, const hw::CmAcceptParams& params);
  Status reject(uint32_t id, uint16_t reason, std::span<const uint8_t> private_data);
  Status establish(uint32_t id);
  Status notify_comm_est(uint32_t id);
  // See hw::CmConnection::set_established_notifier.
  void set_established_notifier(uint32_t id, void (*fn)(void* ctx), void* ctx);
  Status disconnect(uint32_t id);
  Status qp_attr(uint32_t id, hw::QpState target, hw::QpAttr* attr, uint32_t* mask) const;
  void destroy(uint32_t id);
  // Listeners are keyed by port space and port: the low 32 bits of their service ID.
  static constexpr uint32_t listen_key(hw::CmPortSpace space, uint16_t port) noexcept {
    return (uint32_t{static_cast<uint16_t>(space)} << 16) | port;
  }
  void close_listener(uint32_t key);
  Status set_backlog(uint32_t key, int backlog);
  // The listener's reader takes the request `id` announced in `ev`: the request gets its
  // handle (ev->request) and an event queue relayed to the listener's. False if the request
  // went away meanwhile (withdrawn, expired).
  bool take_request(uint32_t id, hw::CmEvent* ev);
  Result<State> state_of(uint32_t id) const;

  // The packet lifetime assumed for the REQ timer: 2 * 4.096 us * 2^8 ~ 2 ms per try on
  // top of the CM response timeout. The simulated fabric has no path record to ask.
  static constexpr uint8_t kPacketLifeTime = 8;

  // What a REQ can make the passive side hold. A REQ's Local CM Response Timeout and Max CM
  // Retries are the requester's word: up to 4.096 us * 2^31 (2.4 hours) per REP try and 16
  // tries, which Linux takes as they come (cm_req_handler: cm_convert_to_ms of the field, no
  // ceiling). Here a request not accepted within kRequestWaitMaxNs of its REQ is withdrawn (REJ
  // 28, as cm_destroy_id sends from REQ_RCVD), and an accepted one not established within
  // kRepWaitMaxNs of its REP times out (REJ timeout, and the `timeout` event of REP_ERROR);
  // each REP try waits at most kRepTryMaxNs. Legitimate requesters answer a REP in a round
  // trip, and rdma_cm's own REQ stage (15 retries of 4.3 s) outlasts these waits.
  static constexpr uint64_t kRequestWaitMaxNs = 4'000'000'000;
  static constexpr uint64_t kRepWaitMaxNs = 4'000'000'000;
  static constexpr uint64_t kRepTryMaxNs = 1'000'000'000;

  // How many of a listener's waiting requests one source address may hold: an eighth of the
  // backlog, so that filling it takes eight addresses or more, but never fewer than 16 (or
  // the whole backlog, if smaller), because one host legitimately opens several connections
  // at once (a queue per CPU, as NVMe-oF hosts do).
  static constexpr int source_share(int backlog) noexcept {
    const int floor = backlog < 16 ? backlog : 16;
    return backlog / 8 > floor ? backlog / 8 : floor;
  }

 private:
  struct Record;
  struct Listener;
  struct Outbox {
    std::vector<std::pair<hw::IpAddress, MadBytes>> mads;
    uint64_t schedule = UINT64_MAX;  // wake-up to ask of the port
  };
  struct Timer {
    uint64_t at;
    uint32_t id;
    bool operator>(const Timer& o) const { return at > o.at; }
  };
  enum class TimerKind : uint8_t { retry, deadline, timewait };

  CmAgent(const CmAgentConfig& config, MadPort* port);

  // Port access without holding mu_ across the call (see the header comment).
  MadPort* acquire_port() const;
  void release_port() const;
  bool port_attached() const;
  uint64_t now() const;
  void flush(Outbox& out);

  // Called with mu_ held.
  Record* find(uint32_t id);
  const Record* find(uint32_t id) const;
  Record* find_by_remote(uint64_t guid, uint32_t remote_comm_id);
  uint32_t allocate_comm_id();
  uint64_t tid_for(uint32_t local_id) const;
  void emit(Outbox& out, const hw::IpAddress& dst, const MadBytes& mad);
  MadBytes send(Outbox& out, const hw::IpAddress& dst, uint64_t tid, CmBody body);
  void arm(Record& r, TimerKind kind, uint64_t at);
  void index_remote(Record& r);
  void unindex_live(Record& r);    // leaves the stale-connection index
  void unindex_remote(Record& r);  // leaves both indexes
  void enter_timewait(Record& r, uint64_t now);
  void finish(Record& r);  // back to idle; erased if no handle holds it
  void erase(uint32_t id);
  void post(Record& r, hw::CmEvent event);
  void send_rej(Outbox& out, const Record& r, uint16_t reason, uint8_t message_rejected,
                std::span<const uint8_t> private_data);
  void send_rej_timeout(Outbox& out, const Record& r);
  void send_dreq(Outbox& out, Record& r, uint64_t now);
  // What destroy() sends the peer for `r`, by its state (mu_ held).
  void tell_peer_locked(Outbox& out, Record& r, uint64_t now);
  void retransmit(Outbox& out, Record& r, uint64_t now);
  void connect_deadline_expired(Outbox& out, Record& r);
  void passive_deadline_expired(Outbox& out, Record& r);
  Listener* listener_of(const Record& r);
  // The record leaves REQ_RCVD: it no longer counts against its listener's backlog, and an
  // announcement the application never took is withdrawn from the listener's queue.
  void release_slot(Record& r);
  void retry_expired(Outbox& out, Record& r, uint64_t now);
  std::unique_ptr<hw::CmConnection> make_connection_handle(uint32_t id);

  // Inbound, one per message (mu_ held).
  void on_req(Outbox& out, const hw::IpAddress& src, const MadHeader& hdr, const ReqMsg& m, uint64_t now);
  void on_rep(Outbox& out, const hw::IpAddress& src, const MadHeader& hdr, const RepMsg& m);
  // Every message that acts on a connection must come from its peer's address (and name the
  // peer's communication ID once it is known): REP, RTU, MRA, REJ, DREQ, DREP.
  void on_rtu(Outbox& out, const hw::IpAddress& src, const RtuMsg& m, uint64_t now);
  void on_rej(const hw::IpAddress& src, const RejMsg& m, uint64_t now);
  void on_mra(const hw::IpAddress& src, const MraMsg& m, uint64_t now);
  void on_dreq(Outbox& out, const hw::IpAddress& src, const MadHeader& hdr, const DreqMsg& m, uint64_t now);
  void on_drep(const hw::IpAddress& src, const DrepMsg& m, uint64_t now);
  void on_timer_for(Outbox& out, Record& r, uint64_t now);
  void reject_req(Outbox& out, const hw::IpAddress& src, const MadHeader& hdr, const ReqMsg& m,
                  uint16_t reason);
  Result<std::unique_ptr<hw::CmListener>> listen_in(hw::CmPortSpace space,
                                                    const hw::CmAddress& local, int backlog);
  // Whether a request from `src` may wait on `l` (its backlog and the source's share of it);
  // counts the drop if not.
  bool admit(const Listener& l, const hw::IpAddress& src);
  // Where a request (REQ or SIDR_REQ) for `service_id` goes: the listener of `space` on its
  // port, and the rdma_cm header at the start of its private data. `miss` says why there is
  // none: no_service (another space, no listener on the port, or one bound to another
  // address) or bad_header (the header does not decode); each request type answers in its own
  // terms.
  struct ListenerMatch {
    enum class Miss : uint8_t { none, no_service, bad_header };
    Listener* listener = nullptr;
    CmaHeader cma;
    Miss miss = Miss::none;
  };
  ListenerMatch match_listener(hw::CmPortSpace space, uint64_t service_id,
                               std::span<const uint8_t> private_data);

  // What every request (REQ, SIDR_REQ) needs before the agent holds anything for it: a
  // timeout, the port, and its event queue (cm_active.cc).
  Result<std::shared_ptr<CmEventQueue>> request_queue(const hw::CmConnectParams& p,
                                                      const std::string& what) const;
  // A request's destination: an address of the device's IP version, and a port.
  Status check_remote(const hw::CmAddress& remote, const std::string& what) const;
  // A new active record for `p` (mu_ held): its IDs, addresses and retry count.
  std::unique_ptr<Record> new_active_record(const hw::CmConnectParams& p);
  // rdma_cm's header, then the consumer's bytes, at the start of a request's private data.
  void put_request_private_data(const Record& r, std::span<const uint8_t> data,
                                uint8_t* out) const;

  // SIDR (cm_sidr.cc; mu_ held except connect_sidr).
  Result<std::unique_ptr<hw::CmConnection>> connect_sidr(const hw::CmConnectParams& params);
  void on_sidr_req(Outbox& out, const hw::IpAddress& src, const MadHeader& hdr, const SidrReqMsg& m,
                   uint64_t now);
  void on_sidr_rep(const hw::IpAddress& src, const MadHeader& hdr, const SidrRepMsg& m);
  Status accept_req(Outbox& out, Record& r, const hw::CmAcceptParams& params, uint64_t now);
  Status accept_sidr(Outbox& out, Record& r, const hw::CmAcceptParams& params);
  Status reject_conn(Outbox& out, Record& r, uint16_t reason,
                     std::span<const uint8_t> private_data, uint64_t now);
  Status reject_sidr(Outbox& out, Record& r, std::span<const uint8_t> private_data);
  // The SIDR_REP answering `r` (in SIDR_REQ_RCVD), which is then done.
  void answer_sidr(Outbox& out, Record& r, uint8_t status, uint32_t qpn, uint32_t qkey,
                   std::span<const uint8_t> private_data);
  // A SIDR_REP to a request no record holds (no listener, a bad header).
  void refuse_sidr(Outbox& out, const hw::IpAddress& src, const MadHeader& hdr, const SidrReqMsg& m,
                   uint8_t status);
  void sidr_expired(Outbox& out, Record& r);  // a request not answered within its wait
  // Requests waiting in SIDR_REQ_RCVD: (source address, request ID) -> record, so that a
  // retransmitted SIDR_REQ is not offered twice.
  std::map<std::pair<hw::IpAddress, uint32_t>, uint32_t> sidr_by_remote_;

  // Fault rules (cm_faults.cc; mu_ held). A REQ that would be offered to a listener may be
  // answered with a chosen REJ (true: it was); a REQ already answered so is answered again.
  bool fault_reject(Outbox& out, const hw::IpAddress& src, const MadHeader& hdr, const ReqMsg& m);
  bool fault_reject_again(Outbox& out, const hw::IpAddress& src, const MadHeader& hdr, const ReqMsg& m);
  // Every transition to ESTABLISHED: numbers the connection, and sends the DREQ of a cm-dreq
  // rule whose time has come and that chooses it.
  void note_established(Outbox& out, Record& r, uint64_t now);
  void fault_dreq_due(Outbox& out, uint64_t now);
  void fault_dreq_fire(Outbox& out, size_t k, uint64_t seq, uint64_t now);
  // The fault timer's ID in timers_: communication ID 0 is never allocated.
  static constexpr uint32_t kFaultTimerId = 0;
  struct DreqRuleState {
    size_t rule = 0;  // index in the spec's cms
    uint64_t at = 0;  // absolute, fabric clock
    bool due = false;
    std::atomic<uint64_t> matches{0};
    std::atomic<uint64_t> fired{0};
  };
  std::vector<std::unique_ptr<DreqRuleState>> dreq_rules_;
  // REQs answered with a chosen REJ: (remote CA GUID, remote Comm ID) -> reason, the oldest
  // forgotten past kRejectedKept.
  static constexpr size_t kRejectedKept = 1024;
  std::map<std::pair<uint64_t, uint32_t>, uint16_t> rejected_;
  std::deque<std::pair<uint64_t, uint32_t>> rejected_order_;

  const CmAgentConfig config_;
  const uint32_t hi_tid_;

  mutable std::mutex port_mu_;
  mutable std::condition_variable port_idle_;
  MadPort* port_;
  mutable int port_users_ = 0;

  mutable std::mutex mu_;
  std::mt19937_64 rng_;
  std::mt19937_64 id_rng_;  // fresh_entropy: communication IDs
  uint32_t next_comm_id_;
  uint32_t comm_id_mask_;
  std::unordered_map<uint32_t, std::unique_ptr<Record>> records_;
  std::map<std::pair<uint64_t, uint32_t>, uint32_t> by_remote_id_;   // (guid, remote comm ID)
  std::map<std::pair<uint64_t, uint32_t>, uint32_t> by_remote_qpn_;  // (guid, remote QPN)
  std::map<uint32_t, std::unique_ptr<Listener>> listeners_;  // by listen_key
  uint64_t next_listener_serial_ = 1;
  std::priority_queue<Timer, std::vector<Timer>, std::greater<>> timers_;
  uint64_t scheduled_at_ = UINT64_MAX;  // earliest wake-up asked of the port
  uint64_t wake_request_ = UINT64_MAX;  // a new earliest wake-up, not yet asked
  std::array<uint32_t, 0x1b> drop_next_{};
  // Established notifiers due, called by the public entry points after mu_ is released.
  std::vector<std::pair<void (*)(void*), void*>> due_notifiers_;
  void call_due_notifiers();
  Status apply_comm_est(uint32_t id, Outbox& out);
  CmCounters counters_;
};

}  // namespace rnicdv::sim::cm
