// SPDX-License-Identifier: BSD-3-Clause
// A shared receive queue as the device sees it (wqe/srq_wqe.h): the ring the consumer posts
// into, the doorbell record that counts the WQEs posted, and the device's own position in the
// free list. QPs created on it take their receives from it (rc/responder.cc).
#pragma once

#include <cstdint>

#include "rnicdv/hw/device.h"
#include "rnicdv/wqe/srq_wqe.h"

namespace rnicdv::sim {

struct CqObj;

struct SrqObj {
  size_t slot = 0;  // index in Hca::srqs_ (slots.h)
  uint32_t srqn = 0;
  uint32_t pdn = 0;
  wqe::SrqRing ring;
  uint32_t* dbrec = nullptr;  // big-endian word 0: WQEs posted (free-running)
  uint16_t next_index = 0;    // the WQE the device takes next (it follows next_wqe_index)
  uint32_t consumed = 0;      // WQEs taken (free-running)
  uint32_t limit = 0;         // armed limit (0: the limit event is off)
  uint32_t qp_refs = 0;
  // An XRC SRQ (hw::QpType::xrc_recv): the domain whose target QPs may name it, and the CQ its
  // receives complete on (held: its qp_refs count this SRQ). user_index is what those CQEs
  // carry in srqn_uidx (libmlx5's user index with CQE version 1; else the SRQ's number).
  bool xrc = false;
  uint32_t xrcdn = 0;
  CqObj* cq = nullptr;
  uint32_t user_index = 0xffffff;
  uint8_t* owned_buf = nullptr;
  uint32_t* owned_dbrec = nullptr;
  // Ring and record placed by the application (libmlx5 through the uverbs shim): read through
  // host_access.h; once a read faulted, never read again (host_failed).
  bool external = false;
  bool host_failed = false;
  // Decoded from a mirror of its own (`ring`), each WQE copied from `ring_host` when taken.
  wqe::SrqRing ring_host;
  uint8_t* mirror_buf = nullptr;
  hw::SrqView view;
};

}  // namespace rnicdv::sim
