// SPDX-License-Identifier: BSD-3-Clause
// The software HCA: public configuration and introspection.
//
// A Fabric is a set of simulated HCAs that share a wire and a clock. Each sim::Device is a
// model of an mlx5 HCA (not a stub): it owns UAR pages, doorbell records and rings in the real
// mlx5 layouts, executes the WQEs the driver wrote, and runs RC over RoCEv2 framing on the
// wire. It implements hw::Device, so the driver uses it exactly like a real ConnectX.
//
// Execution modes:
//  * deterministic: nothing happens until step()/run_until() (or the driver's progress hook)
//    is called; time is virtual and every random choice comes from the fabric's seed;
//  * threaded: a device thread polls the registers and the wire with adaptive back-off, and
//    the driver's progress hook also drives the engine from the polling thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "rnicdv/hw/device.h"
#include "rnicdv/status.h"

namespace rnicdv::sim {

enum class ExecMode : uint8_t { deterministic, threaded };
enum class WireKind : uint8_t { inproc, udp, dpdk };

const char* exec_mode_name(ExecMode m) noexcept;  // "deterministic", "threaded"
const char* wire_kind_name(WireKind w) noexcept;  // "inproc", "udp", "dpdk"

// Seeded fault injection, applied per frame by the wire. Probabilities in [0, 1].
struct FaultConfig {
  double drop = 0;
  double duplicate = 0;
  double reorder = 0;        // hold the frame back so that later frames overtake it
  double corrupt = 0;        // flip a byte; the receiver's ICRC check drops it
  double delay = 0;
  uint64_t max_delay_ns = 200'000;
  bool any() const noexcept { return drop > 0 || duplicate > 0 || reorder > 0 || corrupt > 0 || delay > 0; }
};

struct FabricConfig {
  ExecMode mode = ExecMode::threaded;
  WireKind wire = WireKind::inproc;
  uint64_t seed = 1;
  FaultConfig faults;
  // pcap of every frame carried (Ethernet/IPv4/UDP/RoCEv2 with ICRC). Empty: $RNICDV_PCAP.
  std::string pcap_path;
  uint16_t udp_port = 4791;
  std::string dpdk_args;  // EAL and port arguments for WireKind::dpdk
  // Faults on demand (docs/faults.md): drops, duplicates, reordering, corruption and delays of
  // chosen frames, port and device events, chosen error completions and CM faults. Empty:
  // $RNICDV_SIM_FAULTS (a leading '@' names a file). A specification that does not parse
  // fails Fabric::create with one line naming the clause and the field.
  std::string fault_spec;
};

// Checks a fault specification (docs/faults.md) without running it: `text`, or
// $RNICDV_SIM_FAULTS when empty, and $RNICDV_SIM_SEED. On success `summary` (if given) says
// what it asks for, e.g. "2 frame rules, 1 link event, 0 chosen completions, 0 CM faults, seed
// 7"; a refusal is the line Fabric::create would give.
Status check_fault_spec(const std::string& text, std::string* summary = nullptr);

struct DeviceConfig {
  std::string name;            // empty: "sim<N>"
  hw::DeviceProfile profile;   // default: mlx5 (keeps_rtr_doorbell, no fetch beyond DBR)
  // IPv4 or IPv6 (rnicdv/hw/ip_address.h); unspecified: pick an IPv4 one (udp: the first free
  // 127.0.0.x, x >= 2). Over IPv6 the device sends RoCE v2 in IPv6 frames and its GID is the
  // address itself; its CM runs over IPv6 too.
  hw::IpAddress address;
  // 1, or 2 for a two-port HCA: its second port has an address of its own on the wire
  // (`port2_address`, of the first's IP version; unspecified: one the wire picks, as for the
  // first). A QP sends and receives through the port its INIT transition names; a frame to
  // one port for a QP of the other is dropped. The GSI, the connection manager and multicast
  // groups are port 1's; link events take both ports down.
  uint8_t ports = 1;
  hw::IpAddress port2_address;
  hw::DeviceCaps caps;         // zero fields take the model's defaults
  uint32_t dedicated_bf_regs = 4;  // QPs beyond this many share a BlueFlame register
};

struct DeviceCounters {
  uint64_t uar_doorbells = 0;     // UAR/BlueFlame register writes seen
  uint64_t bf_writes = 0;         // of which BlueFlame copies (more than 8 bytes)
  uint64_t sq_dbr_advances = 0;   // times an SQ doorbell record was seen to move
  uint64_t rq_dbr_advances = 0;
  uint64_t wqes_fetched = 0;
  uint64_t wqes_beyond_dbr = 0;   // fetched past the DBR (fetches_beyond_dbr profile)
  uint64_t rtr_doorbells_kept = 0;
  uint64_t rtr_doorbells_dropped = 0;
  uint64_t packets_tx = 0, packets_rx = 0;
  uint64_t bytes_tx = 0, bytes_rx = 0;
  // A two-port device: the frames (and their bytes) that left and arrived through port 2,
  // also counted in the four above, which are the device's.
  uint64_t port2_packets_tx = 0, port2_packets_rx = 0;
  uint64_t port2_bytes_tx = 0, port2_bytes_rx = 0;
  uint64_t retransmits = 0;
  uint64_t timeouts = 0;
  uint64_t naks_tx = 0, naks_rx = 0;
  uint64_t rnr_naks_tx = 0, rnr_naks_rx = 0;
  uint64_t acks_tx = 0, acks_rx = 0;
  uint64_t duplicates_rx = 0;
  uint64_t rx_dropped = 0;        // bad ICRC, unknown QPN, wrong state, malformed
  // Datagrams a UD QP dropped (also counted in rx_dropped): a Q_Key other than the QP's
  // (IBA 10.2.4), or no receive WQE posted (UD has no RNR: the datagram is lost).
  uint64_t ud_qkey_drops = 0;
  uint64_t ud_no_recv_drops = 0;
  // Messages a UC QP dropped whole, its packets also counted in rx_dropped (UC neither
  // acknowledges nor retries): one that lost a packet or broke the opcode sequence, a WRITE
  // refused (R_Key, access rights, length), or one with no receive WQE posted (UC has no RNR),
  // which uc_no_recv_drops counts too.
  uint64_t uc_messages_dropped = 0;
  uint64_t uc_no_recv_drops = 0;
  uint64_t cqes_written = 0;
  uint64_t cq_overflows = 0;
  uint64_t cq_arms = 0;           // completion-event arm requests taken (CQs with a handler)
  uint64_t cq_events = 0;         // completion events raised
  uint64_t comm_est_raised = 0;
  uint64_t error_cqes = 0;
  // Accesses to memory the application placed (rings, doorbell records and UAR mappings
  // given to the device by the uverbs shim, registered regions) that faulted because the
  // application had unmapped or protected it: each moved a QP or CQ to its error state, or
  // ended a work request or an inbound request with a protection error.
  uint64_t host_memory_faults = 0;
  // Frames not sent or not taken in because the port was down or the device had a fatal
  // error (the link events of the fault specification, docs/faults.md).
  uint64_t link_down_drops = 0;
  // Threaded mode: times the device thread went to sleep, and of those the deep sleeps with
  // the application's UAR mappings write-protected through userfaultfd (woken by the first
  // doorbell store or a driver's kick, not by a timer).
  uint64_t sleeps = 0;
  uint64_t watched_sleeps = 0;
  // CLOCK_MONOTONIC (threaded mode; virtual time in deterministic mode) at which a doorbell
  // last gave the engine new WQEs to fetch (a QP in RTS or SQD whose doorbell record moved):
  // the doorbell-to-execution benchmark reads it.
  uint64_t last_doorbell_ns = 0;
};

// The port counters a simulated HCA keeps, by their names under sysfs's ports/1/ (as
// perftest's -W and the uverbs shim's sysfs files name them), each computed from
// DeviceCounters: the RoCE packets' bytes (from the BTH to the end of the payload; the wire
// adds the ICRC) in 4-byte words and their count each way, the frames not sent because the port was down, local ACK timeouts, RNR NAKs
// received, and packets dropped for want of a receive WQE (an RNR NAK sent, or a UD datagram
// lost).
const std::vector<std::string>& port_counter_names();
// The value of port counter `name` in `c`; false if the simulated HCA has no such counter.
// With `port` 2 (a two-port device), port 2's: its own traffic (DeviceCounters::port2_*);
// the other counters, which the device keeps whole, are port 1's and read 0 there. Port 1's
// traffic is the device's less port 2's.
bool port_counter_value(const DeviceCounters& c, const std::string& name, uint64_t* out);
bool port_counter_value(const DeviceCounters& c, uint8_t port, const std::string& name,
                        uint64_t* out);

// Per-QP view of the same counters plus the transport's state, for tests and dumps.
struct QpSnapshot {
  uint32_t qpn = 0;
  hw::QpState state = hw::QpState::reset;
  uint32_t sq_dbr = 0;          // value of dbrec[MLX5_SND_DBR] (BB counter)
  uint32_t rq_dbr = 0;
  uint32_t sq_consumed = 0;     // BB counter up to which the device has fetched WQEs
  uint32_t rq_consumed = 0;
  uint32_t next_psn = 0;        // requester
  uint32_t expected_psn = 0;    // responder
  uint64_t wqes_executed = 0;
  uint64_t uar_doorbells = 0;
  uint64_t sq_dbr_advances = 0;
  uint64_t retransmits = 0;
  uint64_t rnr_naks_rx = 0;
  bool comm_est_raised = false;
};

class Fabric;

// The state of the device's port as ibv_query_port reports it (enum ibv_port_state's values).
enum class PortState : uint8_t {
  down = 1,    // IBV_PORT_DOWN: the link is down (a port-down event), or the device is dead
  active = 4,  // IBV_PORT_ACTIVE
};

// CM messages by their MAD attribute ID (IBA 16.7 / 12.6).
enum class CmMessage : uint16_t {
  req = 0x0010,
  mra = 0x0011,
  rej = 0x0012,
  rep = 0x0013,
  rtu = 0x0014,
  dreq = 0x0015,
  drep = 0x0016,
};

// A simulated HCA. Created by Fabric::add_device.
class Device : public hw::Device {
 public:
  struct Impl;

  ~Device() override;
  const hw::DeviceInfo& info() const override;
  Result<std::unique_ptr<hw::Pd>> alloc_pd() override;
  Result<std::unique_ptr<hw::Mr>> reg_mr(hw::Pd& pd, void* addr, size_t length,
                                         uint32_t access) override;
  Result<std::unique_ptr<hw::Cq>> create_cq(uint32_t min_cqe) override;
  Result<std::unique_ptr<hw::CompletionChannel>> create_completion_channel() override;
  Result<std::unique_ptr<hw::Cq>> create_evented_cq(uint32_t min_cqe,
                                                    hw::CompletionChannel& channel) override;
  Result<std::unique_ptr<hw::Qp>> create_qp(hw::Pd& pd, hw::Cq& send_cq, hw::Cq& recv_cq,
                                            const hw::QpCaps& caps) override;
  Result<std::unique_ptr<hw::Srq>> create_srq(hw::Pd& pd, uint32_t max_wr,
                                              uint32_t max_sge) override;
  Result<std::unique_ptr<hw::Qp>> create_qp_on_srq(hw::Pd& pd, hw::Cq& send_cq, hw::Cq& recv_cq,
                                                   hw::Srq& srq, const hw::QpCaps& caps) override;
  Result<std::unique_ptr<hw::Qp>> create_ud_qp(hw::Pd& pd, hw::Cq& send_cq, hw::Cq& recv_cq,
                                               const hw::QpCaps& caps) override;
  Result<std::unique_ptr<hw::Qp>> create_uc_qp(hw::Pd& pd, hw::Cq& send_cq, hw::Cq& recv_cq,
                                               hw::Srq* srq, const hw::QpCaps& caps) override;
  Result<std::unique_ptr<hw::Ah>> create_ah(hw::Pd& pd, const hw::AhAttr& attr) override;
  Result<std::unique_ptr<hw::Xrcd>> open_xrcd() override;
  Result<std::unique_ptr<hw::Srq>> create_xrc_srq(hw::Xrcd& xrcd, hw::Pd& pd, hw::Cq& cq,
                                                  uint32_t max_wr, uint32_t max_sge) override;
  Result<std::unique_ptr<hw::Qp>> create_xrc_send_qp(hw::Pd& pd, hw::Cq& send_cq,
                                                     const hw::QpCaps& caps) override;
  Result<std::unique_ptr<hw::Qp>> create_xrc_recv_qp(hw::Xrcd& xrcd) override;
  int async_fd() const override;
  bool next_async_event(hw::AsyncEvent* out) override;
  hw::ProgressHook progress_hook() override;
  Result<uint64_t> read_port_counter(uint8_t port, const std::string& name) override;
  hw::ConnectionManager* connection_manager() override;

  const DeviceConfig& config() const;
  const hw::IpAddress& address() const;
  uint32_t ipv4() const;  // host order; 0 when the device's address is IPv6
  DeviceCounters counters() const;
  Result<QpSnapshot> qp_snapshot(uint32_t qpn) const;
  std::string dump() const;  // readable state of every object
  // The port's state (port-down and port-up events; DOWN for good after a fatal error), and
  // whether the device had a fatal error (a `fatal` event: DEVICE_FATAL was raised, the
  // device no longer sends, receives or completes anything, its QPs read ERR, and creating or
  // modifying objects fails with Errc::io_error; destroying them still works).
  PortState port_state() const;
  bool fatal() const;

  // Stops the engine from executing anything on this device (benchmarks measure only the
  // driver's cost). Doorbells are still recorded and run after resume().
  void pause();
  void resume();

  // Loses the next `count` CM messages of kind `msg` this device sends (retransmissions
  // included), as a lossy fabric would lose exactly those; 0 stops a drop still pending.
  // For experiments and tests (rnicperf's first-reply demo loses the RTU).
  void drop_outgoing_cm(CmMessage msg, uint32_t count);

  Impl& impl() { return *impl_; }

 private:
  friend class Fabric;
  explicit Device(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

class Fabric : public std::enable_shared_from_this<Fabric> {
 public:
  struct Impl;

  static Result<std::shared_ptr<Fabric>> create(const FabricConfig& config);
  ~Fabric();

  Result<std::shared_ptr<Device>> add_device(const DeviceConfig& config = {});
  std::vector<std::shared_ptr<Device>> devices() const;
  const FabricConfig& config() const;

  // Faults on demand: whether a specification is in force, the seed its random choices come
  // from (the spec's seed=, else $RNICDV_SIM_SEED, else a fresh one), and the JSON-lines log
  // of every fault injected (empty: none). A fabric whose specification came from the
  // environment states these on stderr once, so that any run can be replayed.
  bool faults_active() const;
  uint64_t fault_seed() const;
  std::string fault_log_path() const;

  // Deterministic mode. step() runs every device's engine and the wire once at the current
  // virtual time; when nothing was ready it advances virtual time to the next timer.
  // Returns true if anything happened.
  bool step();
  void advance_time(uint64_t ns);
  uint64_t now_ns() const;
  // Steps until `done()` or until `max_virtual_ns` of virtual time passed (deterministic), or
  // `max_virtual_ns` of real time (threaded). Returns done().
  bool run_until(const std::function<bool()>& done, uint64_t max_virtual_ns = 10'000'000'000ull);

  Impl& impl() { return *impl_; }

 private:
  explicit Fabric(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The process-wide fabric behind device names "sim0", "sim1", ... opened without an explicit
// fabric. Threaded; wire from $RNICDV_SIM_WIRE ("udp" default, "inproc"); device address
// from $RNICDV_SIM_ADDR; profile from $RNICDV_SIM_PROFILE ("mlx5" default, "scanning",
// "forgetful"); pcap from $RNICDV_PCAP.
Result<std::shared_ptr<Fabric>> default_fabric();

// Opens simulated HCA `name` ("simN") on `fabric` (null: default_fabric()), creating it with
// `config` (null: the defaults; its name is replaced by `name`) when the fabric has no device
// of that name yet. rnicdv::Device::open("simN") opens through this on the default fabric; a
// program that configures fabrics itself wraps the result (rnicdv::Device::wrap).
Result<std::shared_ptr<Device>> open_device(const std::string& name,
                                            std::shared_ptr<Fabric> fabric = nullptr,
                                            const DeviceConfig* config = nullptr);

// The largest UDP payload a simulated wire carries: a RoCEv2 datagram of a 4096-byte MTU
// (BTH..pad, 4160 bytes at most) and its ICRC.
inline constexpr size_t kMaxWireDatagramBytes = 4096 + 64 + 4;

// Parses a profile name: "mlx5" {keeps_rtr_doorbell}, "scanning" {fetches_beyond_dbr,
// keeps_rtr_doorbell}, "forgetful" {neither}, "scanning-forgetful" {fetches_beyond_dbr}.
Result<hw::DeviceProfile> parse_profile(const std::string& name);
std::string profile_name(const hw::DeviceProfile& p);

}  // namespace rnicdv::sim
