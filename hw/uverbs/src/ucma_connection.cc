// SPDX-License-Identifier: BSD-3-Clause
// rdma_cm connections: LISTEN, CONNECT, ACCEPT, REJECT, DISCONNECT, INIT_QP_ATTR and NOTIFY,
// on the simulated device's IB CM, with the kernel's rules (ucma.c, cma.c).
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/sa.h>
#include <infiniband/verbs.h>
#include <string.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>

#include "shim.h"
#include "ucma_command.h"
#include "user_memory.h"

namespace rnicdv::uverbs::ucma {

int listen(const Cmd& c) {
  const auto cmd = c.as<rdma_ucm_listen>();
  FIND_ID(c, id, cmd.id);
  // ucma_listen: a backlog of 0, a negative one or one above max_backlog is max_backlog.
  const int backlog =
      hw::listen_backlog(cmd.backlog > static_cast<uint32_t>(hw::kDefaultListenBacklog)
                             ? 0
                             : static_cast<int>(cmd.backlog));
  if (id->state == State::listen) {
    for (auto& [dev, listener] : id->listeners)
      if (Status st = listener->set_backlog(backlog); !st)
        return c.error(to_errno(st.code()), "id %u: %s", id->handle, st.message().c_str());
    id->backlog = backlog;
    return 0;
  }
  if (id->state == State::idle) {
    Parsed any{AF_INET, {hw::IpAddress::v4(0), 0}};
    if (int rc = bind_to(c, *id, any); rc != 0) return rc;
  }
  if (id->state != State::addr_bound)
    return c.error(EINVAL, "id %u: listening: it is %s", id->handle, state_name(id->state));
  if (id->family == AF_IB)
    return c.unsupported(EAFNOSUPPORT, "id %u: listening on an AF_IB address", id->handle);
  std::vector<std::pair<SimDevice*, std::unique_ptr<hw::CmListener>>> listeners;
  std::vector<SimDevice*> devs;
  if (id->dev) {
    devs.push_back(id->dev);
  } else {
    for (uint32_t i = 0; i < config().devices; ++i) {
      Result<SimDevice*> d = device_for(i);
      if (!d) return c.error(ENODEV, "id %u: %s", id->handle, d.status().message().c_str());
      devs.push_back(d.value());
    }
  }
  for (SimDevice* d : devs) {
    hw::ConnectionManager* cm = d->dev->connection_manager();
    // The bound address, or the wildcard of the ID's family (0.0.0.0 hears IPv4 requests only).
    const hw::CmAddress at{id->src.ip, id->src.port};
    Result<std::unique_ptr<hw::CmListener>> l =
        id->ud() ? cm->listen_ud(at, backlog) : cm->listen(at, backlog);
    if (!l)
      return c.error(to_errno(l.status().code()), "id %u: %s", id->handle,
                     l.status().message().c_str());
    listeners.emplace_back(d, std::move(l).value());
  }
  id->listeners = std::move(listeners);
  id->backlog = backlog;
  id->state = State::listen;
  wake_pump();
  return 0;
}

int connect(const Cmd& c) {
  const auto cmd = c.as<rdma_ucm_connect>();
  FIND_ID(c, id, cmd.id);
  if (id->state != State::route_resolved)
    return c.error(EINVAL, "id %u: it is %s, not route resolved", id->handle,
                   state_name(id->state));
  const rdma_ucm_conn_param& p = cmd.conn_param;
  if (!p.valid) return c.error(EINVAL, "id %u: no connection parameters", id->handle);
  // A UD ID resolves the service's QPN and Q_Key with a SIDR_REQ (cma_resolve_ib_udp).
  const size_t max = id->ud() ? hw::kSidrReqPrivateDataMax : hw::kReqPrivateDataMax;
  if (p.private_data_len > max)
    return c.error(EINVAL, "id %u: %u bytes of private data, a %s carries at most %zu",
                   id->handle, p.private_data_len, id->ud() ? "SIDR_REQ" : "REQ", max);
  hw::CmConnectParams params;
  params.space = id->ud() ? hw::CmPortSpace::udp : hw::CmPortSpace::tcp;
  params.qp.srq = p.srq != 0;
  params.remote = {id->dst.ip, id->dst.port};
  params.local_port = id->src.port;
  params.qp.qpn = p.qp_num;
  params.qp.path_mtu = path_mtu(*id);
  params.qp.responder_resources = p.responder_resources;
  params.qp.initiator_depth = p.initiator_depth;
  params.qp.retry_count = std::min<uint8_t>(p.retry_count, 7);
  params.qp.rnr_retry_count = std::min<uint8_t>(p.rnr_retry_count, 7);
  params.qp.local_ack_timeout = local_ack_timeout(*id);
  // RDMA_OPTION_ID_TOS: the path's traffic class, which the REQ carries to the passive side.
  params.qp.traffic_class = id->tos;
  params.qp.hop_limit = kHopLimit;
  params.private_data.assign(p.private_data, p.private_data + p.private_data_len);
  params.timeout_ms = kConnectBudgetMs;
  Result<std::unique_ptr<hw::CmConnection>> conn =
      id->dev->dev->connection_manager()->connect(params);
  if (!conn)
    return c.error(to_errno(conn.status().code()), "id %u: %s", id->handle,
                   conn.status().message().c_str());
  id->conn = std::move(conn).value();
  id->state = State::connect;
  wake_pump();
  return 0;
}

int accept(const Cmd& c) {
  const auto cmd = c.as<rdma_ucm_accept>();
  FIND_ID(c, id, cmd.id);
  if (id->state != State::connect || !id->conn)
    return c.error(EINVAL, "id %u: accepting: it is %s", id->handle, state_name(id->state));
  if (!id->passive) {
    // The active side after CONNECT_RESPONSE (rdma_establish, or librdmacm once it moved the
    // QP to RTS): the RTU.
    if (!id->have_peer) return c.error(EINVAL, "id %u: no REP received yet", id->handle);
    Status st = id->conn->establish();
    if (!st) return c.error(to_errno(st.code()), "id %u: %s", id->handle, st.message().c_str());
    return 0;
  }
  const rdma_ucm_conn_param& p = cmd.conn_param;
  if (!p.valid) return c.error(EINVAL, "id %u: no connection parameters", id->handle);
  if (id->accepted) return c.error(EINVAL, "id %u: accepted already", id->handle);
  const size_t max = id->ud() ? hw::kSidrRepPrivateDataMax : hw::kRepPrivateDataMax;
  if (p.private_data_len > max)
    return c.error(EINVAL, "id %u: %u bytes of private data, a %s carries at most %zu",
                   id->handle, p.private_data_len, id->ud() ? "SIDR_REP" : "REP", max);
  hw::CmAcceptParams params;
  // A UD service answers with its QP and the port space's Q_Key (cma_send_sidr_rep,
  // cma_set_qkey): a Q_Key other than that one is refused, as the kernel refuses it.
  if (id->ud()) {
    if (p.qkey != 0 && p.qkey != hw::kRdmaUdpQkey)
      return c.error(EINVAL, "id %u: Q_Key %#x; RDMA_PS_UDP uses %#x", id->handle, p.qkey,
                     hw::kRdmaUdpQkey);
    params.qp.qkey = hw::kRdmaUdpQkey;
  }
  params.qp.srq = p.srq != 0;
  params.qp.qpn = p.qp_num;
  params.qp.responder_resources = p.responder_resources;
  params.qp.initiator_depth = p.initiator_depth;
  params.qp.rnr_retry_count = std::min<uint8_t>(p.rnr_retry_count, 7);
  params.private_data.assign(p.private_data, p.private_data + p.private_data_len);
  Status st = id->conn->accept(params);
  if (!st) return c.error(to_errno(st.code()), "id %u: %s", id->handle, st.message().c_str());
  id->uid = cmd.uid;
  id->accepted = true;
  // SIDR has no connection to establish: the answer is the end of it.
  if (id->ud()) id->state = State::established;
  wake_pump();  // the connection's events now have a descriptor of their own
  return 0;
}

int reject(const Cmd& c) {
  const auto cmd = c.as<rdma_ucm_reject>();
  FIND_ID(c, id, cmd.id);
  uint16_t reason = cmd.reason ? cmd.reason : hw::reject_reason::consumer_defined;
  if (reason != hw::reject_reason::consumer_defined && reason != 35)
    return c.error(EINVAL, "id %u: reject reason %u (only 28, consumer defined, and 35)",
                   id->handle, reason);
  if (id->state != State::connect || !id->conn)
    return c.error(EINVAL, "id %u: rejecting: it is %s", id->handle, state_name(id->state));
  const size_t n = std::min<size_t>(
      cmd.private_data_len, id->ud() ? hw::kSidrRepPrivateDataMax : hw::kRejPrivateDataMax);
  Status st = id->conn->reject(reason, {cmd.private_data, n});
  if (!st) return c.error(to_errno(st.code()), "id %u: %s", id->handle, st.message().c_str());
  id->state = State::failed;
  return 0;
}

int disconnect(const Cmd& c) {
  const auto cmd = c.as<rdma_ucm_disconnect>();
  FIND_ID(c, id, cmd.id);
  if (!id->conn) return c.error(EINVAL, "id %u: no connection", id->handle);
  // As the kernel: a DREQ, or the DREP to a DREQ already received; never an error once
  // there is a connection.
  (void)id->conn->disconnect();
  return 0;
}

int init_qp_attr(const Cmd& c) {
  const auto cmd = c.as<rdma_ucm_init_qp_attr>();
  FIND_ID(c, id, cmd.id);
  if (int rc = c.writable(cmd.response, sizeof(ib_uverbs_qp_attr)); rc != 0) return rc;
  hw::QpAttr a;
  uint32_t mask = 0;
  if (id->ud()) {
    // A UD QP (cma_ib_init_qp_attr): INIT with the port space's Q_Key; librdmacm moves it to
    // RTR and RTS itself.
    if (cmd.qp_state != IBV_QPS_INIT)
      return c.error(EINVAL, "id %u: a UD ID gives attributes for INIT only, not QP state %u",
                     id->handle, cmd.qp_state);
    if (!id->dev) return c.error(EINVAL, "id %u: no device yet", id->handle);
    a.state = hw::QpState::init;
    a.qkey = hw::kRdmaUdpQkey;
    mask = hw::qp_attr::state | hw::qp_attr::port | hw::qp_attr::qkey;
  } else if (cmd.qp_state == IBV_QPS_INIT && !id->conn) {
    // Before a connection (rdma_create_qp after route resolution): INIT with no remote access.
    if (!id->dev) return c.error(EINVAL, "id %u: no device yet", id->handle);
    a.state = hw::QpState::init;
    mask = hw::qp_attr::state | hw::qp_attr::port | hw::qp_attr::access_flags;
  } else if (cmd.qp_state >= IBV_QPS_INIT && cmd.qp_state <= IBV_QPS_RTS && id->conn) {
    Status st = id->conn->qp_attr(static_cast<hw::QpState>(cmd.qp_state), &a, &mask);
    if (!st) return c.error(EINVAL, "id %u: %s", id->handle, st.message().c_str());
  } else {
    return c.error(EINVAL, "id %u (%s): no attributes for QP state %u", id->handle,
                   state_name(id->state), cmd.qp_state);
  }
  ib_uverbs_qp_attr r{};
  uint32_t m = 0;
  r.qp_state = static_cast<uint32_t>(a.state);
  if (mask & hw::qp_attr::state) m |= IBV_QP_STATE;
  if (mask & hw::qp_attr::access_flags)
    m |= IBV_QP_ACCESS_FLAGS, r.qp_access_flags = a.access_flags;
  if (mask & hw::qp_attr::port) {
    m |= IBV_QP_PKEY_INDEX | IBV_QP_PORT;
    r.pkey_index = a.pkey_index;
    r.port_num = a.port_num;
  }
  if (mask & hw::qp_attr::qkey) m |= IBV_QP_QKEY, r.qkey = a.qkey;
  if (mask & hw::qp_attr::path_mtu)
    m |= IBV_QP_PATH_MTU, r.path_mtu = static_cast<uint32_t>(a.path_mtu);
  if (mask & hw::qp_attr::dest_qpn) m |= IBV_QP_DEST_QPN, r.dest_qp_num = a.dest_qpn;
  if (mask & hw::qp_attr::rq_psn) m |= IBV_QP_RQ_PSN, r.rq_psn = a.rq_psn;
  if (mask & hw::qp_attr::sq_psn) m |= IBV_QP_SQ_PSN, r.sq_psn = a.sq_psn;
  if (mask & hw::qp_attr::max_rd_atomic)
    m |= IBV_QP_MAX_QP_RD_ATOMIC, r.max_rd_atomic = a.max_rd_atomic;
  if (mask & hw::qp_attr::max_dest_rd_atomic)
    m |= IBV_QP_MAX_DEST_RD_ATOMIC, r.max_dest_rd_atomic = a.max_dest_rd_atomic;
  if (mask & hw::qp_attr::min_rnr_timer)
    m |= IBV_QP_MIN_RNR_TIMER, r.min_rnr_timer = a.min_rnr_timer;
  if (mask & hw::qp_attr::timeout) m |= IBV_QP_TIMEOUT, r.timeout = a.timeout;
  if (mask & hw::qp_attr::retry_cnt) m |= IBV_QP_RETRY_CNT, r.retry_cnt = a.retry_cnt;
  if (mask & hw::qp_attr::rnr_retry) m |= IBV_QP_RNR_RETRY, r.rnr_retry = a.rnr_retry;
  if (mask & hw::qp_attr::av) {
    m |= IBV_QP_AV;
    // The path's, from the CM: this side's TOS when it connected, the REQ's when it accepted
    // (as the kernel's CM gives a passive rdma_cm ID the REQ's path).
    fill_ah_attr(r.ah_attr, *id->dev, a.remote_gid, a.traffic_class, a.hop_limit, a.flow_label,
                 a.sl);
  }
  r.qp_attr_mask = m;
  return c.reply(cmd.response, r);
}

void fill_ah_attr(ib_uverbs_ah_attr& ah, const SimDevice& dev, const hw::Gid& remote,
                  uint8_t traffic_class, uint8_t hop_limit, uint32_t flow_label, uint8_t sl) {
  ah = ib_uverbs_ah_attr{};
  std::memcpy(ah.grh.dgid, remote.raw, 16);
  ah.grh.sgid_index = static_cast<uint8_t>(own_gid_index(dev.dev->address()));
  ah.grh.hop_limit = hop_limit;
  ah.grh.traffic_class = traffic_class;
  ah.grh.flow_label = flow_label;
  ah.sl = sl;
  ah.is_global = 1;
  ah.port_num = 1;
}

int notify(const Cmd& c) {
  const auto cmd = c.as<rdma_ucm_notify>();
  FIND_ID(c, id, cmd.id);
  if (cmd.event != IBV_EVENT_COMM_EST)
    return c.error(EINVAL, "id %u: event %u (only COMM_EST)", id->handle, cmd.event);
  if (!id->conn || !id->passive)
    return c.error(EINVAL, "id %u: not a passive connection", id->handle);
  if (id->state == State::established) return -EISCONN;
  Status st = id->conn->notify_comm_est();
  if (!st) return c.error(EINVAL, "id %u: %s", id->handle, st.message().c_str());
  return 0;
}

}  // namespace rnicdv::uverbs::ucma
