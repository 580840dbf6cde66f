// SPDX-License-Identifier: BSD-3-Clause
// ibv_async_event -> hw::AsyncEvent. Pure: reads the event, never acknowledges it.
#pragma once

#include <infiniband/verbs.h>

#include <optional>

#include "rnicdv/hw/device.h"

namespace rnicdv::hw::mlx5 {

// The AsyncEvent for `event`, or nothing for an event type the interface does not carry
// (path migration, LID/P_Key/SM/GID changes, SRQ and WQ events) or a CQ event on a CQ this
// backend did not create (cq_context does not point at a CqHandle).
//
// Must be called before ibv_ack_async_event(): after the ack the QP or CQ named by the event
// may be destroyed.
std::optional<AsyncEvent> map_async_event(const ibv_async_event& event) noexcept;

}  // namespace rnicdv::hw::mlx5
