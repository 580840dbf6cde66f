// SPDX-License-Identifier: BSD-3-Clause
// Entry points for fuzzing the two places hostile bytes enter the model: the send queue
// ring (written by any driver) and the wire (written by any peer). Each takes bytes, runs
// the model until it is idle, and must never crash, hang or touch memory outside the
// regions the harness registered.
#pragma once

#include <cstddef>
#include <cstdint>

#include "rnicdv/sim/sim.h"

namespace rnicdv::sim {

// Copies `data` into the SQ ring of a connected QP in RTS (wrapping at the ring's size),
// sets its doorbell record to cover the bytes, rings, and runs the fabric.
void fuzz_execute_send_queue(const uint8_t* data, size_t len);

// Hands `data` to the receive path as a datagram from the connected peer, then runs the
// fabric. The receiving device has a UD QP, number 0x101, with this Q_Key and receives posted.
inline constexpr uint32_t kFuzzUdQkey = 0x0badf00d;
void fuzz_receive_datagram(const uint8_t* data, size_t len);

// Receive WQEs the UD QP consumed for the last input (a datagram it took).
uint32_t fuzz_ud_receives_taken();

// The receiving device's UC QP, number 0x102 (kFuzzUcQpn), in RTS facing the sending device,
// with receives posted; and the receive WQEs it consumed for the last input.
inline constexpr uint32_t kFuzzUcQpn = 0x102;
uint32_t fuzz_uc_qpn();
uint32_t fuzz_uc_receives_taken();

// The receiving device's XRC target (0x103), in RTR facing the sending device's RC QP; the
// XRC SRQ of its domain, with receives posted once, and an XRC SRQ of another domain.
inline constexpr uint32_t kFuzzXrcQpn = 0x103;
inline constexpr uint32_t kFuzzXrcSrqn = 0x40;         // the device's first SRQ
inline constexpr uint32_t kFuzzForeignXrcSrqn = 0x41;  // and its second
uint32_t fuzz_xrc_qpn();
uint32_t fuzz_xrc_srqn();
uint32_t fuzz_foreign_xrc_srqn();

// The counters of the harness's two devices (requester, responder), to check that inputs
// reach the code under test.
DeviceCounters fuzz_requester_counters();
DeviceCounters fuzz_responder_counters();

}  // namespace rnicdv::sim
