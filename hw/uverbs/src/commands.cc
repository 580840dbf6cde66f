// SPDX-License-Identifier: BSD-3-Clause
// The uverbs write() commands (rdma/ib_user_verbs.h) with mlx5's driver data
// (rdma/mlx5-abi.h): the command table and the framing. The handlers are grouped by object in
// device_commands.cc, cq_commands.cc, qp_commands.cc and srq_commands.cc.
//
// Framing (the kernel's ib_uverbs_write): an ib_uverbs_cmd_hdr whose in_words counts the
// whole buffer in 4-byte words and out_words the response; the core request follows, then
// the driver's. Extended commands (bit 31) add an ib_uverbs_ex_cmd_hdr and count in 8-byte
// words. Commands that answer carry the response address as the core request's first u64.
//
// Errors: every handler returns 0 or a negative errno, as the kernel's do; command_write
// (cdev.cc) turns that into -1 with errno, once.
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <infiniband/verbs.h>
#include <rdma/ib_user_verbs.h>
#include <rdma/mlx5-abi.h>

#include <algorithm>
#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "command.h"
#include "command_table.h"
#include "context.h"
#include "shim.h"
#include "user_memory.h"

namespace rnicdv::uverbs {

namespace {

static_assert(sizeof(ib_uverbs_cmd_hdr) == 8);
static_assert(sizeof(ib_uverbs_ex_cmd_hdr) == 16);

// ---- The command table ----
// One row per command of the ABI, as the kernel's DECLARE_UVERBS_WRITE(cmd, handler, req,
// resp): the number and the name both come from the enumerator's own spelling, so neither
// can drift from the other, and the row's place in the table is its number (by_number).
#define UVERBS_WRITE(cmd, handler, req, resp, drv_min) \
  CommandSpec { IB_USER_VERBS_CMD_##cmd, #cmd, handler, sizeof(req), resp, drv_min, true }
#define UVERBS_WRITE_EX(cmd, handler, req_len, resp_len, drv_min) \
  CommandSpec { IB_USER_VERBS_EX_CMD_##cmd, "EX_" #cmd, handler, req_len, resp_len, drv_min, true }
#define UVERBS_UNIMPLEMENTED(cmd) CommandSpec { IB_USER_VERBS_CMD_##cmd, #cmd }
#define UVERBS_UNIMPLEMENTED_EX(cmd) CommandSpec { IB_USER_VERBS_EX_CMD_##cmd, "EX_" #cmd }

constexpr size_t kNoResponse = 0;
constexpr size_t kNoDriverData = 0;

constexpr CommandSpec kWriteRows[] = {
    CommandSpec{IB_USER_VERBS_CMD_GET_CONTEXT, "GET_CONTEXT", get_context,
                sizeof(ib_uverbs_get_context), sizeof(ib_uverbs_get_context_resp),
                offsetof(mlx5_ib_alloc_ucontext_req_v2, flags), /*needs_ucontext=*/false},
    UVERBS_WRITE(QUERY_DEVICE, query_device, ib_uverbs_query_device,
                 sizeof(ib_uverbs_query_device_resp), kNoDriverData),
    UVERBS_WRITE(QUERY_PORT, query_port, ib_uverbs_query_port, sizeof(ib_uverbs_query_port_resp),
                 kNoDriverData),
    UVERBS_WRITE(ALLOC_PD, alloc_pd, ib_uverbs_alloc_pd, sizeof(ib_uverbs_alloc_pd_resp),
                 kNoDriverData),
    UVERBS_WRITE(DEALLOC_PD, dealloc_pd, ib_uverbs_dealloc_pd, kNoResponse, kNoDriverData),
    UVERBS_WRITE(CREATE_AH, create_ah, ib_uverbs_create_ah, sizeof(ib_uverbs_create_ah_resp),
                 kNoDriverData),
    UVERBS_UNIMPLEMENTED(MODIFY_AH),
    UVERBS_UNIMPLEMENTED(QUERY_AH),
    UVERBS_WRITE(DESTROY_AH, destroy_ah, ib_uverbs_destroy_ah, kNoResponse, kNoDriverData),
    UVERBS_WRITE(REG_MR, reg_mr, ib_uverbs_reg_mr, sizeof(ib_uverbs_reg_mr_resp), kNoDriverData),
    UVERBS_UNIMPLEMENTED(REG_SMR),
    UVERBS_WRITE(REREG_MR, rereg_mr, ib_uverbs_rereg_mr, sizeof(ib_uverbs_rereg_mr_resp),
                 kNoDriverData),
    UVERBS_UNIMPLEMENTED(QUERY_MR),
    UVERBS_WRITE(DEREG_MR, dereg_mr, ib_uverbs_dereg_mr, kNoResponse, kNoDriverData),
    UVERBS_UNIMPLEMENTED(ALLOC_MW),
    UVERBS_UNIMPLEMENTED(BIND_MW),
    UVERBS_UNIMPLEMENTED(DEALLOC_MW),
    UVERBS_WRITE(CREATE_COMP_CHANNEL, create_comp_channel, ib_uverbs_create_comp_channel,
                 sizeof(ib_uverbs_create_comp_channel_resp), kNoDriverData),
    // libmlx5's request up to and including the 16-bit UAR page index.
    UVERBS_WRITE(CREATE_CQ, create_cq, ib_uverbs_create_cq, sizeof(ib_uverbs_create_cq_resp),
                 offsetof(mlx5_ib_create_cq, uar_page_index) + sizeof(uint16_t)),
    UVERBS_UNIMPLEMENTED(RESIZE_CQ),
    UVERBS_WRITE(DESTROY_CQ, destroy_cq, ib_uverbs_destroy_cq, sizeof(ib_uverbs_destroy_cq_resp),
                 kNoDriverData),
    UVERBS_UNIMPLEMENTED(POLL_CQ),
    UVERBS_UNIMPLEMENTED(PEEK_CQ),
    UVERBS_UNIMPLEMENTED(REQ_NOTIFY_CQ),
    UVERBS_WRITE(CREATE_QP, create_qp, ib_uverbs_create_qp, sizeof(ib_uverbs_create_qp_resp),
                 offsetof(mlx5_ib_create_qp, bfreg_index)),
    UVERBS_WRITE(QUERY_QP, query_qp, ib_uverbs_query_qp, sizeof(ib_uverbs_query_qp_resp),
                 kNoDriverData),
    UVERBS_WRITE(MODIFY_QP, modify_qp, ib_uverbs_modify_qp, kNoResponse, kNoDriverData),
    UVERBS_WRITE(DESTROY_QP, destroy_qp, ib_uverbs_destroy_qp, sizeof(ib_uverbs_destroy_qp_resp),
                 kNoDriverData),
    UVERBS_UNIMPLEMENTED(POST_SEND),
    UVERBS_UNIMPLEMENTED(POST_RECV),
    UVERBS_WRITE(ATTACH_MCAST, attach_mcast, ib_uverbs_attach_mcast, kNoResponse, kNoDriverData),
    UVERBS_WRITE(DETACH_MCAST, detach_mcast, ib_uverbs_detach_mcast, kNoResponse, kNoDriverData),
    // libmlx5's request up to and including its flags.
    UVERBS_WRITE(CREATE_SRQ, create_srq, ib_uverbs_create_srq, sizeof(ib_uverbs_create_srq_resp),
                 offsetof(mlx5_ib_create_srq, flags) + sizeof(uint32_t)),
    UVERBS_WRITE(MODIFY_SRQ, modify_srq, ib_uverbs_modify_srq, kNoResponse, kNoDriverData),
    UVERBS_WRITE(QUERY_SRQ, query_srq, ib_uverbs_query_srq, sizeof(ib_uverbs_query_srq_resp),
                 kNoDriverData),
    UVERBS_WRITE(DESTROY_SRQ, destroy_srq, ib_uverbs_destroy_srq,
                 sizeof(ib_uverbs_destroy_srq_resp), kNoDriverData),
    UVERBS_UNIMPLEMENTED(POST_SRQ_RECV),
    UVERBS_WRITE(OPEN_XRCD, open_xrcd, ib_uverbs_open_xrcd, sizeof(ib_uverbs_open_xrcd_resp),
                 kNoDriverData),
    UVERBS_WRITE(CLOSE_XRCD, close_xrcd, ib_uverbs_close_xrcd, kNoResponse, kNoDriverData),
    // libmlx5's request up to and including its user index.
    UVERBS_WRITE(CREATE_XSRQ, create_xsrq, ib_uverbs_create_xsrq,
                 sizeof(ib_uverbs_create_srq_resp), offsetof(mlx5_ib_create_srq, uidx) + sizeof(uint32_t)),
    UVERBS_UNIMPLEMENTED(OPEN_QP),
};

constexpr CommandSpec kExtendedRows[] = {
    // The response ends before the ODP capabilities: libibverbs asks for what it knows.
    UVERBS_WRITE_EX(QUERY_DEVICE, query_device_ex, sizeof(ib_uverbs_ex_query_device),
                    offsetof(ib_uverbs_ex_query_device_resp, odp_caps), kNoDriverData),
    UVERBS_UNIMPLEMENTED_EX(CREATE_CQ),
    // The request up to its create flags; what follows (TSO, RSS) is the handler's to refuse.
    UVERBS_WRITE_EX(CREATE_QP, create_qp_ex, offsetof(ib_uverbs_ex_create_qp, create_flags),
                    sizeof(ib_uverbs_ex_create_qp_resp), offsetof(mlx5_ib_create_qp, bfreg_index)),
    UVERBS_WRITE_EX(MODIFY_QP, modify_qp_ex, sizeof(ib_uverbs_ex_modify_qp),
                    sizeof(ib_uverbs_ex_modify_qp_resp), kNoDriverData),
    UVERBS_UNIMPLEMENTED_EX(CREATE_FLOW),
    UVERBS_UNIMPLEMENTED_EX(DESTROY_FLOW),
    UVERBS_UNIMPLEMENTED_EX(CREATE_WQ),
    UVERBS_UNIMPLEMENTED_EX(MODIFY_WQ),
    UVERBS_UNIMPLEMENTED_EX(DESTROY_WQ),
    UVERBS_UNIMPLEMENTED_EX(CREATE_RWQ_IND_TBL),
    UVERBS_UNIMPLEMENTED_EX(DESTROY_RWQ_IND_TBL),
    UVERBS_UNIMPLEMENTED_EX(MODIFY_CQ),
};

// After a fatal error (hw/sim link.cc), what a ConnectX in mlx5_core's internal-error state
// still answers: the firmware executes nothing, and mlx5_core completes the destroys and
// deallocations itself with success and fails every other firmware command with EIO
// (mlx5_internal_err_ret_value). QUERY_DEVICE is answered from the attributes the kernel
// keeps; the port's state is answered too (DOWN). A completion channel and a RoCE address
// handle are the kernel's own objects, made without the firmware.
bool survives_fatal_error(uint32_t number, bool extended) {
  if (extended) return number == IB_USER_VERBS_EX_CMD_QUERY_DEVICE;
  switch (number) {
    case IB_USER_VERBS_CMD_QUERY_DEVICE:
    case IB_USER_VERBS_CMD_QUERY_PORT:
    case IB_USER_VERBS_CMD_DEALLOC_PD:
    case IB_USER_VERBS_CMD_CREATE_AH:
    case IB_USER_VERBS_CMD_DESTROY_AH:
    case IB_USER_VERBS_CMD_DEREG_MR:
    case IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL:
    case IB_USER_VERBS_CMD_DESTROY_CQ:
    case IB_USER_VERBS_CMD_DESTROY_QP:
    case IB_USER_VERBS_CMD_DESTROY_SRQ:
      return true;
    default:
      return false;
  }
}

#undef UVERBS_WRITE
#undef UVERBS_WRITE_EX
#undef UVERBS_UNIMPLEMENTED
#undef UVERBS_UNIMPLEMENTED_EX

constexpr auto kWrite = by_number<IB_USER_VERBS_CMD_OPEN_QP + 1>(kWriteRows);
constexpr auto kExtended = by_number<IB_USER_VERBS_EX_CMD_MODIFY_CQ + 1>(kExtendedRows);

template <size_t Size>
constexpr bool rows_at_their_numbers(const std::array<CommandSpec, Size>& table) {
  for (size_t i = 0; i < Size; ++i)
    if (table[i].name && table[i].number != i) return false;
  return true;
}
template <size_t Size>
constexpr bool named_from(const std::array<CommandSpec, Size>& table, size_t first) {
  for (size_t i = first; i < Size; ++i)
    if (!table[i].name) return false;
  return true;
}
static_assert(rows_at_their_numbers(kWrite) && rows_at_their_numbers(kExtended));
// Every command of the first form has its row, and so has every extended one.
static_assert(named_from(kWrite, 0) && std::size(kWriteRows) == kWrite.size());
static_assert(named_from(kExtended, IB_USER_VERBS_EX_CMD_CREATE_FLOW) &&
              kExtended[IB_USER_VERBS_EX_CMD_QUERY_DEVICE].name &&
              kExtended[IB_USER_VERBS_EX_CMD_CREATE_CQ].name &&
              kExtended[IB_USER_VERBS_EX_CMD_CREATE_QP].name &&
              kExtended[IB_USER_VERBS_EX_CMD_MODIFY_QP].name);
static_assert(std::string_view(kWrite[IB_USER_VERBS_CMD_CREATE_QP].name) == "CREATE_QP" &&
              kWrite[IB_USER_VERBS_CMD_CREATE_QP].handler == create_qp &&
              std::string_view(kExtended[IB_USER_VERBS_EX_CMD_CREATE_QP].name) == "EX_CREATE_QP" &&
              kExtended[IB_USER_VERBS_EX_CMD_CREATE_QP].handler == create_qp_ex);

}  // namespace

const CommandSpec* command_spec(uint32_t number, bool extended) {
  const CommandSpec* row = nullptr;
  if (!extended && number < kWrite.size()) row = &kWrite[number];
  if (extended && number < kExtended.size()) row = &kExtended[number];
  return row && row->name ? row : nullptr;
}

const char* command_name(uint32_t number, bool extended) {
  const CommandSpec* row = command_spec(number, extended);
  return row ? row->name : "unknown command";
}

int Cmd::error(int err, const char* fmt, ...) const {
  char why[320];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  // The reason, for saying it once: the command and the format, without the object's numbers.
  return report(err,
                Status::error(Errc::invalid_argument, "%s: %s: %s", dev_name.c_str(),
                              command_name(number, extended), why),
                std::string(command_name(number, extended)) + ": " + fmt);
}

int Cmd::reply(const void* core_resp, size_t core_size, const void* drv_resp, size_t drv_size) {
  std::vector<uint8_t> out(resp_core_len + resp_drv_len, 0);
  std::memcpy(out.data(), core_resp, std::min(core_size, resp_core_len));
  if (drv_resp) std::memcpy(out.data() + resp_core_len, drv_resp, std::min(drv_size, resp_drv_len));
  if (out.empty() || copy_to_user(response, out.data(), out.size())) return 0;
  reply_failed = true;
  return error(EFAULT, "response at %#llx (%zu bytes) cannot be written (unmapped or write-protected "
               "since it was checked)",
               static_cast<unsigned long long>(response), out.size());
}

int sim_error(const Cmd& c, const std::string& what, const Status& st) {
  return report(to_errno(st.code()),
                Status(st.code(), c.dev_name + ": " + command_name(c.number, c.extended) + ": " +
                                      what + ": " + st.message()));
}

uint32_t new_handle(Context& ctx) { return ctx.next_handle++; }

int dispatch_write(Context& ctx, const uint8_t* in, size_t len) {
  ib_uverbs_cmd_hdr hdr{};
  if (len < sizeof hdr) return -EINVAL;
  std::memcpy(&hdr, in, sizeof hdr);
  Cmd c{ctx, 0, false, nullptr, 0, nullptr, 0, 0, 0, 0, {}, false};
  c.dev_name = device_name(ctx.dev->index);
  c.extended = (hdr.command & IB_USER_VERBS_CMD_FLAG_EXTENDED) != 0;
  c.number = hdr.command & IB_USER_VERBS_CMD_COMMAND_MASK;
  if (hdr.command & ~(IB_USER_VERBS_CMD_FLAG_EXTENDED | IB_USER_VERBS_CMD_COMMAND_MASK))
    return c.error(EINVAL, "command word %#x has reserved bits set", hdr.command);
  const CommandSpec* spec = command_spec(c.number, c.extended);
  if (!spec || !spec->handler) {
    const std::string what =
        !spec ? std::string(c.extended ? "unknown extended command" : "unknown command")
              : std::string(c.extended ? "extended command " : "command ") + spec->name;
    return unimplemented(what.c_str(), c.number);
  }
  if (c.extended) {
    ib_uverbs_ex_cmd_hdr ex{};
    if (len < sizeof hdr + sizeof ex) return c.error(EINVAL, "short extended header");
    std::memcpy(&ex, in + sizeof hdr, sizeof ex);
    const size_t core = size_t{hdr.in_words} * 8, drv = size_t{ex.provider_in_words} * 8;
    if (len != sizeof hdr + sizeof ex + core + drv)
      return c.error(EINVAL, "%zu bytes written, the header counts %zu", len,
                     sizeof hdr + sizeof ex + core + drv);
    c.core = in + sizeof hdr + sizeof ex;
    c.core_len = core;
    c.drv = drv ? c.core + core : nullptr;
    c.drv_len = drv;
    c.response = ex.response;
    c.resp_core_len = size_t{hdr.out_words} * 8;
    c.resp_drv_len = size_t{ex.provider_out_words} * 8;
  } else {
    if (size_t{hdr.in_words} * 4 != len)
      return c.error(EINVAL, "%zu bytes written, the header counts %u words", len, hdr.in_words);
    c.core = in + sizeof hdr;
    c.core_len = std::min(len - sizeof hdr, spec->req_len);
    c.drv = len - sizeof hdr > spec->req_len ? c.core + spec->req_len : nullptr;
    c.drv_len = c.drv ? len - sizeof hdr - spec->req_len : 0;
    const size_t out = size_t{hdr.out_words} * 4;
    // The response address is the core request's first u64; a request too short for it is
    // refused below, before anything reads past what was written.
    if (spec->resp_len && c.core_len >= sizeof c.response)
      std::memcpy(&c.response, c.core, sizeof c.response);
    c.resp_core_len = std::min(out, spec->resp_len);
    c.resp_drv_len = out > spec->resp_len ? out - spec->resp_len : 0;
  }
  // The row's sizes, checked as the kernel's verify_hdr and the handlers' udata copies do.
  if (c.core_len < spec->req_len)
    return c.error(EINVAL, "request of %zu bytes, %zu expected", c.core_len, spec->req_len);
  if (spec->resp_len && (c.resp_core_len < spec->resp_len || !c.response))
    return c.error(ENOSPC, "response of %zu bytes, %zu needed", c.resp_core_len, spec->resp_len);
  if (spec->needs_ucontext && !ctx.have_ucontext)
    return c.error(EINVAL, "context: none yet (GET_CONTEXT first)");
  // Where the answer goes must be writable before anything is created (copy_to_user).
  if (c.resp_core_len + c.resp_drv_len &&
      !user_range_ok(c.response, c.resp_core_len + c.resp_drv_len, true))
    return c.error(EFAULT, "response at %#llx (%zu bytes) is not writable",
                   static_cast<unsigned long long>(c.response), c.resp_core_len + c.resp_drv_len);
  if (c.drv_len < spec->drv_req_min)
    return c.error(EINVAL, "mlx5 driver request of %zu bytes, at least %zu expected", c.drv_len,
                   spec->drv_req_min);
  if (ctx.dev->dev->fatal() && !survives_fatal_error(c.number, c.extended))
    return c.error(EIO, "the device had a fatal error: only destroys and queries of the "
                   "device and its port are still answered");
  const int rc = spec->handler(c);
  // A handler's answer whose response could not be written is EFAULT (copy_to_user).
  return c.reply_failed ? -EFAULT : rc;
}

// Async events of device `index` go to the context that owns the QP or CQ, as the kernel's
// ib_uverbs_qp_event_handler does; device and port events go to every context.
void deliver_async_event(uint32_t index, const hw::AsyncEvent& ev) {
  ib_uverbs_async_event_desc d{};
  bool qp_event = true;
  switch (ev.type) {
    case hw::AsyncEventType::comm_est: d.event_type = IBV_EVENT_COMM_EST; break;
    case hw::AsyncEventType::sq_drained: d.event_type = IBV_EVENT_SQ_DRAINED; break;
    case hw::AsyncEventType::last_wqe_reached: d.event_type = IBV_EVENT_QP_LAST_WQE_REACHED; break;
    case hw::AsyncEventType::qp_fatal: d.event_type = IBV_EVENT_QP_FATAL; break;
    case hw::AsyncEventType::qp_req_err: d.event_type = IBV_EVENT_QP_REQ_ERR; break;
    case hw::AsyncEventType::qp_access_err: d.event_type = IBV_EVENT_QP_ACCESS_ERR; break;
    case hw::AsyncEventType::cq_err: d.event_type = IBV_EVENT_CQ_ERR; qp_event = false; break;
    case hw::AsyncEventType::device_fatal: d.event_type = IBV_EVENT_DEVICE_FATAL; qp_event = false; break;
    case hw::AsyncEventType::port_active: d.event_type = IBV_EVENT_PORT_ACTIVE; qp_event = false; break;
    case hw::AsyncEventType::port_err: d.event_type = IBV_EVENT_PORT_ERR; qp_event = false; break;
    case hw::AsyncEventType::srq_limit_reached:
      d.event_type = IBV_EVENT_SRQ_LIMIT_REACHED;
      qp_event = false;
      break;
  }
  if (config().log_errors)
    log_line("%s: async event %s (qp %#x, cq %#x)", device_name(index).c_str(),
             hw::async_event_name(ev.type), ev.qpn, ev.cqn);
  for (const std::shared_ptr<Context>& ctx : contexts_on(index)) {
    std::lock_guard<std::mutex> lock(ctx->mu);
    if (!ctx->async) continue;
    if (qp_event) {
      for (auto& [h, q] : ctx->qps) {
        if (q.qpn != ev.qpn) continue;
        d.element = q.user_handle;
        ctx->async->push(&d, q.key, q.async_read);
      }
    } else if (ev.type == hw::AsyncEventType::srq_limit_reached) {
      for (auto& [h, srq] : ctx->srqs) {
        if (srq.srq->view().dv.srqn != ev.srqn) continue;
        srq.limit = 0;  // the device disarmed it
        d.element = srq.user_handle;
        ctx->async->push(&d, srq.key, srq.async_read);
      }
    } else if (ev.type == hw::AsyncEventType::cq_err) {
      for (auto& [h, cq] : ctx->cqs) {
        if (cq.cq->view().dv.cqn != ev.cqn) continue;
        d.element = cq.user_handle;
        ctx->async->push(&d, cq.key, cq.async_read);
      }
    } else if (ev.type == hw::AsyncEventType::device_fatal) {
      d.element = 0;
      ctx->async->push(&d, 0, nullptr);
    } else {
      // A link event takes the simulated HCA's whole link down or up: every port's event,
      // each naming its port, as a ConnectX raises one per port.
      const size_t ports = std::max<size_t>(1, ctx->dev->dev->info().ports.size());
      for (size_t port = 1; port <= ports; ++port) {
        d.element = port;
        ctx->async->push(&d, 0, nullptr);
      }
    }
  }
}

namespace {
__attribute__((constructor)) void install_async_sink() { set_async_sink(deliver_async_event); }
}  // namespace

}  // namespace rnicdv::uverbs