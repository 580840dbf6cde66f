// SPDX-License-Identifier: BSD-3-Clause
// The fuzz targets: where hostile bytes enter rnicdv. Each takes any input, must never crash,
// read or write out of bounds or hit undefined behaviour (ASan+UBSan find that), and checks
// the properties its parser promises (a broken property aborts, which the fuzzer reports as a
// crash). The libFuzzer programs (libfuzzer_main.cc) and the corpus replay test
// (corpus_replay.cc) call the same functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace rnicdv::fuzz {

// Any bytes as the SQ ring of a QP in RTS, announced by the doorbell record and a doorbell.
int sq_executor(const uint8_t* data, size_t size);
// Any bytes as a RoCEv2 datagram (BTH to ICRC) from the connected peer.
int receive_path(const uint8_t* data, size_t size);
// Any bytes as a received CM MAD; what parses must encode back to the same message.
int cm_mad(const uint8_t* data, size_t size);
// Any bytes as a CQ ring (first byte: CQE size and ring length); every software-owned entry
// is decoded, and a re-written entry decodes to the same fields.
int cqe_decoder(const uint8_t* data, size_t size);
// Any bytes as a fault specification (RNICDV_SIM_FAULTS): accepted or refused in one line that
// names its clause; what is accepted parses again, from its own text, to the same rules.
int fault_spec(const uint8_t* data, size_t size);

struct Target {
  const char* name;  // also the directory under test/fuzz/corpus/
  int (*run)(const uint8_t*, size_t);
};
std::span<const Target> targets() noexcept;

}  // namespace rnicdv::fuzz
