// SPDX-License-Identifier: BSD-3-Clause
// The simulated HCA: all state of one device and the engine that runs it.
//
// Locking: `mu_` protects everything below it. The control path (create, modify, destroy,
// counters, dump) and the engine (run_once) take it; the driver's fast path never does: it
// only writes ring memory, doorbell records and UAR registers, which the engine reads with
// acquire loads. GSI handlers and timers, and completion-event handlers, run after the lock
// is released (see gsi.h and handles.h).
//
// The engine's work is split by concern over several files: doorbells and the engine loop
// (engine.cc), completion events (cq_events.cc), SQ fetching and WQE validation (sq_executor.cc), request packets
// (requester.cc), inbound responses and send completions (completer.cc), inbound requests
// (responder.cc, responder_tx.cc), timers and go-back-N (retransmit.cc), errors and flushes
// (flush.cc), object creation (objects.cc) and state transitions (qp_state.cc).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "async_events.h"
#include "cq.h"
#include "external.h"
#include "gsi.h"
#include "host_access.h"
#include "mr_table.h"
#include "packet/packet.h"
#include "qp.h"
#include "rnicdv/sim/sim.h"
#include "uar.h"
#include "wire/wire.h"

namespace rnicdv::sim {

struct FabricShared;

// Engine pacing: packets one QP may send per engine pass, datagrams taken from the wire.
inline constexpr uint32_t kTxBudgetPerQp = 32;
inline constexpr uint32_t kRxBudget = 128;
// Go-back-N window in PSNs (rxe stops 128 PSNs past the oldest unacked one) and the
// interval at which AckReq is set inside long messages.
inline constexpr uint32_t kPsnWindow = 128;
inline constexpr uint32_t kAckReqInterval = 32;
inline constexpr uint32_t kMaxSqBbs = 32768;

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

  const hw::DeviceInfo& info() const { return info_; }
  const DeviceConfig& config() const { return config_; }
  uint32_t ipv4() const { return endpoint_.ipv4; }
  const Endpoint& endpoint() const { return endpoint_; }
  FabricShared& shared() { return shared_; }
  const Clock& clock() const;
  uint64_t now() const;
  AsyncEventQueue& events() { return events_; }
  Gsi& gsi() { return gsi_; }

  // ---- Control path (objects.cc, qp_state.cc) ----
  Result<uint32_t> alloc_pd();
  void dealloc_pd(uint32_t pdn);
  bool has_pd(uint32_t pdn) const;
  Result<uint32_t> reg_mr(uint32_t pdn, void* addr, size_t length, uint32_t access);
  void dereg_mr(uint32_t key);
  Result<CqObj*> create_cq(uint32_t min_cqe);
  Result<CqObj*> create_cq_external(const ExternalCqMemory& mem);
  void release_cq(CqObj* cq);
  Result<QpObj*> create_qp(uint32_t pdn, CqObj* send_cq, CqObj* recv_cq, const hw::QpCaps& caps);
  Result<QpObj*> create_qp_external(uint32_t pdn, CqObj* send_cq, CqObj* recv_cq,
                                    const ExternalQpMemory& mem);
  void destroy_qp(QpObj* qp);
  Status modify_qp(QpObj* qp, const hw::QpAttr& attr, uint32_t mask);
  hw::QpState qp_state(const QpObj* qp) const;
  Status attach_uar_page(uint8_t* page);
  void detach_uar_page(uint8_t* page);
  void set_user_index(QpObj* qp, uint32_t user_index);
  // Completion events of `cq` go to `fn` (empty: off). See handles.h set_cq_event_handler.
  Status set_cq_event_handler(CqObj* cq, std::function<void()> fn);

  DeviceCounters counters() const;
  Result<QpSnapshot> qp_snapshot(uint32_t qpn) const;
  std::string dump() const;
  void pause();
  void resume();

  // ---- Engine (engine.cc) ----
  // One pass over doorbells, the wire, timers and every QP. True if anything happened.
  bool run_once();
  // Same, unless another thread is running the engine.
  bool try_run_once();
  // Earliest future time something is due (timers, held-back frames); UINT64_MAX if none.
  uint64_t next_deadline_ns() const;
  void on_datagram(const Endpoint& src, const Endpoint& dst, const uint8_t* data,
                   size_t len) override;

  // Threaded mode (device_thread.cc).
  void kick();
  bool sleeping() const { return sleeping_.load(std::memory_order_acquire); }
  // Wakes the device thread if it sleeps (control-path changes that need an engine pass).
  void kick_if_sleeping() {
    if (sleeping()) kick();
  }

  // Hands `len` bytes to the receive path as if the wire delivered them from `src_ipv4`
  // (the fuzz harness's entry, fuzz_entry.h).
  void inject_datagram(uint32_t src_ipv4, const uint8_t* data, size_t len);

  // Packet trace: `tap` sees every datagram this device transmits (BTH..pad), on the engine
  // thread, before the wire takes it. Empty function: off.
  using TxTap = std::function<void(uint32_t dst_ipv4, const uint8_t* data, size_t len)>;
  void set_tx_tap(TxTap tap);

  // The driver's progress hook: deterministic mode steps the whole fabric; threaded mode
  // runs every device's engine once on the caller's thread unless its thread is busy.
  void progress();

  // Used by Gsi.
  void transmit_raw(uint32_t dst_ipv4, const uint8_t* data, size_t len);

 private:
  friend class Gsi;

  // engine.cc
  bool run_pass(std::unique_lock<std::mutex> lock);
  bool engine_pass_locked(uint64_t now);
  bool scan_doorbells_locked();
  void on_doorbell_locked(QpObj& qp);
  bool observe_dbrs_locked(QpObj& qp);
  void deliver_locked(uint32_t src_ipv4, const uint8_t* data, size_t len);
  bool run_timers_locked(QpObj& qp, uint64_t now);
  void transmit(QpObj& qp, const uint8_t* frame, size_t len);
  uint16_t load_sq_dbr(const QpObj& qp) const;
  uint16_t load_rq_dbr(const QpObj& qp) const;

  // sq_executor.cc
  bool fetch_next_wqe(QpObj& qp);
  bool sq_has_fetchable(QpObj& qp, bool* beyond_dbr);
  void resolve_wqe(QpObj& qp, const wqe::DecodedSendWqe& d, SendWqe& w);

  // requester.cc
  bool requester_progress(QpObj& qp, uint32_t budget);
  bool send_request_packet(QpObj& qp, SendWqe& w);
  bool may_start(QpObj& qp, const SendWqe& w);
  void arm_retransmit(QpObj& qp);

  // completer.cc
  void on_response(QpObj& qp, const pkt::Packet& p);
  void on_ack(QpObj& qp, const pkt::Packet& p);
  void on_read_response(QpObj& qp, const pkt::Packet& p);
  void on_atomic_ack(QpObj& qp, const pkt::Packet& p);
  bool acknowledge_through(QpObj& qp, uint32_t psn);
  void complete_wqes(QpObj& qp);
  void complete_send_wqe(QpObj& qp, SendWqe& w);
  SendWqe* find_wqe_by_psn(QpObj& qp, uint32_t psn, uint32_t* index);

  // responder.cc
  void on_request(QpObj& qp, const pkt::Packet& p);
  void on_duplicate_request(QpObj& qp, const pkt::Packet& p);
  bool responder_send(QpObj& qp, const pkt::Packet& p, const pkt::OpcodeInfo& info);
  bool responder_write(QpObj& qp, const pkt::Packet& p, const pkt::OpcodeInfo& info);
  void responder_read(QpObj& qp, const pkt::Packet& p);
  void responder_atomic(QpObj& qp, const pkt::Packet& p);
  bool take_recv_wqe(QpObj& qp, const pkt::Packet& p);
  void complete_recv(QpObj& qp, const pkt::Packet& p, uint8_t cqe_opcode, uint64_t byte_cnt);
  void responder_error(QpObj& qp, uint8_t nak_syndrome, uint32_t psn, uint8_t recv_syndrome,
                       hw::AsyncEventType event);

  // responder_tx.cc
  void queue_ack(QpObj& qp, uint8_t syndrome, uint32_t psn);
  bool responder_transmit(QpObj& qp, uint32_t budget);
  bool send_read_response(QpObj& qp, RespJob& job);

  // retransmit.cc
  void rewind(QpObj& qp, uint32_t psn);
  void on_retransmit_timeout(QpObj& qp);
  void on_rnr_timer(QpObj& qp);
  void on_rnr_nak(QpObj& qp, const pkt::Packet& p);

  // flush.cc
  void qp_to_error_locked(QpObj& qp);
  void flush_sq_locked(QpObj& qp);
  void flush_rq_locked(QpObj& qp);
  void reset_qp_locked(QpObj& qp);
  void push_cqe(QpObj& qp, CqObj* cq, const wqe::CqeInit& init);
  void send_error_cqe(QpObj& qp, const SendWqe& w, uint8_t syndrome);

  // qp_state.cc
  Status check_modify(const QpObj& qp, const hw::QpAttr& attr, uint32_t mask) const;
  void apply_modify(QpObj& qp, const hw::QpAttr& attr, uint32_t mask);

  // dump.cc
  void dump_qp(std::string& out, const QpObj& qp) const;

  void raise_event(hw::AsyncEventType type, uint32_t qpn, uint32_t cqn);
  // Completion events (cq_events.cc).
  bool scan_cq_arms_locked();
  bool check_new_arms_locked();
  void raise_cq_event_locked(CqObj& cq);
  bool deliver_cq_events(std::vector<std::pair<uint32_t, uint32_t>>& fired);
  QpObj* find_qp(uint32_t qpn);
  Result<BfRegister*> bind_register(QpObj& qp);
  Result<BfRegister*> bind_external_register(QpObj& qp, uint8_t* base);
  void handle_cq_overflows_locked();
  // Runs `read` over the QP's rings: directly in the device's own memory, through
  // host_access.h in memory placed by someone else. False (and the QP marked for ERR) on a
  // fault, and without reading once that memory has failed.
  template <class F>
  bool read_queue(const QpObj& qp, F&& read) {
    if (!qp.external) [[likely]] {
      read();
      return true;
    }
    if (qp.host_failed) return false;
    if (host_guarded(read)) return true;
    qp.host_fault = true;
    return false;
  }
  // Memory the application placed that faulted (host_access.h; engine.cc).
  void handle_host_faults_locked();
  void fail_cq_memory_locked(CqObj& cq);
  void unbind_register(QpObj& qp);
  void free_qp_memory(QpObj& qp);
  void maybe_free_cq(CqObj* cq);
  uint32_t alloc_qpn();
  Result<QpObj*> finish_create_qp(std::unique_ptr<QpObj> qp, uint32_t pdn, CqObj* send_cq,
                                  CqObj* recv_cq);

  std::shared_ptr<Fabric> fabric_;  // keeps the wire and the clock alive
  FabricShared& shared_;
  DeviceConfig config_;
  hw::DeviceInfo info_;
  Endpoint endpoint_{};
  std::atomic<bool> attached_{false};
  AsyncEventQueue events_;
  Gsi gsi_;

  mutable std::mutex mu_;
  DeviceCounters counters_;
  MrTable mrs_;
  std::vector<uint32_t> pds_;
  uint32_t next_pdn_ = 1;
  uint32_t next_cqn_ = 0x80;
  uint32_t next_qpn_ = 0x100;
  std::vector<uint8_t*> owned_pages_;
  std::vector<uint8_t*> external_pages_;
  std::vector<std::unique_ptr<BfRegister>> registers_;  // stable addresses
  std::vector<BfRegister*> free_dedicated_;
  BfRegister* shared_register_ = nullptr;
  std::vector<std::unique_ptr<CqObj>> cqs_;
  std::vector<std::unique_ptr<QpObj>> qps_;  // creation order: deterministic
  std::unordered_map<uint32_t, QpObj*> qp_by_num_;
  std::atomic<bool> paused_{false};
  std::vector<CqObj*> overflowed_cqs_;  // CQ_ERR raised; their QPs go to ERR
  bool any_external_ = false;           // a QP in placed memory was ever created
  std::vector<CqObj*> evented_cqs_;     // CQs with an event handler: their arms are watched
  // Completion events raised under mu_ and delivered after it is released: (cqn, handler_gen).
  std::vector<std::pair<uint32_t, uint32_t>> fired_cq_events_;

  // Completion-event handlers by CQN. event_mu_ guards them and is held while one runs, so a
  // handler removed under it is never called again. Lock order: event_mu_, then mu_.
  struct CqEventHandler {
    uint32_t gen;
    std::function<void()> fn;
  };
  std::mutex event_mu_;
  std::unordered_map<uint32_t, CqEventHandler> cq_event_handlers_;

  // Scratch for decoding and framing (engine only, under mu_).
  std::unique_ptr<wqe::DecodedSendWqe> decoded_;
  std::vector<uint8_t> inline_scratch_;
  std::vector<uint8_t> frame_;
  bool transmitted_ = false;
  TxTap tx_tap_;

  // Threaded mode.
  friend struct DeviceThread;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> sleeping_{false};
  std::atomic<uint64_t> sleeps_{0}, watched_sleeps_{0};
  int kick_fd_ = -1;
  void thread_main();
  // Doorbell wake-up (doorbell_watch.h): the UAR pages software rings, write-protected while
  // the thread sleeps. watch_mu_ guards the list; lock order: mu_, then watch_mu_.
  struct WatchedPage {
    uint8_t* page;
    int slot;
  };
  std::mutex watch_mu_;
  std::vector<WatchedPage> watched_;
  void watch_page(uint8_t* page);
  void unwatch_page(uint8_t* page);
  void unwatch_all();
  bool arm_watches();  // false: not every page could be protected (all are left writable)
  void disarm_watches();
  // A doorbell or CQ-arm register holds an unconsumed write (loads only: the pages may be
  // write-protected).
  bool register_written();
};

}  // namespace rnicdv::sim
