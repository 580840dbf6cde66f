// SPDX-License-Identifier: BSD-3-Clause
// The simulated HCA: all state of one device and the engine that runs it.
//
// Locking: `mu_` protects everything below it. The control path (create, modify, destroy,
// counters, dump) and the engine (run_engine_pass) take it; the driver's fast path never does:
// it only writes ring memory, doorbell records and UAR registers, which the engine reads with
// acquire loads. GSI handlers and timers, and completion-event handlers, run after the lock
// is released (see gsi.h and handles.h).
//
// The device's own work: doorbells and the engine loop (engine.cc), CQE writes and overruns
// (cq_write.cc), completion events (cq_events.cc), object creation (objects.cc). The RC
// transport is its own part (rc/transport.h): role objects (SQ fetcher, requester, completer,
// retransmit, responder, flush, QP state machine) that see the device only through
// rc::Context. The engine calls into them; they never call the engine.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "async_events.h"
#include "cq.h"
#include "external.h"
#include "faults/schedule.h"
#include "gsi.h"
#include "host_access.h"
#include "mr_table.h"
#include "packet/packet.h"
#include "qp.h"
#include "rc/transport.h"
#include "slots.h"
#include "srq.h"
#include "ud/datagram.h"
#include "rnicdv/sim/sim.h"
#include "uar.h"
#include "uar_watch.h"
#include "wire/wire.h"

namespace rnicdv::sim {

// Counts fork()s in this process's line: a child's value differs from its parent's (a
// pthread_atfork handler, registered with the first device, increments it in the child).
extern std::atomic<uint32_t> g_fork_epoch;
uint32_t fork_epoch();

struct FabricShared;

// How often a threaded device looks at the records of a QP in ERR in memory the application
// placed (engine.cc look_at_errored_locked): libmlx5's receive posts are record stores only.
inline constexpr uint64_t kErroredLookNs = 2'000'000;

// Engine pacing: packets one QP may send per engine pass, datagrams taken from the wire.
inline constexpr uint32_t kTxBudgetPerQp = 32;
inline constexpr uint32_t kRxBudget = 128;
inline constexpr uint32_t kMaxSqBbs = 32768;
inline constexpr uint32_t kMaxSrqWqes = 1u << 16;  // the largest SRQ ring the model takes
inline constexpr uint32_t kMaxRateLimitBurst = 1u << 20;  // the largest pacing burst, bytes

// The model's defaults (sim.h: zero fields of DeviceConfig::caps take these).
hw::DeviceCaps default_caps();
// The largest values the WQE format allows (a 63-DS WQE).
hw::DeviceCaps format_limits();

class Hca final : public WireSink, public std::enable_shared_from_this<Hca> {
 public:
  Hca(std::shared_ptr<Fabric> fabric, FabricShared& shared, const DeviceConfig& config,
      uint32_t index);
  ~Hca() override;
  Hca(const Hca&) = delete;
  Hca& operator=(const Hca&) = delete;

  // Attaches to the wire, opens the event fd, allocates the UAR pages; threaded mode starts
  // the device thread.
  Status start();
  // Stops the thread and detaches from the wire. Objects stay usable as memory.
  void stop();
  // In a child of fork(): this device, its thread, and whatever locks it held at the fork,
  // are the parent's. Nothing may join the thread or wait for those locks here, and the
  // child's calls on it are refused (check_owner), as the kernel refuses a forked child's
  // commands on its parent's uverbs file.
  bool forked_away() const {
    return g_fork_epoch.load(std::memory_order_relaxed) != owner_epoch_;
  }
  // ok, or the error for `op` when this process is a child of the device's owner.
  Status check_owner(const char* op) const;
  // ok, or the error for `op` once the device had a fatal error (link.cc).
  Status check_alive(const char* op) const;

  const hw::DeviceInfo& info() const { return info_; }
  const DeviceConfig& config() const { return config_; }
  const IpAddress& address() const { return endpoint_.ip; }
  uint32_t ipv4() const { return endpoint_.ip.ipv4(); }
  // The device's place in its fabric (creation order): the device= of fault rules.
  uint32_t index() const { return index_; }
  // The fabric's fault schedule (faults/schedule.h), or null when no faults are asked for.
  faults::FaultSchedule* fault_schedule() const;
  const Endpoint& endpoint() const { return endpoint_; }
  // Takes what the wire holds for the device's ports (engine.cc).
  bool poll_wire_locked();
  // Port `port`'s endpoint (port 1's for a port the device has not).
  const Endpoint& port_endpoint(uint8_t port) const {
    return port == 2 && two_ports_ ? endpoint2_ : endpoint_;
  }
  uint8_t port_count() const { return two_ports_ ? 2 : 1; }
  // The port a QP sends and receives through: the one its INIT transition named.
  uint8_t qp_port(const QpObj& qp) const { return qp.attr.port_num == 2 && two_ports_ ? 2 : 1; }
  FabricShared& shared() { return shared_; }
  const Clock& clock() const;
  uint64_t now() const;
  AsyncEventQueue& events() { return events_; }
  // Link events (link.cc): the port's state, and whether the device had a fatal error. Read
  // without the device lock.
  bool port_up() const { return port_up_.load(std::memory_order_acquire); }
  bool dead() const { return dead_.load(std::memory_order_acquire); }
  Gsi& gsi() { return gsi_; }

  // ---- Control path (objects.cc, srq.cc, hca.cc; transitions in rc/qp_state.cc) ----
  Result<uint32_t> alloc_pd();
  void dealloc_pd(uint32_t pdn);
  bool has_pd(uint32_t pdn) const;
  Result<uint32_t> reg_mr(uint32_t pdn, void* addr, size_t length, uint32_t access);
  void dereg_mr(uint32_t key);
  Status rereg_mr(uint32_t key, uint32_t pdn, void* addr, size_t length, uint32_t access);
  Result<CqObj*> create_cq(uint32_t min_cqe);
  Result<CqObj*> create_cq_external(const ExternalCqMemory& mem);
  void release_cq(CqObj* cq);
  Result<QpObj*> create_qp(uint32_t pdn, CqObj* send_cq, CqObj* recv_cq, const hw::QpCaps& caps,
                           SrqObj* srq = nullptr, hw::QpType type = hw::QpType::rc);
  // Shared receive queues (srq.cc).
  Result<SrqObj*> create_srq(uint32_t pdn, uint32_t max_wr, uint32_t max_sge);
  Result<SrqObj*> create_srq_external(uint32_t pdn, const ExternalSrqMemory& mem);
  Status arm_srq_limit(SrqObj* srq, uint32_t limit);
  Status destroy_srq(SrqObj* srq);
  // XRC (srq.cc): domains, the SRQs of one (their receives completing on `cq`), and target
  // QPs, which have neither queue and whose CQs are a placeholder of the device's.
  Result<uint32_t> alloc_xrcd();
  Status dealloc_xrcd(uint32_t xrcdn);
  Result<SrqObj*> create_xrc_srq(uint32_t xrcdn, uint32_t pdn, CqObj* cq, uint32_t max_wr,
                                 uint32_t max_sge);
  Result<SrqObj*> create_xrc_srq_external(uint32_t xrcdn, uint32_t pdn, CqObj* cq,
                                          const ExternalSrqMemory& mem, uint32_t user_index);
  Result<QpObj*> create_xrc_recv_qp(uint32_t xrcdn);
  // An SRQ just made becomes one of domain `xrcdn`, completing on `cq` (undone, and an
  // error, if the domain was closed meanwhile).
  Result<SrqObj*> attach_xrc_srq_locked(SrqObj* srq, uint32_t xrcdn, CqObj* cq,
                                        uint32_t user_index);
  // An SRQ by its number (null: none), under the device lock.
  SrqObj* find_srq_locked(uint32_t srqn) const;
  Result<QpObj*> create_qp_external(uint32_t pdn, CqObj* send_cq, CqObj* recv_cq,
                                    const ExternalQpMemory& mem, SrqObj* srq = nullptr);
  // Refuses an XRC SRQ as an RC or UC QP's (create_qp, create_qp_external).
  Status check_receive_srq(const SrqObj* srq) const;
  void destroy_qp(QpObj* qp);
  Status modify_qp(QpObj* qp, const hw::QpAttr& attr, uint32_t mask);
  hw::QpState qp_state(const QpObj* qp) const;
  Status set_qp_rate_limit(QpObj* qp, const hw::RateLimit& limit);
  // UD multicast (ud/multicast.cc): the QP receives the datagrams sent to the group `mgid`
  // names (an IPv4-mapped class D address) from attach until detach or its destruction.
  Status attach_mcast(QpObj* qp, const hw::Gid& mgid);
  Status detach_mcast(QpObj* qp, const hw::Gid& mgid);
  // A UAR page that software maps (libmlx5 through the shim): `app_view` is where software
  // stores, `device_view` a mapping of the same page that the device reads and that stays
  // mapped until detach (the application may unmap its own). Stores into `app_view` wake a
  // sleeping device (uar_watch.h).
  Status attach_uar_page(uint8_t* app_view, uint8_t* device_view);
  void detach_uar_page(uint8_t* app_view);
  void set_user_index(QpObj* qp, uint32_t user_index);
  // Completion events of `cq` go to `fn` (empty: off). See handles.h set_cq_event_handler.
  Status set_cq_event_handler(CqObj* cq, std::function<void()> fn);
  // COMM_EST of `qp` goes to `fn(ctx)` after the pass that raised it (hw::Qp).
  void set_comm_est_notifier(QpObj* qp, void (*fn)(void*), void* ctx);

  DeviceCounters counters() const;
  Result<QpSnapshot> qp_snapshot(uint32_t qpn) const;
  std::string dump() const;
  void pause();
  void resume();

  // ---- Engine (engine.cc) ----
  // One pass over doorbells, the wire, timers and the active QPs, waiting for the device lock
  // if another thread holds it; then the notifications the pass raised, without the lock.
  // True if anything happened.
  bool run_engine_pass();
  // The same pass, unless another thread holds the device lock: then nothing, and false.
  bool try_run_engine_pass();
  // Earliest future time something is due (timers, held-back frames); UINT64_MAX if none.
  uint64_t next_deadline_ns() const;
  void on_datagram(const Endpoint& src, const Endpoint& dst, const uint8_t* data,
                   size_t len) override;
  void on_unreachable(const Endpoint& peer) override;

  // Threaded mode (device_thread.cc).
  void kick();
  // Whether the device thread sleeps. After a store that it must see (a frame for it, a
  // control-path change), the caller fences (seq_cst) before this load: the device publishes
  // the flag, fences, then looks once more before it sleeps.
  bool sleeping() const { return asleep_.load(std::memory_order_relaxed) != 0; }
  // Wakes the device thread if it sleeps (control-path changes that need an engine pass).
  void kick_if_sleeping() {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (sleeping()) kick();
  }
  // What a driver needs to wake the device after a register write (hw::QpView::wake).
  hw::DeviceWakeView wake_view() const;

  // Hands `len` bytes to the receive path as if the wire delivered them from `src`
  // (the fuzz harness's entry, fuzz_entry.h).
  void inject_datagram(const IpAddress& src, const uint8_t* data, size_t len);

  // Packet trace: `tap` sees every datagram this device transmits (BTH..pad), on the engine
  // thread, before the wire takes it. Empty function: off.
  using TxTap = std::function<void(const IpAddress& dst, const uint8_t* data, size_t len)>;
  void set_tx_tap(TxTap tap);

  // The driver's progress hook: deterministic mode steps the whole fabric; threaded mode
  // runs every device's engine once on the caller's thread unless its thread is busy.
  void progress();

  // Used by Gsi. Takes no device lock (unless a transmit tap is set): the CM sends from any
  // thread, also from the teardown at exit, where a command the exit interrupted may hold mu_.
  void transmit_raw(const IpAddress& dst, const uint8_t* data, size_t len);

 private:
  friend class Gsi;

  friend class rc::Context;
  friend class ud::Datagram;

  // reg_mr's and rereg_mr's checks of a region (objects.cc).
  Status check_region_locked(const char* op, uint32_t pdn, const void* addr, size_t length,
                             uint32_t access) const;

  // engine.cc
  // A pass with `lock` (the device lock) held on entry: the work, then unlock, then the
  // completion events, COMM_EST notifiers and GSI handlers it raised.
  bool run_pass_then_notify(std::unique_lock<std::mutex> lock);
  // The pass's work under the lock: doorbells, arms, timers, ERR QPs, wire, active QPs.
  bool do_device_work_locked(uint64_t now);
  bool scan_doorbells_locked();
  void on_doorbell_locked(QpObj& qp);
  void observe_dbrs_locked(QpObj& qp);
  void observe_own_dbrs_locked();
  void note_sq_dbr_locked(QpObj& qp, uint16_t dbr);
  // The active list: a QP is put on it by what gives it work (a doorbell, a packet, a modify,
  // a timer) and stays while its roles make progress.
  void activate_locked(QpObj& qp);
  bool run_active_locked(uint64_t now_ns);
  // Files the QP's earliest timer (retransmit, RNR wait, a look at its records in ERR) in the
  // timer set, and keeps the list of QPs in ERR up to date.
  void file_timers_locked(QpObj& qp, uint64_t now_ns);
  void fire_timers_locked(uint64_t now_ns);
  bool look_at_errored_locked(uint64_t now_ns);
  // Removes a QP being destroyed from the engine's lists.
  void forget_qp_locked(QpObj& qp);
  // A datagram from the wire, sent from `src` to `dst` (this device's address, or a group it
  // joined).
  void deliver_locked(const IpAddress& src, const IpAddress& dst, const uint8_t* data, size_t len);
  bool deliver_datagram_locked(QpObj* qp, const IpAddress& src, const IpAddress& dst,
                               const pkt::Packet& p, size_t len);
  // A UD SEND to a group: a copy to every QP attached (ud/multicast.cc). False if none took it.
  bool deliver_multicast_locked(const IpAddress& src, const IpAddress& group, const pkt::Packet& p,
                                size_t len);
  // A UD QP being destroyed in RTS sends the datagrams its doorbells announced first
  // (engine.cc).
  void send_rung_datagrams_locked(QpObj& qp);
  // Takes a QP being destroyed out of its groups (ud/multicast.cc).
  void detach_all_mcast_locked(QpObj& qp);
  void transmit(QpObj& qp, const IpAddress& dst, const uint8_t* frame, size_t len, IpClass ip);

  // link.cc: the link rules of the fault specification (port-down, port-up, fatal) that
  // concern this device, as events due at a time or after a number of transmitted frames.
  void init_link_events();
  // Applies the events that are due (at or before `now_ns`, or whose frame count was reached),
  // earliest first; true if any was.
  bool apply_link_events_locked(uint64_t now_ns);
  // The earliest time a pending timed event is due; UINT64_MAX if none.
  uint64_t next_link_deadline_locked() const;
  // Counts a frame that went out, for after= events; true if one of them is now due.
  bool count_link_frame();
  void apply_link_event_locked(size_t k, uint64_t now_ns);
  // A fatal error: the device stops, as a ConnectX after a catastrophic error (link.cc).
  void die_locked();

  // cq_write.cc: every CQE the transport writes; overruns and CQ memory faults.
  void write_cqe_locked(CqObj* cq, const wqe::CqeInit& init);
  void handle_cq_overflows_locked();
  void fail_cq_memory_locked(CqObj& cq);

  // dump.cc
  void dump_qp(std::string& out, const QpObj& qp) const;

  void raise_event(hw::AsyncEventType type, uint32_t qpn, uint32_t cqn, uint32_t srqn = 0);
  // Completion events (cq_events.cc).
  bool scan_cq_arms_locked();
  bool check_new_arms_locked();
  void raise_cq_event_locked(CqObj& cq);
  bool deliver_cq_events(std::vector<std::pair<uint32_t, uint32_t>>& fired);
  QpObj* find_qp(uint32_t qpn);
  Result<BfRegister*> bind_register(QpObj& qp);
  Result<BfRegister*> bind_external_register(QpObj& qp, uint8_t* base);
  // Memory the application placed that faulted (host_access.h; engine.cc).
  void handle_host_fault_locked(QpObj& qp);
  void unbind_register(QpObj& qp);
  void free_qp_memory(QpObj& qp);
  void maybe_free_cq(CqObj* cq);
  uint32_t alloc_qpn();
  // Numbers a new SRQ, fills its view and keeps it (srq.cc); the caller holds mu_.
  SrqObj* add_srq_locked(std::unique_ptr<SrqObj> srq, uint32_t pdn);
  Result<QpObj*> finish_create_qp(std::unique_ptr<QpObj> qp, uint32_t pdn, CqObj* send_cq,
                                  CqObj* recv_cq);

  std::shared_ptr<Fabric> fabric_;  // keeps the wire and the clock alive
  FabricShared& shared_;
  DeviceConfig config_;
  uint32_t index_;
  hw::DeviceInfo info_;
  Endpoint endpoint_{};   // port 1
  Endpoint endpoint2_{};  // port 2, when two_ports_
  bool two_ports_ = false;
  std::atomic<bool> attached_{false};
  AsyncEventQueue events_;
  Gsi gsi_;

  // The pages of registered regions (pinned_memory.h); its own lock, taken after mu_ or alone.
  PinnedMemory pins_;
  mutable std::mutex mu_;
  DeviceCounters counters_;
  MrTable mrs_;
  std::unordered_set<uint32_t> pds_;
  // UD multicast: group address -> the QPs attached, and the attachments in all.
  std::unordered_map<IpAddress, std::vector<QpObj*>, hw::IpAddressHash> mcast_groups_;
  uint32_t mcast_attachments_ = 0;
  uint32_t next_pdn_ = 1;
  uint32_t next_cqn_ = 0x80;
  uint32_t next_qpn_ = 0x100;
  std::vector<uint8_t*> owned_pages_;
  struct ExternalUarPage {
    uint8_t* app;     // where software stores
    uint8_t* device;  // where the device reads
  };
  std::vector<ExternalUarPage> external_pages_;
  // Application UAR pages a store was caught on while the device slept (uar_watch.h): every
  // register in them counts as written in the next pass.
  std::vector<uint8_t*> rung_pages_;
  std::vector<std::unique_ptr<BfRegister>> registers_;  // stable addresses
  std::vector<BfRegister*> free_dedicated_;
  BfRegister* shared_register_ = nullptr;
  std::vector<std::unique_ptr<CqObj>> cqs_;
  std::vector<std::unique_ptr<QpObj>> qps_;  // slots.h: an order the calls made decide
  std::vector<QpObj*> active_;               // QPs with work for the next pass (qp.queued)
  std::vector<QpObj*> working_;              // the pass's share of active_
  std::set<std::pair<uint64_t, QpObj*>> timers_;  // (deadline, QP): qp.timer_at
  std::vector<QpObj*> errored_;              // QPs in ERR or SQE (qp.watched_in_error)
  std::atomic<uint32_t> errored_external_{0};  // of them, in memory the application placed
  std::vector<std::unique_ptr<SrqObj>> srqs_;
  std::unordered_map<uint32_t, SrqObj*> srq_by_num_;
  uint32_t next_srqn_ = 0x40;
  // XRC domains: number -> the SRQs and target QPs of it. The targets' placeholder CQ and PD
  // are made with the first target (placeholder_mu_ keeps two from making them twice).
  std::unordered_map<uint32_t, uint32_t> xrcds_;
  uint32_t next_xrcdn_ = 1;
  std::mutex placeholder_mu_;
  CqObj* xrc_placeholder_cq_ = nullptr;
  uint32_t xrc_placeholder_pdn_ = 0;
  std::unordered_map<uint32_t, QpObj*> qp_by_num_;
  std::atomic<bool> paused_{false};
  std::vector<CqObj*> overflowed_cqs_;  // CQ_ERR raised; their QPs go to ERR
  std::vector<CqObj*> evented_cqs_;     // CQs with an event handler: their arms are watched
  // Completion events raised under mu_ and delivered after it is released: (cqn, handler_gen).
  std::vector<std::pair<uint32_t, uint32_t>> fired_cq_events_;
  // COMM_ESTs raised under mu_, their notifiers called after it is released.
  std::vector<std::pair<void (*)(void*), void*>> fired_comm_est_;

  // Completion-event handlers by CQN. event_mu_ guards them and is held while one runs, so a
  // handler removed under it is never called again. Lock order: event_mu_, then mu_.
  struct CqEventHandler {
    uint32_t gen;
    std::function<void()> fn;
  };
  std::mutex event_mu_;
  std::unordered_map<uint32_t, CqEventHandler> cq_event_handlers_;

  // The RC transport: its roles work on one QP at a time, under mu_ (rc/transport.h).
  rc::Transport rc_;
  // The datagram service, on the RC transport's fetcher, flush and CQE writer (ud/datagram.h).
  ud::Datagram ud_;
  bool transmitted_ = false;

  // Link events (link.cc). One entry per link rule that names this device (or every device),
  // plus one per port-down with for= once it fired (the port-up it brings).
  struct LinkEvent {
    uint32_t rule;           // index in the specification's links, for the log
    faults::LinkAction action;
    const char* trigger;     // "at", "after" or "for"
    uint64_t due_ns;         // at= and for=: the fabric's clock; 0 for after=
    uint64_t after_frames;   // after=: the frame count that makes it due; 0 otherwise
    uint64_t for_ns;         // port-down: the outage's length, 0 = until a port-up
    bool done;
  };
  std::vector<LinkEvent> link_events_;  // under mu_
  // The smallest after= still pending (UINT64_MAX: none), so that transmit pays one compare.
  std::atomic<uint64_t> link_frames_due_{UINT64_MAX};
  std::atomic<uint64_t> link_frames_tx_{0};   // frames sent, for after=
  std::atomic<bool> port_up_{true};
  std::atomic<bool> dead_{false};
  // Frames transmit_raw did not send because the link was down; counters() adds them.
  std::atomic<uint64_t> raw_link_down_drops_{0};
  TxTap tx_tap_;
  std::atomic<bool> has_tx_tap_{false};
  // Frames transmit_raw sent (QP1), counted without mu_; counters() adds them.
  std::atomic<uint64_t> raw_packets_tx_{0}, raw_bytes_tx_{0};

  // Threaded mode.
  friend struct DeviceThread;
  std::thread thread_;
  uint32_t owner_epoch_ = fork_epoch();  // the process that created the device
  std::atomic<bool> stop_{false};
  // Non-zero while the device thread sleeps (doorbell/device_wake.h).
  std::atomic<uint32_t> asleep_{0};
  std::atomic<uint64_t> sleeps_{0}, watched_sleeps_{0};
  int kick_fd_ = -1;
  // The application's mappings of attached UAR pages, write-protected while the thread sleeps.
  UarWatch uar_watch_;
  void thread_main();
  // Pages whose stores woke the thread (under mu_).
  void note_rung_pages(const std::vector<uint8_t*>& pages);
  // The application's UAR pages software may ring now: those with a register a QP is bound
  // to, and the CQ doorbell pages of CQs whose events are watched.
  void pages_to_watch(std::vector<uint8_t*>* out);
};

}  // namespace rnicdv::sim
