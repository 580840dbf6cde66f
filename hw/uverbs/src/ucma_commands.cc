// SPDX-License-Identifier: BSD-3-Clause
// The rdma_cm commands (ucma.h), with the kernel's rules (drivers/infiniband/core/ucma.c and
// cma.c): which state each command needs, what it answers, and the errno of each refusal.
// This file holds the command table and the commands on IDs as such (CREATE_ID, DESTROY_ID,
// MIGRATE_ID), options and multicast; addresses and routes are in ucma_address.cc,
// connections in ucma_connection.cc, GET_EVENT in ucma.cc.
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <string_view>

#include "command_table.h"
#include "shim.h"
#include "ucma_command.h"
#include "user_memory.h"

namespace rnicdv::uverbs::ucma {

namespace {

// ---- The command table ----------------------------------------------------------------------
// One row per command, as the kernel's ucma_cmd_table ([RDMA_USER_CM_CMD_x] = handler): the
// number and the name come from the enumerator's own spelling, and by_number puts each row at
// its number, so a renumbered enum moves the row with it.
#define UCMA_CMD(cmd, handler, req, resp_min) \
  CommandSpec { RDMA_USER_CM_CMD_##cmd, #cmd, handler, sizeof(req), resp_min, false }

constexpr size_t kNoResponse = 0;

constexpr CommandSpec kRows[] = {
    UCMA_CMD(CREATE_ID, create_id, rdma_ucm_create_id, sizeof(rdma_ucm_create_id_resp)),
    UCMA_CMD(DESTROY_ID, destroy_id, rdma_ucm_destroy_id, sizeof(rdma_ucm_destroy_id_resp)),
    UCMA_CMD(BIND_IP, bind_ip, rdma_ucm_bind_ip, kNoResponse),
    UCMA_CMD(RESOLVE_IP, resolve_ip, rdma_ucm_resolve_ip, kNoResponse),
    UCMA_CMD(RESOLVE_ROUTE, resolve_route, rdma_ucm_resolve_route, kNoResponse),
    UCMA_CMD(QUERY_ROUTE, query_route, rdma_ucm_query, kNoResponse),
    UCMA_CMD(CONNECT, connect, rdma_ucm_connect, kNoResponse),
    UCMA_CMD(LISTEN, listen, rdma_ucm_listen, kNoResponse),
    UCMA_CMD(ACCEPT, accept, rdma_ucm_accept, kNoResponse),
    UCMA_CMD(REJECT, reject, rdma_ucm_reject, kNoResponse),
    UCMA_CMD(DISCONNECT, disconnect, rdma_ucm_disconnect, kNoResponse),
    UCMA_CMD(INIT_QP_ATTR, init_qp_attr, rdma_ucm_init_qp_attr, sizeof(ib_uverbs_qp_attr)),
    // Blocks until an event is queued: run without the registry lock. The kernel accepts a
    // response without the trailing reserved word and ECE.
    CommandSpec{RDMA_USER_CM_CMD_GET_EVENT, "GET_EVENT", get_event, sizeof(rdma_ucm_get_event),
                offsetof(rdma_ucm_event_resp, reserved), /*waits=*/true},
    // A hole in the kernel's table too: ENOSYS.
    CommandSpec{RDMA_USER_CM_CMD_GET_OPTION, "GET_OPTION"},
    UCMA_CMD(SET_OPTION, set_option, rdma_ucm_set_option, kNoResponse),
    UCMA_CMD(NOTIFY, notify, rdma_ucm_notify, kNoResponse),
    UCMA_CMD(JOIN_IP_MCAST, join_mcast, rdma_ucm_join_ip_mcast,
             sizeof(rdma_ucm_create_id_resp)),
    UCMA_CMD(LEAVE_MCAST, leave_mcast, rdma_ucm_destroy_id, sizeof(rdma_ucm_destroy_id_resp)),
    UCMA_CMD(MIGRATE_ID, migrate_id, rdma_ucm_migrate_id, sizeof(rdma_ucm_migrate_resp)),
    // The response's size depends on the option (QUERY_PATH: as many paths as fit).
    UCMA_CMD(QUERY, query, rdma_ucm_query, kNoResponse),
    UCMA_CMD(BIND, bind, rdma_ucm_bind, kNoResponse),
    UCMA_CMD(RESOLVE_ADDR, resolve_addr, rdma_ucm_resolve_addr, kNoResponse),
    UCMA_CMD(JOIN_MCAST, join_mcast, rdma_ucm_join_mcast, sizeof(rdma_ucm_create_id_resp)),
};

#undef UCMA_CMD

constexpr auto kTable = by_number<RDMA_USER_CM_CMD_JOIN_MCAST + 1>(kRows);

constexpr bool complete_and_in_place() {
  for (size_t i = 0; i < kTable.size(); ++i)
    if (!kTable[i].name || kTable[i].number != i) return false;
  return std::size(kRows) == kTable.size();
}
static_assert(complete_and_in_place(), "every rdma_cm command has one row, at its number");
static_assert(std::string_view(kTable[RDMA_USER_CM_CMD_CREATE_ID].name) == "CREATE_ID" &&
              kTable[RDMA_USER_CM_CMD_CREATE_ID].handler == create_id &&
              std::string_view(kTable[RDMA_USER_CM_CMD_JOIN_MCAST].name) == "JOIN_MCAST" &&
              kTable[RDMA_USER_CM_CMD_GET_EVENT].waits);

}  // namespace

const char* command_name(uint32_t number) {
  return number < kTable.size() ? kTable[number].name : "unknown command";
}

int Cmd::writable(uint64_t response, size_t size) const {
  if (user_range_ok(response, std::min(size, out_len), true)) return 0;
  return error(EFAULT, "response at %#llx is not writable",
               static_cast<unsigned long long>(response));
}

int Cmd::reply_fault(uint64_t response, size_t size) const {
  reply_failed = true;
  return error(EFAULT,
               "response at %#llx (%zu bytes) cannot be written (unmapped or write-protected "
               "since it was checked)",
               static_cast<unsigned long long>(response), size);
}

int Cmd::error(int err, const char* fmt, ...) const {
  char why[320];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  return report(
      err, Status::error(Errc::invalid_argument, "rdma_cm: %s: %s", command_name(number), why),
      std::string("rdma_cm: ") + command_name(number) + ": " + fmt);
}

int Cmd::unsupported(int err, const char* fmt, ...) const {
  char what[320];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  log_line("rdma_cm: %s: %s is not supported on the simulated HCA (%s)", command_name(number),
           what, strerror(err));
  return -err;
}

Id* find(uint32_t handle, const std::shared_ptr<File>& file) {
  Registry& r = registry();
  auto it = r.ids.find(handle);
  if (it == r.ids.end() || it->second->file != file) return nullptr;
  return it->second.get();
}

// ---- IDs, options, multicast ----------------------------------------------------------------

int create_id(const Cmd& c) {
  const auto cmd = c.as<rdma_ucm_create_id>();
  if (int rc = c.writable(cmd.response, sizeof(rdma_ucm_create_id_resp)); rc != 0) return rc;
  uint8_t qp_type;
  switch (cmd.ps) {
    case RDMA_PS_TCP:
      qp_type = IBV_QPT_RC;
      break;
    case RDMA_PS_IB:
      // rdma_create_id2 and rdma_create_ep pass the QP type the application asked for.
      qp_type = cmd.qp_type;
      switch (qp_type) {
        case IBV_QPT_RC:
          break;
        case IBV_QPT_UD:
          return c.unsupported(EINVAL, "new id: a UD ID (IBV_QPT_UD) in the IB port space");
        case IBV_QPT_XRC_SEND:
        case IBV_QPT_XRC_RECV:
          return c.unsupported(
              EINVAL, "new id: an XRC ID (%s) in the IB port space",
              qp_type == IBV_QPT_XRC_SEND ? "IBV_QPT_XRC_SEND" : "IBV_QPT_XRC_RECV");
        case IBV_QPT_UC:
          return c.unsupported(EINVAL, "new id: a UC ID (IBV_QPT_UC) in the IB port space");
        default:
          return c.unsupported(EINVAL, "new id: an ID of QP type %u in the IB port space", qp_type);
      }
      break;
    case RDMA_PS_UDP:
      qp_type = IBV_QPT_UD;  // as librdmacm's rdma_create_id sets it
      break;
    case RDMA_PS_IPOIB:
      return c.unsupported(EINVAL, "new id: the IPoIB port space (RDMA_PS_IPOIB: multicast UD)");
    default:
      return c.error(EINVAL, "new id: port space %#x", cmd.ps);
  }
  Registry& r = registry();
  auto id = std::make_unique<Id>();
  id->handle = r.next_handle++;
  id->uid = cmd.uid;
  id->file = c.file;
  id->ps = cmd.ps;
  id->qp_type = qp_type;
  rdma_ucm_create_id_resp resp{};
  resp.id = id->handle;
  r.ids.emplace(id->handle, std::move(id));
  if (int rc = c.reply(cmd.response, resp); rc != 0) {
    // The caller never learns the new id: it goes again, as the kernel's ucma_create_id
    // destroys it.
    destroy_id_locked(resp.id);
    return rc;
  }
  return 0;
}

int destroy_id(const Cmd& c) {
  const auto cmd = c.as<rdma_ucm_destroy_id>();
  if (int rc = c.writable(cmd.response, sizeof(rdma_ucm_destroy_id_resp)); rc != 0) return rc;
  FIND_ID(c, id, cmd.id);
  (void)id;
  rdma_ucm_destroy_id_resp resp{};
  resp.events_reported = destroy_id_locked(cmd.id);
  return c.reply(cmd.response, resp);
}

int set_option(const Cmd& c) {
  const auto cmd = c.as<rdma_ucm_set_option>();
  FIND_ID(c, id, cmd.id);
  // copy_from_user of the value (at most an int here; a path record is refused below).
  uint8_t val[sizeof(int)] = {};
  if (cmd.optlen <= sizeof val && !copy_from_user(val, cmd.optval, cmd.optlen))
    return c.error(EFAULT, "id %u: option value at %#llx is not readable", id->handle,
                   static_cast<unsigned long long>(cmd.optval));
  auto read_int = [&](int* out) {
    if (cmd.optlen != sizeof(int)) return false;
    std::memcpy(out, val, sizeof(int));
    return true;
  };
  if (cmd.level == RDMA_OPTION_ID) {
    int v = 0;
    switch (cmd.optname) {
      case RDMA_OPTION_ID_TOS:
        if (cmd.optlen != sizeof(uint8_t))
          return c.error(EINVAL, "id %u: TOS: %u bytes", id->handle, cmd.optlen);
        id->tos = val[0];
        return 0;
      case RDMA_OPTION_ID_REUSEADDR:
        if (!read_int(&v))
          return c.error(EINVAL, "id %u: REUSEADDR: %u bytes", id->handle, cmd.optlen);
        if (id->state != State::idle)
          return c.error(EINVAL, "id %u: REUSEADDR after bind", id->handle);
        id->reuseaddr = v != 0;
        return 0;
      case RDMA_OPTION_ID_AFONLY:
        if (!read_int(&v))
          return c.error(EINVAL, "id %u: AFONLY: %u bytes", id->handle, cmd.optlen);
        if (id->state != State::idle)
          return c.error(EINVAL, "id %u: AFONLY after bind", id->handle);
        id->afonly = v != 0;
        return 0;
      case RDMA_OPTION_ID_ACK_TIMEOUT:
        if (cmd.optlen != sizeof(uint8_t))
          return c.error(EINVAL, "id %u: ACK_TIMEOUT: %u bytes", id->handle, cmd.optlen);
        id->ack_timeout = std::min<uint8_t>(val[0], 31);
        return 0;
      default:
        return c.error(ENOSYS, "id %u: option %u of level RDMA_OPTION_ID", id->handle, cmd.optname);
    }
  }
  if (cmd.level == RDMA_OPTION_IB && cmd.optname == RDMA_OPTION_IB_PATH)
    return c.unsupported(EINVAL, "id %u: setting an InfiniBand path record", id->handle);
  return c.error(ENOSYS, "id %u: option %u of level %u", id->handle, cmd.optname, cmd.level);
}

int migrate_id(const Cmd& c) {
  const auto cmd = c.as<rdma_ucm_migrate_id>();
  if (int rc = c.writable(cmd.response, sizeof(rdma_ucm_migrate_resp)); rc != 0) return rc;
  Registry& r = registry();
  auto fit = r.files.find(static_cast<int>(cmd.fd));
  if (fit == r.files.end())
    return c.error(fd_kind(static_cast<int>(cmd.fd)) == FdKind::none ? ENOENT : EINVAL,
                   "id %u: descriptor %d is not an rdma_cm channel", cmd.id, cmd.fd);
  std::shared_ptr<File> from = fit->second;
  Id* id = find(cmd.id, from);
  if (!id) return c.error(ENOENT, "id %u: no such id on channel %d", cmd.id, cmd.fd);
  if (from != c.file) {
    for (const Event& ev : from->take(id->handle)) c.file->push(ev);
    id->file = c.file;
  }
  rdma_ucm_migrate_resp resp{};
  resp.events_reported = id->events_reported;
  return c.reply(cmd.response, resp);
}

namespace {

// rdma_addr_size: what a socket address of `family` occupies (0: no family rdma_cm takes).
size_t address_size(sa_family_t family) {
  switch (family) {
    case AF_INET:
      return sizeof(sockaddr_in);
    case AF_INET6:
      return sizeof(sockaddr_in6);
    case AF_IB:
      return sizeof(sockaddr_ib);
    default:
      return 0;
  }
}

}  // namespace

// JOIN_IP_MCAST (a full member, the address in a sockaddr_in6's room) and JOIN_MCAST, as the
// kernel's ucma_process_join and rdma_join_multicast take them. On RoCE a join needs no subnet
// manager: the kernel sends an IGMP report and answers MULTICAST_JOIN at once
// (cma_iboe_join_multicast), with the group's IPv4-mapped GID, QPN 0xFFFFFF and the port
// space's Q_Key. The device joins the group on the wire when a QP attaches (librdmacm attaches
// the ID's QP as it reads the event, unless the join is send-only).
int join_mcast(const Cmd& c) {
  rdma_ucm_join_mcast cmd{};
  if (c.number == RDMA_USER_CM_CMD_JOIN_IP_MCAST) {
    const auto ip = c.as<rdma_ucm_join_ip_mcast>();
    cmd.response = ip.response;
    cmd.uid = ip.uid;
    cmd.id = ip.id;
    cmd.join_flags = RDMA_MC_JOIN_FLAG_FULLMEMBER;
    std::memcpy(&cmd.addr, &ip.addr, sizeof ip.addr);
    cmd.addr_size = static_cast<uint16_t>(address_size(ip.addr.sin6_family));
    if (cmd.addr_size == 0 || cmd.addr_size > sizeof ip.addr)
      return c.error(EINVAL, "id %u: join: address family %u", ip.id, ip.addr.sin6_family);
  } else {
    cmd = c.as<rdma_ucm_join_mcast>();
    if (cmd.addr_size != address_size(cmd.addr.ss_family) || cmd.addr_size == 0)
      return c.error(EINVAL, "id %u: join: an address of %u bytes for family %u", cmd.id,
                     cmd.addr_size, cmd.addr.ss_family);
  }
  if (cmd.join_flags != RDMA_MC_JOIN_FLAG_FULLMEMBER &&
      cmd.join_flags != RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER)
    return c.error(EINVAL, "id %u: join flags %u (a full member, or a send-only one)", cmd.id,
                   cmd.join_flags);
  if (int rc = c.writable(cmd.response, sizeof(rdma_ucm_create_id_resp)); rc != 0) return rc;
  FIND_ID(c, id, cmd.id);
  if (!id->dev)
    return c.error(ENODEV, "id %u: join: the id has no device (bind it to an address, or "
                   "resolve one)", id->handle);
  if (id->state != State::addr_bound && id->state != State::addr_resolved)
    return c.error(EINVAL, "id %u: join: it is %s (a join needs a bound or resolved address)",
                   id->handle, state_name(id->state));
  if (!id->ud())
    return c.error(EINVAL, "id %u: join: port space %#x has no UD QPs (RDMA_PS_UDP has)",
                   id->handle, id->ps);
  Parsed group;
  if (int rc = parse_addr(c, *id, &cmd.addr, cmd.addr_size, &group); rc != 0) return rc;
  if (group.family == AF_IB)
    return c.unsupported(EADDRNOTAVAIL, "id %u: join: an AF_IB group", id->handle);
  if (group.ep.ip.is_unspecified())
    return c.error(EINVAL, "id %u: join: the wildcard address is no group", id->handle);
  if (!group.ep.ip.is_multicast())
    return c.error(EINVAL, "id %u: join: %s is not a multicast address (%s)", id->handle,
                   group.ep.ip.to_string().c_str(),
                   group.ep.ip.is_v4() ? "224.0.0.0/4" : "ff00::/8");
  // Linux joins only IPv4 groups through rdma_cm on RoCE v2 (cma_iboe_join_multicast answers
  // ENOTSUPP, which ucma returns as it is); ibv_attach_mcast takes IPv6 groups.
  if (!group.ep.ip.is_v4())
    return c.unsupported(kKernelEnotsupp,
                         "id %u: join: IPv6 multicast group %s through rdma_cm (RoCE v2 joins "
                         "IPv4 groups only, as the kernel's rdma_cm; ibv_attach_mcast takes it)",
                         id->handle, group.ep.ip.to_string().c_str());
  const hw::IpAddress own = id->dev->dev->address();
  if (group.ep.ip.is_v4() != own.is_v4())
    return c.error(EINVAL, "id %u: join: %s is an %s group, and %s's address %s is %s",
                   id->handle, group.ep.ip.to_string().c_str(),
                   group.ep.ip.is_v4() ? "IPv4" : "IPv6", id->dev->dev->info().name.c_str(),
                   own.to_string().c_str(), own.is_v4() ? "IPv4" : "IPv6");
  Registry& r = registry();
  const uint32_t handle = r.next_mc++;
  r.mcasts[handle] = Multicast{id->handle, cmd.uid, group.ep.ip, 0};
  rdma_ucm_create_id_resp resp{};
  resp.id = handle;
  if (int rc = c.reply(cmd.response, resp); rc != 0) {
    r.mcasts.erase(handle);
    return rc;
  }
  Event ev;
  ev.resp.uid = cmd.uid;
  ev.resp.id = handle;
  ev.resp.event = RDMA_CM_EVENT_MULTICAST_JOIN;
  ev.owner = id->handle;
  ev.mc = handle;
  rdma_ucm_ud_param& p = ev.resp.param.ud;
  fill_ah_attr(p.ah_attr, *id->dev, hw::Gid::from_ip(group.ep.ip), id->tos, kHopLimit, 0, 0);
  p.qp_num = 0xFFFFFF;
  p.qkey = hw::kRdmaUdpQkey;
  id->file->push(ev);
  return 0;
}

// LEAVE_MCAST: the membership and its unread events go; the answer counts the events the
// application read, which librdmacm waits to see acknowledged.
int leave_mcast(const Cmd& c) {
  const auto cmd = c.as<rdma_ucm_destroy_id>();
  if (int rc = c.writable(cmd.response, sizeof(rdma_ucm_destroy_id_resp)); rc != 0) return rc;
  Registry& r = registry();
  auto it = r.mcasts.find(cmd.id);
  if (it == r.mcasts.end() || !find(it->second.owner, c.file))
    return c.error(ENOENT, "multicast membership %u: none on this channel", cmd.id);
  Id* id = find(it->second.owner, c.file);
  (void)id->file->take_multicast(cmd.id);
  rdma_ucm_destroy_id_resp resp{};
  resp.events_reported = it->second.events_reported;
  r.mcasts.erase(it);
  return c.reply(cmd.response, resp);
}

int run_command(const std::shared_ptr<File>& file, uint32_t number, const uint8_t* in,
                size_t in_len, size_t out_len) {
  const Cmd c{number, in, in_len, out_len, file, false};
  if (number >= kTable.size()) return c.error(EINVAL, "unknown command %u", number);
  const CommandSpec& row = kTable[number];
  if (!row.handler) return c.unsupported(ENOSYS, "%s", row.name);
  if (out_len < row.resp_min)
    return c.error(ENOSPC, "response of %zu bytes, %zu needed", out_len, row.resp_min);
  int rc;
  if (row.waits) {
    rc = row.handler(c);
  } else {
    std::lock_guard<std::mutex> lock(registry().mu);
    rc = row.handler(c);
  }
  // A handler's answer whose response could not be written is EFAULT (copy_to_user).
  return c.reply_failed ? -EFAULT : rc;
}

}  // namespace rnicdv::uverbs::ucma
