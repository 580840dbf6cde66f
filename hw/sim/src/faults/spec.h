// SPDX-License-Identifier: BSD-3-Clause
// A fault specification: what the simulated fabric breaks on purpose, and when.
//
// One text, from RNICDV_SIM_FAULTS (or the file it names with a leading '@'), or from
// FabricConfig::fault_spec, applies to any process on the simulated HCA: rnicdv's own API and
// unmodified verbs and rdma_cm programs under the uverbs shim alike. docs/faults.md has the
// grammar and an example of each kind. In short, clauses separated by ';' or new lines:
//
//   seed=N                                  the seed of every random choice (else $RNICDV_SIM_SEED,
//                                           else a fresh one, stated at start)
//   log=PATH                                JSON lines, one per injected fault (default: beside the
//                                           pcap, NAME.faults.jsonl); %p: the process ID
//   drop|duplicate|reorder|corrupt|delay    per-frame faults: p=P | nth=N | every=N, count=N,
//       after=N, dir=, opcode=, qp=, mad=, from=, to=, device=, max= (delay), hold= (reorder)
//   port-down | port-up | fatal             link events: at=TIME | after=N (frames), for=TIME,
//                                           device=N, addr=IP
//   wr status=NAME                          a chosen error completion: nth=N, count=N, qp=,
//                                           opcode=, device=, addr=IP
//   cm-reject reason=N | cm-dreq at=TIME    CM faults: nth=N, device=N, addr=IP
//
// IP: an IPv4 or IPv6 address ("127.0.0.2", "fd00::2"), as the fabric's devices have.
//
// Parsing is all or nothing: the first bad field refuses the whole text, with one line that
// names the clause, the field and what it accepts.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "rnicdv/hw/ip_address.h"
#include "rnicdv/status.h"

namespace rnicdv::sim::faults {

// What a frame is, for selectors. Bits of FrameSelector::opcodes.
namespace op {
inline constexpr uint32_t send = 1u << 0;           // RC SEND (any position, with or without imm)
inline constexpr uint32_t write = 1u << 1;          // RC RDMA WRITE
inline constexpr uint32_t read = 1u << 2;           // RC RDMA READ request
inline constexpr uint32_t atomic = 1u << 3;         // RC compare-swap and fetch-add
inline constexpr uint32_t ack = 1u << 4;            // RC ACK and NAK (AETH alone)
inline constexpr uint32_t read_response = 1u << 5;  // RC RDMA READ response
inline constexpr uint32_t atomic_ack = 1u << 6;     // RC atomic ACK
inline constexpr uint32_t ud = 1u << 7;             // UD SEND to a QP other than QP1
inline constexpr uint32_t mad = 1u << 8;            // UD SEND to QP1 (CM MADs)
inline constexpr uint32_t requests = send | write | read | atomic | ud | mad;
inline constexpr uint32_t responses = ack | read_response | atomic_ack;
inline constexpr uint32_t all = requests | responses;
}  // namespace op

// The spec's name of one op:: bit ("send", "read_response", ...), or "other".
const char* opcode_name(uint32_t bit) noexcept;
// The spec's name of a CM MAD attribute ID (cm::AttrId: "req", "rtu", ...), or "other".
const char* mad_name(uint16_t attr_id) noexcept;

inline constexpr uint32_t kAnyDevice = UINT32_MAX;
inline constexpr uint32_t kMaxDevice = 63;  // device= takes 0..63
inline constexpr uint32_t kAnyQpn = UINT32_MAX;
inline constexpr uint64_t kUnlimited = UINT64_MAX;

// Which frames a rule looks at. A frame matches when every given field matches.
struct FrameSelector {
  uint32_t opcodes = op::all;       // op:: bits; dir= narrows it to requests or responses
  uint32_t qpn = kAnyQpn;           // the BTH's destination QP
  std::vector<uint16_t> mads;       // CM attribute IDs (cm::AttrId; implies op::mad); empty: any
  hw::IpAddress from;               // the frame's source address (either family); ::: any
  hw::IpAddress to;                 // its destination address; ::: any
  uint32_t device = kAnyDevice;     // the transmitting device's index in its fabric
};

// When a rule fires, counted over the frames (or WRs, or requests) it matches.
struct Trigger {
  double probability = 0;  // p=: each match independently, from the seed
  uint64_t nth = 0;        // nth=: the Nth match only (1-based)
  uint64_t every = 0;      // every=: matches N, 2N, 3N...
  uint64_t after = 0;      // after=: not before match number after+1
  uint64_t count = kUnlimited;  // count=: at most this many injections
};

enum class FrameAction : uint8_t { drop, duplicate, reorder, corrupt, delay };
const char* frame_action_name(FrameAction a) noexcept;

struct FrameRule {
  FrameAction action = FrameAction::drop;
  FrameSelector match;
  Trigger when;
  uint64_t max_delay_ns = 200'000;  // delay: uniform in [1, max]
  uint64_t hold_ns = 20'000;        // reorder: held for [hold/2, hold]
};

enum class LinkAction : uint8_t { port_down, port_up, fatal };
const char* link_action_name(LinkAction a) noexcept;

// A port or device event. Exactly one of at_ns and after_frames is set (the other 0):
// at_ns counts from the fabric's creation on its clock; after_frames counts the frames the
// device transmitted. for_ns (port_down only): brought back up that long after, 0 = stays down.
struct LinkRule {
  LinkAction action = LinkAction::port_down;
  uint32_t device = kAnyDevice;  // every device when not given
  hw::IpAddress addr;            // addr=: only the device with this address; ::: any
  uint64_t at_ns = 0;
  uint64_t after_frames = 0;
  uint64_t for_ns = 0;
};

// Chosen error completions. The remote statuses are produced by the responder, which answers
// the chosen request as it would a genuine error (the NAK on the wire, its QP's state), so
// the requester completes the WR with that status; the local ones by the requester, which
// fails the chosen WR as it fetches it.
enum class ChosenStatus : uint8_t {
  remote_access,     // responder: Remote Access Error NAK; IBV_WC_REM_ACCESS_ERR
  remote_operation,  // responder: Remote Operational Error NAK; IBV_WC_REM_OP_ERR
  rnr_retry,         // responder: RNR NAKs until the requester's RNR retries run out;
                     //   IBV_WC_RNR_RETRY_EXC_ERR (never, for rnr_retry 7: infinite, as on HW)
  retry,             // responder: ignores the request until the requester's retries run out;
                     //   IBV_WC_RETRY_EXC_ERR
  local_protection,  // requester: IBV_WC_LOC_PROT_ERR
  local_length,      // requester: IBV_WC_LOC_LEN_ERR
};
const char* chosen_status_name(ChosenStatus s) noexcept;  // the spec's spelling
bool chosen_status_is_remote(ChosenStatus s) noexcept;

// wr status=NAME: counts WRs of the device (requester side: WRs it fetches; responder side:
// request messages it receives, by their first packet) that match qp (the QP on that side:
// the requester's own QPN, or the responder's, the BTH's destination QP) and opcodes
// (op::send / write / read / atomic), then fires per `when` (default nth=1, count=1).
struct WrRule {
  ChosenStatus status = ChosenStatus::remote_access;
  uint32_t device = kAnyDevice;
  hw::IpAddress addr;  // addr=: only the device with this address; ::: any
  uint32_t qpn = kAnyQpn;
  uint32_t opcodes = op::send | op::write | op::read | op::atomic;
  Trigger when;
};

enum class CmAction : uint8_t { reject, dreq };
const char* cm_action_name(CmAction a) noexcept;

// cm-reject: the passive side answers the chosen REQ (per `when`, default nth=1) with a REJ
// carrying `reason` instead of offering it to the listener. cm-dreq: at at_ns the device
// sends a DREQ on its chosen established connection (per `when`, counted in the order they
// were established; default nth=1), as if the application there had disconnected, so that
// the peer sees a DREQ it did not ask for.
struct CmRule {
  CmAction action = CmAction::reject;
  uint32_t device = kAnyDevice;
  hw::IpAddress addr;  // addr=: only the device with this address; ::: any
  uint16_t reason = 28;  // REJ reason (IBA 12.6.7.2, Table 112); 28: consumer reject
  uint64_t at_ns = 0;
  Trigger when;
};

struct FaultSpec {
  std::string text;          // as given, for messages and the log's first line
  bool seed_given = false;
  uint64_t seed = 0;
  std::string log_path;      // empty: beside the pcap, or none without one
  std::vector<FrameRule> frames;
  std::vector<LinkRule> links;
  std::vector<WrRule> wrs;
  std::vector<CmRule> cms;

  bool empty() const noexcept { return frames.empty() && links.empty() && wrs.empty() && cms.empty(); }
};

// Parses `text` (clauses separated by ';' or new lines; '#' starts a comment to the end of its
// line). Errors are one line: "fault spec: clause 2 'drop p=2': p: 2 is not a probability in
// [0, 1]".
Result<FaultSpec> parse_fault_spec(std::string_view text);

// The specification a process runs under: `given` when not empty, else $RNICDV_SIM_FAULTS
// (a leading '@' names a file to read). An empty result means no faults. `source` is set to
// where the text came from ("RNICDV_SIM_FAULTS", the file's path, or "configuration").
Result<FaultSpec> fault_spec_from(std::string_view given, std::string* source);

}  // namespace rnicdv::sim::faults
