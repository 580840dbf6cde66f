// SPDX-License-Identifier: BSD-3-Clause
// Barriers named by the ordering they guarantee, one header per ISA (after rdma-core's
// util/udma_barrier.h):
//
//   to_device_barrier()    prior stores to ordinary (write-back) memory - WQEs, doorbell
//                          records - are visible to the device before later such stores;
//   from_device_barrier()  the load of a device-written valid/owner flag happens before later
//                          loads of the entry it guards;
//   wc_start()             prior stores are visible before a following store to a
//                          write-combining register (the UAR doorbell / BlueFlame page);
//   wc_flush()             write-combining buffers are flushed: the register write leaves the
//                          CPU now, and before any later store;
//   cpu_relax()            spin-wait hint.
#pragma once

#if defined(__x86_64__)
#include "rnicdv/doorbell/barrier_x86_64.h"
#elif defined(__aarch64__)
#include "rnicdv/doorbell/barrier_aarch64.h"
#else
#error \
    "rnicdv: no doorbell barriers for this ISA; add barrier_<isa>.h after rdma-core's util/udma_barrier.h"
#endif
